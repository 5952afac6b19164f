import { existsSync } from 'node:fs';

/** Whether this host has curl (Debian's `curl`, which the set-up installs). */
export const HAS_CURL = ['/usr/bin/curl', '/bin/curl'].some((f) => existsSync(f));

/**
 * curl as the server's programs run it to fetch a blob into a pipe (store/blobs/pack.ts: layers
 * from the object store; runtime/bwrap/helpers.ts: image layers from a registry): its
 * configuration on stdin (`url`, `header`: no secret in an argument anyone on the host could
 * list), no ~/.curlrc (`--disable`, first), http(s) only, an HTTP error fails it, and so does a
 * connection that moves under 1 KiB/s for 60 s. No `--retry`: writing to a pipe, curl would
 * start a retried transfer from its first byte after the bytes it already wrote (seen with curl
 * 7.88); the callers retry the whole unpacking instead. Started through setpriv, so it dies with
 * the shell that runs it. `extra`: more options.
 */
export function curlCommand(extra: readonly string[] = []): string {
  return ['setpriv --pdeathsig KILL curl --disable --config - --silent --show-error --fail --proto =http,https --connect-timeout 30',
    '--speed-limit 1024 --speed-time 60', ...extra].join(' ');
}

/** What curl said when it failed (`--show-error`): its exit code and the HTTP status, if any. */
export interface CurlFailure {
  code?: number;
  status?: number;
  /** A failure that may pass: a connection refused, cut, reset or stalled; an HTTP 5xx, 408 or 429. */
  mayPass: boolean;
}

/** curl's exit codes for a connection refused (7), cut (18, 52, 55, 56), stalled (28) or an HTTP/2 stream broken (16, 92). */
const PASSING = new Set([7, 16, 18, 28, 52, 55, 56, 92]);

export function curlFailure(stderr: string): CurlFailure {
  const code = Number(/curl: \((\d+)\)/.exec(stderr)?.[1] ?? NaN);
  const status = Number(/returned error: (\d{3})/.exec(stderr)?.[1] ?? NaN);
  const mayPass = Number.isNaN(status) ? PASSING.has(code) : status >= 500 || status === 408 || status === 429;
  return { ...(Number.isNaN(code) ? {} : { code }), ...(Number.isNaN(status) ? {} : { status }), mayPass };
}

/** How many times a fetch into an unpacking is tried when it fails for a reason that may pass. */
export const FETCH_ATTEMPTS = 3;

/**
 * Runs `once` (a fetch by curl into an unpacking, from its first byte, into a clean target) up to
 * FETCH_ATTEMPTS times while it fails with an error `mayPass` says may pass, waiting a little
 * longer each time.
 */
export async function withFetchRetries<T>(once: () => Promise<T>, mayPass: (e: unknown) => boolean): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await once();
    } catch (e) {
      if (attempt >= FETCH_ATTEMPTS || !mayPass(e)) throw e;
      await new Promise((r) => setTimeout(r, 250 * attempt));
    }
  }
}

/** A value for a curl configuration line, quoted as curl reads it. */
export function curlQuoted(s: string): string {
  if (/[\x00-\x1f\x7f]/.test(s)) throw new Error('a curl configuration value with a control character');
  return `"${s.replace(/[\\"]/g, (c) => `\\${c}`)}"`;
}

/**
 * curl as the server's programs run it to fetch a blob into a pipe (store/blobs/pack.ts: layers
 * from the object store; runtime/bwrap/helpers.ts: image layers from a registry): its
 * configuration on stdin (`url`, `header`: no secret in an argument anyone on the host could
 * list), no ~/.curlrc (`--disable`, first), http(s) only, two retries of a refused connection or
 * a transient answer, an HTTP error fails it, and so does a connection that moves under 1 KiB/s
 * for 60 s. Started through setpriv, so it dies with the shell that runs it. `extra`: more options.
 */
export function curlCommand(extra: readonly string[] = []): string {
  return ['setpriv --pdeathsig KILL curl --disable --config - --silent --show-error --fail --proto =http,https --connect-timeout 30',
    '--retry 2 --retry-connrefused --speed-limit 1024 --speed-time 60', ...extra].join(' ');
}

/** A value for a curl configuration line, quoted as curl reads it. */
export function curlQuoted(s: string): string {
  if (/[\x00-\x1f\x7f]/.test(s)) throw new Error('a curl configuration value with a control character');
  return `"${s.replace(/[\\"]/g, (c) => `\\${c}`)}"`;
}

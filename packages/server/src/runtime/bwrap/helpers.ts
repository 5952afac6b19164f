import { existsSync } from 'node:fs';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { ShellbaseError, invalid } from '../../errors.js';
import { MACHINE_USERNS_SPEC, USERNS_SPEC } from '../../util/idmap.js';
import { curlCommand, curlFailure, curlQuoted } from '../../util/curl.js';
import { feed, stoppedReading, type DialedProcess, type Dialer } from '../../util/dialer.js';
import { SBX } from '../../util/native.js';
import { runOk } from '../../util/proc.js';
import { spawner, type Spawned } from '../../util/spawner.js';
import type { MountSpec } from '../../store/snapshotter/types.js';
import type { Bridge, BridgeSpec, HelperSpec, JailSpec, LayerCompression, RemoteBlob, UnpackOptions, UnpackedLayer } from '../types.js';

/** A bwrap that sees only the host's /usr (read-only), for helper tools. */
const USR_ONLY = ['--ro-bind', '/usr', '/usr', '--symlink', 'usr/lib', '/lib', '--symlink', 'usr/lib64', '/lib64', '--symlink', 'usr/bin', '/bin'];

/**
 * The sandbox GNU tar unpacks in: a throw-away bubblewrap in the sandboxes' user namespace that
 * sees only the host's /usr (plus `binds`) and the target directory, mounted at /out. `before`:
 * what runs tar (its arguments end with `--`), or nothing. tar reads its stream 128 KiB at a
 * time (`--blocking-factor=256`; its default, 10 KiB, costs a wakeup of both ends per 10 KiB).
 */
function untarSandbox(into: { source: string }, binds: string[], before: string[]): string[] {
  return [SBX, 'userns', USERNS_SPEC, '--', 'bwrap',
    '--unshare-ipc', '--unshare-pid', '--unshare-net', '--unshare-uts', '--unshare-cgroup', '--die-with-parent', '--new-session',
    ...USR_ONLY, ...binds, '--bind', into.source, '/out', '--proc', '/proc', '--dev', '/dev', '--chdir', '/out', '--clearenv',
    '--setenv', 'PATH', '/usr/bin', '--cap-drop', 'ALL', '--cap-add', 'CAP_CHOWN', '--cap-add', 'CAP_FOWNER',
    '--cap-add', 'CAP_DAC_OVERRIDE', '--cap-add', 'CAP_FSETID',
    '--', ...before, 'tar', '-x', '--numeric-owner', '--no-overwrite-dir', '--blocking-factor=256', '-f', '-'];
}

/** GNU tar's failure: the disk limit met (413, with `fullHint`) or a bad archive (400). */
function untarFailed(stderr: string, fullHint: string): ShellbaseError {
  const full = /Disk quota exceeded|No space left/.test(stderr);
  return new ShellbaseError(full ? 'payload_too_large' : 'invalid_argument', `the tar stream could not be unpacked: ${stderr.trim().slice(0, 500)}`, {
    hint: full ? fullHint : 'send a tar archive of regular files, directories and symlinks',
  });
}

/** igzip's complaint without its name and the "(null)" it says for stdin. */
const igzipSaid = (stderr: string): string => stderr.replace(/^igzip: /gm, '').replace(/ (for file )?\(null\)/g, '').trim().slice(0, 300);

/**
 * Unpacks a tar stream into `into` (a directory the snapshotter described) with GNU tar in
 * untarSandbox: whatever the archive holds (absolute names, `..`, symlinks followed by members
 * below them, device nodes), nothing outside it is reached, no device node is made, and owners
 * are stored as a sandbox maps them (ids past 65535 fail).
 */
export async function unpackTar(dialer: Dialer, body: Readable, into: { source: string }): Promise<void> {
  const { program: tar, code } = await feed(dialer, untarSandbox(into, [], []), body);
  if (code !== 0) throw untarFailed(tar.stderr(), 'upload less than limits.diskMb at once');
}

/**
 * An image's layer unpacked in untarSandbox with sbx-tarcheck bound read-only before tar:
 * sbx-tarcheck decompresses, hashes and filters the stream and feeds GNU tar beside it, so the
 * decompressed bytes never cross the server. A `RemoteBlob` is fetched by curl straight into
 * it, and sbx-tarcheck hashes the blob as sent too (`--blob`): then no byte crosses the server.
 * Its reports (native/tarcheck.c) become the result or the layer's error.
 */
export async function unpackLayerConfined(dialer: Dialer, tarcheck: string, source: Readable | RemoteBlob, compression: LayerCompression,
  into: { source: string }, opts: UnpackOptions = {}): Promise<UnpackedLayer> {
  const remote = !isReadable(source);
  const check = ['/sbx-tarcheck', ...(compression === 'gzip' ? ['--gunzip'] : compression === 'zstd' ? ['--unzstd'] : []),
    ...(remote ? ['--blob', String(opts.blobMax ?? Number.MAX_SAFE_INTEGER)] : []), '--'];
  const sandbox = untarSandbox(into, ['--ro-bind', tarcheck, '/sbx-tarcheck'], check);
  const { program: p, code, lines } = remote
    ? await fetchInto(dialer, sandbox, source, opts)
    : await feed(dialer, sandbox, source).then((r) => ({ ...r, lines: r.program.stdout().split('\n') }));
  const said = (what: string) => lines.find((l) => l.startsWith(`${what} `))?.slice(what.length + 1);
  const stderr = p.stderr().trim().slice(0, 500);
  if (code === 0) {
    const diffId = said('diff-id');
    if (!diffId) throw new Error(`sbx-tarcheck gave no digest: ${lines.join('\n').slice(0, 300)}`);
    const names = lines.filter((l) => l.startsWith('dropped ')).map((l) => l.slice(8));
    const blob = said('blob')?.split(' ');
    return {
      diffId, dropped: { count: Number(said('dropped-count') ?? names.length), names },
      ...(blob ? { blob: { digest: blob[0], size: Number(blob[1]) } } : {}),
    };
  }
  if (code === 75) throw fetchFailed(stderr);
  const refused = said('refused');
  if (refused !== undefined) {
    throw invalid(`the layer holds a member that leaves its root (${JSON.stringify(refused)})`, 'layers name paths below their root only; nothing was kept');
  }
  const bad = said('bad');
  if (bad !== undefined) {
    if (bad.startsWith('the layer is larger than')) throw invalid(bad, 'the registry or archive is corrupt; nothing was kept');
    throw invalid(bad, 'send a tar archive (gzip or zstd compressed layers are decompressed first)');
  }
  if (code === 67) {
    const why = igzipSaid(stderr);
    throw invalid(`the layer cannot be decompressed: the stream is damaged or cut short (${why || 'no reason given'})`, 'the registry or archive is corrupt; nothing was kept');
  }
  if (code === 66) throw untarFailed(stderr, 'the layer (an image\'s, or an imported context\'s) is larger than limits.diskMb allows');
  throw new Error(`sbx-tarcheck failed (exit ${code}): ${stderr}`);
}

const isReadable = (s: Readable | RemoteBlob): s is Readable => typeof (s as Readable).pipe === 'function';

/**
 * The fetch in front of the unpacking sandbox: curl (util/curl.ts; redirects followed, the
 * headers kept to the first host (curl 7.83 on: and port), a `Content-Length` above `blobMax`
 * refused at once) writes the blob straight into it, and sbx-tarcheck stops at `blobMax` bytes
 * whatever the length said: its bytes never cross the server. Exit 75: curl failed (its message
 * on stderr), unless only because the sandbox stopped reading (23): then the sandbox's own code
 * says why.
 */
const FETCH_SCRIPT = `${curlCommand(['--location', '--proto-redir', '=http,https'])} | "$@"; s=("\${PIPESTATUS[@]}"); `
  + '[ "${s[0]}" = 0 ] || [ "${s[0]}" = 23 ] || exit 75; exit "${s[1]}"';

async function fetchInto(dialer: Dialer, sandbox: string[], blob: RemoteBlob, opts: UnpackOptions): Promise<{ program: DialedProcess; code: number | null; lines: string[] }> {
  blob.signal?.throwIfAborted();
  const config = [`url = ${curlQuoted(blob.url)}`, ...blob.headers.map((h) => `header = ${curlQuoted(h)}`),
    ...(opts.blobMax ? [`max-filesize = ${opts.blobMax}`] : [])].join('\n');
  // The reports, read here as they come: `got` lines (progress) are passed on, not kept (the
  // dialer keeps only the first 64 KiB of stdout, which a huge layer's progress would fill).
  const lines: string[] = [];
  let partial = '';
  const onStdout = (c: Buffer) => {
    const all = (partial + c.toString()).split('\n');
    partial = all.pop()!;
    for (const l of all) {
      if (l.startsWith('got ')) opts.onBytes?.(Number(l.slice(4)));
      else if (lines.length < 1000) lines.push(l);
    }
  };
  const program = await dialer.start(['bash', '--norc', '--noprofile', '-c', FETCH_SCRIPT, 'fetch', ...sandbox], 'in', onStdout);
  const abort = () => program.kill();
  blob.signal?.addEventListener('abort', abort, { once: true });
  if (blob.signal?.aborted) abort(); // aborted while it started
  try {
    program.socket.end(`${config}\n`);
    const code = await program.exited;
    blob.signal?.throwIfAborted();
    if (partial) lines.push(partial);
    return { program, code, lines };
  } finally {
    blob.signal?.removeEventListener('abort', abort);
    program.socket.destroy();
  }
}

/**
 * curl's failure: a 404 (`not_found`), a 401 or 403 (`forbidden`), a blob larger than its
 * manifest says (`invalid_argument`), else `unavailable`, with `details.mayPass` when it may pass
 * (util/curl.ts): what the caller tries again (runtime/types.ts, RemoteBlob).
 */
function fetchFailed(stderr: string): ShellbaseError {
  const said = stderr.replace(/^curl: /gm, '').trim().slice(0, 300);
  const f = curlFailure(stderr);
  if (f.status === 404) return new ShellbaseError('not_found', `the registry has no such blob (${said})`);
  if (f.status === 401 || f.status === 403) return new ShellbaseError('forbidden', `the registry refused the blob (${said})`, { hint: 'shellbase pulls anonymously: the image must be public' });
  if (f.code === 63) return invalid(`the layer is larger than its manifest says (${said})`, 'the registry or archive is corrupt; nothing was kept');
  return new ShellbaseError('unavailable', `the layer could not be fetched: ${said}`, {
    hint: f.mayPass ? 'try again later' : 'check that this host reaches the registry and trusts its certificate',
    ...(f.mayPass ? { details: { mayPass: true } } : {}),
  });
}

/** Debian's `isal` package: an inflate several times faster than zlib's (docs/performance.md, images). */
const IGZIP = '/usr/bin/igzip';
export const hasIgzip = existsSync(IGZIP);

/**
 * A gzip stream decompressed by `igzip` in a throw-away bubblewrap sandbox that sees only /usr,
 * has no capabilities and writes nowhere: the stream is whatever a registry sent. Chunks come
 * as the program writes them; a stream it refuses throws with its message. Stopping early (the
 * consumer returns, or `body` fails) kills the sandbox's process group.
 */
export async function* gunzipConfined(dialer: Dialer, body: AsyncIterable<Buffer>): AsyncGenerator<Buffer> {
  const args = ['--unshare-all', '--die-with-parent', '--new-session', ...USR_ONLY, '--proc', '/proc', '--dev', '/dev', '--clearenv',
    '--cap-drop', 'ALL', '--', 'igzip', '-d', '-c', '-q'];
  const igzip = await dialer.start([SBX, 'userns', USERNS_SPEC, '--', 'bwrap', ...args], 'both');
  let failed: unknown = null;
  const feeding = pipeline(body, igzip.socket).catch((e: unknown) => {
    if (stoppedReading(e)) return; // its exit code says why
    failed ??= e;
    igzip.kill();
  });
  let done = false;
  let threw: unknown = null;
  let code: number | null = null;
  try {
    for await (const c of igzip.socket) yield c as Buffer;
    done = true;
  } catch (e) {
    threw = e; // a read that failed: igzip's own end (with input left unread) or the body's, said below
  } finally {
    // A read that failed as igzip ended (with input left unread) is answered by its exit: given a
    // moment to come before a kill would hide its code and message.
    if (threw && !failed && ['ECONNRESET', 'EPIPE'].includes((threw as NodeJS.ErrnoException).code ?? '')) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([igzip.exited, new Promise((r) => { timer = setTimeout(r, 1000); })]);
      clearTimeout(timer);
    }
    if (!done) igzip.kill();
    igzip.socket.destroy(); // before waiting for the feed: an idle body must not hold it
    code = await igzip.exited;
    await feeding;
  }
  // Reached when the output ended or its read failed (a consumer that stops early ends in `finally`).
  if (failed) throw failed;
  if (code !== 0 && (done || code !== null)) {
    const said = igzipSaid(igzip.stderr());
    throw new Error(`the gzip stream is damaged or cut short (igzip: ${said || `exit ${code}`})`);
  }
  if (threw) throw threw;
}

/**
 * Runs a helper tool over a layer stack: `sbx run` mounts it (in a private mount namespace that
 * ends with the tool) and the tool runs as the sandboxes' root in their user namespace, so it
 * reads ids as a sandbox sees them (or, with `hostRoot`, as the host's root). `argv` gets the
 * merged tree's host path.
 */
export async function runHelper(spec: HelperSpec): Promise<void> {
  const m: MountSpec = spec.mount;
  const lower = [...spec.extraLowers ?? [], m.lower].join(':');
  await runOk(SBX, ['run', ...(spec.hostRoot ? [] : ['--userns', USERNS_SPEC]), '--chdir', m.chdir, '--lower', lower, '--upper', m.upper,
    '--work', m.work, '--merged', m.merged, '--', ...spec.argv(`${m.chdir}/${m.merged}`)]);
}

/**
 * A Unix socket on the host that reaches `target` inside the network namespace of process
 * `netnsPid`: socat entered there with nsenter, through `sbx run` so the bridge dies with the
 * server, even killed with -9. Each connection is a new socat child.
 */
export function bridge(spec: BridgeSpec): Bridge {
  const b: Spawned = spawner.start([SBX, 'run', '--', 'nsenter', `--net=/proc/${spec.netnsPid}/ns/net`, 'socat',
    `UNIX-LISTEN:${spec.socketPath},fork,unlink-early,mode=600,backlog=${spec.backlog ?? 256}`, spec.target], undefined, {
    onStdout: () => undefined, onStderr: (c) => spec.onError?.(c.toString()),
  });
  return { kill: () => b.kill(), exited: b.exited.then(() => undefined, () => undefined) };
}

/**
 * Like Firecracker's jailer: a long-running program in its own pid, network, ipc and uts
 * namespaces with no capabilities, seeing /usr and only the paths it is given, in a cgroup;
 * with `userns`, not host root either (uid 0 of a namespace mapping only the machines' id).
 */
export function jail(spec: JailSpec, handlers: { onStderr(chunk: Buffer): void }): Spawned {
  const outer = ['run', ...(spec.cgroup?.joinFiles.flatMap((f) => ['--cgroup', f]) ?? []), '--nofile', String(spec.nofile ?? 1024),
    ...(spec.userns ? ['--userns', MACHINE_USERNS_SPEC] : []), '--'];
  const bw = ['bwrap', '--die-with-parent', '--new-session', '--unshare-pid', '--unshare-net', '--unshare-ipc', '--unshare-uts', '--unshare-cgroup-try',
    '--cap-drop', 'ALL', ...USR_ONLY, '--symlink', 'usr/sbin', '/sbin', '--dev', '/dev', '--proc', '/proc', '--tmpfs', '/tmp'];
  for (const d of spec.devices ?? []) bw.push('--dev-bind', d, d);
  for (const r of new Set(spec.readable)) bw.push('--ro-bind', r, r);
  for (const w of new Set(spec.writable)) bw.push('--bind', w, w);
  return spawner.start([SBX, ...outer, ...bw, '--', ...spec.argv], undefined, { onStdout: () => undefined, onStderr: handlers.onStderr });
}

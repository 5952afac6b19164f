import { PassThrough, Readable, Transform } from 'node:stream';
import { finished, pipeline } from 'node:stream/promises';
import { constants as z, createZstdCompress, createZstdDecompress } from 'node:zlib';
import { feed, type Dialer, type DialedProcess } from '../../util/dialer.js';
import { HAS_CURL, curlCommand, curlFailure, curlQuoted } from '../../util/curl.js';
import { open } from 'node:fs/promises';
import { blobError, checkDigest, type BlobLocation, type LocalBlob, type PackSource } from './types.js';

/**
 * Version of a packed layer. Format 1 is a zstd stream (checksummed frames) whose
 * first frame is a skippable one (magic 0x184D2A50, so `zstd -d` passes over it)
 * holding the JSON header `{"kind":"shellbase.layer","format":1}`; the rest
 * decompresses to a POSIX (pax) tar made by GNU tar, of the layer's tree as the
 * snapshotter stores it (store/snapshotter/btrfs: overlayfs format, ids as stored):
 *
 * - `./` first, then every entry sorted by name (C locale); numeric ids only;
 * - mtimes to the nanosecond (pax `mtime`); no atime or ctime;
 * - every extended attribute (`SCHILY.xattr.*`: trusted.overlay.opaque=y marks an
 *   opaque directory, security.capability, user.*) and POSIX ACLs;
 * - whiteouts as the 0/0 character devices they are; hard links as links to the
 *   first name; sparse files as GNU sparse 1.0 (data and a map of the holes);
 * - sockets are not kept (tar cannot hold one; nothing can use one after a restore).
 *
 * The same tree packs to the same bytes once its data is on disk (a file whose blocks
 * are not allocated yet, under delayed allocation, looks sparse to tar and is stored as
 * a sparse entry): a synced layer's blob digest does not depend on when, where or by
 * which process it was packed.
 */
export const LAYER_PACK_FORMAT = 1;

const SKIPPABLE = 0x184d2a50;
const HEADER = Buffer.from(JSON.stringify({ kind: 'shellbase.layer', format: LAYER_PACK_FORMAT }));
/** The longest header an unpacker reads. */
const MAX_HEADER = 4096;

const PAX = [
  '--format=posix', '--numeric-owner', '--xattrs', '--xattrs-include=*', '--acls',
  // Extended headers named without tar's pid (%p), atime and ctime dropped: the same tree, the same bytes.
  '--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime',
];

export interface PackOptions {
  /** zstd level (default 3). */
  level?: number;
  /**
   * The tree's bytes of file data, where the caller knows them: a tree of less than `SMALL_TREE`
   * is compressed in this process (no program to start: what a small commit's upload wants),
   * others by the zstd program (faster on large trees). Either way the bytes are a function of
   * the tree, the level and this hint.
   */
  bytes?: number;
}

/** Below this many bytes of file data, a tree is compressed in this process (PackOptions.bytes). */
export const SMALL_TREE = 1 << 20;

/** tar's environment: nothing of the server's but a search path; the C locale (names sort bytewise). */
const TAR_ENV = ['env', '-i', 'PATH=/usr/sbin:/usr/bin:/sbin:/bin', 'LC_ALL=C'];

/** Each stage of an unpacking script dies with bash (which dies with the spawner: `sbx dial`). */
const STAGE = 'setpriv --pdeathsig KILL';

/**
 * The unpacking script: its input (stdin, or curl's GET of the URL its config on stdin names)
 * through zstd into tar with the script's arguments. Every stage is killed when bash goes
 * (bash itself goes with the spawner: `sbx dial`), so nothing outlives a server that died.
 * Exit 75: the fetch failed (curl's message on stderr); 65: zstd or tar did (curl's own 23, a
 * write refused, is theirs); 0: all went well.
 * curl as util/curl.ts says, following no redirect, with the object store's bounds: a connection
 * not made in 5 s, or a transfer under 1 KiB/s for 15 s, fails the attempt (across a partition
 * the defaults, meant for registries far away, would hold a request for minutes).
 */
function unpackScript(fetch: boolean): string {
  const curl = `${curlCommand(['--connect-timeout 5', '--speed-time 15'])} | `;
  // curl's 23 (it could not write) means zstd or tar stopped reading: their failure says why.
  const status = fetch ? `[ "\${s[0]}" = 0 ] || [ "\${s[0]}" = 23 ] || exit 75; ${unpacked(1)}` : unpacked(0);
  return `${fetch ? curl : ''}${STAGE} zstd --decompress --stdout --quiet | ${STAGE} tar "$@"; s=("\${PIPESTATUS[@]}"); ${status}`;
}

/**
 * The check after a script's `zstd | tar` whose statuses are in `s` from index `at`: exit 65
 * naming both statuses unless both are 0 (a stage killed by a signal says nothing itself).
 */
function unpacked(at: number): string {
  const [z, t] = [`\${s[${at}]}`, `\${s[${at + 1}]}`];
  return `[ "${z}${t}" = 00 ] || { echo "zstd exited ${z}, tar ${t}" >&2; exit 65; }`;
}

/**
 * The unpacking script of a pack in a file (its first two arguments: the file and the sha256 its
 * bytes must have; tar's after them): the file is hashed (openssl) before anything is unpacked,
 * then read by zstd into tar. Exit 66: the digest is not the one given; 65: openssl, zstd or tar
 * failed.
 */
const LOCAL_UNPACK_SCRIPT = `f=$1; want=$2; shift 2; got=$(${STAGE} openssl dgst -sha256 -r -- "$f") || exit 65; [ "\${got%% *}" = "$want" ] || exit 66; `
  + `${STAGE} zstd --decompress --stdout --quiet -- "$f" | ${STAGE} tar "$@"; s=("\${PIPESTATUS[@]}"); ${unpacked(0)}`;

/**
 * tar's arguments for unpacking into `into`: the archive from stdin in records of 128 KiB, owners
 * and modes as packed. `--ignore-zeros` makes tar read to the end of its input: GNU tar otherwise
 * exits at the archive's two zero blocks, and when tar's padding after them runs into a record
 * zstd has not written yet, zstd's next write dies by SIGPIPE before it checks its last frame.
 */
const untar = (into: string): string[] => ['--extract', '--file=-', '--blocking-factor=256', '--ignore-zeros', ...PAX, '--same-owner', '--same-permissions', '--directory', into];

/** A pack made by a program: the bytes that come first, then what `argv` writes on its stdout. */
export interface PackProgram {
  prefix: Buffer;
  argv: string[];
}

/** The first frame of every pack: a skippable one holding the pack's JSON header. */
function packPrefix(): Buffer {
  const frame = Buffer.alloc(8);
  frame.writeUInt32LE(SKIPPABLE, 0);
  frame.writeUInt32LE(HEADER.length, 4);
  return Buffer.concat([frame, HEADER]);
}

const levelOf = (options: PackOptions): number => Math.max(1, Math.min(19, Math.round(options.level ?? 3)));

/**
 * GNU tar of a tree, as root (trusted.* attributes need it). tar names a sparse file's header
 * `GNUSparseFile.PID/NAME`, pid fixed by no option: in a pid namespace of its own, tar is pid 1.
 */
const tarOf = (tree: string): string[] => ['unshare', '--pid', '--fork', '--kill-child', '--', 'tar', '--create', '--file=-', ...PAX, '--sort=name', '--sparse', '--directory', tree, '.'];

/**
 * The pack of a tree as a program makes it, tar and the zstd program beside each other as `tar |
 * zstd` runs (zstd reads its input in blocks of its own, and its output does not depend on its
 * number of threads): what `packLayer` runs for a tree of `SMALL_TREE` bytes or more, and what an
 * export runs where it writes a layer straight into its client's connection (native/send.c).
 */
export function packProgram(tree: string, options: PackOptions = {}): PackProgram {
  const script = `set -o pipefail; "$@" | zstd -q -${levelOf(options)} -T2 --check --stdout`;
  return { prefix: packPrefix(), argv: [...TAR_ENV, 'bash', '-c', script, 'pack', ...tarOf(tree)] };
}

/**
 * Packs a layer's tree into a stream of LAYER_PACK_FORMAT. The stream fails, and never ends
 * cleanly, when tar does; destroying it stops tar.
 */
export function packLayer(dialer: Dialer, tree: string, options: PackOptions = {}): Readable {
  const out = new PassThrough();
  if (options.bytes !== undefined && options.bytes < SMALL_TREE) {
    // A small tree (a commit's layer, mostly): compressed here, with no compressor process to start.
    out.write(packPrefix());
    const zstd = createZstdCompress({ params: { [z.ZSTD_c_compressionLevel]: levelOf(options), [z.ZSTD_c_checksumFlag]: 1 } });
    out.on('close', () => zstd.destroy());
    tarInto(dialer, [...TAR_ENV, ...tarOf(tree)], `pack ${tree}`, out, (socket) => {
      // zstd's output depends on how its input is cut into writes, and a socket cuts tar's output as
      // the scheduler pleases: fixed-size pieces make the packed bytes a function of the tree alone.
      socket.pipe(fixedChunks(ZSTD_FEED)).pipe(zstd).pipe(out, { end: false });
      return finished(zstd);
    });
    return out;
  }
  const program = packProgram(tree, options);
  out.write(program.prefix);
  tarInto(dialer, program.argv, `pack ${tree}`, out, (socket) => {
    socket.pipe(out, { end: false });
    return finished(socket, { readable: true, writable: false });
  });
  return out;
}

/**
 * A tree as a plain, uncompressed POSIX tar for an OCI layer (images/oci/layer-tar.ts turns its
 * overlayfs form into OCI's): `./` first, then every entry sorted by name; numeric host ids;
 * mtimes to the nanosecond, no atime or ctime; extended attributes but no ACLs (they hold host
 * ids); sparse files written whole. The same tree, the same bytes. The stream fails when tar does;
 * destroying it stops tar.
 */
export function tarTree(dialer: Dialer, tree: string): Readable {
  const out = new PassThrough();
  const argv = [...TAR_ENV, 'tar', '--create', '--file=-', ...PAX.filter((o) => o !== '--acls'), '--sort=name', '--directory', tree, '.'];
  tarInto(dialer, argv, `read ${tree}`, out, (socket) => {
    socket.pipe(out, { end: false });
    return finished(socket, { readable: true, writable: false });
  });
  return out;
}

/**
 * Runs tar (`argv`) through the spawner (util/dialer.ts: the server does not fork, and tar's output
 * comes with back-pressure); `feed` pipes its output on into `out` and resolves once that is done.
 * `out` ends when tar exits 0, else fails naming what tar could not do; destroying `out` stops tar.
 */
function tarInto(dialer: Dialer, argv: string[], what: string, out: PassThrough, feed: (socket: DialedProcess['socket']) => Promise<unknown>): void {
  let tar: DialedProcess | null = null;
  let closed = false;
  out.on('close', () => {
    closed = true;
    tar?.kill();
    tar?.socket.destroy();
  });
  void (async () => {
    const t = await dialer.start(argv, 'out');
    tar = t;
    if (closed) { t.kill(); t.socket.destroy(); return; }
    const [, code] = await Promise.all([feed(t.socket), t.exited]);
    t.socket.destroy();
    if (code === 0) out.end();
    else out.destroy(new Error(`tar could not ${what} (exit ${code}): ${t.stderr().trim().slice(0, 500)}`));
  })().catch((e: unknown) => out.destroy(e as Error));
}

/**
 * Unpacks a layer of LAYER_PACK_FORMAT into `into` (an empty directory: its own owner, mode,
 * times and attributes become the packed root's), from a stream or from where a program can
 * fetch it (a blob store's `locate`). GNU tar runs as this process's user, which must be able to
 * make device nodes (whiteouts) and set trusted.* attributes (root); it keeps members inside
 * `into` (no absolute names, no `..`, symlinks made last). A stream whose header is not a
 * layer's fails with code `invalid_pack`, another format with `unknown_pack_format` (a fetched
 * blob's format is the index's word, read before); an archive that fails, `invalid_pack`; a
 * fetch that fails, `not_found` for an HTTP 404, `fetch_failed` where it may pass (util/curl.ts,
 * `curlFailure`), else a plain Error with curl's message.
 */
export async function unpackLayer(dialer: Dialer, source: PackSource, into: string): Promise<void> {
  if (isLocal(source)) return unpackLocal(dialer, source, into);
  // zstd decompresses in a process of its own (it passes over the skippable header frame and
  // checks the frames' checksums) and feeds tar through a pipe that tar reads 128 KiB at a time.
  // Not `tar --zstd`: reading from a stream, tar forks a copy of itself to pass the archive to
  // zstd in 10 KiB records, and those small writes and wakeups made a layer's unpacking twice
  // as slow here (docs/performance.md, cluster). zstd's failure (a checksum, a cut stream) fails
  // the script even where tar saw a whole archive.
  const located = !(source instanceof Readable);
  let input: Readable;
  if (located) {
    // curl GETs the blob: its bytes go from the object store to zstd without this process
    // copying every chunk through its event loop (which, for a cold worker's first query, made
    // the fetch CPU-bound here). The URL grants a read of this blob for a while: it goes to
    // curl on its stdin (a config line), never in an argument anyone on the host could list.
    input = Readable.from([Buffer.from(`url = ${curlQuoted(source.url)}\n`)]);
  } else {
    // A body that failed already (a GET refused before this was called) fails `checked` too.
    const checked = checkHeader();
    pipeline(source, checked).catch(() => undefined);
    input = checked;
  }
  const { program, code } = await feed(dialer, [...TAR_ENV, 'bash', '--norc', '--noprofile', '-c', unpackScript(located), 'unpack',
    ...untar(into)], input)
    .finally(() => { if (!located) source.destroy(); });
  const said = program.stderr().trim().slice(0, 500);
  if (code === 0) return;
  if (code === 75) {
    if (/returned error: 404\b/.test(said)) throw blobError('not_found', `the object store has no such blob (${said})`);
    if (curlFailure(said).mayPass) throw blobError('fetch_failed', `the blob could not be fetched: ${said}`);
    throw new Error(`the blob could not be fetched: ${said}`);
  }
  throw unpackFailed(into, code, said);
}

/** An unpacking script's failure (exit 65 or another status): what zstd and tar said, from its stderr. */
const unpackFailed = (into: string, code: number | null, said: string) =>
  blobError('invalid_pack', `zstd and tar could not unpack the layer into ${into} (exit ${code}): ${said}`);

/**
 * A pack's tar stream, decompressed in this process (its header checked as unpackLayer checks
 * it): for a reader that rewrites the entries before they are unpacked (a tenant's import of a
 * context archive, whose layers unpack confined as an image's). A damaged pack fails the stream
 * with code `invalid_pack` or `unknown_pack_format`, or zstd's error.
 */
export function packedTar(source: Readable): Readable {
  const checked = checkHeader();
  const tar = createZstdDecompress({ chunkSize: 256 << 10 });
  pipeline(source, checked, tar).catch(() => undefined); // a failure destroys `tar` with it: its reader sees it
  return tar;
}

// Not a stream: a file's read stream has a `path` too.
const isLocal = (s: PackSource): s is LocalBlob => !(s instanceof Readable) && typeof (s as LocalBlob).path === 'string';

/**
 * A pack in a file of this host (a local backup's blob) unpacked by a program that reads the
 * file itself, its bytes never crossing this process: the header is checked here, the whole
 * file's sha256 by the program (LOCAL_UNPACK_SCRIPT) before any of it is unpacked. A digest other
 * than the one given fails with code `digest_mismatch`; others as unpackLayer's.
 */
async function unpackLocal(dialer: Dialer, blob: LocalBlob, into: string): Promise<void> {
  const fh = await open(blob.path, 'r').catch((e: NodeJS.ErrnoException) => {
    throw e.code === 'ENOENT' ? blobError('not_found', `no blob at ${blob.path}`) : e;
  });
  try {
    const { buffer, bytesRead } = await fh.read(Buffer.alloc(8 + MAX_HEADER), 0, 8 + MAX_HEADER, 0);
    await pipeline(Readable.from([buffer.subarray(0, bytesRead)]), checkHeader(), new PassThrough().resume());
  } finally {
    await fh.close();
  }
  checkDigest(blob.digest);
  const { program, code } = await feed(dialer, [...TAR_ENV, 'bash', '--norc', '--noprofile', '-c', LOCAL_UNPACK_SCRIPT, 'unpack', blob.path, blob.digest.slice('sha256:'.length),
    ...untar(into)], Readable.from([]));
  if (code === 0) return;
  if (code === 66) throw blobError('digest_mismatch', `the blob at ${blob.path} is not ${blob.digest}`);
  throw unpackFailed(into, code, program.stderr().trim().slice(0, 500));
}

/** Whether a failed unpackLayer of a located blob may succeed if tried again (`fetch_failed`). */
export const fetchMayPass = (e: unknown): boolean => (e as { code?: string }).code === 'fetch_failed';

/** Whether unpackLayer can fetch a located blob here (curl is installed; scripts/setup installs it). */
export const CAN_FETCH = HAS_CURL;

/** How long a blob's URL (BlobStore.locate) is asked to be good for: its GET starts within moments. */
export const LOCATION_TTL_S = 300;

/** A string as curl's config file quotes it; a control character (which would end the line) is refused. */
/** Passes the stream through once its first frame is a layer header of a known format. */
function checkHeader(): Transform {
  let head: Buffer | null = Buffer.alloc(0);
  return new Transform({
    transform(chunk: Buffer, _enc, done) {
      if (head === null) return done(null, chunk);
      head = Buffer.concat([head, chunk]);
      if (head.length < 8) return done();
      if (head.readUInt32LE(0) !== SKIPPABLE || head.readUInt32LE(4) > MAX_HEADER) return done(blobError('invalid_pack', 'not a packed layer'));
      const end = 8 + head.readUInt32LE(4);
      if (head.length < end) return done();
      let header: { kind?: unknown; format?: unknown };
      try { header = JSON.parse(head.toString('utf8', 8, end)) as typeof header; } catch { return done(blobError('invalid_pack', 'not a packed layer')); }
      if (header.kind !== 'shellbase.layer') return done(blobError('invalid_pack', 'not a packed layer'));
      if (header.format !== LAYER_PACK_FORMAT) {
        return done(blobError('unknown_pack_format', `a packed layer of format ${JSON.stringify(header.format)}; this server knows ${LAYER_PACK_FORMAT}`));
      }
      const all = head;
      head = null;
      done(null, all);
    },
    flush(done) { done(head === null ? null : blobError('invalid_pack', 'not a packed layer (too short)')); },
  });
}


/** Bytes per write into the in-process compressor (see packLayer). */
const ZSTD_FEED = 128 << 10;

/** Re-cuts a stream into chunks of exactly `size` bytes (the last one shorter). */
function fixedChunks(size: number): Transform {
  let held: Buffer[] = [];
  let bytes = 0;
  return new Transform({
    transform(chunk: Buffer, _enc, done) {
      held.push(chunk);
      bytes += chunk.length;
      if (bytes >= size) {
        let all = Buffer.concat(held, bytes);
        while (all.length >= size) {
          this.push(all.subarray(0, size));
          all = all.subarray(size);
        }
        held = all.length ? [all] : [];
        bytes = all.length;
      }
      done();
    },
    flush(done) { done(null, bytes ? Buffer.concat(held, bytes) : null); },
  });
}

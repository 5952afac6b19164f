import type { MountSpec } from '../store/snapshotter/types.js';
import type { Readable } from 'node:stream';
import type { Spawned } from '../util/spawner.js';
import type { Cgroup, CgroupLimits } from './cgroups/types.js';

/**
 * The runtime runs one command in a fresh sandbox over a mount the layer
 * store described, and reports how it ended. It knows nothing of contexts,
 * versions or HTTP.
 */
export interface SandboxLimits {
  memoryMb: number;
  pids: number;
  cpus: number;
  outputBytes: number;
  timeoutMs: number;
}

/** An image's user a sandbox's command runs as (ids inside the sandbox). */
export interface SandboxUser {
  uid: number;
  gid: number;
  /** Supplementary groups. */
  groups: number[];
}

export interface SandboxSpec {
  mount: MountSpec;
  argv: string[];
  /**
   * Runs first, as the sandbox's root, and execs the rest of the command line
   * (services' forwarder, which binds ports before the command starts).
   */
  preamble?: string[];
  /** Run `argv` as this user (default: the sandbox's root). */
  user?: SandboxUser;
  env: Record<string, string>;
  cwd: string;
  stdin?: string | Buffer;
  limits: SandboxLimits;
  /** Receives output as it happens (already capped at `limits.outputBytes` per stream). */
  onOutput?: (stream: 'stdout' | 'stderr', data: string) => void;
  /** Aborting kills the sandbox (the result then says `aborted`). */
  signal?: AbortSignal;
  /**
   * Sandboxes of one group (a tenant) share one sandbox's worth of contended
   * CPU, however many run, and at most `cpus` cores together: one tenant's many
   * sandboxes cannot crowd out another's.
   */
  group?: { id: string; cpus: number };
  /**
   * Other layer stacks shown at absolute paths outside /tmp (mounted contexts): each mounted over
   * the sandbox's tree at `target`, from `mount`'s layers, writable into `mount`'s scratch unless
   * `readOnly` (then its upper and work are not used). The runtime provides every mount point
   * without it becoming one of the command's writes.
   */
  volumes?: readonly SandboxVolume[];
  /** Host paths to show inside, below /tmp (which is not part of the context). */
  binds?: { source: string; target: string; readOnly?: boolean }[];
  /**
   * Host directories in overlay format (ids as layers store them) stacked above the mount's
   * layers, top first: the command sees their files, and they are never part of its writes
   * (the host's TLS authorities: trust/).
   */
  overlays?: readonly string[];
  /**
   * `PORT>SOCKET` ports on the sandbox's 127.0.0.1, listening before the command starts, whose
   * connections are handed whole (SCM_RIGHTS) to the Unix SOCKET (a path inside, among `binds`):
   * the egress proxy's. A warm sandbox's pid 1 serves them; a cold one runs `forwarder`
   * (sbx-forward, bound in) first.
   */
  handOver?: { ports: string[]; forwarder: { source: string; target: string; readOnly?: boolean } };
  /**
   * Long-running sandboxes (services): every output byte goes here as it comes,
   * nothing is collected or capped (the result's stdout and stderr are empty).
   */
  stream?: (stream: 'stdout' | 'stderr', chunk: Buffer) => void;
  /** Called once the sandbox process started (long-running sandboxes: services). */
  onStart?: (sandbox: RunningSandbox) => void;
}

/** A layer stack mounted into a sandbox (SandboxSpec.volumes). */
export interface SandboxVolume {
  mount: MountSpec;
  target: string;
  readOnly: boolean;
}

export interface RunningSandbox {
  /** Host pid of the sandbox's first process inside its namespaces (its network namespace is the sandbox's). */
  innerPid(): Promise<number>;
  /** Sends a signal to every process of the sandbox. */
  signal(sig: NodeJS.Signals): void;
}

export interface SandboxResult {
  exitCode: number;
  signal?: string;
  timedOut: boolean;
  oomKilled: boolean;
  aborted: boolean;
  stdout: string;
  stderr: string;
  truncated: boolean;
  cpuMs: number;
  wallMs: number;
  memoryPeakBytes: number;
}

/** A helper tool over a layer stack (e.g. `mkfs.ext4 -d` of a machine's disk). */
export interface HelperSpec {
  mount: MountSpec;
  /** Directories stacked above the mount's layers, top first (machines' guest and kernel layers). */
  extraLowers?: readonly string[];
  /** The tool's argv, given the merged tree's path. */
  argv(merged: string): string[];
  /**
   * Run as the host's root instead of the sandboxes' root in their user namespace: it reads ids as
   * the store keeps them (shifted) and may copy device nodes (an image's root file system written
   * into the cache: images/rootfs.ts).
   */
  hostRoot?: boolean;
}

/** A Unix socket on the host bridged to an address inside a sandbox's (or a VM's) network namespace. */
export interface BridgeSpec {
  /** Any process in the namespace. */
  netnsPid: number;
  socketPath: string;
  /** socat's address inside, e.g. `TCP4:127.0.0.1:8000`. */
  target: string;
  backlog?: number;
  onError?: (text: string) => void;
}

export interface Bridge {
  kill(): void;
  exited: Promise<void>;
}

/** A long-running confined program (a machine's QEMU). */
export interface JailSpec {
  argv: string[];
  /** Host paths visible read-only, and read-write (everything else but /usr is absent). */
  readable: string[];
  writable: string[];
  /** Device nodes passed through (/dev/kvm). */
  devices?: string[];
  cgroup?: Cgroup;
  nofile?: number;
  /** As root of a user namespace mapping only the machines' host id (util/idmap.ts), not as host root. */
  userns?: boolean;
}

export type LayerCompression = 'gzip' | 'zstd' | 'none';

/** Members left out of a layer (device nodes and FIFOs): how many, and some of their names. */
export interface Dropped {
  count: number;
  names: string[];
}

/**
 * A layer's blob where the runtime fetches it itself: a URL and the request headers it needs (a
 * registry's token: never an argument a host's process list shows). Redirects are followed; the
 * headers do not go to another host. A fetch that failed for a reason that may pass (a
 * connection refused, cut or stalled; an HTTP 5xx, 408 or 429) throws ShellbaseError
 * `unavailable` with `details.mayPass`; nothing else does.
 */
export interface RemoteBlob {
  url: string;
  headers: string[];
  /** Stops the fetch (and the unpacking) when it aborts. */
  signal?: AbortSignal;
}

export interface UnpackOptions {
  /** The most bytes the blob (as sent) may have (absent: no limit). */
  blobMax?: number;
  /** Bytes of the blob arrived so far (from time to time), where the runtime fetches it. */
  onBytes?: (n: number) => void;
}

export interface UnpackedLayer {
  /** sha256:HEX of the tar stream, decompressed, as sent (all of it, past its end marker too). */
  diffId: string;
  /** The blob as it came (before decompression), where the runtime fetched it: its digest and size. */
  blob?: { digest: string; size: number };
  /** Device nodes and FIFOs left out (the first ten names as the archive spells them). */
  dropped: Dropped;
}

/**
 * Sandboxes: one command in a fresh sandbox over a mount the snapshotter described (queries,
 * services, build steps). Every backend has them (bwrap; in memory for the fast tier).
 */
export interface SandboxRuntime {
  run(spec: SandboxSpec): Promise<SandboxResult>;
  /** Kills and removes whatever sandboxes a crashed server left behind. */
  recover(): Promise<number>;
  /** Releases what the runtime holds on the host (its parent cgroups). */
  close(): Promise<void>;
}

/**
 * Archives into a directory the snapshotter described (`into.source`): a tar stream as every
 * backend unpacks it, and an image's layer whole where the backend has confined programs for it.
 */
export interface ArchiveUnpacking {
  /** Unpacks a tar stream, confined (files keep the owners a sandbox would give them). */
  unpackTar(body: Readable, into: { source: string }): Promise<void>;
  /**
   * A gzip stream decompressed by a confined program; absent (or null: the program is not
   * installed) where the backend has none, and the caller decompresses in its own process. A
   * stream the program refuses throws.
   */
  gunzip?(body: AsyncIterable<Buffer>): AsyncIterable<Buffer> | null;
  /**
   * Unpacks an image's layer as sent (`body`, compressed as said), with every step confined
   * beside the tar that unpacks it: decompression, the tar stream's digest (its diff_id), device
   * nodes and FIFOs dropped, a member with `..` refusing the layer (a 400). Absent (or null) where
   * the backend has no such program: the caller does the steps itself. A `RemoteBlob` (only where
   * `fetchesLayers`) is fetched by the backend's own program, and hashed there too (`blob`).
   */
  unpackLayer?(body: Readable | RemoteBlob, compression: LayerCompression, into: { source: string }, opts?: UnpackOptions): Promise<UnpackedLayer> | null;
  /** Whether `unpackLayer` takes a `RemoteBlob`. */
  readonly fetchesLayers: boolean;
}

/**
 * Programs on the host beside the sandboxes, confined by the same means: what services (a bridge
 * into a sandbox's network) and machines (cgroups, a helper over a layer stack, jails) need. Only
 * a backend that runs real sandboxes has them (bwrap).
 */
export interface HostPrograms {
  /** A cgroup with these limits for a process the runtime does not start itself (a machine's QEMU). */
  cgroup(limits: CgroupLimits): Cgroup;
  /** Runs a helper tool over a layer stack, as the sandboxes' root; throws if it fails. */
  runHelper(spec: HelperSpec): Promise<void>;
  /** Bridges a host Unix socket into a network namespace. */
  bridge(spec: BridgeSpec): Bridge;
  /** Starts a confined long-running program. */
  jail(spec: JailSpec, handlers: { onStderr(chunk: Buffer): void }): Spawned;
}

/** A runtime with every capability (bwrap). */
export type Runtime = SandboxRuntime & ArchiveUnpacking & HostPrograms;

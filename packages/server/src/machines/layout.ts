import path from 'node:path';

/**
 * Where machines' files live: the one module that spells their paths.
 *
 * In `$SHELLBASE_HOME/machines/` (this server's):
 * - `ram/`: `ID.ram` is a running machine's memory file (QEMU: a tmpfs of the machines' memory
 *   budget, files QEMU maps shared), `TEMP.ram` a fork's frozen RAM on its way to the copies.
 * - `run/ID/`: one machine's sockets (`qmp.sock`, `agent.sock`, `port-N.sock`), `console.log`, and
 *   while it is hibernated its `ram` and `state.bin`, or, hibernated without its memory, `cold`.
 * - `tenants/T/disks/`: qcow2 files of machines' disk chains; `tenants/T/snapshots/S/`: a
 *   snapshot's `ram` and `state.bin`; `tenants/T/templates/KEY/`: templates of the tenant's versions.
 * - `build/`: where disks are made before they move into a template.
 * - `blobs/` (cluster mode, machines/storage/stowage.ts): `DIGEST/NAME`, frozen disk files fetched from the
 *   object store; `known/`, the blobs files here were stored as; `tmp/`, packs being made.
 *
 * In `$SHELLBASE_CACHE/machines/` (shared by servers on the host): `assets/` (kernel, initramfs),
 * `guest/HASH/` (the guest layer), `templates/KEY/` (templates of images), `accel.json`.
 *
 * A template directory holds `base.raw` (the built disk), `disk.qcow2` (its frozen top), `ram`,
 * `state.bin` and `info.json` (written last: a template without it is incomplete).
 */
export class MachineLayout {
  readonly root: string;
  readonly ramDir: string;
  readonly runRoot: string;
  readonly tenantsDir: string;
  readonly buildDir: string;
  readonly blobsDir: string;
  readonly cacheRoot: string;

  constructor(home: string, cache: string) {
    this.root = path.join(home, 'machines');
    this.ramDir = path.join(this.root, 'ram');
    this.runRoot = path.join(this.root, 'run');
    this.tenantsDir = path.join(this.root, 'tenants');
    this.buildDir = path.join(this.root, 'build');
    this.blobsDir = path.join(this.root, 'blobs');
    this.cacheRoot = path.join(cache, 'machines');
  }

  /** A running machine's RAM file. */
  ramFile(machineId: string): string { return path.join(this.ramDir, `${machineId}.ram`); }
  /** A throw-away RAM file in the RAM directory (a fork's frozen memory, a template's boot). */
  tempRam(name: string): string { return path.join(this.ramDir, `${name}.ram`); }

  runDir(machineId: string): string { return path.join(this.runRoot, machineId); }
  /** What a hibernated machine keeps in its run directory. */
  hibernation(machineId: string): { ram: string; state: string } {
    const dir = this.runDir(machineId);
    return { ram: path.join(dir, 'ram'), state: path.join(dir, 'state.bin') };
  }
  /** Present while a machine is hibernated without its memory (powered off, its disk kept): its wake boots it from its disk. */
  coldMarker(machineId: string): string { return path.join(this.runDir(machineId), 'cold'); }
  qmpSocket(runDir: string): string { return runFiles(runDir).qmp; }
  agentSocket(runDir: string): string { return runFiles(runDir).agent; }
  portSocket(runDir: string, port: number): string { return runFiles(runDir).port(port); }

  tenantDir(tenantId: string): string { return path.join(this.tenantsDir, tenantId); }
  disksDir(tenantId: string): string { return path.join(this.tenantDir(tenantId), 'disks'); }
  /** A new file of a machine's disk chain. */
  diskFile(tenantId: string, name: string): string { return path.join(this.disksDir(tenantId), `${name}.qcow2`); }
  snapshotDir(tenantId: string, snapshotId: string): string { return path.join(this.tenantDir(tenantId), 'snapshots', snapshotId); }
  snapshotFiles(dir: string): { ram: string; state: string } { return { ram: path.join(dir, 'ram'), state: path.join(dir, 'state.bin') }; }
  /** Templates of a tenant's versions, or (tenant null) of images, in the cache. */
  templatesDir(tenantId: string | null): string {
    return tenantId === null ? path.join(this.cacheRoot, 'templates') : path.join(this.tenantDir(tenantId), 'templates');
  }
  templateFiles(dir: string): { base: string; disk: string; ram: string; state: string; info: string } {
    return { base: path.join(dir, 'base.raw'), disk: path.join(dir, 'disk.qcow2'), ram: path.join(dir, 'ram'), state: path.join(dir, 'state.bin'), info: path.join(dir, 'info.json') };
  }

  get assetsDir(): string { return path.join(this.cacheRoot, 'assets'); }
  guestDir(hash: string): string { return path.join(this.cacheRoot, 'guest', hash); }
  get accelFile(): string { return path.join(this.cacheRoot, 'accel.json'); }
}

/** The files of a QEMU's run directory (a machine's, or a template's while it boots). */
export function runFiles(runDir: string) {
  return {
    qmp: path.join(runDir, 'qmp.sock'),
    agent: path.join(runDir, 'agent.sock'),
    console: path.join(runDir, 'console.log'),
    /** Device state written during a freeze, before it moves to its snapshot. */
    frozenState: path.join(runDir, 'frozen-state.bin'),
    port: (port: number) => path.join(runDir, `port-${port}.sock`),
  };
}

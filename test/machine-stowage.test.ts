import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { after, before, test } from 'node:test';
import pino from 'pino';
import { LocalBlobStore } from '../packages/server/src/store/blobs/index.ts';
import type { BlobStore } from '../packages/server/src/store/blobs/types.ts';
import { ShellbaseError } from '../packages/server/src/errors.ts';
import { MachineLayout } from '../packages/server/src/machines/layout.ts';
import { MachineStowage } from '../packages/server/src/machines/storage/stowage.ts';
import { MachineDisks } from '../packages/server/src/machines/storage/storage.ts';
import { startS3 } from './s3.ts';
import { Dialer } from '../packages/server/src/util/dialer.ts';

// Machines' files in a cluster: in the object store (machines/storage/stowage.ts), with real qcow2 chains
// (qemu-img, qemu-io) and GNU tar over a local blob store (what one worker stores, another
// fetches), and what a worker keeps of them locally (machines/storage/storage.ts, collectStray).
let root: string;
let blobs: BlobStore;
let puts = 0;
const log = pino({ level: 'silent' });
const worker = (name: string) => new MachineStowage(blobs, new MachineLayout(path.join(root, name), path.join(root, 'cache')), log, new Dialer(path.join(root, name, 'streams')));
const qemuIo = (file: string, cmd: string) => execFileSync('qemu-io', ['-f', file.endsWith('.raw') ? 'raw' : 'qcow2', '-c', cmd, file]).toString();
const backing = (file: string) => (JSON.parse(execFileSync('qemu-img', ['info', '--backing-chain', '--output=json', file]).toString()) as { filename: string }[]).map((i) => i.filename);

/** A chain as machines have it: a sparse raw base, a frozen qcow2 above it (relative backing, as templates'), a writable top. */
function chain(dir: string): { ram: string; state: string; disk: string[] } {
  mkdirSync(dir, { recursive: true });
  const f = (n: string) => path.join(dir, n);
  execFileSync('qemu-img', ['create', '-q', '-f', 'raw', f('base.raw'), '1G']);
  qemuIo(f('base.raw'), 'write -P 0x11 0 64k');
  execFileSync('qemu-img', ['create', '-q', '-f', 'qcow2', '-b', 'base.raw', '-F', 'raw', f('mid.qcow2')], { cwd: dir });
  qemuIo(f('mid.qcow2'), 'write -P 0x22 64k 64k');
  execFileSync('qemu-img', ['create', '-q', '-f', 'qcow2', '-b', f('mid.qcow2'), '-F', 'qcow2', f('top.qcow2')]);
  qemuIo(f('top.qcow2'), 'write -P 0x33 128k 64k');
  writeFileSync(f('ram'), 'memory');
  writeFileSync(f('state.bin'), 'devices');
  return { ram: f('ram'), state: f('state.bin'), disk: [f('top.qcow2'), f('mid.qcow2')] };
}

before(() => {
  root = mkdtempSync(path.join(tmpdir(), 'shellbase-stowage-'));
  const local = new LocalBlobStore(path.join(root, 'blobs'));
  // The local store, counting puts.
  blobs = {
    put: (body: Readable, o?: { expect?: string }) => { puts++; return local.put(body, o); },
    get: (d, r) => local.get(d, r), stat: (d) => local.stat(d), delete: (d) => local.delete(d), list: (o) => local.list(o),
  };
});
after(() => { rmSync(root, { recursive: true, force: true }); });

test('a machine stored by one worker is fetched by another: its whole chain (down to the base), rebased onto its own copies, collected when unused', async () => {
  const files = chain(path.join(root, 'a-files'));
  const a = worker('a');
  const stored = await a.store(files);
  assert.equal(stored.format, 1);
  assert.deepEqual(stored.disk.map((d) => d.name), ['disk.qcow2', 'disk.qcow2', 'disk.raw'], 'the base the chain names is found and stored too');
  assert.equal(puts, 5);
  // Stored again: the frozen files are not packed again, the top, RAM and state are.
  const again = await a.store(files);
  assert.equal(puts, 8);
  assert.deepEqual(again.disk.slice(1), stored.disk.slice(1));

  const b = worker('b');
  const out = path.join(root, 'b-out');
  mkdirSync(out);
  const local = await b.fetch(stored, { ram: path.join(out, 'ram'), state: path.join(out, 'state.bin'), top: path.join(out, 'top.qcow2') });
  assert.equal(local[0], path.join(out, 'top.qcow2'));
  const names = backing(local[0]);
  assert.equal(names.length, 3);
  for (const n of names.slice(1)) assert.ok(n.startsWith(path.join(root, 'b', 'machines', 'blobs')), `${n} is B's own copy`);
  for (const [pattern, offset] of [['0x11', '0'], ['0x22', '64k'], ['0x33', '128k']]) {
    assert.match(qemuIo(local[0], `read -P ${pattern} ${offset} 64k`), /read 65536\/65536/, `${pattern} at ${offset} through the fetched chain`);
  }
  assert.equal(readFileSync(path.join(out, 'ram'), 'utf8'), 'memory');
  assert.equal(readFileSync(path.join(out, 'state.bin'), 'utf8'), 'devices');

  // A snapshot's fetch keeps the whole chain frozen, fetched once per worker.
  const snap = await b.fetchSnapshot(await a.store(files, { frozenTop: true }), path.join(root, 'b-snap'));
  assert.equal(snap.disk.length, 3);
  assert.ok(snap.disk.every((d) => d.startsWith(path.join(root, 'b', 'machines', 'blobs'))));
  assert.match(qemuIo(snap.disk[0], 'read -P 0x33 128k 64k'), /read 65536\/65536/);

  // B's fetched copies go once no chain names them and nothing used them for idleMs.
  assert.equal(b.collect(new Set([...local, ...snap.disk]), 0), 0, 'what a chain names stays');
  assert.equal(b.collect(new Set(), 3_600_000), 0, 'so does what was used within idleMs');
  assert.equal(b.collect(new Set(), 0), 3);
  assert.deepEqual(readdirSync(path.join(root, 'b', 'machines', 'blobs')).filter((e) => /^[0-9a-f]{64}$/.test(e)), []);
});

test('a stored machine whose blob is gone, or of an unknown format, is refused with a typed error', async () => {
  const stored = await worker('c').store(chain(path.join(root, 'c-files')));
  const b = worker('d');
  const to = { ram: path.join(root, 'd-ram'), state: path.join(root, 'd-state'), top: path.join(root, 'd-top.qcow2') };
  await assert.rejects(b.fetch({ ...stored, format: 2 as 1 }, to), (e: unknown) => e instanceof ShellbaseError && e.code === 'failed_precondition' && /format 2/.test(e.message));
  await blobs.delete(stored.ram.digest);
  await assert.rejects(b.fetch(stored, to), (e: unknown) => e instanceof ShellbaseError && e.code === 'failed_precondition' && /missing/.test(e.message));
});

test("a worker's files of machines and snapshots that moved on or went are collected once unused (MachineDisks.collectStray)", async () => {
  const layout = new MachineLayout(path.join(root, 'e'), path.join(root, 'cache'));
  const disks = layout.disksDir('t1');
  mkdirSync(disks, { recursive: true });
  const named = path.join(disks, 'named.qcow2');
  const stray = path.join(disks, 'moved-on.qcow2');
  for (const f of [named, stray]) writeFileSync(f, '');
  mkdirSync(layout.snapshotDir('t1', 's_kept'), { recursive: true });
  mkdirSync(layout.snapshotDir('t1', 's_gone'), { recursive: true });
  const metadata = { machines: { list: async () => [{ spec: { disk: [named] } }], listSnapshots: async () => [{ id: 's_kept', spec: { disk: [] } }] } };
  const store = new MachineDisks({ metadata, log } as unknown as ConstructorParameters<typeof MachineDisks>[0], layout);
  assert.equal(await store.collectStray(3_600_000), 0, 'nothing younger than idleMs');
  assert.equal(await store.collectStray(0), 2);
  assert.deepEqual(readdirSync(disks), ['named.qcow2']);
  assert.deepEqual(readdirSync(path.dirname(layout.snapshotDir('t1', 'x'))), ['s_kept']);
});

test('over an S3 store, another worker fetches a stored machine by URL (curl: no byte through the worker); a blob gone is refused the same way', async () => {
  const s3 = await startS3();
  try {
    const store = s3.store({ prefix: 'stowage' });
    let gets = 0;
    const get = store.get.bind(store);
    store.get = (...args: Parameters<typeof store.get>) => { gets++; return get(...args); };
    const on = (name: string) => new MachineStowage(store, new MachineLayout(path.join(root, name), path.join(root, 'cache')), log, new Dialer(path.join(root, name, 'streams')));
    const stored = await on('s3-a').store(chain(path.join(root, 's3-files')));
    const out = path.join(root, 's3-out');
    mkdirSync(out);
    const local = await on('s3-b').fetch(stored, { ram: path.join(out, 'ram'), state: path.join(out, 'state.bin'), top: path.join(out, 'top.qcow2') });
    assert.equal(gets, 0, 'every file came by its URL');
    for (const [pattern, offset] of [['0x11', '0'], ['0x22', '64k'], ['0x33', '128k']]) {
      assert.match(qemuIo(local[0], `read -P ${pattern} ${offset} 64k`), /read 65536\/65536/, `${pattern} at ${offset} through the fetched chain`);
    }
    assert.equal(readFileSync(path.join(out, 'ram'), 'utf8'), 'memory');
    await store.delete(stored.ram.digest);
    const to = { ram: path.join(root, 's3-c-ram'), state: path.join(root, 's3-c-state'), top: path.join(root, 's3-c-top.qcow2') };
    await assert.rejects(on('s3-c').fetch(stored, to), (e: unknown) => e instanceof ShellbaseError && e.code === 'failed_precondition' && /missing/.test(e.message));
  } finally {
    await s3.stop();
  }
});

import assert from 'node:assert/strict';
import { existsSync, mkdirSync } from 'node:fs';
import { connect } from 'node:net';
import { after, before, describe, test } from 'node:test';
import type { MachineHost } from '../../packages/server/src/machines/host.ts';
import type { AgentExec } from '../../packages/server/src/machines/vm/agent.ts';
import type { Vm, VmPort } from '../../packages/server/src/machines/vm/types.ts';

export interface VmBackendFixture {
  /** The backend, with the directories of a throw-away home (its layout). */
  host: MachineHost;
  /** A template: its built base disk, the frozen top over it, and memory and state saved once its system was up. */
  template: { base: string; disk: string; ram: string; state: string; memoryMb: number; cpus: number; ramPadKb: number };
  /** argv of a process of the guest's own writing 1, 2, 3… (a line each) into `file` every 100 ms. */
  ticker(file: string): string[];
  /** argv of a process of the guest's own answering connections to `port` with `text` in what it sends (HTTP/1.0 is asked). */
  serve(port: number, text: string): string[];
  done(): Promise<void>;
}

const TENANT = 't_vm';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * The cases every VM backend (packages/server/src/machines/vm/types.ts) must pass, over one
 * fixture for them all (a template is slow to make for real). Commands are those both guests
 * have (the in-memory guest's: vm/memory/shell.ts); what differs (a guest's own processes) is
 * the fixture's.
 */
export function vmBackendConformance(name: string, make: () => Promise<VmBackendFixture>) {
  describe(name, { timeout: 900_000 }, () => {
    let f: VmBackendFixture;
    let n = 0;
    before(async () => { f = await make(); });
    after(async () => { await f?.done(); });

    /** A VM restored from the template over a fresh top of its own (or from `from`, over `chain`). */
    const restore = async (o: { from?: { ram: string; state: string }; chain?: string[]; memoryMb?: number; ports?: number[]; guestEnv?: Record<string, string> } = {}) => {
      const id = `m_vm${n++}${Date.now().toString(36)}`;
      const { layout, backend } = f.host;
      const chain = o.chain ?? [f.template.disk];
      f.host.disksDir(TENANT);
      const top = layout.diskFile(TENANT, `${id}-d_top`);
      await backend.overlay(chain[0]!, top);
      const dir = f.host.runDir(id);
      const ports: VmPort[] = (o.ports ?? []).map((port) => ({ port, socket: layout.portSocket(dir, port) }));
      const vm = await backend.restore({
        memoryMb: o.memoryMb ?? f.template.memoryMb, ramPadKb: f.template.ramPadKb, cpus: f.template.cpus, ram: layout.ramFile(id),
        disk: [top, ...chain], runDir: dir, ports, guestEnv: o.guestEnv, egress: null,
      }, o.from ?? { ram: f.template.ram, state: f.template.state });
      return { vm, id, top, dir, ram: layout.ramFile(id), ports };
    };
    const sh = (vm: Vm, script: string, extra: Partial<AgentExec> = {}) =>
      vm.agent.run({ argv: ['sh', '-c', script], timeoutMs: 60_000, outputBytes: 1 << 20, ...extra });
    const out = async (vm: Vm, script: string) => {
      const r = await sh(vm, script);
      assert.equal(r.exitCode, 0, `${script}: ${r.stderr.toString()}`);
      return r.stdout.toString();
    };
    const count = async (vm: Vm, file: string) => Number((await out(vm, `cat ${file}`)).trim());
    const ended = async (vm: Vm, ms: number) => {
      let timer: NodeJS.Timeout | undefined;
      try {
        return await Promise.race([vm.exited, new Promise<never>((_, reject) => { timer = setTimeout(() => reject(new Error(`the VM did not end within ${ms} ms`)), ms); })]);
      } finally { clearTimeout(timer); }
    };
    const withVm = (title: string, fn: (v: Awaited<ReturnType<typeof restore>>) => Promise<void>) => test(`${name}: ${title}`, async () => {
      const v = await restore();
      try { await fn(v); } finally { await v.vm.kill(); }
    });

    withVm('exec: exit codes, stdout and stderr apart; output streams before the command ends', async ({ vm }) => {
      const r = await sh(vm, 'echo out; echo err >&2; exit 3');
      assert.deepEqual([r.exitCode, r.stdout.toString(), r.stderr.toString(), r.timedOut], [3, 'out\n', 'err\n', false]);
      const seen: { data: string; at: number }[] = [];
      const t0 = Date.now();
      const s = await sh(vm, 'echo one; sleep 1; echo two', { onOutput: (_s, data) => seen.push({ data, at: Date.now() - t0 }) });
      const end = Date.now() - t0;
      assert.equal(s.stdout.toString(), 'one\ntwo\n');
      assert.equal(seen.map((x) => x.data).join(''), 'one\ntwo\n');
      assert.ok(seen[0]!.data.startsWith('one') && end - seen[0]!.at >= 700, `the first line came ${end - seen[0]!.at} ms before the end`);
      assert.equal((await vm.agent.run({ argv: ['no-such-command-here'], timeoutMs: 10_000, outputBytes: 4096 })).exitCode, 127);
    });

    withVm('exec: a time limit kills the command; stdin reaches it; every command gets the guest\'s variables', async ({ vm }) => {
      const t0 = Date.now();
      const r = await vm.agent.run({ argv: ['sleep', '30'], timeoutMs: 1000, outputBytes: 4096 });
      assert.deepEqual([r.timedOut, r.exitCode, r.signal], [true, 137, 'SIGKILL']);
      assert.ok(Date.now() - t0 < 15_000, 'killed in time');
      assert.equal((await vm.agent.run({ argv: ['cat'], stdin: 'from stdin\n', timeoutMs: 10_000, outputBytes: 4096 })).stdout.toString(), 'from stdin\n');
      const v = await restore({ guestEnv: { SHELLBASE_SUITE_VAR: 'given' } });
      try {
        assert.equal(await out(v.vm, 'printenv SHELLBASE_SUITE_VAR'), 'given\n');
      } finally { await v.vm.kill(); }
      assert.equal((await sh(vm, 'printenv SHELLBASE_SUITE_VAR')).exitCode, 1, 'only where given');
    });

    withVm('the guest\'s files: written with a mode, read back (capped), listed; a missing path is missing', async ({ vm }) => {
      await vm.guest.write('/root/suite/hello.txt', Buffer.from('hello guest'), 0o600);
      assert.deepEqual(await vm.guest.read('/root/suite/hello.txt', 1 << 20), { kind: 'file', data: Buffer.from('hello guest'), truncated: false });
      assert.deepEqual(await vm.guest.read('/root/suite/hello.txt', 5), { kind: 'file', data: Buffer.from('hello'), truncated: true });
      await vm.guest.write('/root/suite/sub/x', Buffer.from(''), 0o644);
      assert.deepEqual(await vm.guest.read('/root/suite', 1 << 20), { kind: 'dir', entries: ['hello.txt', 'sub/'] });
      assert.deepEqual(await vm.guest.read('/root/no-such-file', 1 << 20), { kind: 'missing' });
      assert.equal(await out(vm, 'cat /root/suite/hello.txt'), 'hello guest', 'commands see what the guest operations wrote');
    });

    withVm('pause: nothing in the guest moves until resume, commands sent meanwhile included', async ({ vm }) => {
      await vm.agent.run({ argv: f.ticker('/run/suite-ticks'), timeoutMs: 30_000, outputBytes: 4096 });
      await sleep(700);
      const before = await count(vm, '/run/suite-ticks');
      assert.ok(before > 0, `the ticker ticks (${before})`);
      await vm.pause();
      let answered = false;
      const echo = sh(vm, 'echo hi').then((r) => { answered = true; return r; });
      await sleep(2000);
      assert.equal(answered, false, 'a command sent to a paused guest waits');
      await vm.resume();
      assert.equal((await echo).stdout.toString(), 'hi\n');
      const afterResume = await count(vm, '/run/suite-ticks');
      assert.ok(afterResume - before < 12, `the ticker stood still while paused (${before} → ${afterResume})`);
    });

    test(`${name}: save and restore: memory (a /run file, a running process) and the disk as they were at one instant; the source goes on`, async () => {
      const a = await restore();
      let b: Awaited<ReturnType<typeof restore>> | null = null;
      try {
        await out(a.vm, 'echo before > /root/suite-file; echo in-memory > /run/suite-mem');
        await a.vm.agent.run({ argv: f.ticker('/run/suite-ticks'), timeoutMs: 30_000, outputBytes: 4096 });
        await sleep(500);
        const atSave = await count(a.vm, '/run/suite-ticks');
        const { layout, backend } = f.host;
        const next = layout.diskFile(TENANT, `${a.id}-d_next`);
        await backend.overlay(a.top, next);
        const dir = layout.snapshotDir(TENANT, `s_suite${n}`);
        mkdirSync(dir, { recursive: true, mode: 0o711 });
        const saved = layout.snapshotFiles(dir);
        await a.vm.pause();
        await a.vm.snapshotDisk(next);
        await a.vm.save(saved);
        await a.vm.resume();
        await out(a.vm, 'echo after > /root/suite-file');
        b = await restore({ from: saved, chain: [a.top, f.template.disk] });
        assert.equal(await out(b.vm, 'cat /root/suite-file'), 'before\n', 'the copy has the disk as it was');
        assert.equal(await out(a.vm, 'cat /root/suite-file'), 'after\n', 'the source writes to its new top');
        assert.equal(await out(b.vm, 'cat /run/suite-mem'), 'in-memory\n', 'memory-only files came along');
        const first = await count(b.vm, '/run/suite-ticks');
        assert.ok(first >= atSave, `the copy's process went on from where it was (${atSave} → ${first})`);
        await sleep(600);
        assert.ok(await count(b.vm, '/run/suite-ticks') > first, 'and it runs');
        const clock = Number(await out(b.vm, 'date +%s'));
        assert.ok(Math.abs(clock - Date.now() / 1000) < 30, `the copy's clock was settled to now (${clock})`);
      } finally {
        await b?.vm.kill();
        await a.vm.kill();
      }
    });

    test(`${name}: a state restores only into RAM of its size; a refused restore leaves no memory file`, async () => {
      const id = `m_vmbad${n++}`;
      const { layout, backend } = f.host;
      f.host.disksDir(TENANT);
      const top = layout.diskFile(TENANT, `${id}-d_top`);
      await backend.overlay(f.template.disk, top);
      await assert.rejects(backend.restore({
        memoryMb: f.template.memoryMb * 2, ramPadKb: f.template.ramPadKb, cpus: f.template.cpus, ram: layout.ramFile(id),
        disk: [top, f.template.disk], runDir: f.host.runDir(id), ports: [], egress: null,
      }, { ram: f.template.ram, state: f.template.state }));
      assert.equal(existsSync(layout.ramFile(id)), false);
    });

    withVm('the disk grows: the guest sees more sectors, and its root grows', async ({ vm }) => {
      const sectors = Number(await out(vm, 'cat /sys/block/vda/size'));
      assert.ok(sectors > 0);
      const bigger = sectors + 2 ** 21; // one GiB more
      await vm.resizeDisk(bigger * 512);
      await vm.guest.growRoot(bigger);
      assert.equal(Number(await out(vm, 'cat /sys/block/vda/size')), bigger);
    });

    test(`${name}: a port reaches the guest's listener through its socket (given at the restore, or exposed after)`, async () => {
      const v = await restore({ ports: [8081] });
      try {
        await v.vm.agent.run({ argv: f.serve(8081, 'from-8081'), timeoutMs: 30_000, outputBytes: 4096 });
        assert.match(await ask(v.ports[0]!.socket), /from-8081/);
        const socket = f.host.layout.portSocket(v.dir, 8082);
        await v.vm.expose(8082, socket);
        await v.vm.agent.run({ argv: f.serve(8082, 'from-8082'), timeoutMs: 30_000, outputBytes: 4096 });
        assert.match(await ask(socket), /from-8082/);
      } finally { await v.vm.kill(); }
    });

    test(`${name}: quit ends the VM and its memory file goes; a guest that powers off ends on its own`, async () => {
      const a = await restore();
      assert.equal(a.vm.alive, true);
      await a.vm.quit();
      assert.equal(typeof await ended(a.vm, 30_000), 'string');
      assert.deepEqual([a.vm.alive, a.vm.exitedOnPurpose, existsSync(a.ram)], [false, true, false]);
      const b = await restore();
      try {
        await b.vm.agent.run({ argv: ['poweroff', '-f'], timeoutMs: 30_000, outputBytes: 4096 }).catch(() => undefined);
        await ended(b.vm, 120_000);
        assert.deepEqual([b.vm.alive, b.vm.exitedOnPurpose], [false, false]);
        await assert.rejects(b.vm.agent.run({ argv: ['true'], timeoutMs: 10_000, outputBytes: 4096 }), 'its agent is gone with it');
      } finally { await b.vm.kill(); }
    });

    test(`${name}: a boot from the base disk comes up with its agent answering, and no memory of the template's`, async () => {
      const id = `m_vmboot${n++}`;
      const { layout, backend } = f.host;
      f.host.disksDir(TENANT);
      const top = layout.diskFile(TENANT, `${id}-d_top`);
      await backend.overlay(f.template.base, top);
      const vm = await backend.boot({
        memoryMb: f.template.memoryMb, ramPadKb: f.template.ramPadKb, cpus: f.template.cpus, ram: layout.ramFile(id),
        disk: [top, f.template.base], runDir: f.host.runDir(id), ports: [], egress: null,
      }, 300_000);
      try {
        assert.equal(await out(vm, 'echo booted'), 'booted\n');
        assert.equal((await sh(vm, 'cat /run/suite-mem')).exitCode === 0, false, 'nothing of another guest\'s memory');
      } finally { await vm.kill(); }
    });

    test(`${name}: a live copy, where the VM offers one: the copy restores with the memory of its instant`, async (t) => {
      const a = await restore();
      try {
        if (!a.vm.copyLive) { t.skip('this backend offers no live copy'); return; }
        await a.vm.agent.run({ argv: f.ticker('/run/suite-ticks'), timeoutMs: 30_000, outputBytes: 4096 });
        await sleep(500);
        const { layout } = f.host;
        const next = layout.diskFile(TENANT, `${a.id}-d_live`);
        await f.host.backend.overlay(a.top, next);
        const dir = layout.snapshotDir(TENANT, `s_live${n}`);
        mkdirSync(dir, { recursive: true, mode: 0o711 });
        const saved = layout.snapshotFiles(dir);
        let switched = false;
        const pauseMs = await a.vm.copyLive({
          dir: `${a.dir}/copy`, ram: saved.ram, state: saved.state, frozen: [a.top, f.template.disk], next,
          switched: () => { switched = true; }, resumed: async () => undefined,
        });
        assert.ok(switched && pauseMs >= 0, `switched at a pause of ${pauseMs} ms`);
        const b = await restore({ from: saved, chain: [a.top, f.template.disk] });
        try {
          assert.ok(await count(b.vm, '/run/suite-ticks') > 0, 'the copy has the process');
        } finally { await b.vm.kill(); }
      } finally { await a.vm.kill(); }
    });
  });
}

/** What a connection to `socket` answers an HTTP/1.0 request with (retried while nothing answers yet). */
async function ask(socket: string): Promise<string> {
  for (let i = 0; ; i++) {
    const got = await new Promise<string>((resolve) => {
      const c = connect(socket);
      let text = '';
      c.on('connect', () => c.write('GET / HTTP/1.0\r\n\r\n'));
      c.on('data', (d) => { text += d.toString(); });
      c.on('close', () => resolve(text));
      c.on('error', () => resolve(''));
    });
    if (got || i >= 100) return got;
    await sleep(200);
  }
}

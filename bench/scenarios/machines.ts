import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import type { MachineHandle } from '@shellbase/sdk';
import { latency, value, type Bench } from '../lib.ts';

/** Busy: 100 MiB of files in RAM (/dev/shm) and a process waiting, on top of systemd's own. */
const BUSY = 'dd if=/dev/urandom of=/dev/shm/blob bs=1M count=100 status=none; setsid -f sleep infinity >/dev/null 2>&1';

/**
 * Scenario 11, machines (512 MiB, 1 vCPU, systemd, 100 MiB of it in use): create from the debian
 * template, the source's pause in a fork (stopped, and as the server copies it by default), and a
 * fork answering exec, each against one boot of the same disk to systemd (the template's build,
 * read from its info.json). At most two VMs run at once; under TCG every figure is seconds-scale,
 * so n is small.
 */
export async function machines(b: Bench): Promise<void> {
  const { t } = b;
  const n = b.quick ? 3 : 10;
  t.config.machines.readyPerTemplate = 0; // `creates` turns it on for its own rows
  const warm = await t.sb.machines.create(); // builds the template on a fresh host
  await warm.remove();
  const accel = t.server.machines.accel()?.accel ?? 'none';
  const tplRoot = path.join(t.config.cache, 'machines', 'templates');
  const boots = readdirSync(tplRoot).filter((d) => !d.includes('.building')).map((d) => {
    try { return JSON.parse(readFileSync(path.join(tplRoot, d, 'info.json'), 'utf8')) as { bootMs: number; accel: string; memoryMb: number }; } catch { return null; }
  }).filter((i) => i && i.accel === accel && i.memoryMb === 512);
  const boot = Math.max(...boots.map((i) => i!.bootMs));
  b.baselines.set('machine boot', boot);
  value(b, `machines (${accel}): boot of the debian disk to systemd up (template build, baseline)`, 'once', boot, 'ms');

  await creates(b, accel, n);

  // These rows are the stopped copy's, comparable with earlier results (auto would choose by size).
  t.config.machines.liveCopy = 'off';
  const runs = { idle: { pause: [] as number[], ready: [] as number[] }, busy: { pause: [] as number[], ready: [] as number[] } };
  for (let i = 0; i < n; i++) {
    const src = await t.sb.machines.create();
    try {
      for (const kind of ['idle', 'busy'] as const) {
        if (kind === 'busy') await src.exec(BUSY);
        await timedFork(b, src, runs[kind]);
      }
    } finally {
      await src.remove();
    }
  }
  for (const [kind, what] of [['idle', 'systemd only'], ['busy', '100 MiB more in use']] as const) {
    latency(b, `machines (${accel}): source paused by a fork (512 MiB, ${what})`, runs[kind].pause);
    latency(b, `machines (${accel}): fork call until the fork answers exec (${what})`, runs[kind].ready, 'machine boot');
  }
  await defaultForks(b, accel, n);
  await liveCopy(b, accel);
}

/**
 * A create restores the template's machine (ready VMs off), or takes one restored ahead
 * for the hot template (machines/pool/ready.ts, the default: the pool is full again before each
 * create, as between a busy template's creates). The create call alone, and it with a first exec.
 * Ready VMs are off after (the one left ready waits paused: no CPU), so the forks measured next
 * share the CPUs with nothing.
 */
async function creates(b: Bench, accel: string, n: number): Promise<void> {
  const { t } = b;
  const m = t.server.machines;
  for (const [how, per] of [['restored', 0], ['ready VM', 1]] as const) {
    t.config.machines.readyPerTemplate = per;
    const create: number[] = [];
    const answered: number[] = [];
    if (per > 0) await (await t.sb.machines.create()).remove(); // the template is hot from here
    for (let i = 0; i < n; i++) {
      for (let w = 0; per > 0 && m.readyStats.ready < per; w++) {
        if (w > 600) throw new Error('no ready machine after 60 s');
        await new Promise((r) => setTimeout(r, 100));
      }
      const taken = m.readyStats.taken;
      const t0 = performance.now();
      const vm = await t.sb.machines.create();
      create.push(performance.now() - t0);
      await vm.exec('true');
      answered.push(performance.now() - t0);
      if (m.readyStats.taken !== taken + per) throw new Error(`create ${i} ${per ? 'took no ready machine' : 'took a ready machine'}`);
      await vm.remove();
    }
    latency(b, `machines (${accel}): create from the template until exec can run${per ? ', a ready VM taken' : ''}`, create, 'machine boot');
    latency(b, `machines (${accel}): create from the template, then a first exec answered (${how})`, answered);
  }
  t.config.machines.readyPerTemplate = 0;
}

/**
 * A 1 GiB machine with 100 and then 800 MiB more in use (a tmpfs in the guest), forked
 * by a live copy and by a stopped one in turn: the source's pause (QEMU's STOP to RESUME for a
 * live copy) and the fork call until the fork answers exec.
 */
async function liveCopy(b: Bench, accel: string): Promise<void> {
  const { t } = b;
  const n = b.quick ? 2 : 5;
  const src = await t.sb.machines.create({ memoryMb: 1024 });
  try {
    for (const used of [100, 800]) {
      await src.exec(`mkdir -p /big; mountpoint -q /big || mount -t tmpfs -o size=900m big /big; rm -f /big/blob; dd if=/dev/urandom of=/big/blob bs=1M count=${used} status=none`);
      const runs = { on: { pause: [] as number[], ready: [] as number[] }, off: { pause: [] as number[], ready: [] as number[] } };
      for (let i = 0; i < n; i++) {
        for (const mode of ['on', 'off'] as const) {
          t.config.machines.liveCopy = mode;
          await timedFork(b, src, runs[mode]);
        }
      }
      for (const mode of ['on', 'off'] as const) {
        const how = mode === 'on' ? 'live copy' : 'stopped copy';
        latency(b, `machines (${accel}): source paused by a fork, ${how} (1 GiB, ${used} MiB more in use)`, runs[mode].pause);
        latency(b, `machines (${accel}): fork call until the fork answers exec, ${how} (1 GiB, ${used} MiB more in use)`, runs[mode].ready);
      }
    }
  } finally {
    t.config.machines.liveCopy = 'auto';
    await src.remove();
  }
}

/**
 * The same forks as the server chooses to copy them by default (`auto`), each source new (a live
 * copy leaves its source's RAM file wholly allocated, so a source is not reused): the pause, the
 * fork answering exec, and how many of the copies were live.
 */
async function defaultForks(b: Bench, accel: string, n: number): Promise<void> {
  const { t } = b;
  t.config.machines.liveCopy = 'auto';
  for (const [kind, what] of [['idle', 'systemd only'], ['busy', '100 MiB more in use']] as const) {
    const runs = { pause: [] as number[], ready: [] as number[] };
    let live = 0;
    for (let i = 0; i < n; i++) {
      const src = await t.sb.machines.create();
      try {
        if (kind === 'busy') await src.exec(BUSY);
        await timedFork(b, src, runs);
        if (t.server.machines.lastCopy === 'live') live++;
      } finally {
        await src.remove();
      }
    }
    latency(b, `machines (${accel}): source paused by a fork, the default (auto) (512 MiB, ${what})`, runs.pause);
    latency(b, `machines (${accel}): fork call until the fork answers exec, the default (auto) (512 MiB, ${what})`, runs.ready, 'machine boot');
    value(b, `machines (${accel}): forks copied live by the default (auto) (512 MiB, ${what})`, 'count', live, 'forks', n);
  }
}

/** One fork of `src`: the call until the fork answers exec (`ready`) and the source's pause; the fork is removed. */
async function timedFork(b: Bench, src: MachineHandle, into: { pause: number[]; ready: number[] }): Promise<void> {
  const t1 = performance.now();
  const [fork] = await src.fork(1);
  await fork.exec('true');
  into.ready.push(performance.now() - t1);
  into.pause.push(b.t.server.machines.lastStep.freeze);
  await fork.remove();
}

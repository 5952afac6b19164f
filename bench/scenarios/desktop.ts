import { Sandbox } from '@e2b/desktop';
import { BLUE, YELLOW, openDesktopPage, shownPageState } from '../../test/desktop-page.ts';
import { boxOf, decodePng } from '../../test/png.ts';
import { latency, round, time, value, type Bench } from '../lib.ts';

/**
 * Desktops: a machine of the `desktop` image through the unmodified `@e2b/desktop` SDK (in this
 * process, pointed at the bench's server by its options). On one sandbox: `screenshot()` and
 * shellbase's `screen()` against `commands.run('true')` on the same sandbox; then with Chromium
 * showing test/desktop-page.ts, a click on the page's button until a screenshot shows its colour
 * changed; then, with at least 600 MiB in use in the guest, `fork(2)` by a live copy and by the
 * server's default choice: the source's pause, and the call until both forks answer a screenshot.
 */
export async function desktop(b: Bench): Promise<void> {
  const { t } = b;
  const n = b.quick ? 10 : 30;
  const clicks = b.quick ? 5 : 10;
  const forks = b.quick ? 2 : 3;
  const accel = t.server.machines.accel()?.accel ?? 'none';
  const name = (what: string) => `desktop (${accel}): ${what}`;
  const opts = { apiKey: t.key, apiUrl: t.server.url, sandboxUrl: t.server.url, domain: 'e2b.test', timeoutMs: 1_800_000, requestTimeoutMs: 300_000 };
  const sbx = await Sandbox.create(opts);
  try {
    const m = t.sb.machines.get(sbx.sandboxId);
    const commands = await time(n, () => sbx.commands.run('true'));
    b.baselines.set('desktop commands.run', round(latency(b, name("commands.run('true') on the desktop sandbox (baseline)"), commands)));
    latency(b, name('screenshot(), @e2b/desktop'), await time(n, () => sbx.screenshot()), 'desktop commands.run');
    latency(b, name("screen(), shellbase's machines.get(id).screen"), await time(n, () => m.screen()), 'desktop commands.run');

    await openDesktopPage(sbx);
    for (let w = 0; !(await shownPageState(sbx)); w++) {
      if (w > 180) throw new Error('the page did not open in the browser within 3 min');
      await new Promise((r) => setTimeout(r, 1000));
    }
    await new Promise((r) => setTimeout(r, 3000));
    const button = boxOf(decodePng(await m.screen()), BLUE);
    if (!button) throw new Error('the page\'s button is not on the screen');
    // Clicks alternate between two points of the button: the SDK's `xdotool mousemove --sync` to where
    // the pointer already is waits for a move that never comes.
    const at = (i: number) => ({ x: button.x + (button.w >> 1) + (i % 2 ? 20 : -20), y: button.y + (button.h >> 1) });
    const toEffect = { sdk: [] as number[], native: [] as number[] };
    for (let i = 0; i < 2 * clicks; i++) {
      const want = i % 2 === 0 ? YELLOW : BLUE;
      const { x, y } = at(i);
      const t0 = performance.now();
      if (i % 4 < 2) await sbx.leftClick(x, y); else await m.click(x, y);
      while (!boxOf(decodePng(await m.screen()), want)) if (performance.now() - t0 > 30_000) throw new Error('a click showed no effect within 30 s');
      toEffect[i % 4 < 2 ? 'sdk' : 'native'].push(performance.now() - t0);
    }
    latency(b, name('leftClick() until a screenshot shows its effect, @e2b/desktop'), toEffect.sdk);
    latency(b, name("click() until a screenshot shows its effect, shellbase's"), toEffect.native);

    // At least 600 MiB in use: what the session and the browser use, and a process's bytes on top.
    const used = Number((await sbx.commands.run("free -m | awk '/^Mem:/ {print $3}'")).stdout.trim());
    const more = Math.max(0, 650 - used);
    if (more) await sbx.commands.run(`python3 -c "import time; b = b'x' * (${more} << 20); time.sleep(1e9)"`, { background: true, timeoutMs: 0 });
    await new Promise((r) => setTimeout(r, 3000));
    const inUse = Number((await sbx.commands.run("free -m | awk '/^Mem:/ {print $3}'")).stdout.trim());
    value(b, name('memory in use in the guest when forked'), 'MiB', inUse, 'MiB');
    const liveBefore = t.config.machines.liveCopy;
    try {
      for (const mode of ['on', 'auto'] as const) {
        t.config.machines.liveCopy = mode;
        const pause: number[] = [];
        const ready: number[] = [];
        for (let i = 0; i < forks; i++) {
          const t0 = performance.now();
          const made = await m.fork(2);
          await Promise.all(made.map((f) => f.screen()));
          ready.push(performance.now() - t0);
          pause.push(t.server.machines.lastStep.freeze);
          for (const f of made) await f.remove();
        }
        const how = mode === 'on' ? 'live copy' : 'the default (auto)';
        latency(b, name(`source paused by fork(2) with the browser running, ${how} (${inUse} MiB in use)`), pause);
        latency(b, name(`fork(2) until both forks answer a screenshot, ${how}`), ready);
      }
    } finally {
      t.config.machines.liveCopy = liveBefore;
    }
  } finally {
    await sbx.kill().catch(() => undefined);
  }
}

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { execFile } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { Sandbox } from '@e2b/desktop';
import { imageBuilt, imageInfo, loadConfig } from '@shellbase/server';
import { launchChromium } from './console-session.ts';
import { BLUE, GREEN, GREY, RED, TRACK_PX, YELLOW, openDesktopPage, shownPageState, type PageState } from './desktop-page.ts';
import { closeWithSandboxes, sleep, startTestServer, type TestServer } from './harness.ts';
import { boxOf, decodePng, differingBox, differingPixels, type Box, type Rgb } from './png.ts';

// The unmodified `@e2b/desktop` SDK and shellbase's own screen and input calls against machines of
// the desktop image under TCG: the SDK's calls, a local page in the machine's browser driven by
// them, the fork of that machine mid-animation (the source and two forks show the same page at the
// same scroll position and the animation within a few seconds of each other; afterwards a click in
// one changes only that one), and the SDK's stream reached from a browser on the host.
const DOMAIN = 'e2b.test';
const run = promisify(execFile);
/** The top panel (its clock changes every minute): left out of the comparisons of screens. */
const PANEL: Box = { x: 0, y: 0, w: 1024, h: 32 };

/**
 * Waits until `check` holds, asking every second: each check runs commands in the machine, whose
 * virtual CPUs (under TCG) the browser needs too.
 */
async function until(what: string, check: () => Promise<boolean>, ms = 30_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(1000);
  }
}

/** The page's scroll position once it stands where `ok` holds: the same on two looks a second apart. */
async function standingAt(sbx: Sandbox, what: string, ok: (y: number) => boolean): Promise<number> {
  let last: number | undefined, seen: number | undefined;
  await until(what, async () => {
    const y = (await shownPageState(sbx))?.y;
    seen = y;
    const stood = y !== undefined && ok(y) && y === last;
    last = y;
    return stood;
  }).catch((err: Error) => { throw new Error(`${err.message} (the page last at y=${seen})`); });
  return last!;
}

const center = (b: Box) => ({ x: b.x + Math.floor(b.w / 2), y: b.y + Math.floor(b.h / 2) });
/** The animation's fill, in px (0: none shown). */
const fill = (img: Rgb) => boxOf(img, RED, 16)?.w ?? 0;
/** How far apart two fills are, around the track. */
const apart = (a: number, b: number) => Math.min(Math.abs(a - b), TRACK_PX - Math.abs(a - b));

describe('desktops: the @e2b/desktop SDK, screen and input, and a fork mid-page', { timeout: 1_200_000 }, () => {
  let t: TestServer;
  let sbx: Sandbox;
  const made: Sandbox[] = [];

  before(async () => {
    const { cache } = loadConfig({ cluster: null });
    assert.ok(imageBuilt(cache, 'desktop'), `the desktop image is not built at ${imageInfo(cache, 'desktop').rootfs}: run scripts/setup (or \`shellbase image build desktop\`)`);
    t = await startTestServer();
    Object.assign(process.env, { E2B_API_URL: t.server.url, E2B_SANDBOX_URL: t.server.url, E2B_API_KEY: t.key, E2B_DOMAIN: DOMAIN });
    // The first machine of a new image boots its template (about a minute and a half under TCG) past the SDK's 60 s default.
    sbx = await Sandbox.create({ timeoutMs: 1_200_000, requestTimeoutMs: 300_000 });
    made.push(sbx);
  });

  after(() => closeWithSandboxes(t, made));

  const state = () => shownPageState(sbx);
  const standing = (what: string, ok: (y: number) => boolean) => standingAt(sbx, what, ok);
  const shot = async (): Promise<Rgb> => decodePng(Buffer.from(await sbx.screenshot()));
  /** A PNG file of the machine's, decoded. */
  const pngFile = async (file: string): Promise<Rgb> => decodePng(Buffer.from(await sbx.files.read(file, { format: 'bytes' })));

  test('the SDK: screen size, screenshots, the pointer, clicks and keys on the Xfce desktop', async () => {
    assert.deepEqual(await sbx.getScreenSize(), { width: 1024, height: 768 });
    await sbx.moveMouse(300, 400);
    assert.deepEqual(await sbx.getCursorPosition(), { x: 300, y: 400 });
    await sbx.moveMouse(600, 500);
    const before = await shot();
    assert.deepEqual([before.width, before.height], [1024, 768]);
    await sbx.rightClick();
    await until('the desktop\'s menu, opened by a right click', async () => differingPixels(before, await shot(), [PANEL]) > 5000, 15_000);
    await sbx.press('escape');
    await until('the menu closed', async () => differingPixels(before, await shot(), [PANEL]) < 50, 15_000);
    assert.deepEqual(await sbx.getCursorPosition(), { x: 600, y: 500 });

    // The SDK's `scrot --pointer FILE` is the image's fbshot, which reads Xvfb's framebuffer: the
    // screen as Debian's scrot captures it over X, and with the pointer (which scrot leaves out
    // unless asked), drawn as X draws it rather than blended in by scrot.
    const scrot = async (args: string) => {
      await sbx.commands.run(`/usr/bin/scrot --overwrite ${args} /tmp/scrot.png`);
      return pngFile('/tmp/scrot.png');
    };
    const served = await sbx.commands.run('readlink -f "$(command -v scrot)"; test -s /run/shellbase-desktop/Xvfb_screen0 && echo framebuffer');
    assert.equal(served.stdout, '/opt/shellbase/desktop/bin/fbshot\nframebuffer\n');
    const pointer: Box = { x: 600 - 8, y: 500 - 8, w: 48, h: 48 };
    const [fast, real, bare] = [await shot(), await scrot('--pointer'), await scrot('')];
    assert.equal(differingPixels(fast, real, [PANEL, pointer]), 0, `fbshot's screen is scrot's: they differ in ${JSON.stringify(differingBox(fast, real, [PANEL, pointer]))}`);
    assert.ok(differingPixels(fast, bare, [PANEL]) > 20, 'the pointer is on the SDK\'s screenshot');
    assert.equal(differingPixels(fast, bare, [PANEL, pointer]), 0, 'and only the pointer');
    // Bands kept from the last capture (the user's cache beside the framebuffer) give the pixels a
    // capture without the cache gives; the captures above, each after a change of the screen, were scrot's.
    await sbx.commands.run('test -s /run/shellbase-desktop/fbshot-cache-$(id -u) && f=/opt/shellbase/desktop/bin/fbshot && $f /tmp/kept.png && FBSHOT_NO_CACHE=1 $f /tmp/fresh.png');
    assert.equal(differingPixels(await pngFile('/tmp/kept.png'), await pngFile('/tmp/fresh.png'), [PANEL]), 0);
    // Without a framebuffer (another Xvfb on :0) the same command is Debian's scrot.
    await sbx.commands.run('FBSHOT_FRAMEBUFFER=/nonexistent scrot --pointer /tmp/passed.png');
    assert.equal(differingPixels(await pngFile('/tmp/passed.png'), real, [PANEL]), 0);

    // The SDK's moves and clicks are the image's xpointer (its right click above opened the menu);
    // anything else it runs is Debian's xdotool, whole chains included.
    const xdotool = await sbx.commands.run('readlink -f "$(command -v xdotool)"');
    assert.equal(xdotool.stdout, '/opt/shellbase/desktop/bin/xpointer\n');
    // Debian's `mousemove --sync` to where the pointer already is waits for a move that never comes.
    await sbx.moveMouse(600, 500);
    const where = await sbx.commands.run('xdotool getmouselocation; /usr/bin/xdotool getmouselocation; xdotool mousemove 70 80 getmouselocation; /opt/shellbase/desktop/bin/xpointer mousemove 520 300 click --repeat 2 --delay 1 1 getmouselocation');
    const [passed, debian, chained, own] = where.stdout.trim().split('\n');
    assert.equal(passed, debian, 'getmouselocation is Debian\'s');
    assert.match(passed!, /^x:600 y:500 screen:0 window:\d+$/);
    assert.match(chained!, /^x:70 y:80 screen:0 window:\d+$/);
    assert.match(own!, /^x:520 y:300 screen:0 window:\d+$/);
    const bad = await sbx.commands.run('/opt/shellbase/desktop/bin/xpointer click 0').then(() => null, (err: { exitCode?: number; stderr?: string }) => err);
    assert.equal(bad?.exitCode, 1, 'a button 0 is refused');
    assert.match(bad?.stderr ?? '', /usage: xpointer/);
    assert.deepEqual(await sbx.getCursorPosition(), { x: 520, y: 300 });
  });

  test('open(url): a page served in the machine, in its browser, driven by the SDK\'s clicks, typing, keys and wheel', async () => {
    await openDesktopPage(sbx);
    await until('the page in the browser', async () => (await state()) !== null, 180_000);
    const first = (await state())!;
    assert.ok(first.y > 1000, `the page scrolled itself half-way down: ${JSON.stringify(first)}`);
    // Let the browser settle (its first paint, the window's placement), then find the page's parts on the screen.
    await sleep(3000);
    const img = await shot();
    const button = boxOf(img, BLUE), field = boxOf(img, GREEN), track = boxOf(img, GREY, 4);
    assert.ok(button && field && track, `the page's button, field and animation are on the screen: ${JSON.stringify({ button, field, track })}`);

    const btn = center(button);
    await sbx.leftClick(btn.x, btn.y);
    await until('one click', async () => (await state())?.clicks === 1);
    await sbx.doubleClick();
    await until('a double click', async () => (await state())?.clicks === 3);
    await until('the button yellow after three clicks', async () => boxOf(await shot(), YELLOW) !== null);

    const f = center(field);
    await sbx.leftClick(f.x, f.y);
    await sbx.write('hello desktop');
    await sbx.press('enter');
    await until('the typed text entered', async () => (await state())?.entered === 'hello_desktop');

    // Each position is waited for until it stands (the same on two looks a second apart), so the
    // wheel up starts from where the wheel down ended. The image's Chromium scrolls without an
    // animation: one that stalls part way under load and is then reversed ends elsewhere.
    const y = (await state())!.y;
    await sbx.moveMouse(500, 500);
    await sbx.scroll('down', 3);
    const down = await standing('the wheel scrolled down', (s) => s > y);
    await sbx.scroll('up', 3);
    const up = await standing('and back up', (s) => s < down);
    assert.equal(up, y, `the wheel down 3 went from ${y} to ${down}, up 3 from there to ${up}`);
  });

  test('fork mid-page: the source and two forks show the same page and scroll position, the animation in step; then each goes on alone', async (tc) => {
    const src = t.sb.machines.get(sbx.sandboxId);
    await src.input({ type: 'move', x: 900, y: 600 });
    const forking = performance.now();
    const forks = await src.fork(2);
    const forkMs = performance.now() - forking;
    tc.after(async () => { for (const f of forks) await f.remove().catch(() => undefined); });
    const machines = [src, ...forks];
    // Right after the fork, the three screens at once.
    const after = (await Promise.all(machines.map((m) => m.screen()))).map(decodePng);
    // The track starts where its red fill does (a fill of 0 px, at the wrap, is in no more than one of them).
    const fillBox = after.map((img) => boxOf(img, RED, 16)).find((x) => x !== null);
    assert.ok(fillBox, 'the animation is on the screens');
    const animated: Box = { x: fillBox.x - 2, y: fillBox.y - 2, w: TRACK_PX + 4, h: fillBox.h + 4 };
    for (const [i, img] of after.entries()) {
      assert.equal(differingPixels(after[0], img, [PANEL, animated]), 0,
        `fork ${i}: the page, its scroll position and the pointer as the source's (they differ in ${JSON.stringify(differingBox(after[0], img, [PANEL, animated]))}; the track is at ${JSON.stringify(animated)})`);
    }
    // The animation runs on the guest's monotonic clock: a fork's resumes where the source's stood at
    // the freeze, when that fork is started, while the source goes on. So the three are apart by no
    // more than the fork call's time (10 px a second) and 2 s. (That a fork did not load the page
    // again is the comparison above: the button's colour and the field's text are the clicks' and typing's.)
    const most = 20 + Math.ceil(forkMs / 100);
    for (const [a, c] of [[0, 1], [0, 2], [1, 2]]) {
      assert.ok(apart(fill(after[a]), fill(after[c])) <= most, `machines ${a} and ${c}: the animations within ${most} px (${fill(after[a])} px and ${fill(after[c])} px; the fork took ${Math.round(forkMs)} ms)`);
    }
    // Each goes on alone: the animation runs in every one; a click in the first fork changes only that one.
    await sleep(3000);
    const later = (await Promise.all(machines.map((m) => m.screen()))).map(decodePng);
    for (const [i, img] of later.entries()) assert.notEqual(fill(img), fill(after[i]), `machine ${i}'s animation goes on`);
    const button = boxOf(after[1], YELLOW)!;
    await forks[0].click(center(button).x, center(button).y);
    await until('the clicked fork\'s button turned blue (a fourth click)', async () => boxOf(decodePng(await forks[0].screen()), BLUE) !== null);
    const clicked = (await Promise.all(machines.map((m) => m.screen()))).map(decodePng);
    for (const i of [0, 2]) {
      assert.ok(boxOf(clicked[i], YELLOW) && !boxOf(clicked[i], BLUE), `machine ${i}'s button is still yellow`);
      assert.equal(differingPixels(after[i], clicked[i], [PANEL, animated]), 0, `machine ${i}'s screen is as it was`);
    }
  });

  test('the console shows the screen and passes clicks and keys through', async () => {
    const img = decodePng(Buffer.from(await sbx.screenshot()));
    const button = center(boxOf(img, YELLOW) ?? boxOf(img, BLUE)!);
    const field = center(boxOf(img, GREEN)!);
    const before = (await state())!;
    const browser = await launchChromium(['--no-sandbox', '--disable-gpu']);
    try {
      const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
      await page.goto(`${t.server.url}/console/`);
      await page.fill('#api-key', t.key);
      await page.keyboard.press('Enter');
      await page.getByRole('heading', { name: 'Contexts' }).waitFor();
      await page.evaluate((id) => { location.hash = `#/machines/${id}`; }, sbx.sandboxId);
      const screen = page.getByRole('img', { name: 'The machine\'s screen' });
      await screen.waitFor({ timeout: 60_000 });
      const scale = await screen.evaluate((el) => (el as HTMLImageElement).clientWidth / (el as HTMLImageElement).naturalWidth);
      await screen.click({ position: { x: button.x * scale, y: button.y * scale } });
      await until('the click from the console', async () => (await state())?.clicks === before.clicks + 1);
      await screen.click({ position: { x: field.x * scale, y: field.y * scale } });
      await page.keyboard.press('Control+a'); // a chord: what the field holds is selected, and typing replaces it
      await page.keyboard.type('abc');
      await page.keyboard.press('Enter');
      let seen: PageState | null = null;
      await until('the keys from the console', async () => (seen = await state())?.entered === 'abc', 60_000).catch(async (err: Error) => {
        // What the page said, where the console's focus was and what it showed as an error.
        const focused = await page.evaluate(() => document.activeElement?.getAttribute('aria-label') ?? document.activeElement?.tagName);
        const alerts = await page.getByRole('alert').allInnerTexts();
        throw new Error(`${err.message}: the page said ${JSON.stringify(seen)}; the console's focus on ${JSON.stringify(focused)}; its alerts ${JSON.stringify(alerts)}`);
      });
    } finally {
      await browser.close();
    }
  });

  test('MCP: screenshot, click, type and key answer with the screen as an image', async () => {
    const client = new Client({ name: 'test', version: '1' });
    await client.connect(new StdioClientTransport({
      command: process.execPath, args: [path.resolve('packages/cli/dist/main.js'), 'mcp'], stderr: 'ignore',
      env: { ...process.env, SHELLBASE_URL: t.server.url, SHELLBASE_API_KEY: t.key } as Record<string, string>,
    }));
    try {
      type Content = { content: { type: string; text?: string; data?: string; mimeType?: string }[]; isError?: boolean };
      const call = async (name: string, args: Record<string, unknown>) => (await client.callTool({ name, arguments: { machine: sbx.sandboxId, ...args } })) as Content;
      const shown = await call('screenshot', {});
      assert.equal(shown.isError, undefined, JSON.stringify(shown.content[0]));
      const image = shown.content.find((c) => c.type === 'image');
      assert.equal(image?.mimeType, 'image/png');
      assert.deepEqual([decodePng(Buffer.from(image!.data!, 'base64')).width], [1024]);
      const clicked = await call('click', { x: 700, y: 700 });
      assert.match(clicked.content[0].text!, /clicked left at 700,700; the pointer is at 700,700/);
      assert.ok(clicked.content.some((c) => c.type === 'image'));
      assert.match((await call('key', { key: 'Escape' })).content[0].text!, /pressed Escape/);
      assert.match((await call('type', { text: 'x' })).content[0].text!, /typed 1 characters/);
      const refused = await call('key', { key: 'not a key!' });
      assert.equal(refused.isError, true);
    } finally {
      await client.close();
    }
  });

  test('native screen and input: a PNG of the screen, each input answers where the pointer is; bad input is refused', async () => {
    const m = t.sb.machines.get(sbx.sandboxId);
    assert.deepEqual(await m.input({ type: 'move', x: 10, y: 20 }), { x: 10, y: 20 });
    // The pointer is drawn in at 10,20 unless asked otherwise.
    const [withPointer, without] = [decodePng(await m.screen()), decodePng(await m.screen({ pointer: false }))];
    assert.ok(differingBox(withPointer, without, [PANEL]), 'the pointer is in one capture and not in the other');
    const unknown = await t.http('POST', `/v1/machines/${sbx.sandboxId}/input`, { body: { type: 'key', key: 'Enter' } });
    assert.equal(unknown.status, 400, 'Enter is no X key name (Return is)');
    assert.deepEqual(await m.key('ctrl+l'), { x: 10, y: 20 });
    // The CLI's: a capture to a file, an input that prints where the pointer is.
    const cli = (...args: string[]) => run(process.execPath, [path.resolve('packages/cli/dist/main.js'), ...args], { env: { ...process.env, SHELLBASE_URL: t.server.url, SHELLBASE_API_KEY: t.key } });
    const file = path.join(tmpdir(), `screen-${process.pid}.png`);
    try {
      await cli('machine', 'screen', sbx.sandboxId, '-o', file);
      assert.equal(decodePng(readFileSync(file)).width, 1024);
    } finally {
      rmSync(file, { force: true });
    }
    assert.equal((await cli('machine', 'input', sbx.sandboxId, 'move', '30', '40')).stdout.trim(), '30 40');
    await assert.rejects(cli('machine', 'input', sbx.sandboxId, 'move', '30'), /move takes X and Y/);
    const refused = await t.http('POST', `/v1/machines/${sbx.sandboxId}/input`, { body: { type: 'click', x: -1, y: 5 } });
    assert.equal(refused.status, 400);
    const half = await t.http('POST', `/v1/machines/${sbx.sandboxId}/input`, { body: { type: 'click', x: 5 } });
    assert.equal(half.status, 400);
    assert.equal(half.json.error.code, 'invalid_argument');
    // xdg-open from a root command (shellbase's exec runs as root) opens the page in the user's browser: a fresh copy, no clicks yet.
    assert.equal((await m.exec('xdg-open http://127.0.0.1:8000/index.html?as-root')).exitCode, 0);
    await until('the page opened by root\'s xdg-open', async () => (await state())?.clicks === 0, 120_000);
    // A machine without a display: test/machines.test.ts.
  });

  test('stream.start(): the SDK\'s noVNC URL, opened in a browser on the host, shows the desktop', async () => {
    await sbx.stream.start();
    const url = new URL(sbx.stream.getUrl());
    assert.equal(url.host, sbx.getHost(6080));
    // The API port stands in for E2B's TLS edge: the sandbox's host name is mapped to it, over plain HTTP.
    const api = new URL(t.server.url);
    const browser = await launchChromium(['--no-sandbox', '--disable-gpu', `--host-resolver-rules=MAP *.${DOMAIN} ${api.hostname}:${api.port}`]);
    try {
      const page = await browser.newPage();
      await page.goto(url.toString().replace(/^https:/, 'http:'));
      await page.waitForFunction(() => /connected/i.test(document.getElementById('noVNC_status')?.textContent ?? '') || document.querySelector('canvas') !== null, undefined, { timeout: 60_000 });
      await until('the desktop drawn in the page', async () => {
        const drawn = await page.evaluate(() => {
          const c = document.querySelector('canvas');
          if (!c || c.width < 320) return false;
          const d = c.getContext('2d')!.getImageData(0, 0, c.width, c.height).data;
          let lit = 0;
          for (let i = 0; i < d.length; i += 4 * 97) if (d[i] + d[i + 1] + d[i + 2] > 0) lit++;
          return lit > 100;
        });
        return drawn;
      }, 60_000);
    } finally {
      await browser.close();
      await sbx.stream.stop();
    }
  });
});

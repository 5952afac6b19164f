// The web console (packages/console) in a real Chromium against a real server: every step goes
// through the console's UI, which calls only the public HTTP API. Screenshots: test-results/console/.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { Page } from 'playwright-core';
import { consoleSession, EXPECTED_4XX, type ConsoleSession } from './console-session.ts';

const SHOTS = path.resolve('test-results/console');
/** A 1×1 PNG. */
const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==';

describe('console: a browser session', () => {
  let c: ConsoleSession;
  let page: Page;
  let t: ConsoleSession['t'];
  const step = (name: string, allow?: RegExp) => c.step(name, allow);
  const open = (hash: string) => c.open(hash);
  const api = (method: string, url: string, body?: unknown) => c.api(method, url, body);

  before(async () => {
    c = await consoleSession({ shots: SHOTS });
    ({ page, t } = c);
  });
  after(async () => { await c?.close(); });

  test('first load (cold cache), a wrong key, then the admin key', async () => {
    await page.goto(`${t.server.url}/console/`);
    await page.locator('#api-key').waitFor();
    const load = await page.evaluate(() => {
      const nav = performance.getEntriesByType('navigation')[0] as PerformanceNavigationTiming;
      const res = performance.getEntriesByType('resource') as PerformanceResourceTiming[];
      return {
        interactive: performance.getEntriesByName('console-interactive')[0]?.startTime ?? NaN,
        requests: res.length + 1,
        bytes: nav.transferSize + res.reduce((s, r) => s + r.transferSize, 0),
      };
    });
    assert.ok(Number.isFinite(load.interactive), 'the console marks when it is interactive');
    console.log(`console first load (cold cache, loopback): interactive after ${load.interactive.toFixed(0)} ms, ${load.requests} requests, ${(load.bytes / 1024).toFixed(1)} KiB transferred`);
    // Its time is logged, not asserted (a loaded CI host took 1.35 s once): what it fetches is asserted.
    assert.ok(load.requests <= 4, `the first load makes ${load.requests} requests`);
    assert.ok(load.bytes < 64 * 1024, `the first load transfers ${load.bytes} bytes`);

    await page.keyboard.type('not-a-key');
    await page.keyboard.press('Enter');
    await page.getByRole('alert').filter({ hasText: 'That API key was not accepted.' }).waitFor();
    assert.match(await page.getByRole('alert').innerText(), /Hint: Check the key/);
    await step('wrong-key', EXPECTED_4XX);

    await page.fill('#api-key', t.key);
    await page.keyboard.press('Enter');
    await page.getByRole('heading', { name: 'Contexts' }).waitFor();
    await page.getByRole('link', { name: 'Tenants & keys' }).waitFor();
    assert.equal(await page.evaluate(() => sessionStorage.getItem('shellbase.apiKey')), t.key);
    assert.equal(await page.evaluate(() => localStorage.length), 0, 'the key is kept for the tab only');
    await step('signed-in');
  });

  test('an API error shows its message and hint; then a context is created', async () => {
    await page.getByRole('button', { name: 'New context' }).click();
    await page.fill('#ctx-name', 'bad name!');
    await page.getByRole('button', { name: 'Create', exact: true }).click();
    const refused = await api('POST', '/v1/contexts', { name: 'bad name!' });
    assert.equal(refused.status, 400);
    const alert = page.getByRole('dialog').getByRole('alert');
    await alert.waitFor();
    const text = await alert.innerText();
    assert.ok(text.includes(refused.json.error.message), `${text} shows ${refused.json.error.message}`);
    assert.ok(text.includes(`Hint: ${refused.json.error.hint}`), `${text} shows the hint`);
    await step('api-error', EXPECTED_4XX);

    await page.fill('#ctx-name', 'demo');
    await page.getByRole('button', { name: 'Create', exact: true }).click();
    await page.getByRole('heading', { name: 'demo', exact: true }).waitFor();
    assert.equal((await api('GET', '/v1/contexts/demo')).status, 200);
    await step('context-created');
  });

  test('run a command: streamed output with colours, the version it committed', async () => {
    await page.getByRole('link', { name: 'Run' }).click();
    await page.fill('#command', String.raw`printf '\033[32mgreen\033[0m hello\n'; printf 'def f():\n    return 1\n' > /root/app.py; printf '\000\001' > /root/blob.bin; echo done >&2`);
    await page.keyboard.press('Enter');
    const outcome = page.getByTestId('outcome');
    await outcome.waitFor({ timeout: 60_000 });
    assert.match(await outcome.innerText(), /Exit code\s+0/);
    assert.match(await outcome.innerText(), /committed/);
    const rows = page.locator('.term-box .xterm-rows');
    await page.waitForFunction(() => document.querySelector('.term-box .xterm-rows')?.textContent?.includes('green hello'));
    assert.match(await rows.innerText(), /done/);
    // xterm.js draws ANSI green (colour 2) with its own class.
    assert.equal(await rows.locator('span.xterm-fg-2', { hasText: 'green' }).count(), 1);
    const head = (await api('GET', '/v1/contexts/demo')).json.head;
    assert.ok((await outcome.innerText()).includes(head.slice(0, 12)), 'the outcome names the new head');
    await step('run');
  });

  test('the timeline shows the new version; a diff of two versions, coloured', async () => {
    await page.getByRole('link', { name: 'History' }).click();
    const versions = (await api('GET', '/v1/contexts/demo/versions')).json.versions;
    const row = page.locator(`[data-version="${versions[0].id}"]`);
    await row.waitFor();
    assert.match(await row.innerText(), /exec[\s\S]*printf/i);
    assert.equal(versions[0].cause.exitCode, 0, 'the version keeps its query\'s exit code');
    assert.equal(await row.locator('[title="exit code"]').innerText(), '0', 'and the timeline shows it');
    await page.getByRole('checkbox', { name: `Select ${versions[0].id} for a diff` }).check();
    await page.getByRole('checkbox', { name: `Select ${versions[1].id} for a diff` }).check();
    await page.getByRole('button', { name: /Diff selected \(2\/2\)/ }).click();
    await page.getByRole('button', { name: /\/root\/app\.py/ }).click();
    const patch = page.getByLabel('Diff of /root/app.py');
    await patch.locator('.l-add').first().waitFor();
    assert.match(await patch.innerText(), /def f\(\):/);
    assert.equal(await patch.locator('.hljs-keyword', { hasText: 'def' }).count(), 1, 'Python is coloured');
    await step('diff');
    await page.getByRole('button', { name: /\/root\/blob\.bin/ }).click();
    await page.getByLabel('Diff of /root/blob.bin').getByText(/^binary/).waitFor();
  });

  test('upload by drag and drop, then edit a file and save it as a new version', async () => {
    await open('#/contexts/demo/files?path=%2Froot');
    await page.getByRole('button', { name: /app\.py/ }).waitFor();
    const before = (await api('GET', '/v1/contexts/demo')).json.head;
    await page.getByTestId('dropzone').evaluate((zone, png) => {
      const dt = new DataTransfer();
      dt.items.add(new File(['dropped text\n'], 'dropped.txt', { type: 'text/plain' }));
      dt.items.add(new File([Uint8Array.from(atob(png), (c) => c.charCodeAt(0))], 'dot.png', { type: 'image/png' }));
      zone.dispatchEvent(new DragEvent('dragover', { dataTransfer: dt, bubbles: true, cancelable: true }));
      zone.dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }));
    }, PNG);
    await page.getByRole('button', { name: /dropped\.txt/ }).click();
    await page.getByLabel('Content').filter({ hasText: 'dropped text' }).waitFor();
    assert.equal((await api('GET', '/v1/contexts/demo/files/root/dropped.txt')).text, 'dropped text\n');
    const uploaded = (await api('GET', '/v1/contexts/demo')).json.head;
    assert.equal((await api('GET', `/v1/contexts/demo/versions?limit=2`)).json.versions[1].id, before, 'two files dropped: one version (a tar)');
    await page.getByRole('button', { name: /dot\.png/ }).click();
    await page.waitForFunction(() => (document.querySelector('.preview-body img') as HTMLImageElement | null)?.naturalWidth === 1);
    await step('uploaded');
    await page.getByRole('button', { name: /dropped\.txt/ }).click();

    await page.getByRole('button', { name: 'Edit' }).click();
    await page.fill('#file-text', 'edited in the console\n');
    await page.getByRole('button', { name: 'Save' }).click();
    await page.getByLabel('Content').filter({ hasText: 'edited in the console' }).waitFor();
    assert.equal((await api('GET', '/v1/contexts/demo/files/root/dropped.txt')).text, 'edited in the console\n');
    const [edit] = (await api('GET', '/v1/contexts/demo/versions?limit=1')).json.versions;
    assert.equal(edit.cause.kind, 'write');
    assert.equal(edit.parent, uploaded);
    await step('edited');

    const [download] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: 'Download .tar' }).click()]);
    const tarFile = path.join(c.scratch, 'root.tar');
    await download.saveAs(tarFile);
    const listing = execFileSync('tar', ['-tvf', tarFile], { encoding: 'utf8' });
    for (const name of ['app.py', 'dot.png', '.bashrc']) assert.match(listing, new RegExp(`\\s${name.replace('.', '\\.')}\n`), listing);
    assert.equal(execFileSync('tar', ['-xOf', tarFile, 'dropped.txt'], { encoding: 'utf8' }), 'edited in the console\n');
  });

  test('a 10,000-entry directory stays a short DOM (virtualised)', async () => {
    const made = await api('POST', '/v1/contexts/demo/exec', { command: 'mkdir -p /root/many && cd /root/many && seq -w 1 10000 | xargs touch' });
    assert.equal(made.json.exitCode, 0);
    const requested: string[] = [];
    const onRequest = (r: { url(): string }) => { requested.push(r.url()); };
    page.on('request', onRequest);
    await open('#/contexts'); // the context's view mounts afresh below
    await page.getByRole('heading', { name: 'Contexts' }).waitFor();
    await open('#/contexts/demo/files?path=%2Froot%2Fmany');
    const list = page.getByRole('list', { name: 'Entries of /root/many (10000)' });
    await list.getByRole('button', { name: /00001/ }).waitFor();
    const rendered = await list.getByRole('listitem').count();
    assert.ok(rendered > 0 && rendered < 80, `${rendered} rows in the DOM`);
    await list.evaluate((el) => { el.scrollTop = el.scrollHeight; });
    await list.getByRole('button', { name: /10000/ }).waitFor();
    await step('many-files');

    // The head moves (an agent writes elsewhere): the listing is read again without being emptied.
    await list.evaluate((el) => {
      const w = window as unknown as { labels: string[] };
      w.labels = [];
      new MutationObserver(() => w.labels.push(el.getAttribute('aria-label') ?? '')).observe(el, { attributes: true, attributeFilter: ['aria-label'] });
    });
    assert.equal((await api('POST', '/v1/contexts/demo/exec', { command: 'echo moved > /root/moved.txt' })).json.committed, true);
    const head = (await api('GET', '/v1/contexts/demo')).json.head as string;
    const relisted = page.waitForResponse((r) => r.url().includes('/v1/contexts/demo/files/root/many') && r.status() === 200, { timeout: 15_000 });
    await page.locator(`code[title="${head}"]`).waitFor({ timeout: 15_000 });
    await relisted;
    assert.deepEqual(await page.evaluate(() => (window as unknown as { labels: string[] }).labels), [], 'the list kept its entries');
    await list.getByRole('button', { name: /10000/ }).waitFor({ timeout: 5000 });
    page.off('request', onRequest);
    // The head is read again because the context's event stream reported the commit (no polling).
    assert.ok(requested.some((u) => /\/v1\/events\?/.test(u) && u.includes('kinds=version.committed') && u.includes('context=demo')), 'the view streams the context\'s commits');
  });

  test('fork, write on the fork, merge it back: the graph draws both lanes and the merge', async () => {
    await open('#/contexts/demo/history');
    await page.getByRole('button', { name: 'Fork', exact: true }).click();
    await page.fill('#ctx-name', 'demo-fork');
    await page.getByRole('dialog').getByRole('button', { name: 'Fork' }).click();
    await page.getByRole('heading', { name: 'demo-fork', exact: true }).waitFor();
    assert.equal((await api('POST', '/v1/contexts/demo-fork/exec', { command: 'echo fork > /root/fork.txt' })).json.committed, true);
    assert.equal((await api('POST', '/v1/contexts/demo/merge', { from: 'demo-fork' })).status, 200);
    await open('#/contexts/demo/history');
    await page.getByRole('heading', { name: 'demo', exact: true }).waitFor();
    const merge = (await api('GET', '/v1/contexts/demo')).json.head;
    await page.locator(`[data-version="${merge}"]`, { hasText: 'merge demo-fork' }).waitFor();
    const graph = page.locator('svg.graph[data-lanes="2"]');
    await graph.locator('path.edge.merge').waitFor();
    assert.equal(await graph.locator('path.edge.merge').count(), 1, 'one dashed merge edge');
    await page.locator('.legend', { hasText: 'demo-fork' }).waitFor();
    await step('graph');
  });

  test('mounts on both sides of the timeline: the query\'s version names the volume, the volume\'s version the query', async () => {
    assert.equal((await api('POST', '/v1/contexts', { name: 'shelf', empty: true })).status, 201);
    const r = (await api('POST', '/v1/contexts/reader/exec', { command: 'echo x > /mnt/shelf/x && echo y > /root/with-mount', mounts: [{ context: 'shelf', path: '/mnt/shelf' }] })).json;
    assert.equal(r.committed, true);
    await open('#/contexts/reader/history');
    await page.locator(`[data-version="${r.version}"] .mount-tag`, { hasText: 'shelf:/mnt/shelf' }).waitFor();
    await open('#/contexts/shelf/history');
    await page.locator(`[data-version="${r.mounts[0].version}"] .mount-tag`, { hasText: 'from reader' }).waitFor();
    // Away from the timeline before its context goes: the timeline refreshes itself, and a refresh
    // after the delete would be a 404 the next step counts.
    await open('#/contexts');
    await page.getByRole('searchbox', { name: 'Search contexts' }).waitFor();
    for (const name of ['reader', 'shelf']) assert.equal((await api('DELETE', `/v1/contexts/${name}`)).status, 204);
  });

  test('the timeline pages (before=ID) instead of loading every version', async () => {
    await api('POST', '/v1/contexts', { name: 'long' });
    for (let i = 0; i < 120; i++) assert.equal((await t.http('PUT', `/v1/contexts/long/files/n${i}`, { raw: String(i), headers: { 'content-type': 'application/octet-stream' } })).status, 200);
    const urls: string[] = [];
    page.on('request', (r) => { if (r.url().includes('/v1/contexts/long/versions')) urls.push(r.url()); });
    await open('#/contexts/long/history');
    await page.getByText('100 versions loaded').waitFor();
    await page.getByRole('list', { name: 'Versions, newest first' }).evaluate((el) => { el.scrollTop = el.scrollHeight; });
    await page.getByText('121 versions loaded (all)').waitFor();
    assert.equal(urls.filter((u) => u.includes('before=')).length, 1, urls.join('\n'));
    await step('paged');

    const [, second] = (await api('GET', '/v1/contexts/long/versions?limit=2')).json.versions;
    await page.getByRole('list', { name: 'Versions, newest first' }).evaluate((el) => { el.scrollTop = 0; });
    await page.locator(`[data-version="${second.id}"]`).getByRole('button', { name: 'Reset' }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Reset' }).click();
    await page.getByText('122 versions loaded (all)').waitFor();
    const [reset] = (await api('GET', '/v1/contexts/long/versions?limit=1')).json.versions;
    assert.equal(reset.cause.kind, 'reset');
    assert.equal((await api('GET', '/v1/contexts/long/files/n119')).status, 404, 'the reset dropped the last write');

    await page.getByRole('link', { name: 'Contexts', exact: true }).first().click();
    await page.getByRole('searchbox', { name: 'Search contexts' }).fill('lon');
    await page.getByRole('row').filter({ hasText: 'demo' }).waitFor({ state: 'detached' });
    await page.getByRole('row', { name: /long/ }).getByRole('button', { name: 'Delete' }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Delete context' }).click();
    await page.getByText('No context matches.').waitFor();
    assert.equal((await api('GET', '/v1/contexts/long')).status, 404);
  });

  test('a service: start it, open its URL, read its logs', async () => {
    await open('#/contexts/demo/services');
    await page.getByRole('button', { name: 'New service' }).click();
    await page.getByLabel('Command').fill('cd /root && python3 -m http.server 8000');
    await page.getByRole('button', { name: 'Create' }).click();
    const link = page.locator('a.service-url');
    await link.waitFor();
    const [tab] = await Promise.all([page.context().waitForEvent('page'), link.click()]);
    await tab.waitForLoadState();
    await tab.getByText('app.py').waitFor({ timeout: 60_000 });
    await tab.screenshot({ path: c.shotPath('service-page') });
    await tab.close();
    await page.getByRole('button', { name: 'Logs' }).click();
    await page.locator('pre.logs', { hasText: 'GET / ' }).waitFor({ timeout: 15_000 });
    await step('service');
    await page.getByRole('button', { name: 'Stop' }).click();
    await page.locator('tr[data-service="web"] .state', { hasText: 'sleeping' }).waitFor({ timeout: 30_000 });
    await page.locator('tr[data-service="web"]').getByRole('button', { name: 'Delete' }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Delete service' }).click();
    await page.locator('tr[data-service="web"]').waitFor({ state: 'detached' });
    assert.deepEqual((await api('GET', '/v1/contexts/demo/services')).json.services, []);
  });

  test('usage charts and the admin figures from /metrics', async () => {
    await page.getByRole('link', { name: 'Usage' }).click();
    await page.getByRole('img', { name: /Queries per day/ }).waitFor();
    const total = (await api('GET', '/v1/usage?groupBy=day')).json.total.queries;
    assert.ok(total >= 3);
    assert.match(await page.locator('.totals').innerText(), new RegExp(`Queries\\s+${total}\\b`));
    assert.match(await page.locator('.totals').innerText(), /Egress\s+\d[\d.]* \w*B out · \d[\d.]* \w*B in/);
    await page.getByRole('img', { name: /Egress bytes \(sent and received\) per day/ }).waitFor();
    await page.getByRole('heading', { name: /Server metrics/ }).waitFor();
    await page.getByRole('link', { name: 'demo' }).first().waitFor();
    await step('usage');
  });

  test('the admin makes a tenant; its key signs in without the admin views', async () => {
    await page.getByRole('link', { name: 'Tenants & keys' }).click();
    await page.getByRole('button', { name: 'New tenant' }).click();
    await page.fill('#tenant-name', 'acme');
    await page.getByRole('dialog').getByRole('button', { name: 'Create' }).click();
    const key = await page.getByLabel('New API key').inputValue();
    assert.ok(key.length > 20);
    await step('tenant-key');
    await page.getByRole('button', { name: 'Done' }).click();
    await page.getByRole('link', { name: 'acme' }).click();
    await page.getByRole('heading', { name: 'Keys of acme' }).waitFor();
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.fill('#api-key', key);
    await page.keyboard.press('Enter');
    await page.getByText('No contexts yet: create one.').waitFor();
    assert.equal(await page.getByRole('link', { name: 'Tenants & keys' }).count(), 0);
    assert.equal(await page.getByText('tenant key').count(), 1);
    // The console learns whether a key is the admin's from GET /v1/tenants: 403 for a tenant's.
    await step('tenant-signed-in', /^HTTP 403 GET \S+\/v1\/tenants$/);
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.fill('#api-key', t.key);
    await page.keyboard.press('Enter');
    await page.getByRole('link', { name: 'Tenants & keys' }).waitFor();
  });

  // The suite's one machine (the first of a version boots a template: tens of seconds without KVM).
  test('a machine: an interactive terminal, hibernate, its console log, commit into its context, delete', async () => {
    await open('#/contexts/demo/machines');
    await page.getByRole('button', { name: 'New machine' }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Start' }).click();
    await page.getByRole('heading', { name: /^Machine m_/ }).waitFor({ timeout: 300_000 });
    const id = (await api('GET', '/v1/machines')).json.machines[0].id as string;
    const state = (s: string) => page.locator(`.bar .state-${s}`).first().waitFor({ timeout: 120_000 });
    // The terminal is a PTY over the API's WebSocket: keys typed go to bash, full-screen programs work.
    await page.getByRole('button', { name: 'Open terminal' }).click();
    await page.locator('[data-terminal-status="open"]').waitFor({ timeout: 120_000 });
    const rows = page.locator('.term-box .xterm-rows');
    const shows = (text: string) => page.waitForFunction((x) => document.querySelector('.term-box .xterm-rows')?.textContent?.includes(x), text, { timeout: 120_000 });
    await page.locator('.term-box').click();
    await page.keyboard.type('cd /tmp && pwd && tty && echo $((6*7)) > /root/vm.txt && echo vm-$((40+2))');
    await page.keyboard.press('Enter');
    await shows('vm-42');
    assert.match(await rows.innerText(), /\/dev\/pts\/\d+/, 'a real terminal');
    await page.keyboard.type('cat /root/app.py | head -1; stty size; echo size-$((1+2))');
    await page.keyboard.press('Enter');
    await shows('size-3');
    assert.match(await rows.innerText(), /^def f\(\):/m);
    assert.match(await rows.innerText(), /^\d+ \d+\s*$/m, 'the terminal has the size the page drew');
    await page.keyboard.type('echo console-tail-$((1+1)) > /dev/console');
    await page.keyboard.press('Enter');
    await step('machine-terminal');
    // The console log shows what reached the serial console.
    await page.locator('pre.console-log', { hasText: 'console-tail-2' }).waitFor({ timeout: 30_000 });
    // Hibernate ends the terminal's session; the state says hibernated; the log stays readable.
    await page.getByRole('button', { name: 'Hibernate' }).click();
    await state('hibernated');
    assert.equal((await api('GET', `/v1/machines/${id}`)).json.state, 'hibernated');
    await page.locator('[data-terminal-status="closed"]').waitFor();
    await page.getByRole('button', { name: 'Refresh' }).click();
    await page.locator('pre.console-log', { hasText: 'console-tail-2' }).waitFor();
    await step('machine-hibernated');
    // Reconnecting wakes it, with its files.
    await page.getByRole('button', { name: 'Reconnect' }).click();
    await page.locator('[data-terminal-status="open"]').waitFor({ timeout: 120_000 });
    await state('running');
    await page.locator('.term-box').click();
    await page.keyboard.type('cat /root/vm.txt; exit');
    await page.keyboard.press('Enter');
    await shows('[the shell ended: exit 0]');
    await page.getByRole('button', { name: 'Commit…' }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Commit' }).click();
    await page.getByText('Committed to demo').waitFor({ timeout: 120_000 });
    assert.equal((await api('GET', '/v1/contexts/demo/files/root/vm.txt')).text, '42\n');
    assert.equal((await api('GET', '/v1/contexts/demo/versions?limit=1')).json.versions[0].cause.kind, 'machine');
    await page.getByRole('button', { name: 'Delete' }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Delete machine' }).click();
    await page.getByRole('heading', { name: 'Snapshots' }).waitFor();
    assert.deepEqual((await api('GET', '/v1/machines')).json.machines, []);
    await step('machine-deleted');
  });

  test('keyboard only: the skip link, a dialog closed by Escape, a context made and a version picked', async () => {
    /** The focused element's accessible name (its label or its text). */
    const focused = () => page.evaluate(() => {
      const el = document.activeElement as HTMLElement | null;
      return (el?.getAttribute('aria-label') ?? el?.innerText ?? '').trim();
    });
    /** Presses Tab until the focused element's name matches (a keyboard user's way there). */
    async function tabTo(name: RegExp) {
      for (let i = 0; i < 60; i++) {
        if (name.test(await focused())) return;
        await page.keyboard.press('Tab');
      }
      assert.fail(`Tab never reached ${name}; focus is on "${await focused()}"`);
    }
    await open('#/contexts');
    await page.reload();
    await page.getByRole('heading', { name: 'Contexts' }).waitFor();
    await page.keyboard.press('Tab');
    assert.equal(await focused(), 'Skip to content', 'the first stop is the skip link');
    await page.keyboard.press('Enter');
    assert.equal(await page.evaluate(() => document.activeElement?.id), 'main');
    await tabTo(/^New context$/);
    await page.keyboard.press('Enter');
    await page.getByRole('dialog').waitFor();
    assert.equal(await page.evaluate(() => document.activeElement?.id), 'ctx-name', 'the dialog takes the focus');
    await page.keyboard.press('Escape');
    await page.getByRole('dialog').waitFor({ state: 'detached' });
    await tabTo(/^New context$/);
    await page.keyboard.press('Enter');
    await page.getByRole('dialog').waitFor();
    await page.keyboard.type('by-keys');
    await page.keyboard.press('Enter');
    await page.getByRole('heading', { name: 'by-keys', exact: true }).waitFor();
    assert.equal((await api('GET', '/v1/contexts/by-keys')).status, 200);
    const [only] = (await api('GET', '/v1/contexts/by-keys/versions')).json.versions;
    const box = page.getByRole('checkbox', { name: `Select ${only.id} for a diff` });
    await box.waitFor();
    await tabTo(new RegExp(`^Select ${only.id} for a diff$`));
    await page.keyboard.press('Space');
    assert.equal(await box.isChecked(), true);
    await step('keyboard');
    assert.equal((await api('DELETE', '/v1/contexts/by-keys')).status, 204);
  });

  test('a narrow window', async () => {
    await page.setViewportSize({ width: 420, height: 800 });
    await open('#/contexts/demo/history');
    await page.locator('svg.graph[data-lanes="2"]').waitFor();
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 1, `the page fits a narrow window (${overflow}px too wide)`);
    await step('narrow');
  });
});

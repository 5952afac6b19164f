// The web console in Debian's Firefox ESR (`apt-get install firefox-esr`; never a browser build from
// elsewhere), driven over WebDriver BiDi by test/bidi.ts. Opt-in: SHELLBASE_TEST_FIREFOX=1 runs it
// (skipped by default, since `npm test` does not install Firefox, and when /usr/bin/firefox-esr is
// absent); SHELLBASE_TEST_FIREFOX=machine adds the machine's terminal, hibernate and console log
// (one machine: minutes under TCG). Screenshots: test-results/console-firefox/.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { FirefoxBidi } from './bidi.ts';
import { startTestServer, type TestServer } from './harness.ts';

const FIREFOX = '/usr/bin/firefox-esr';
const SHOTS = path.resolve('test-results/console-firefox');
const WANTED = process.env.SHELLBASE_TEST_FIREFOX;
const skip = !WANTED ? 'opt-in: set SHELLBASE_TEST_FIREFOX=1 (or =machine) with firefox-esr installed'
  : !existsSync(FIREFOX) ? `${FIREFOX} is absent: apt-get install firefox-esr` : false;
const ENTER = '\uE007';

// What the page runs (the sources of functions called in it).
/** Clicks the enabled button or link whose label or text is `name` (or, with a `*` after it, holds it). */
const CLICK = `(name) => {
  const part = name.endsWith('*') ? name.slice(0, -1) : null;
  const el = [...document.querySelectorAll('button, a')].find((e) => {
    const label = (e.getAttribute('aria-label') || e.textContent).trim();
    return !e.disabled && (part === null ? label === name : label.includes(part));
  });
  if (!el) return false;
  el.click();
  return true;
}`;
/** Sets an input's or textarea's value as typing would (Preact hears the input event). */
const FILL = `(sel, value) => {
  const el = document.querySelector(sel);
  if (!el) return false;
  const proto = el instanceof HTMLTextAreaElement ? HTMLTextAreaElement.prototype : HTMLInputElement.prototype;
  Object.getOwnPropertyDescriptor(proto, 'value').set.call(el, value);
  el.dispatchEvent(new Event('input', { bubbles: true }));
  el.focus();
  return true;
}`;
const HAS = `(sel, text) => [...document.querySelectorAll(sel)].some((e) => e.textContent.includes(text))`;
const FOCUS = `(sel) => { const el = document.querySelector(sel); if (el) el.focus(); return !!el; }`;

describe('console in Firefox ESR', { skip, timeout: 900_000 }, () => {
  let t: TestServer;
  let ff: FirefoxBidi;
  let shot = 0;
  const click = (name: string) => ff.waitFor(`a button "${name}"`, CLICK, [name]);
  const has = (sel: string, text: string, timeoutMs?: number) => ff.waitFor(`"${text}" in ${sel}`, HAS, [sel, text], timeoutMs);
  /** A screenshot; then no error may have been logged in the page (the wrong key's refusal aside). */
  async function step(name: string, allow?: RegExp) {
    await ff.screenshot(path.join(SHOTS, `${String(++shot).padStart(2, '0')}-${name}.png`));
    assert.deepEqual(ff.errors.splice(0).filter((e) => !(allow && allow.test(e))), [], `browser errors during ${name}`);
  }

  before(async () => {
    mkdirSync(SHOTS, { recursive: true });
    t = await startTestServer();
    ff = await FirefoxBidi.launch(FIREFOX);
  });
  after(async () => { await ff?.close(); await t?.close(); });

  test('sign-in: a wrong key says so, the admin key signs in for the tab only', async () => {
    await ff.goto(`${t.server.url}/console/`);
    await ff.waitFor('the key field', FOCUS, ['#api-key']);
    await ff.type(`not-a-key${ENTER}`);
    await has('[role="alert"]', 'That API key was not accepted.');
    await step('wrong-key', /401/);
    await ff.call(FILL, '#api-key', '');
    await ff.type(`${t.key}${ENTER}`);
    await has('h1', 'Contexts');
    assert.equal(await ff.call('() => sessionStorage.getItem("shellbase.apiKey")'), t.key);
    assert.equal(await ff.call('() => localStorage.length'), 0);
    await step('signed-in');
  });

  test('a context, a run with colours, the timeline and a coloured diff', async () => {
    await click('New context');
    await ff.waitFor('the name field', FOCUS, ['#ctx-name']);
    await ff.type(`fx${ENTER}`);
    await has('h1', 'fx');
    await click('Run');
    await ff.waitFor('the command box', FILL, ['#command', String.raw`printf '\033[32mgreen\033[0m hello\n'; printf 'def f():\n    return 1\n' > /root/app.py`]);
    await ff.type(ENTER);
    await has('[data-testid="outcome"]', 'committed', 60_000);
    await has('.term-box .xterm-rows', 'green hello');
    await has('.term-box .xterm-rows span.xterm-fg-2', 'green');
    await step('run');
    await click('History');
    const versions = (await t.http('GET', '/v1/contexts/fx/versions')).json.versions as { id: string }[];
    for (const v of versions.slice(0, 2)) await ff.waitFor('a version', `(id) => { const b = document.querySelector('input[aria-label="Select ' + id + ' for a diff"]'); if (b) b.click(); return !!b; }`, [v.id]);
    await click('Diff selected (2/2)');
    await click('/root/app.py*');
    await has('[aria-label="Diff of /root/app.py"] .hljs-keyword', 'def');
    await step('diff');
  });

  test('edit a file and save it as a version; the usage page', async () => {
    await ff.call('(h) => { location.hash = h; }', '#/contexts/fx/files?path=%2Froot');
    await click('app.py*');
    await click('Edit');
    await ff.waitFor('the editor', FILL, ['#file-text', 'edited in firefox\n']);
    await click('Save');
    await has('[aria-label="Content"]', 'edited in firefox');
    assert.equal((await t.http('GET', '/v1/contexts/fx/files/root/app.py')).text, 'edited in firefox\n');
    await step('edited');
    await click('Usage');
    await ff.waitFor('the queries chart', '() => !!document.querySelector(\'svg[role="img"][aria-label^="Queries per day"]\')');
    await step('usage');
  });

  test('a machine: the interactive terminal over the WebSocket (key in a subprotocol), hibernate, the console log', { skip: WANTED !== 'machine' && 'SHELLBASE_TEST_FIREFOX=machine adds it' }, async () => {
    await ff.call('(h) => { location.hash = h; }', '#/contexts/fx/machines');
    await click('New machine');
    await click('Start');
    await has('h1', 'Machine m_', 300_000);
    await click('Open terminal');
    await ff.waitFor('the open terminal', '() => !!document.querySelector(\'[data-terminal-status="open"]\')', [], 120_000);
    await ff.call(FOCUS, '.term-box textarea');
    await ff.type(`tty; echo fx-$((40+2)) | tee /dev/console${ENTER}`);
    await has('.term-box .xterm-rows', 'fx-42', 120_000);
    await has('.term-box .xterm-rows', '/dev/pts/');
    await has('pre.console-log', 'fx-42', 30_000);
    await step('machine-terminal');
    await click('Hibernate');
    await has('.bar .state', 'hibernated', 120_000);
    await ff.waitFor('the closed terminal', '() => !!document.querySelector(\'[data-terminal-status="closed"]\')');
    await step('machine-hibernated');
    await click('Delete');
    await click('Delete machine');
    await has('h2', 'Snapshots');
    assert.deepEqual((await t.http('GET', '/v1/machines')).json.machines, []);
    await step('machine-deleted');
  });
});

// A small WebDriver BiDi client for Debian's Firefox ESR (test/console-firefox.test.ts): the
// browser's own remote protocol over a WebSocket, no driver binary and no patched browser.
// playwright-core's `moz-firefox` channel is not used: it sends commands Firefox ESR 153 lacks
// (`emulation.setMediaFeaturesOverride`), so a page cannot even open through it.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

type Json = Record<string, unknown>;
/** A remote value as BiDi serialises it (primitives only are read back here). */
interface RemoteValue { type: string; value?: unknown }

export class FirefoxBidi {
  private next = 1;
  private readonly pending = new Map<number, { resolve(r: Json): void; reject(e: Error): void }>();
  /** `log.entryAdded` entries of level error (console errors and uncaught exceptions). */
  readonly errors: string[] = [];
  private context = '';

  private constructor(private readonly child: ChildProcess, private readonly ws: WebSocket, private readonly profile: string) {
    ws.onmessage = (e) => {
      const msg = JSON.parse(String(e.data)) as { id?: number; type: string; result?: Json; error?: string; message?: string; method?: string; params?: Json };
      if (msg.id !== undefined) {
        const p = this.pending.get(msg.id);
        this.pending.delete(msg.id);
        if (msg.type === 'error') p?.reject(new Error(`${msg.error}: ${msg.message}`)); else p?.resolve(msg.result ?? {});
      } else if (msg.method === 'log.entryAdded' && msg.params?.level === 'error') {
        this.errors.push(String(msg.params.text));
      }
    };
  }

  /** Starts `executable` headless on a fresh profile, opens a BiDi session, sizes the first tab. */
  static async launch(executable: string, viewport = { width: 1280, height: 800 }): Promise<FirefoxBidi> {
    const profile = mkdtempSync(path.join(tmpdir(), 'console-firefox-'));
    // No first-run pages, updates or telemetry in a throw-away profile.
    writeFileSync(path.join(profile, 'user.js'), ['browser.shell.checkDefaultBrowser', 'app.update.enabled', 'datareporting.policy.dataSubmissionEnabled', 'toolkit.telemetry.enabled']
      .map((p) => `user_pref("${p}", false);`).join('\n'));
    const child = spawn(executable, ['--headless', '--no-remote', '--profile', profile, '--remote-debugging-port=0'], { stdio: ['ignore', 'ignore', 'pipe'] });
    const url = await new Promise<string>((resolve, reject) => {
      let err = '';
      const timer = setTimeout(() => reject(new Error(`Firefox did not start its BiDi server: ${err}`)), 60_000);
      child.stderr!.on('data', (c: Buffer) => {
        err += c.toString();
        const m = /WebDriver BiDi listening on (ws:\/\/\S+)/.exec(err);
        if (m) { clearTimeout(timer); resolve(m[1]); }
      });
      child.once('exit', (code) => { clearTimeout(timer); reject(new Error(`Firefox exited (${code}): ${err}`)); });
    });
    const ws = new WebSocket(`${url}/session`);
    await new Promise((resolve, reject) => { ws.onopen = resolve; ws.onerror = reject; });
    const b = new FirefoxBidi(child, ws, profile);
    await b.send('session.new', { capabilities: {} });
    await b.send('session.subscribe', { events: ['log.entryAdded'] });
    const tree = await b.send('browsingContext.getTree', {}) as { contexts: { context: string }[] };
    b.context = tree.contexts[0]!.context;
    await b.send('browsingContext.setViewport', { context: b.context, viewport });
    return b;
  }

  send(method: string, params: Json): Promise<Json> {
    const id = this.next++;
    this.ws.send(JSON.stringify({ id, method, params }));
    return new Promise((resolve, reject) => this.pending.set(id, { resolve, reject }));
  }

  async goto(url: string): Promise<void> {
    await this.send('browsingContext.navigate', { context: this.context, url, wait: 'complete' });
  }

  /** Runs `fn` (its source) in the page with string arguments; its result if a primitive. Throws what the page threw. */
  async call<T = unknown>(fn: string, ...args: (string | number)[]): Promise<T> {
    const r = await this.send('script.callFunction', {
      functionDeclaration: fn, awaitPromise: true, target: { context: this.context }, resultOwnership: 'none',
      arguments: args.map((a) => (typeof a === 'number' ? { type: 'number', value: a } : { type: 'string', value: a })),
    }) as { type: 'success' | 'exception'; result?: RemoteValue; exceptionDetails?: { text: string } };
    if (r.type === 'exception') throw new Error(`in the page: ${r.exceptionDetails?.text}`);
    return r.result?.value as T;
  }

  /** Polls `fn` until it returns something truthy. */
  async waitFor(what: string, fn: string, args: (string | number)[] = [], timeoutMs = 30_000): Promise<unknown> {
    const until = Date.now() + timeoutMs;
    for (;;) {
      const v = await this.call(fn, ...args).catch(() => undefined);
      if (v) return v;
      if (Date.now() > until) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** Types `text` as key presses into whatever has the focus ("\uE007" is Enter). */
  async type(text: string): Promise<void> {
    const actions = [...text].flatMap((value) => [{ type: 'keyDown', value }, { type: 'keyUp', value }]);
    await this.send('input.performActions', { context: this.context, actions: [{ type: 'key', id: 'keyboard', actions }] });
  }

  async screenshot(file: string): Promise<void> {
    const r = await this.send('browsingContext.captureScreenshot', { context: this.context }) as { data: string };
    writeFileSync(file, Buffer.from(r.data, 'base64'));
  }

  async close(): Promise<void> {
    await this.send('browser.close', {}).catch(() => undefined);
    this.ws.close();
    if (this.child.exitCode === null) await new Promise((r) => { const t = setTimeout(() => { this.child.kill('SIGKILL'); r(undefined); }, 10_000); this.child.once('exit', () => { clearTimeout(t); r(undefined); }); });
    rmSync(this.profile, { recursive: true, force: true });
  }
}

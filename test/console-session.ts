// A browser session on the web console against a real server, for test/console.test.ts: Debian's
// Chromium driven by playwright-core, nothing downloaded (Firefox: test/console-firefox.test.ts).
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { startTestServer, type TestServer } from './harness.ts';

const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];
/** Debian's Chromium (`scripts/setup` installs it). */
export const CHROMIUM = '/usr/bin/chromium';

/**
 * The environment of a test's Chromium: its home and runtime directory are `dir`, so that what it
 * keeps there (settings, caches, PulseAudio's runtime directory and its link) goes with `dir`.
 */
export function chromiumEnv(dir: string): Record<string, string> {
  return { ...(process.env as Record<string, string>), HOME: dir, XDG_RUNTIME_DIR: dir, XDG_CONFIG_HOME: path.join(dir, '.config'), XDG_CACHE_HOME: path.join(dir, '.cache') };
}

/** Debian's Chromium, headless, with a home of its own that goes when it closes. */
export async function launchChromium(args: string[]): Promise<Browser> {
  const home = mkdtempSync(path.join(tmpdir(), 'shellbase-chromium-'));
  try {
    const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args, env: chromiumEnv(home) });
    browser.on('disconnected', () => rmSync(home, { recursive: true, force: true }));
    return browser;
  } catch (err) {
    rmSync(home, { recursive: true, force: true });
    throw err;
  }
}

/** What a step expects to be refused (a wrong key, a bad name): answers logged as `HTTP status METHOD url`. */
export const EXPECTED_4XX = /^HTTP 4\d\d /;

export interface ConsoleSession {
  t: TestServer;
  page: Page;
  /** A throw-away directory of the session's (downloads go there). */
  scratch: string;
  /** The path of the next screenshot, named after `name`. */
  shotPath(name: string): string;
  /** Saves a screenshot named after the step; then no browser error may have been logged, except `allow`ed ones. */
  step(name: string, allow?: RegExp): Promise<void>;
  /** Goes to a route of the console (its URL's hash). */
  open(hash: string): Promise<void>;
  /** A raw API call with the admin key. */
  api(method: string, url: string, body?: unknown): ReturnType<TestServer['http']>;
  close(): Promise<void>;
}

/** A fresh server and a fresh browser profile (a cold cache), 1280×800; screenshots go to `shots`. */
export async function consoleSession(opts: { shots: string }): Promise<ConsoleSession> {
  mkdirSync(opts.shots, { recursive: true });
  const t = await startTestServer();
  const profile = mkdtempSync(path.join(tmpdir(), 'console-chromium-'));
  const context = await chromium.launchPersistentContext(path.join(profile, 'profile'), {
    executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS, viewport: { width: 1280, height: 800 }, env: chromiumEnv(profile),
  });
  const page = context.pages()[0] ?? (await context.newPage());
  const messages: string[] = [];
  // Chromium logs each 4xx/5xx answer as a console error without its URL: those are recorded from the responses instead.
  page.on('console', (m) => { if (m.type() === 'error' && !m.text().startsWith('Failed to load resource:')) messages.push(m.text()); });
  page.on('response', (r) => { if (r.status() >= 400) messages.push(`HTTP ${r.status()} ${r.request().method()} ${r.url()}`); });
  page.on('pageerror', (e) => messages.push(`page error: ${e.message}`));
  let shot = 0;
  const shotPath = (name: string) => path.join(opts.shots, `${String(++shot).padStart(2, '0')}-${name}.png`);
  return {
    t, page, scratch: profile, shotPath,
    async step(name, allow) {
      await page.screenshot({ path: shotPath(name), fullPage: true });
      const bad = messages.splice(0).filter((m) => !(allow && allow.test(m)));
      assert.deepEqual(bad, [], `browser errors during ${name}`);
    },
    open: (hash) => page.evaluate((h) => { location.hash = h; }, hash),
    api: (method, url, body) => t.http(method, url, body === undefined ? {} : { body }),
    async close() {
      await context.close().catch(() => {});
      rmSync(profile, { recursive: true, force: true });
      await t.close();
    },
  };
}

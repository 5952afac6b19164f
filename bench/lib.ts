import { execFile } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { promisify } from 'node:util';
import type { TestServer } from '../test/harness.ts';

/** One line of results.json; names are stable so runs can be compared over time. */
export interface Row {
  scenario: string;
  metric: string;
  value: number;
  unit: string;
  n: number;
  baseline?: string;
  ratio?: number;
}

export interface Bench {
  t: TestServer;
  quick: boolean;
  /** Samples per latency scenario. */
  n: number;
  rows: Row[];
  baselines: Map<string, number>;
}

export function pct(samples: number[], p: number): number {
  const s = [...samples].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
}

/** Runs `fn` once to warm up, then `n` times, returning each duration in ms. */
export async function time(n: number, fn: () => unknown): Promise<number[]> {
  const out: number[] = [];
  await fn();
  for (let i = 0; i < n; i++) { const t0 = performance.now(); await fn(); out.push(performance.now() - t0); }
  return out;
}

/** Records p50/p90/p99 of samples; with `baseline`, the p50 ratio against that baseline's p50. */
export function latency(b: Bench, scenario: string, samples: number[], baseline?: string): number {
  const p50 = pct(samples, 50);
  for (const p of [50, 90, 99]) {
    const row: Row = { scenario, metric: `p${p}`, value: round(pct(samples, p)), unit: 'ms', n: samples.length };
    const base = baseline === undefined ? undefined : b.baselines.get(baseline);
    if (p === 50 && base !== undefined) { row.baseline = baseline; row.ratio = round(p50 / base); }
    b.rows.push(row);
  }
  return p50;
}

export function value(b: Bench, scenario: string, metric: string, v: number, unit: string, n = 1): void {
  b.rows.push({ scenario, metric, value: round(v), unit, n });
}

export const round = (v: number) => Math.round(v * 100) / 100;

const execFileAsync = promisify(execFile);

/**
 * Sequential requests from a client in its own process (as real callers are;
 * the server shares this process, so the client must not run on its event loop): `b.n` of them,
 * timed, with the key `b.t.key` (the bench's server's, or one of bench/ab.ts's servers').
 */
export async function httpClient(b: { t: { key: string }; n: number }, url: string, body?: unknown): Promise<number[]> {
  const args = ['bench/http-client.mjs', url, b.t.key, String(b.n), ...(body === undefined ? [] : [JSON.stringify(body)])];
  return JSON.parse((await execFileAsync(process.execPath, args, { encoding: 'utf8' })).stdout) as number[];
}

export function print(rows: Row[]): void {
  const w = Math.max(...rows.map((r) => r.scenario.length));
  console.log(`\n${'scenario'.padEnd(w)}  metric  ${'value'.padStart(12)}     n  ratio`);
  for (const r of rows) {
    const ratio = r.ratio === undefined ? '' : `${r.ratio}× ${r.baseline}`;
    console.log(`${r.scenario.padEnd(w)}  ${r.metric.padEnd(6)}  ${`${r.value} ${r.unit}`.padStart(12)}  ${String(r.n).padStart(4)}  ${ratio}`);
  }
}

export function save(rows: Row[], file: string): void {
  writeFileSync(file, JSON.stringify(rows, null, 2) + '\n');
}

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { TEMPLATE_READY, waitUntilReady } from '../../../packages/server/src/machines/pool/readiness.ts';
import type { Vm } from '../../../packages/server/src/machines/vm/types.ts';

/** A VM whose guest has the readiness check or not, and whose agent answers each run with the next of `exits`. */
function guest(o: { hasCheck: boolean; exits: number[]; stderr?: string; alive?: () => boolean }): { vm: Vm; runs: string[][] } {
  const runs: string[][] = [];
  const vm = {
    get alive() { return o.alive?.() ?? true; },
    guest: { read: async (p: string) => (p === TEMPLATE_READY && o.hasCheck ? { kind: 'file', data: Buffer.alloc(0), truncated: true } : { kind: 'missing' }) },
    agent: {
      run: async (req: { argv: string[] }) => {
        runs.push(req.argv);
        const exitCode = o.exits[Math.min(runs.length - 1, o.exits.length - 1)];
        return { exitCode, timedOut: false, aborted: false, stdout: Buffer.alloc(0), stderr: Buffer.from(exitCode ? o.stderr ?? '' : ''), truncated: false, wallMs: 1 };
      },
    },
  } as unknown as Vm;
  return { vm, runs };
}

test('template readiness: an image without the check is ready at once, nothing runs', async () => {
  const g = guest({ hasCheck: false, exits: [1] });
  assert.equal(await waitUntilReady(g.vm, { timeoutMs: 1000 }), 0);
  assert.deepEqual(g.runs, []);
});

test('template readiness: the check runs through the agent until it exits 0', async () => {
  const g = guest({ hasCheck: true, exits: [7, 7, 0] });
  assert.equal(await waitUntilReady(g.vm, { timeoutMs: 5000, intervalMs: 5 }), 3);
  assert.deepEqual(g.runs, [[TEMPLATE_READY], [TEMPLATE_READY], [TEMPLATE_READY]]);
});

test('template readiness: a check that never passes fails the template after its timeout, saying what it said last', async () => {
  const g = guest({ hasCheck: true, exits: [22], stderr: 'curl: (7) Failed to connect to 127.0.0.1 port 49999\n' });
  const started = Date.now();
  await assert.rejects(waitUntilReady(g.vm, { timeoutMs: 200, intervalMs: 20 }),
    /readiness check \/etc\/shellbase\/template-ready did not pass within 200ms \(last run: exit 22: curl: \(7\) Failed to connect to 127\.0\.0\.1 port 49999\)/);
  assert.ok(Date.now() - started < 2000);
  assert.ok(g.runs.length >= 2, `${g.runs.length} runs`);
});

test('template readiness: a machine that ends meanwhile fails it at once', async () => {
  let alive = true;
  const g = guest({ hasCheck: true, exits: [1], alive: () => alive });
  alive = false;
  await assert.rejects(waitUntilReady(g.vm, { timeoutMs: 60_000 }), /the machine ended while its image's readiness check \/etc\/shellbase\/template-ready ran \(exit 1\)/);
  assert.equal(g.runs.length, 1);
});

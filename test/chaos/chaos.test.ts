import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FAULT_KINDS } from './nemesis.ts';
import { runChaos } from './run.ts';

// The short chaos run: three workers, Postgres and the S3 server each in a network namespace of
// its own, clients writing, forking, merging, reading and calling a service all along, and every
// fault kind once (test/chaos/run.ts; `npm run chaos` is the long run). Nothing acknowledged may be
// lost, nothing read may be wrong, no service may run on two workers at once, no quota may be
// exceeded, and every request is answered (or refused with a typed error) within its timeout.
test('chaos: every fault kind once against a three-worker cluster under load: nothing lost, wrong, doubled, over quota or hung', { timeout: 900_000 }, async () => {
  const report = await runChaos({ schedule: [...FAULT_KINDS], holdMs: 4000 });
  const { verdict } = report;
  const summary = JSON.stringify({ recovery: report.recovery, seen: report.seen, verdict }, null, 1);
  assert.equal(report.violations, 0, summary);
  assert.deepEqual(report.faults.map((f) => f.kind), [...FAULT_KINDS], 'every fault was injected');
  for (const f of report.faults) assert.notEqual(f.recoveryMs, null, `recovered from ${f.kind}`);
  // The run did work and met the faults: acknowledged writes of each kind, and refusals or cut-off calls.
  for (const kind of ['write', 'put', 'fork', 'merge', 'read', 'service', 'quota']) assert.ok((verdict.outcomes[`${kind} ok`] ?? 0) > 0, `some ${kind} acknowledged: ${summary}`);
  assert.ok(verdict.leasedCommits > 0, `the service's runs committed under their leases: ${summary}`);
  const failed = Object.entries(verdict.outcomes).filter(([k]) => !k.endsWith(' ok')).reduce((n, [, c]) => n + c, 0);
  assert.ok(failed > 0, `the faults were felt: ${summary}`);
});

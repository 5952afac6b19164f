import assert from 'node:assert/strict';
import { test } from 'node:test';
import { runChaos } from './run.ts';

// The short chaos run with machines (test/chaos/machines.ts) as well: machines made, appended to,
// forked, hibernated and read back through random workers while workers are killed, paused and
// cut off and the stores restarted. Besides chaos.test.ts's checks: every acknowledged line in
// each machine's file, and no machine running under two workers at once. Named machines-… so that
// it runs with the suite's other machine tests, one at a time.
// Opt-in (SHELLBASE_CHAOS_MACHINES=1): under TCG its machines make it the slowest and least settled of the chaos runs.
test('chaos with machines: kills, pauses, partitions and restarts under load: nothing lost or doubled, no hung request', { timeout: 900_000, skip: process.env.SHELLBASE_CHAOS_MACHINES !== '1' && 'set SHELLBASE_CHAOS_MACHINES=1' }, async () => {
  const report = await runChaos({ schedule: ['kill', 'pause', 'partition-postgres', 'partition-s3', 'isolate', 's3-restart'], holdMs: 4000, machines: true });
  const { verdict } = report;
  const summary = JSON.stringify({ recovery: report.recovery, seen: report.seen, verdict }, null, 1);
  assert.equal(report.violations, 0, summary);
  for (const f of report.faults) assert.notEqual(f.recoveryMs, null, `recovered from ${f.kind}`);
  for (const kind of ['m-create', 'm-write', 'm-read', 'm-hibernate']) assert.ok((verdict.outcomes[`${kind} ok`] ?? 0) > 0, `some ${kind} acknowledged: ${summary}`);
});

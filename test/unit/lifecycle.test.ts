import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MACHINE_STATES, SERVICE_STATES } from '../../packages/protocol/src/types.ts';
import { IdleLease } from '../../packages/server/src/core/idle-lease.ts';
import { SERVICE_LIFECYCLE, type ServiceEvent } from '../../packages/server/src/engine/services/lifecycle.ts';
import { ShellbaseError } from '../../packages/server/src/errors.ts';
import { MACHINE_LIFECYCLE, type MachineEvent } from '../../packages/server/src/machines/lifecycle.ts';

const refused = (e: unknown) => e instanceof ShellbaseError && e.code === 'failed_precondition';

test('the machine lifecycle table: every allowed move, and every other one refused', () => {
  const allowed: Record<string, string> = {
    'starting restored': 'running', 'starting wakeFailed': 'hibernated', 'starting stop': 'stopped', 'starting exited': 'stopped',
    'running pause': 'paused', 'running hibernate': 'hibernated', 'running stop': 'stopped', 'running exited': 'stopped',
    'paused resume': 'running', 'paused hibernate': 'hibernated', 'paused stop': 'stopped', 'paused exited': 'stopped',
    'hibernated wake': 'starting', 'hibernated stop': 'stopped',
    // Hibernated without memory (its disk kept), woken by a boot.
    'running powerOff': 'hibernated', 'paused powerOff': 'hibernated', 'starting booted': 'running',
    // Cluster mode: its worker died while it held memory.
    'starting lost': 'lost', 'running lost': 'lost', 'paused lost': 'lost', 'lost stop': 'stopped',
  };
  const events: MachineEvent[] = ['restored', 'booted', 'pause', 'resume', 'hibernate', 'powerOff', 'wake', 'wakeFailed', 'stop', 'exited', 'lost'];
  for (const s of MACHINE_STATES) {
    for (const e of events) {
      const want = allowed[`${s} ${e}`];
      if (want) assert.equal(MACHINE_LIFECYCLE.next('m_1', s, e), want, `${s} ${e}`);
      else assert.throws(() => MACHINE_LIFECYCLE.next('m_1', s, e), refused, `${s} ${e} is refused`);
    }
  }
  assert.throws(() => MACHINE_LIFECYCLE.next('m_1', 'paused', 'pause'), /machine m_1 is paused: it cannot pause/);
});

test('the service lifecycle table: every allowed move, and every other one refused', () => {
  const allowed: Record<string, string> = {
    'sleeping wake': 'starting', 'starting ready': 'running', 'starting startFailed': 'sleeping', 'starting stop': 'stopping',
    'starting exited': 'sleeping', 'running stop': 'stopping', 'running exited': 'sleeping', 'stopping exited': 'sleeping',
  };
  const events: ServiceEvent[] = ['wake', 'ready', 'startFailed', 'stop', 'exited'];
  for (const s of SERVICE_STATES) {
    for (const e of events) {
      const want = allowed[`${s} ${e}`];
      if (want) assert.equal(SERVICE_LIFECYCLE.next('web', s, e), want, `${s} ${e}`);
      else assert.throws(() => SERVICE_LIFECYCLE.next('web', s, e), refused, `${s} ${e} is refused`);
    }
  }
});

test('the idle lease: idle only with no user for the timeout; releases are idempotent', async () => {
  const lease = new IdleLease();
  const release = lease.acquire();
  assert.equal(lease.idleFor(0), false, 'a user holds it');
  release();
  release();
  assert.equal(lease.inUse, false);
  assert.equal(lease.idleFor(60_000), false, 'just used');
  assert.equal(lease.idleFor(0), true);
  let fired = 0;
  lease.watch(60, () => { fired++; });
  const held = lease.acquire();
  await new Promise((r) => setTimeout(r, 200));
  assert.equal(fired, 0, 'no firing while in use');
  held();
  await new Promise((r) => setTimeout(r, 250));
  lease.unwatch();
  assert.ok(fired >= 1, 'fires once idle');
});

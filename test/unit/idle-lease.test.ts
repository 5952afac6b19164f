import assert from 'node:assert/strict';
import { test } from 'node:test';
import { IdleLease } from '../../packages/server/src/core/idle-lease.ts';

test('idle lease: active time is the time with at least one user, overlaps counted once, open stretches up to now', () => {
  let t = 1000;
  const lease = new IdleLease(() => t);
  const a = lease.acquire();          // 1000: active from here
  t = 1100;
  const b = lease.acquire();          // overlapping user
  t = 1300;
  a();
  t = 1400;
  b();                                // 1000–1400 active: 400 ms
  t = 5000;                           // idle: not counted
  assert.equal(lease.takeActiveMs(), 400);
  assert.equal(lease.takeActiveMs(), 0, 'a take resets');
  const c = lease.acquire();          // 5000
  t = 5250;
  assert.equal(lease.takeActiveMs(), 250, 'an open stretch counts up to now');
  t = 5300;
  c();
  c();                                // releases are idempotent
  assert.equal(lease.takeActiveMs(), 50, 'and the rest of it at the next take');
  assert.equal(lease.inUse, false);
});

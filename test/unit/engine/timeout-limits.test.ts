import assert from 'node:assert/strict';
import { test } from 'node:test';
import { loadConfig } from '../../../packages/server/src/config.ts';
import { checkQuotas, quotasOf } from '../../../packages/server/src/core/quotas.ts';
import { resolveLimits } from '../../../packages/server/src/core/validate.ts';
import { ShellbaseError } from '../../../packages/server/src/errors.ts';
import { fakeEngine } from './fake-engine.ts';

const HOUR = 3_600_000;
const DAY = 86_400_000;

/** The typed 400 of a time limit: it names the field, the value and the allowed maximum. */
const refused = (field: string, value: number, max: number) => (e: unknown) => {
  assert.ok(e instanceof ShellbaseError, String(e));
  assert.equal(e.code, 'invalid_argument');
  assert.equal(e.status, 400);
  assert.deepEqual([e.details?.field, e.details?.value, e.details?.max], [field, value, max]);
  assert.ok(e.message.includes(String(value)) && `${e.message} ${e.hint}`.includes(String(max)), `${e.message} (${e.hint})`);
  return true;
};

test('time limits: a tenant may ask for up to 1 h unless its quota says otherwise; an admin may raise it to 24 h, not further', () => {
  const config = loadConfig({ home: '/nonexistent' });
  assert.equal(config.maximums.timeoutMs, HOUR, 'the default per-tenant maximum');
  assert.equal(config.defaults.timeoutMs, 60_000, 'a query that asks for nothing still gets 60 s');
  const plain = quotasOf(config, {});
  assert.equal(plain.maximums.timeoutMs, HOUR);
  assert.equal(resolveLimits(undefined, undefined, config.defaults, plain.maximums).timeoutMs, 60_000);
  assert.equal(resolveLimits(undefined, 1_200_000, config.defaults, plain.maximums).timeoutMs, 1_200_000, 'above the old 600 s cap');
  assert.equal(resolveLimits(undefined, HOUR, config.defaults, plain.maximums).timeoutMs, HOUR);
  assert.throws(() => resolveLimits(undefined, HOUR + 1, config.defaults, plain.maximums), refused('timeoutMs', HOUR + 1, HOUR));
  assert.throws(() => resolveLimits(undefined, HOUR + 1, config.defaults, plain.maximums), (e: ShellbaseError) =>
    /tenant's maximum of 3600000 ms \(1h\)/.test(e.message) && /quotas\.timeoutMs up to 86400000/.test(e.hint ?? ''));
  assert.throws(() => resolveLimits(undefined, 0, config.defaults, plain.maximums), refused('timeoutMs', 0, HOUR));

  // The admin raises one tenant's maximum (above the server's): the quota is the tenant's own ceiling.
  const raised = quotasOf(config, { quotas: checkQuotas({ timeoutMs: DAY }, config) });
  assert.equal(raised.maximums.timeoutMs, DAY);
  assert.equal(resolveLimits(undefined, DAY, config.defaults, raised.maximums).timeoutMs, DAY);
  assert.throws(() => resolveLimits(undefined, DAY + 1, config.defaults, raised.maximums), (e: ShellbaseError) =>
    refused('timeoutMs', DAY + 1, DAY)(e) && !/may raise/.test(e.hint ?? ''));
  // ...or lowers it; the other limits still only go down.
  const lowered = quotasOf(config, { quotas: { timeoutMs: 5000, memoryMb: 1e9 } });
  assert.deepEqual([lowered.maximums.timeoutMs, lowered.maximums.memoryMb], [5000, config.maximums.memoryMb]);
  assert.equal(resolveLimits(undefined, undefined, config.defaults, lowered.maximums).timeoutMs, 5000, 'the default is lowered to it');

  assert.throws(() => checkQuotas({ timeoutMs: DAY + 1 }, config), refused('quotas.timeoutMs', DAY + 1, DAY));
  assert.throws(() => checkQuotas({ timeoutMs: 1.5 }, config), (e: ShellbaseError) => e.code === 'invalid_argument');
  assert.throws(() => checkQuotas({ memoryMb: 1e9 }, config), refused('quotas.memoryMb', 1e9, config.maximums.memoryMb));
});

test('time limits: the server-wide default maximum is SHELLBASE_MAX_TIMEOUT_MS, at most 24 h', () => {
  const before = process.env.SHELLBASE_MAX_TIMEOUT_MS;
  try {
    process.env.SHELLBASE_MAX_TIMEOUT_MS = String(2 * HOUR);
    assert.equal(loadConfig({ home: '/nonexistent' }).maximums.timeoutMs, 2 * HOUR);
    process.env.SHELLBASE_MAX_TIMEOUT_MS = String(DAY + 1);
    assert.throws(() => loadConfig({ home: '/nonexistent' }), /SHELLBASE_MAX_TIMEOUT_MS must be at most 86400000/);
  } finally {
    if (before === undefined) delete process.env.SHELLBASE_MAX_TIMEOUT_MS; else process.env.SHELLBASE_MAX_TIMEOUT_MS = before;
  }
});

test('fast tier: tenant quotas set the time limit queries and services may use; a refused change changes nothing', async () => {
  const f = await fakeEngine();
  try {
    const admin = { tenantId: 't_admin', admin: true, hold: f.pins.hold() };
    const { apiKey } = await f.engine.tenants.create(admin, 'long');
    const caller = async () => ({ ...(await f.engine.tenants.authenticate(`Bearer ${apiKey}`)), hold: f.pins.hold() });
    await assert.rejects(f.engine.exec(await caller(), 'c', { command: 'true', timeoutMs: 2 * HOUR }), refused('timeoutMs', 2 * HOUR, HOUR));
    assert.equal((await f.engine.exec(await caller(), 'c', { command: 'true', timeoutMs: 1_200_000 })).exitCode, 0);

    assert.deepEqual((await f.engine.tenants.update(admin, 'long', { quotas: { timeoutMs: DAY } })).quotas, { timeoutMs: DAY });
    assert.equal((await f.engine.exec(await caller(), 'c', { command: 'true', timeoutMs: 2 * HOUR })).exitCode, 0);
    // A query that met its time limit names it, its value and the tenant's maximum; one that did not names none.
    const slow = await f.engine.exec(await caller(), 'c', { command: 'sleep 5', timeoutMs: 200 });
    assert.equal(slow.timedOut, true);
    assert.deepEqual(slow.limit, { name: 'timeoutMs', value: 200, max: DAY });
    assert.equal((await f.engine.exec(await caller(), 'c', { command: 'true' })).limit, undefined);
    await assert.rejects(f.engine.tenants.update(admin, 'long', { quotas: { timeoutMs: DAY + 1 } }), refused('quotas.timeoutMs', DAY + 1, DAY));
    await assert.rejects(f.engine.tenants.create(admin, 'longer', { timeoutMs: 2 * DAY }), refused('quotas.timeoutMs', 2 * DAY, DAY));
    assert.deepEqual((await f.engine.tenants.list(admin)).map((t) => [t.name, t.quotas]), [['long', { timeoutMs: DAY }]], 'nothing changed, nothing made');

    // A service's start timeout follows the same maximum (not a fixed 600 s).
    const define = async (name: string, port: number, startTimeoutMs: number) =>
      f.engine.services.create(await caller(), 'c', { name, command: 'true', port, startTimeoutMs });
    await define('slow-start', 8000, 2 * HOUR);
    await assert.rejects(define('too-slow', 8001, DAY + 1), refused('startTimeoutMs', DAY + 1, DAY));
    const other = { ...(await f.caller('other')) };
    await assert.rejects(f.engine.services.create(other, 'c', { name: 'web', command: 'true', port: 8000, startTimeoutMs: 2 * HOUR }),
      refused('startTimeoutMs', 2 * HOUR, HOUR));
    await f.engine.services.create(other, 'c', { name: 'web', command: 'true', port: 8000, startTimeoutMs: 1_200_000 });
  } finally {
    await f.close();
  }
});

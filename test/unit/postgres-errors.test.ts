import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ShellbaseError } from '../../packages/server/src/errors.ts';
import { neverSent } from '../../packages/server/src/store/metadata/postgres/postgres-db.ts';

// Which failures of a statement say it never ran (so running it again cannot do it twice): what a
// slot's release retries on, and what it must not.
const down = (cause: unknown) => new ShellbaseError('unavailable', 'the metadata database cannot be reached', { cause });
const coded = (code: string, message = code) => Object.assign(new Error(message), { code });

test('postgres errors: refused, unreachable and shut-down connections never ran the statement; a timeout or a cut may have', () => {
  for (const e of [coded('ECONNREFUSED'), coded('EHOSTUNREACH'), coded('57P01'), coded('57P03'), new Error('timeout exceeded when trying to connect')]) {
    assert.equal(neverSent(down(e)), true, String(e));
    assert.equal(neverSent(e), true, String(e));
  }
  for (const e of [new Error('Query read timeout'), new Error('Connection terminated unexpectedly'), coded('ECONNRESET'), coded('40001'), new Error('x')]) {
    assert.equal(neverSent(down(e)), false, String(e));
  }
});

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { clusterFromEnv } from '../../packages/server/src/config.ts';

// A worker's cluster settings from its environment: half a cluster, and mutual TLS without what it
// needs, are refused with a typed error naming the flags to give.
const base = { SHELLBASE_METADATA: 'postgres://p@h/db', SHELLBASE_BLOBS: 's3://b/p' };
const tls = { SHELLBASE_TLS_CERT: '/c.pem', SHELLBASE_TLS_KEY: '/k.pem', SHELLBASE_TLS_CA: '/ca.pem' };
const refused = (env: Record<string, string>, pattern: RegExp) => assert.throws(() => clusterFromEnv(env), (e: Error & { code?: string }) => e.code === 'invalid_argument' && pattern.test(`${e.message} ${JSON.stringify(e)}`));

test('cluster config: the embedded default, a cluster, and half a cluster refused', () => {
  assert.equal(clusterFromEnv({}), null);
  assert.equal(clusterFromEnv(base)?.blobs, 's3://b/p');
  refused({ SHELLBASE_METADATA: base.SHELLBASE_METADATA }, /object store/);
  refused({ SHELLBASE_BLOBS: base.SHELLBASE_BLOBS }, /Postgres/);
});

test('cluster config: mutual TLS between workers takes the worker\'s certificate and key, and needs the cluster\'s CA', () => {
  assert.equal(clusterFromEnv({ ...base, ...tls })?.clientAuth, undefined, 'off unless asked for');
  assert.equal(clusterFromEnv({ ...base, ...tls, SHELLBASE_TLS_CLIENT_AUTH: '0' })?.clientAuth, undefined);
  assert.deepEqual(clusterFromEnv({ ...base, ...tls, SHELLBASE_TLS_CLIENT_AUTH: '1' })?.clientAuth, { cert: '/c.pem', key: '/k.pem' });
  refused({ ...base, SHELLBASE_TLS_CERT: '/c.pem', SHELLBASE_TLS_KEY: '/k.pem', SHELLBASE_TLS_CLIENT_AUTH: '1' }, /--tls-ca/);
  refused({ ...base, SHELLBASE_TLS_CA: '/ca.pem', SHELLBASE_TLS_CLIENT_AUTH: 'true' }, /certificate and key/);
  refused({ ...base, ...tls, SHELLBASE_TLS_CLIENT_AUTH: 'maybe' }, /SHELLBASE_TLS_CLIENT_AUTH/);
});

import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { test } from 'node:test';
import { ClusterPeers } from '../../packages/server/src/cluster/peers.ts';
import { PROOF_VALIDITY_MS } from '../../packages/server/src/core/peers.ts';

const secret = randomBytes(32);
let clock = 1_800_000_000_000;
const peers = (s = secret, workerId = 'w_a') => new ClusterPeers({ workerId, secret: s, now: () => clock });
const refused = (fn: () => void, why: RegExp) => assert.throws(fn, (e: Error & { code?: string }) => e.code === 'unauthorized' && why.test(e.message));

test('peers: a proof made with the cluster secret is accepted for the request it was made for', () => {
  const proof = peers().prove('GET', 'abc.localhost:7071', '/s/x/path?q=1');
  assert.match(proof, /^v1 w_a \d+ [\w-]+$/);
  peers(secret, 'w_b').check(proof, 'GET', 'abc.localhost:7071', '/s/x/path?q=1');
  peers(secret, 'w_b').check(proof, 'get', 'ABC.localhost:7071', '/s/x/path?q=1');
});

test('peers: no proof, a malformed one, another secret, another request or another worker id is refused', () => {
  const b = peers(secret, 'w_b');
  const proof = peers().prove('POST', 'h:1', '/v1/contexts/c/services/s/stop');
  refused(() => b.check(undefined, 'POST', 'h:1', '/v1/contexts/c/services/s/stop'), /malformed/);
  refused(() => b.check('1', 'POST', 'h:1', '/v1/contexts/c/services/s/stop'), /malformed/);
  refused(() => b.check(peers(randomBytes(32)).prove('POST', 'h:1', '/p'), 'POST', 'h:1', '/p'), /signature/);
  refused(() => b.check(proof, 'GET', 'h:1', '/v1/contexts/c/services/s/stop'), /signature/);
  refused(() => b.check(proof, 'POST', 'h:2', '/v1/contexts/c/services/s/stop'), /signature/);
  refused(() => b.check(proof, 'POST', 'h:1', '/v1/contexts/c/services/other/stop'), /signature/);
  refused(() => b.check(proof.replace('w_a', 'w_z'), 'POST', 'h:1', '/v1/contexts/c/services/s/stop'), /signature/);
});

test('peers: a proof is valid for a short time only (a replay later is refused), and not from far ahead', () => {
  const b = peers(secret, 'w_b');
  const proof = peers().prove('GET', 'h', '/p');
  clock += PROOF_VALIDITY_MS;
  b.check(proof, 'GET', 'h', '/p');
  clock += 1;
  refused(() => b.check(proof, 'GET', 'h', '/p'), /too old/);
  const ahead = peers().prove('GET', 'h', '/p');
  clock -= 2 * PROOF_VALIDITY_MS;
  refused(() => b.check(ahead, 'GET', 'h', '/p'), /too old/);
});

test('peers: a secret shorter than 32 bytes is refused', () => {
  assert.throws(() => peers(randomBytes(16)), /32 bytes/);
});

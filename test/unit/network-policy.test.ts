import assert from 'node:assert/strict';
import { test } from 'node:test';
import { AddressRules, parseCidr } from '../../packages/server/src/net/addresses.ts';
import { allowsHost, checkPolicy, checkWithin, effectivePolicy, narrowest, within } from '../../packages/server/src/net/policy.ts';
import { ShellbaseError } from '../../packages/server/src/errors.ts';

const bad = (code: string) => (e: unknown) => e instanceof ShellbaseError && e.code === code;

test('policies: parsed strictly; domains and wildcards matched by name', () => {
  assert.deepEqual(checkPolicy({ egress: 'allow', domains: ['API.Example.com.', '*.github.com', 'api.example.com'] }), { egress: 'allow', domains: ['*.github.com', 'api.example.com'] });
  for (const wrong of [{ egress: 'all' }, { egress: 'allow' }, { egress: 'allow', domains: [] }, { egress: 'public', domains: ['a.com'] }, { egress: 'none', extra: 1 }, 'public', null]) {
    assert.throws(() => checkPolicy(wrong), bad('invalid_argument'), JSON.stringify(wrong));
  }
  for (const d of ['*', '*.com', 'a.*.com', '*.*.com', '1.2.3.4', 'bad_name.com', '-a.com', '', 'a..com']) {
    assert.throws(() => checkPolicy({ egress: 'allow', domains: [d] }), bad('invalid_argument'), d);
  }
  const p = checkPolicy({ egress: 'allow', domains: ['*.github.com', 'api.example.com'] });
  assert.ok(allowsHost(p, 'codeload.github.com') && allowsHost(p, 'a.b.github.com') && allowsHost(p, 'API.example.com'));
  assert.ok(!allowsHost(p, 'github.com') && !allowsHost(p, 'evilgithub.com') && !allowsHost(p, 'example.com') && !allowsHost(p, 'x.api.example.com'));
  assert.ok(!allowsHost({ egress: 'none' }, 'a.com') && allowsHost({ egress: 'public' }, 'a.com'));
});

test('policies nest: a narrower one may only narrow; the effective one is the innermost', () => {
  const gh = checkPolicy({ egress: 'allow', domains: ['*.github.com'] });
  const api = checkPolicy({ egress: 'allow', domains: ['api.github.com'] });
  assert.ok(within(api, gh) && within(gh, { egress: 'public' }) && within({ egress: 'none' }, api));
  assert.ok(!within(gh, api) && !within({ egress: 'public' }, gh) && !within(checkPolicy({ egress: 'allow', domains: ['x.com'] }), gh));
  assert.deepEqual(effectivePolicy({ egress: 'public' }), { egress: 'public' });
  assert.deepEqual(effectivePolicy({ egress: 'public' }, gh, api), api);
  assert.deepEqual(effectivePolicy(gh, null, { egress: 'none' }), { egress: 'none' });
  assert.throws(() => checkWithin({ egress: 'public' }, gh), (e: unknown) => bad('forbidden')(e) && /wider than the tenant's \(allow \*\.github\.com\)/.test((e as Error).message));
  assert.throws(() => effectivePolicy(gh, null, { egress: 'public' }), (e: unknown) => bad('forbidden')(e) && /wider than the tenant's network policy/.test((e as Error).message));
  // A context's stored policy wider than a tenant narrowed since is cut down to it, not refused.
  assert.deepEqual(effectivePolicy(gh, { egress: 'public' }), gh);
  const mixed = checkPolicy({ egress: 'allow', domains: ['api.github.com', 'example.com', '*.gitlab.com'] });
  assert.deepEqual(narrowest(mixed, checkPolicy({ egress: 'allow', domains: ['*.github.com', 'a.gitlab.com'] })), checkPolicy({ egress: 'allow', domains: ['api.github.com', 'a.gitlab.com'] }));
  assert.deepEqual(narrowest(api, checkPolicy({ egress: 'allow', domains: ['x.com'] })), { egress: 'none' });
  assert.deepEqual(narrowest({ egress: 'public' }, api), api);
  assert.throws(() => effectivePolicy({ egress: 'public' }, api, gh), /this request's network \(allow \*\.github\.com\) is wider than the context's/);
});

test('addresses: private, loopback, link-local, reserved and mapped forms refused; allowed ranges let through', () => {
  const rules = new AddressRules([]);
  for (const a of ['127.0.0.1', '10.1.2.3', '172.16.0.1', '192.168.1.1', '100.64.0.1', '169.254.169.254', '0.0.0.0', '224.0.0.1', '255.255.255.255',
    '::1', '::', 'fe80::1', 'fc00::1', 'fd12:3456::1', 'ff02::1', '::ffff:127.0.0.1', '::ffff:169.254.169.254', '64:ff9b::10.0.0.1']) {
    assert.ok(rules.refusal(a), `${a} is refused`);
  }
  for (const a of ['93.184.216.34', '8.8.8.8', '2606:4700::1111', '::ffff:8.8.8.8']) assert.equal(rules.refusal(a), null, a);
  const allowed = new AddressRules(['127.0.0.2/32', '10.9.0.0/16']);
  assert.equal(allowed.refusal('127.0.0.2'), null);
  assert.equal(allowed.refusal('10.9.3.4'), null);
  assert.ok(allowed.refusal('127.0.0.1'));
  assert.throws(() => parseCidr('10.0.0.0/33'), bad('invalid_argument'));
  assert.throws(() => parseCidr('example.com/8'), bad('invalid_argument'));
});

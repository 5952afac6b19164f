import assert from 'node:assert/strict';
import { test } from 'node:test';
import { copiesLive, CopyRate, liveCopySound, ramPadKb } from '../../packages/server/src/machines/vm/live-copy.ts';

test('live copy: on and off say so; auto copies live unless a stopped copy is expected within the bound', () => {
  const rate = new CopyRate();
  assert.equal(copiesLive('on', 1, rate, 100, true), true);
  assert.equal(copiesLive('off', 100_000, rate, 100, true), false);
  // 0.8 ms per MiB before any copy, taken 1.25 times: 100 ms is 100 MiB.
  assert.equal(rate.pauseMs(100), 100);
  assert.equal(copiesLive('auto', 99, rate, 100, true), false);
  assert.equal(copiesLive('auto', 101, rate, 100, true), true);
  assert.equal(copiesLive('auto', 200, rate, 250, true), false);
  assert.equal(copiesLive('auto', 400, rate, 250, true), true);
});

test('live copy: sound under KVM, under TCG from QEMU 9.0, and before it only for RAM padded off 256 KiB; never where unsound', () => {
  const old = 'QEMU emulator version 7.2.19 (Debian 1:7.2+dfsg-7+deb12u18)';
  assert.equal(ramPadKb('kvm', old), 0);
  assert.equal(ramPadKb('tcg', old), 8);
  assert.equal(ramPadKb('tcg', 'QEMU emulator version 9.2.0'), 0);
  assert.equal(ramPadKb('tcg', 'QEMU emulator version 10.0.2 (Debian 1:10.0.2+ds-1)'), 0);
  assert.equal(ramPadKb('tcg', 'something else'), 8);
  assert.equal(liveCopySound('tcg', old, 0), false, 'a machine made before its RAM was padded');
  assert.equal(liveCopySound('tcg', old, 8), true);
  assert.equal(liveCopySound('kvm', old, 0), true);
  const rate = new CopyRate();
  for (const setting of ['on', 'auto'] as const) assert.equal(copiesLive(setting, 100_000, rate, 250, false), false, setting);
});

test('live copy: the rate follows the stopped copies this host made, ignoring ones too small to tell', () => {
  const rate = new CopyRate();
  rate.note(5, 4);
  rate.note(Number.NaN, 500);
  assert.equal(rate.msPerMiB, 0.8);
  for (let i = 0; i < 20; i++) rate.note(100, 1000); // a faster host: 0.1 ms per MiB
  assert.ok(Math.abs(rate.msPerMiB - 0.1) < 0.01, String(rate.msPerMiB));
  assert.equal(copiesLive('auto', 700, rate, 100, true), false, 'so 700 MiB in use is copied stopped');
  assert.equal(copiesLive('auto', 900, rate, 100, true), true, 'and 900 MiB live');
});

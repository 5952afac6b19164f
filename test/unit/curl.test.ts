import assert from 'node:assert/strict';
import { test } from 'node:test';
import { curlCommand, curlFailure, curlQuoted } from '../../packages/server/src/util/curl.ts';

// What a failed curl said decides whether its fetch is made again (util/curl.ts).
test('curl failures: refused, cut, stalled and 5xx/408/429 may pass; 4xx, DNS, TLS and oversize do not', () => {
  const cases: [string, boolean, number | undefined, number | undefined][] = [
    ['curl: (7) Failed to connect to 127.0.0.1 port 9 after 0 ms: Couldn\'t connect to server', true, 7, undefined],
    ['curl: (18) transfer closed with 50000 bytes remaining to read', true, 18, undefined],
    ['curl: (28) Operation too slow. Less than 1024 bytes/sec transferred the last 60 seconds', true, 28, undefined],
    ['curl: (56) Recv failure: Connection reset by peer', true, 56, undefined],
    ['curl: (22) The requested URL returned error: 503', true, 22, 503],
    ['curl: (22) The requested URL returned error: 429', true, 22, 429],
    ['curl: (22) The requested URL returned error: 403', false, 22, 403],
    ['curl: (22) The requested URL returned error: 410', false, 22, 410],
    ['curl: (6) Could not resolve host: registry.invalid', false, 6, undefined],
    ['curl: (60) SSL certificate problem: unable to get local issuer certificate', false, 60, undefined],
    ['curl: (63) Maximum file size exceeded', false, 63, undefined],
    ['something else entirely', false, undefined, undefined],
  ];
  for (const [stderr, mayPass, code, status] of cases) {
    const f = curlFailure(stderr);
    assert.equal(f.mayPass, mayPass, stderr);
    assert.equal(f.code, code, stderr);
    assert.equal(f.status, status, stderr);
  }
});

test('curl command: no retries of its own (into a pipe they repeat bytes), configuration quoted as curl reads it', () => {
  assert.doesNotMatch(curlCommand(['--location']), /--retry/);
  assert.match(curlCommand(['--location']), /--config - .*--location$/);
  assert.equal(curlQuoted('http://h/a"b\\c'), '"http://h/a\\"b\\\\c"');
  assert.throws(() => curlQuoted('http://h/\nheader = x'), /control character/);
});

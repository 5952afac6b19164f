// The console's static files as `shellbase serve` serves them (packages/server/src/api/console.ts),
// without a browser: index, hashed assets, errors in the API's form, no way out of the folder.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import Fastify from 'fastify';
import { CONSOLE_DIST, consoleRoutes, resolveInside } from '../packages/server/src/api/console.ts';
import { errorHandler } from '../packages/server/src/api/errors.ts';

describe('console: served at /console/', () => {
  test('index, hashed assets, 404 and 503 in the API error form, no traversal', async () => {
    assert.ok(existsSync(path.join(CONSOLE_DIST, 'index.html')), 'the console is built (npm run build)');
    const empty = mkdtempSync(path.join(tmpdir(), 'console-empty-'));
    const app = Fastify();
    app.setErrorHandler(errorHandler);
    consoleRoutes(app, empty);
    const built = Fastify();
    built.setErrorHandler(errorHandler);
    consoleRoutes(built);
    try {
      const unbuilt = await app.inject('/console/');
      assert.equal(unbuilt.statusCode, 503);
      assert.equal(unbuilt.json().error.code, 'unavailable');
      assert.match(unbuilt.json().error.hint, /npm run build/);
      for (const url of ['/console', '/console/', '/console/index.html']) {
        const r = await built.inject(url);
        assert.equal(r.statusCode, 200, url);
        assert.match(String(r.headers['content-type']), /^text\/html/);
        assert.equal(r.headers['cache-control'], 'no-cache');
      }
      const js = /src="\/console\/(assets\/[^"]+\.js)"/.exec((await built.inject('/console/')).body)![1]!;
      const asset = await built.inject({ url: `/console/${js}`, headers: { 'accept-encoding': 'gzip' } });
      assert.equal(asset.statusCode, 200);
      assert.match(String(asset.headers['content-type']), /^text\/javascript/);
      assert.match(String(asset.headers['cache-control']), /max-age=31536000, immutable/);
      assert.equal(asset.headers['content-encoding'], 'gzip');
      const missing = await built.inject('/console/assets/nothing.js');
      assert.equal(missing.statusCode, 404);
      assert.equal(missing.json().error.code, 'not_found');
      for (const url of ['/console/..%2f..%2fpackage.json', '/console/%2e%2e%2f%2e%2e%2f%2e%2e%2fpackage.json', '/console/assets/..%2f..%2f..%2fserver%2fpackage.json']) {
        const r = await built.inject(url);
        assert.equal(r.statusCode, 404, url);
        assert.doesNotMatch(r.body, /"workspaces"|@shellbase\/server/);
      }
      assert.equal(resolveInside('/srv/c', '../etc/passwd'), '/srv/c/etc/passwd');
      assert.equal(resolveInside('/srv/c', 'a\0b'), null);
      assert.equal(resolveInside('/srv/c', ''), null);
    } finally {
      await app.close();
      await built.close();
      rmSync(empty, { recursive: true, force: true });
    }
  });
});

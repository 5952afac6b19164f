import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';
import { Shellbase, type BuildEvent, type BuildResult } from '../packages/sdk/src/index.ts';
import { tar, type TarInput } from '../packages/sdk/src/tar.ts';
import { startTestServer, type TestServer } from './harness.ts';
import { APP_CONFIG, appLayer, baseLayer } from './image-fixtures.ts';
import { TestRegistry } from './registry.ts';

/** A multi-stage Dockerfile over the busybox test image: ARGs, WORKDIR, COPY (context, --from, --chown), RUN, ENV, USER, config. */
const dockerfile = (mode: string) => `# a comment
ARG BASE
FROM \${BASE} AS build
ARG WHO=world
WORKDIR /src
COPY src/ ./
RUN echo "hello $WHO from $(cat a.txt)" > out.txt
RUN cat b.txt > /dev/null && \\
    echo middle >> out.txt
COPY . /ctx/
RUN ls -a /ctx > listing.txt

FROM \${BASE}
ENV MODE=${mode}
COPY --from=build --chown=app:app /src/out.txt /src/listing.txt /home/app/
USER app
WORKDIR /home/app
RUN echo "ran as $(id -u) in $(pwd) mode $MODE" > ran.txt
LABEL org.example.name="built app"
EXPOSE 8080
CMD ["cat", "out.txt"]
`;

const context = (files: Record<string, string>): Buffer =>
  tar([{ path: 'src', type: 'dir' }, ...Object.entries(files).map(([path, data]): TarInput => ({ path, data }))]);

const files = (mode = 'prod', b = 'b1') => ({
  Dockerfile: dockerfile(mode), '.dockerignore': 'secret.txt\n', 'secret.txt': 'do not send\n', 'src/a.txt': 'a', 'src/b.txt': b,
});

describe('builds: Dockerfiles become contexts, with cached steps', () => {
  let t: TestServer;
  let reg: TestRegistry;
  let base: string;
  let first: BuildResult;

  const build = async (f: Record<string, string>, extra: { noCache?: boolean; buildArgs?: Record<string, string> } = {}) => {
    const events: BuildEvent[] = [];
    const result = await t.sb.build({ context: context(f), tag: 'built', buildArgs: { BASE: base, ...extra.buildArgs }, noCache: extra.noCache, onEvent: (e) => events.push(e) });
    return { result, events };
  };
  const cachedFlags = (r: BuildResult) => r.steps.map((s) => s.cached);

  before(async () => {
    reg = await TestRegistry.start();
    t = await startTestServer();
    await reg.push('test/app', '1', { layers: [baseLayer(), appLayer()], config: APP_CONFIG });
    base = `${reg.host}/test/app:1`;
  });
  after(async () => {
    await t?.close();
    await reg?.close();
  });

  test('a multi-stage build makes a context with the last stage\'s files, defaults and config; FROM pulls what is missing', async () => {
    const { result, events } = await build(files(), { buildArgs: { WHO: 'shellbase' } });
    first = result;
    assert.equal(result.context, 'built');
    assert.equal(result.steps.length, 17);
    assert.match(result.steps[0].instruction, /^\[build 1\/8\] FROM \$\{BASE\} AS build$/);
    assert.match(result.steps[4].instruction, /^\[build 5\/8\] RUN echo "hello \$WHO/);
    assert.equal(result.steps[0].cached, false, 'FROM pulled the image');
    assert.ok(events.some((e) => e.type === 'stdout' && /test\/app:1/.test(e.data)), 'the pull reported its progress');
    assert.deepEqual(events.filter((e) => e.type === 'step').map((e) => (e as { index: number }).index), [...Array(17).keys()]);
    const layerSteps = [2, 3, 4, 5, 6, 7, 10, 13];
    assert.deepEqual(layerSteps.map((i) => result.steps[i].cached), layerSteps.map(() => false), JSON.stringify(result.steps, null, 1));

    const ctx = await t.sb.context('built').info();
    assert.equal(ctx.head, result.version);
    assert.equal(ctx.image, base);
    assert.deepEqual(ctx.defaults, { env: { PATH: '/bin', GREETING: 'hi', MODE: 'prod' }, cwd: '/home/app', user: 'app' });
    assert.deepEqual(ctx.config, { cmd: ['cat', 'out.txt'], exposedPorts: ['8080/tcp'], labels: { 'org.example.name': 'built app' } });
    const r = await t.sb.context('built').exec('cat out.txt ran.txt listing.txt; stat -c %u:%g out.txt; id -un');
    assert.equal(r.stderr, '');
    assert.equal(r.stdout, 'hello shellbase from a\nmiddle\nran as 1000 in /home/app mode prod\n'
      + '.\n..\n.dockerignore\nDockerfile\nsrc\n1000:1000\napp\n', 'the .dockerignore kept secret.txt out of COPY .');
    const versions = await t.sb.context('built').versions();
    assert.ok(versions.some((v) => v.cause.kind === 'build' && /ran as/.test(v.cause.command ?? '')), 'each step is a version');
  });

  test('a rebuild with nothing changed takes every step from the cache; a change reruns only what it reaches', async () => {
    const again = await build(files(), { buildArgs: { WHO: 'shellbase' } });
    assert.deepEqual(cachedFlags(again.result), first.steps.map(() => true));
    assert.equal(again.result.version, first.version);
    assert.deepEqual(again.events.filter((e) => e.type === 'stdout' || e.type === 'stderr'), [], 'no RUN ran');

    // b.txt is an input of the build stage's COPY: it and the steps after it run again; out.txt is
    // the same, so the last stage's COPY --from (and all after it) come from the cache.
    const changed = await build(files('prod', 'b2'), { buildArgs: { WHO: 'shellbase' } });
    assert.deepEqual(cachedFlags(changed.result).slice(0, 8), [true, true, true, false, false, false, false, false]);
    assert.deepEqual(cachedFlags(changed.result).slice(8), Array(9).fill(true));
    assert.equal(changed.result.version, first.version);

    // ENV in the last stage changes what its RUN sees: that RUN runs again, the COPY before it does not.
    const mode = await build(files('dev', 'b2'), { buildArgs: { WHO: 'shellbase' } });
    const byText = (re: RegExp) => mode.result.steps.find((s) => re.test(s.instruction))!;
    assert.equal(byText(/COPY --from=build/).cached, true);
    assert.equal(byText(/RUN echo "ran as/).cached, false);
    assert.notEqual(mode.result.version, first.version);
    assert.equal((await t.sb.context('built').exec('cat ran.txt')).stdout, 'ran as 1000 in /home/app mode dev\n');

    const forced = await build(files('dev', 'b2'), { noCache: true, buildArgs: { WHO: 'shellbase' } });
    assert.equal(forced.result.steps.find((s) => /RUN echo "hello/.test(s.instruction))!.cached, false);
    assert.equal((await t.sb.context('built').exec('cat out.txt')).stdout, 'hello shellbase from a\nmiddle\n');
  });

  test('a failing RUN stops the build with its output and line; the steps before it stay cached and the context keeps its head', async () => {
    const head = (await t.sb.context('built').info()).head;
    const bad = { ...files(), Dockerfile: `${dockerfile('prod').replace('LABEL', 'RUN echo failing >&2; exit 3\nLABEL')}` };
    const events: BuildEvent[] = [];
    const err = await t.sb.build({ context: context(bad), tag: 'built', buildArgs: { BASE: base, WHO: 'shellbase' }, onEvent: (e) => events.push(e) }).catch((e: Error) => e);
    assert.match(String(err), /Dockerfile line 19: RUN exited with 3/);
    assert.ok(events.some((e) => e.type === 'stderr' && e.data.includes('failing')));
    assert.equal((await t.sb.context('built').info()).head, head);
    // Here-documents: one alone is the step's script; one after a command is its shell's to feed it.
    const heredocs = 'RUN <<EOF\necho one > heredoc.txt\necho "two $MODE" >> heredoc.txt\nEOF\nRUN cat <<EOF > fed.txt\nfed as $(id -u)\nEOF\n';
    const fixed = { ...files(), Dockerfile: `${dockerfile('prod').replace('LABEL', `RUN echo fixed > fixed.txt\n${heredocs}LABEL`)}` };
    const { result } = await build(fixed, { buildArgs: { WHO: 'shellbase' } });
    assert.equal((await t.sb.context('built').files.read('/home/app/heredoc.txt')).toString(), 'one\ntwo prod\n');
    assert.equal((await t.sb.context('built').files.read('/home/app/fed.txt')).toString(), 'fed as 1000\n');
    const steps = result.steps.map((s) => `${s.cached ? 'cached' : 'ran'} ${s.instruction.replace(/^\[\S+ \d+\/\d+\] /, '')}`);
    assert.ok(steps.includes('cached RUN echo "ran as $(id -u) in $(pwd) mode $MODE" > ran.txt'), steps.join('\n'));
    assert.ok(steps.includes('ran RUN echo fixed > fixed.txt'), steps.join('\n'));
  });

  test('bad Dockerfiles and contexts are clear errors naming the line, and change nothing', async () => {
    const head = (await t.sb.context('built').info()).head;
    const cases: [Record<string, string>, RegExp][] = [
      [{ Dockerfile: 'FROM debian\nFROBNICATE x\n' }, /line 2: unknown instruction "FROBNICATE"/],
      [{ Dockerfile: 'FROM debian\nVOLUME /data\n' }, /line 2: VOLUME is not supported/],
      [{ Dockerfile: 'RUN true\n' }, /line 1: RUN before the first FROM/],
      [{ Dockerfile: '# only a comment\n' }, /no FROM/],
      [{ Dockerfile: 'FROM debian\nCOPY missing.txt /x\n' }, /line 2: missing.txt: no such file/],
      [{ Dockerfile: 'FROM debian\nCOPY ../x /x\n' }, /line 2: \.\.\/x leaves the build context/],
      [{ Dockerfile: 'FROM debian\nADD https://example.com/x /x\n' }, /line 2: ADD https:\/\/example.com\/x: URLs and archives/],
      [{ Dockerfile: 'FROM debian\nRUN --mount=type=cache,target=/x true\n' }, /line 2: RUN --mount is not supported/],
      [{ Dockerfile: 'FROM context:nope\n' }, /line 1: context "nope" does not exist/],
      [{ Dockerfile: 'FROM scratch\n' }, /FROM scratch is not supported/],
      [{ 'other.txt': 'x' }, /has no Dockerfile/],
    ];
    for (const [f, re] of cases) {
      const res = await fetch(`${t.server.url}/v1/builds?tag=built`, { method: 'POST', body: context(f), headers: { authorization: `Bearer ${t.key}`, 'content-type': 'application/x-tar' } });
      const body = await res.json() as { error: { code: string; message: string } };
      assert.ok(res.status === 400 || res.status === 404, `${JSON.stringify(f)}: ${res.status}`);
      assert.match(body.error.message, re);
    }
    const garbage = await fetch(`${t.server.url}/v1/builds?tag=built`, { method: 'POST', body: 'not a tar'.repeat(100), headers: { authorization: `Bearer ${t.key}`, 'content-type': 'application/x-tar' } });
    assert.equal(garbage.status, 400);
    assert.equal((await fetch(`${t.server.url}/v1/builds?tag=bad%20name`, { method: 'POST', body: context(files()), headers: { authorization: `Bearer ${t.key}`, 'content-type': 'application/x-tar' } })).status, 400);
    assert.equal((await t.sb.context('built').info()).head, head);
  });

  test('FROM context:NAME builds on a context; the cache is per tenant', async () => {
    const { result } = await t.sb.build({ context: context({ Dockerfile: 'FROM context:built\nRUN echo more > more.txt\n' }), tag: 'derived' }).then((r) => ({ result: r }));
    assert.equal(result.steps[1].cached, false);
    assert.equal((await t.sb.context('derived').exec('cat more.txt out.txt; id -un')).stdout, 'more\nhello shellbase from a\nmiddle\napp\n');
    const { apiKey } = await t.sb.tenants.create('builder-two');
    const other = new Shellbase({ url: t.server.url, apiKey });
    const theirs = await other.build({ context: context(files()), tag: 'built', buildArgs: { BASE: base, WHO: 'shellbase' } });
    assert.ok(theirs.steps.filter((s) => /RUN/.test(s.instruction)).every((s) => !s.cached), 'another tenant reuses none of the cache');
  });

  test("RUN steps reach the network under the tag context's egress policy", async () => {
    const ctx = t.sb.context('netbuild');
    await ctx.exec('true');
    const f = { Dockerfile: 'FROM debian\nRUN (env | grep -ci _proxy || true) > /root/proxies\n' };
    await ctx.network.set({ egress: 'none' });
    await t.sb.build({ context: context(f), tag: 'netbuild' });
    assert.equal((await ctx.exec('cat /root/proxies')).stdout, '0\n', 'no egress: no proxy');
    await ctx.network.set({ egress: 'public' });
    await t.sb.build({ context: context(f), tag: 'netbuild', noCache: true });
    assert.notEqual((await ctx.exec('cat /root/proxies')).stdout, '0\n', 'egress: the proxy variables are set');
  });

  test('the CLI builds a directory (-f, --build-arg, .dockerignore), lists and removes images, and sets defaults', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'shellbase-build-'));
    try {
      mkdirSync(path.join(dir, 'docker'));
      writeFileSync(path.join(dir, 'docker', 'app.Dockerfile'), `ARG BASE\nFROM \${BASE}\nARG N\nCOPY . /in/\nRUN ls /in > /home/app/listing; echo $N > /home/app/n\n`);
      writeFileSync(path.join(dir, 'kept.txt'), 'k');
      writeFileSync(path.join(dir, 'left-out.log'), 'x');
      writeFileSync(path.join(dir, '.dockerignore'), '*.log\n');
      const env = { ...process.env, SHELLBASE_URL: t.server.url, SHELLBASE_API_KEY: t.key };
      const cli = (...args: string[]) => promisify(execFile)(process.execPath, [path.resolve('packages/cli/dist/main.js'), ...args], { env });
      const built = await cli('build', '-f', path.join(dir, 'docker', 'app.Dockerfile'), '--tag', 'cli-built', '--build-arg', `BASE=${base}`, '--build-arg', 'N=7', dir);
      assert.match(built.stdout, /^cli-built v_\S+\n$/);
      assert.match(built.stderr, /#4\/4 \[0 4\/4\] RUN ls/);
      assert.equal((await t.sb.context('cli-built').exec('cat /home/app/listing /home/app/n')).stdout, 'docker\nkept.txt\n7\n');
      const again = await cli('build', '-f', path.join(dir, 'docker', 'app.Dockerfile'), '-t', 'cli-built', '--build-arg', `BASE=${base}`, '--build-arg', 'N=7', dir);
      assert.equal(again.stderr.split('\n').filter((l) => l.includes('CACHED')).length, 4);
      assert.match((await cli('image', 'ls')).stdout, /test\/app:1/);
      const d = await cli('defaults', 'cli-built', '--env', 'A=1', '--env', 'B=2', '--cwd', '/in', '--user', 'root');
      assert.match(d.stdout, /env  A=1\nenv  B=2/);
      assert.equal((await t.sb.context('cli-built').exec('pwd; echo $A$B; id -u')).stdout, '/in\n12\n0\n');
      assert.match((await cli('create', 'cli-made', '--image', base)).stdout, /^cli-made v_\S+ \(127\.0\.0\.1:\d+\/test\/app:1\)\n$/);
      const bad = await cli('build', '--tag', 'x', path.join(dir, 'nope')).catch((e: { code: number; stderr: string }) => e);
      assert.equal((bad as { code: number }).code, 2);
      await cli('image', 'rm', base);
      assert.doesNotMatch((await cli('image', 'ls')).stdout, /test\/app:1/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

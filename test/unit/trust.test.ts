import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readlinkSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import { loadConfig } from '../../packages/server/src/config.ts';
import { HostAuthorities, TrustLayers, TRUST_DIR } from '../../packages/server/src/trust/index.ts';
import { MemorySnapshotter } from '../../packages/server/src/store/snapshotter/memory/memory-snapshotter.ts';

/** A self-signed authority made by openssl: [PEM, OpenSSL's subject hash]. */
function authority(dir: string, cn: string): [string, string] {
  const out = path.join(dir, `${cn}.pem`);
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1', '-subj', `/CN=${cn}`,
    '-keyout', path.join(dir, `${cn}.key`), '-out', out], { stdio: 'ignore' });
  const hash = execFileSync('openssl', ['x509', '-noout', '-subject_hash', '-in', out]).toString().trim();
  return [readFileSync(out, 'utf8'), hash];
}

describe('trust: the host\'s authorities as an overlay', () => {
  let dir = '';
  let hostDir = '';
  let ca1: [string, string];
  let ca2: [string, string];
  const store = new MemorySnapshotter();
  const BASE = 'image:test:1';

  before(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'shellbase-trust-'));
    hostDir = path.join(dir, 'host');
    mkdirSync(path.join(hostDir, 'company'), { recursive: true });
    ca1 = authority(dir, 'Company Root A');
    ca2 = authority(dir, 'Company Root B');
    store.addImage(BASE, { '/etc/ssl/certs/ca-certificates.crt': 'PUBLIC ROOTS\n', [`/etc/ssl/certs/${ca2[1]}.0`]: 'a public root of the same subject hash\n', '/root/': '' });
    store.addImage('image:bare:1', { '/root/': '' });
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  /** A layer with these directories and links (path → target), committed. */
  const linkedLayer = async (dirs: string[], links: Record<string, string>) => {
    const scratch = await store.prepare({ diskMb: 16 });
    const w = store.writer(scratch);
    for (const d of dirs) w.mkdir(d, { mode: 0o755, uid: 0, gid: 0 });
    for (const [at, target] of Object.entries(links)) w.symlink(at, target, { mode: 0o777, uid: 0, gid: 0 });
    return (await store.commit(scratch))!.layerId;
  };
  /** Runs `fn` while the host's directory has `pem` at `rel`. */
  const withAuthority = async (rel: string, pem: string, fn: () => Promise<void>) => {
    writeFileSync(path.join(hostDir, rel), pem);
    try { await fn(); } finally { rmSync(path.join(hostDir, rel)); }
  };
  const layersFor = (authorities: HostAuthorities) => new TrustLayers({ authorities, snapshotter: store, dir: path.join(dir, 'overlays') });
  const fresh = (extraFile?: string) => new HostAuthorities({ hostDir, ...(extraFile ? { extraFile } : {}), recheckMs: 0 });

  test('a host without authorities adds nothing; off adds nothing', async () => {
    assert.equal(await layersFor(fresh()).forLayers([BASE]), null);
    await withAuthority(path.join('company', 'a.crt'), ca1[0], async () => {
      assert.equal(await new TrustLayers({ authorities: null, snapshotter: store, dir }).forLayers([BASE]), null);
    });
  });

  test('the context\'s bundle with the host\'s authorities after it, hashed links past the context\'s own, variables', async () => {
    writeFileSync(path.join(hostDir, 'company', 'a.crt'), ca1[0]);
    const bundleFile = path.join(dir, 'extra.pem');
    writeFileSync(bundleFile, `some text first\n${ca2[0]}${ca1[0]}`); // the operator's bundle repeats A: it counts once
    try {
      const o = await layersFor(fresh(bundleFile)).forLayers([BASE]);
      assert.ok(o);
      const at = (rel: string) => path.join(o.dir, rel);
      assert.equal(readFileSync(at('etc/ssl/certs/ca-certificates.crt'), 'utf8'), `PUBLIC ROOTS\n${ca1[0]}${ca2[0]}`);
      const etc = (await store.reader(BASE)).stat('etc')!;
      const shown = statSync(at('etc'));
      assert.deepEqual([shown.mode & 0o7777, shown.uid, Math.round(shown.mtimeMs)], [etc.mode, etc.uid, Math.round(etc.mtimeMs)], 'the stack\'s /etc, as it has it');
      assert.equal(readFileSync(at(`${TRUST_DIR}/bundle.pem`), 'utf8'), `PUBLIC ROOTS\n${ca1[0]}${ca2[0]}`);
      assert.equal(readFileSync(at(`${TRUST_DIR}/authorities.pem`), 'utf8'), `${ca1[0]}${ca2[0]}`);
      assert.equal(readlinkSync(at(`etc/ssl/certs/${ca1[1]}.0`)), `${TRUST_DIR}/authority-0.pem`);
      assert.equal(readlinkSync(at(`etc/ssl/certs/${ca2[1]}.1`)), `${TRUST_DIR}/authority-1.pem`, '.0 is the context\'s own');
      assert.equal(existsSync(at(`etc/ssl/certs/${ca2[1]}.0`)), false);
      assert.equal(o.env.NODE_EXTRA_CA_CERTS, `${TRUST_DIR}/authorities.pem`);
      for (const k of ['SSL_CERT_FILE', 'REQUESTS_CA_BUNDLE', 'PIP_CERT', 'GIT_SSL_CAINFO']) assert.equal(o.env[k], `${TRUST_DIR}/bundle.pem`, k);
      assert.match(readFileSync(at('etc/profile.d/shellbase-ca.sh'), 'utf8'), new RegExp(`${TRUST_DIR}/env.sh`));
      assert.match(readFileSync(at(`${TRUST_DIR}/env.sh`), 'utf8'), /\[ -n "\$\{SSL_CERT_FILE:-\}" \] \|\| export SSL_CERT_FILE=/);
    } finally {
      rmSync(path.join(hostDir, 'company', 'a.crt'));
      rmSync(bundleFile);
    }
  });

  test('a context without a bundle (or whose bundle a later layer deleted) gets the authorities alone, and no variable that replaces a store', async () => {
    await withAuthority('a.crt', ca1[0], async () => {
      const layers = layersFor(fresh());
      const bare = await layers.forLayers(['image:bare:1']);
      assert.ok(bare);
      assert.equal(readFileSync(path.join(bare.dir, 'etc/ssl/certs/ca-certificates.crt'), 'utf8'), ca1[0]);
      assert.deepEqual(Object.keys(bare.env), ['NODE_EXTRA_CA_CERTS']);
      const scratch = await store.prepare({ diskMb: 16 });
      const w = store.writer(scratch);
      for (const d of ['etc', 'etc/ssl', 'etc/ssl/certs']) w.mkdir(d, { mode: 0o755, uid: 0, gid: 0 });
      await w.whiteout('etc/ssl/certs/ca-certificates.crt');
      const deleted = await store.commit(scratch);
      const o = await layers.forLayers([BASE, deleted!.layerId]);
      assert.ok(o);
      assert.equal(readFileSync(path.join(o.dir, 'etc/ssl/certs/ca-certificates.crt'), 'utf8'), ca1[0]);
      assert.deepEqual(Object.keys(o.env), ['NODE_EXTRA_CA_CERTS']);
    });
  });

  test('a bundle that is a link into another store is left as it is; hashed links that are links count as taken', async () => {
    await withAuthority('a.crt', ca1[0], async () => {
      const linked = await linkedLayer(['etc', 'etc/ssl', 'etc/ssl/certs'], {
        'etc/ssl/certs/ca-certificates.crt': '/etc/pki/tls/certs/ca-bundle.crt', [`etc/ssl/certs/${ca1[1]}.0`]: 'some-root.pem',
      });
      const o = await layersFor(fresh()).forLayers(['image:bare:1', linked]);
      assert.ok(o);
      assert.equal(existsSync(path.join(o.dir, 'etc/ssl/certs/ca-certificates.crt')), false, 'the context\'s link stays');
      assert.deepEqual(Object.keys(o.env), ['NODE_EXTRA_CA_CERTS']);
      assert.equal(readlinkSync(path.join(o.dir, `etc/ssl/certs/${ca1[1]}.1`)), `${TRUST_DIR}/authority-0.pem`, '.0 is the context\'s link');
    });
  });

  test('where /etc/ssl/certs is a link into another store (RHEL\'s), the overlay puts nothing there', async () => {
    await withAuthority('a.crt', ca1[0], async () => {
      const linked = await linkedLayer(['etc', 'etc/ssl'], { 'etc/ssl/certs': '../pki/tls/certs' });
      const o = await layersFor(fresh()).forLayers(['image:bare:1', linked]);
      assert.ok(o);
      assert.equal(existsSync(path.join(o.dir, 'etc/ssl/certs')), false, 'the context\'s link stays in view');
      assert.equal(readFileSync(path.join(o.dir, `${TRUST_DIR}/authorities.pem`), 'utf8'), ca1[0]);
      assert.deepEqual(Object.keys(o.env), ['NODE_EXTRA_CA_CERTS']);
    });
  });

  test('a version whose layer touches neither /etc nor /usr has its base\'s overlay; one that writes the bundle gets its own', async () => {
    await withAuthority('a.crt', ca1[0], async () => {
      const layers = layersFor(fresh());
      const base = await layers.forLayers([BASE]);
      const write = async (rel: string, text: string) => {
        const scratch = await store.prepare({ diskMb: 16 });
        const w = store.writer(scratch);
        const dirs = rel.split('/').slice(0, -1);
        for (let i = 1; i <= dirs.length; i++) w.mkdir(dirs.slice(0, i).join('/'), { mode: 0o755, uid: 0, gid: 0 });
        await w.writeFile(rel, Readable.from([Buffer.from(text)]), { mode: 0o644, uid: 0, gid: 0 });
        return (await store.commit(scratch))!.layerId;
      };
      const mine = await write('root/notes.txt', 'hi\n');
      assert.equal(await layers.forLayers([BASE, mine]), base, 'the same overlay, found without a lookup');
      const bundle = await write('etc/ssl/certs/ca-certificates.crt', 'OTHER ROOTS\n');
      const own = await layers.forLayers([BASE, mine, bundle]);
      assert.ok(own && own.key !== base!.key);
      assert.equal(readFileSync(path.join(own.dir, 'etc/ssl/certs/ca-certificates.crt'), 'utf8'), `OTHER ROOTS\n${ca1[0]}`);
    });
  });

  test('a change of the host\'s set is read again; a file that holds no certificate is skipped', async () => {
    const authorities = fresh();
    const layers = layersFor(authorities);
    writeFileSync(path.join(hostDir, 'a.crt'), ca1[0]);
    writeFileSync(path.join(hostDir, 'broken.crt'), 'not a certificate\n');
    try {
      const first = await layers.forLayers([BASE]);
      assert.ok(first);
      assert.equal((await authorities.get()).authorities.length, 1);
      writeFileSync(path.join(hostDir, 'b.crt'), ca2[0]);
      const second = await layers.forLayers([BASE]);
      assert.ok(second);
      assert.notEqual(second.key, first.key);
      assert.equal(readFileSync(path.join(second.dir, `${TRUST_DIR}/authorities.pem`), 'utf8'), `${ca1[0]}${ca2[0]}`);
      rmSync(path.join(hostDir, 'a.crt'));
      rmSync(path.join(hostDir, 'b.crt'));
      assert.equal(await layers.forLayers([BASE]), null, 'all gone: nothing added');
    } finally {
      rmSync(path.join(hostDir, 'broken.crt'));
      rmSync(path.join(hostDir, 'a.crt'), { force: true });
      rmSync(path.join(hostDir, 'b.crt'), { force: true });
    }
  });

  test('SHELLBASE_EXTRA_CA turns it off; SHELLBASE_EXTRA_CA_FILE names the bundle; anything else is refused', () => {
    const saved = { ...process.env };
    try {
      process.env.SHELLBASE_EXTRA_CA = 'off';
      assert.equal(loadConfig().trust.enabled, false);
      process.env.SHELLBASE_EXTRA_CA = '';
      process.env.SHELLBASE_EXTRA_CA_FILE = 'relative/ca.pem';
      const c = loadConfig().trust;
      assert.deepEqual([c.enabled, c.hostDir, c.extraFile], [true, '/usr/local/share/ca-certificates', path.resolve('relative/ca.pem')]);
      process.env.SHELLBASE_EXTRA_CA = 'maybe';
      assert.throws(() => loadConfig(), /SHELLBASE_EXTRA_CA must be on or off/);
    } finally {
      for (const k of ['SHELLBASE_EXTRA_CA', 'SHELLBASE_EXTRA_CA_FILE']) if (saved[k] === undefined) delete process.env[k]; else process.env[k] = saved[k];
    }
  });
});

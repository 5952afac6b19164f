// Builds the Python SDK's pure-Python wheel (packages/python -> shellbase-VERSION-py3-none-any.whl)
// with nothing but Node: no `wheel`, `build` or setuptools is needed, so it installs with
// `pip install --no-index FILE.whl` into any Python's virtual environment. The name, version,
// requires-python and the rest of the metadata come from the package's pyproject.toml; the files are
// the packages setuptools would find there (directories with an __init__.py under package-dir) with
// their .py files and package-data. The output is deterministic: fixed timestamps and modes, sorted
// entries, so two builds of the same tree give the same bytes.
//
//   node scripts/python-wheel.mjs [OUT_DIR]    (default dist/packages; prints the wheel's path)
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { crc32, deflateRawSync } from 'node:zlib';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/**
 * The part of TOML pyproject.toml files use: [tables] and [dotted.tables], bare, quoted and dotted
 * keys, single-line basic and literal strings, integers, floats, booleans, arrays (over several
 * lines, with comments) and inline tables. Anything else is an error that names the line.
 */
export function parseToml(text) {
  const top = {};
  let table = top;
  let i = 0;
  const fail = (what) => { throw new Error(`TOML line ${text.slice(0, i).split('\n').length}: ${what}`); };
  const skipSpace = () => { while (text[i] === ' ' || text[i] === '\t') i++; };
  const skipBlank = () => {
    for (;;) {
      skipSpace();
      if (text[i] === '#') while (i < text.length && text[i] !== '\n') i++;
      else if (text[i] === '\n' || text[i] === '\r') i++;
      else return;
    }
  };
  const expect = (c) => { skipSpace(); if (text[i] !== c) fail(`expected ${c}`); i++; };
  const endOfLine = () => {
    skipSpace();
    if (text[i] === '#') while (i < text.length && text[i] !== '\n') i++;
    if (text[i] === '\r') i++;
    if (i < text.length && text[i] !== '\n') fail('unexpected text after the value');
  };
  const escapes = { b: '\b', t: '\t', n: '\n', f: '\f', r: '\r', '"': '"', '\\': '\\' };
  const string = () => {
    const quote = text[i];
    if (text.startsWith(quote.repeat(3), i)) fail('multi-line strings are not supported');
    let s = '';
    for (i++; ; i++) {
      const c = text[i];
      if (c === undefined || c === '\n') fail('unterminated string');
      if (c === quote) { i++; return s; }
      if (c === '\\' && quote === '"') {
        const e = text[++i];
        if (e in escapes) s += escapes[e];
        else if (e === 'u' || e === 'U') {
          const n = e === 'u' ? 4 : 8;
          const hex = text.slice(i + 1, i + 1 + n);
          if (!/^[0-9a-fA-F]+$/.test(hex) || hex.length !== n) fail('bad unicode escape');
          s += String.fromCodePoint(parseInt(hex, 16));
          i += n;
        } else fail(`bad escape \\${e}`);
      } else s += c;
    }
  };
  const key = () => {
    const parts = [];
    for (;;) {
      skipSpace();
      if (text[i] === '"' || text[i] === "'") parts.push(string());
      else {
        const m = /^[A-Za-z0-9_-]+/.exec(text.slice(i, i + 200));
        if (!m) fail('expected a key');
        parts.push(m[0]);
        i += m[0].length;
      }
      skipSpace();
      if (text[i] !== '.') return parts;
      i++;
    }
  };
  const descend = (obj, parts) => {
    for (const p of parts) {
      if (!(p in obj)) obj[p] = {};
      else if (typeof obj[p] !== 'object' || Array.isArray(obj[p])) fail(`${parts.join('.')} is not a table`);
      obj = obj[p];
    }
    return obj;
  };
  const assign = (obj, parts, value) => {
    const into = descend(obj, parts.slice(0, -1));
    const last = parts[parts.length - 1];
    if (last in into) fail(`${parts.join('.')} is defined twice`);
    into[last] = value;
  };
  const value = () => {
    skipSpace();
    const c = text[i];
    if (c === '"' || c === "'") return string();
    if (c === '[') {
      i++;
      const list = [];
      for (;;) {
        skipBlank();
        if (text[i] === ']') { i++; return list; }
        list.push(value());
        skipBlank();
        if (text[i] === ',') i++;
        else if (text[i] !== ']') fail('expected , or ] in an array');
      }
    }
    if (c === '{') {
      i++;
      const obj = {};
      skipSpace();
      if (text[i] === '}') { i++; return obj; }
      for (;;) {
        const k = key();
        expect('=');
        assign(obj, k, value());
        skipSpace();
        if (text[i] === '}') { i++; return obj; }
        expect(',');
      }
    }
    const m = /^(?:true|false|[+-]?\d[\d_]*(?:\.\d[\d_]*)?(?:[eE][+-]?\d+)?)(?![\w.:-])/.exec(text.slice(i, i + 100));
    if (!m) fail('unsupported value');
    i += m[0].length;
    return m[0] === 'true' ? true : m[0] === 'false' ? false : Number(m[0].replaceAll('_', ''));
  };
  for (;;) {
    skipBlank();
    if (i >= text.length) return top;
    if (text[i] === '[') {
      if (text[i + 1] === '[') fail('arrays of tables are not supported');
      i++;
      const parts = key();
      expect(']');
      table = descend(top, parts);
    } else {
      const parts = key();
      expect('=');
      assign(table, parts, value());
    }
    endOfLine();
  }
}

/** A zip archive of the entries in the order given (deflated unless storing is smaller), dated 1980-01-01, mode 0644. */
export function zip(entries) {
  const locals = [];
  const centrals = [];
  let offset = 0;
  const DOS_TIME = 0;
  const DOS_DATE = (0 << 9) | (1 << 5) | 1; // 1980-01-01, the first date a zip can hold
  for (const { name, data } of entries) {
    const nameBytes = Buffer.from(name, 'utf8');
    const deflated = deflateRawSync(data, { level: 9 });
    const method = deflated.length < data.length ? 8 : 0;
    const body = method === 8 ? deflated : data;
    if (data.length > 0xfffffffe || offset > 0xfffffffe) throw new Error(`${name}: too large for a zip without zip64`);
    const flags = /^[\x00-\x7f]*$/.test(name) ? 0 : 0x0800; // bit 11: the name is UTF-8
    const crc = crc32(data);
    // The fields both headers have, in the same order: from "version needed to extract" to the name's length.
    const shared = (b, at) => {
      b.writeUInt16LE(20, at); // version needed to extract: 2.0 (deflate)
      b.writeUInt16LE(flags, at + 2);
      b.writeUInt16LE(method, at + 4);
      b.writeUInt16LE(DOS_TIME, at + 6);
      b.writeUInt16LE(DOS_DATE, at + 8);
      b.writeUInt32LE(crc, at + 10);
      b.writeUInt32LE(body.length, at + 14);
      b.writeUInt32LE(data.length, at + 18);
      b.writeUInt16LE(nameBytes.length, at + 22);
      return b;
    };
    const local = shared(Buffer.alloc(30), 4); // then no extra field (0)
    local.writeUInt32LE(0x04034b50, 0);
    const central = shared(Buffer.alloc(46), 6);
    central.writeUInt32LE(0x02014b50, 0);
    central.writeUInt16LE((3 << 8) | 20, 4); // made by: Unix, so the external attributes hold the mode
    // extra length, comment length, disk number, internal attributes: all 0
    central.writeUInt32LE(((0o100644 << 16) >>> 0), 38);
    central.writeUInt32LE(offset, 42);
    locals.push(local, nameBytes, body);
    centrals.push(central, nameBytes);
    offset += local.length + nameBytes.length + body.length;
  }
  if (entries.length > 0xffff) throw new Error('too many entries for a zip without zip64');
  const directory = Buffer.concat(centrals);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(entries.length, 8);
  end.writeUInt16LE(entries.length, 10);
  end.writeUInt32LE(directory.length, 12);
  end.writeUInt32LE(offset, 16);
  return Buffer.concat([...locals, directory, end]);
}

/** The files setuptools would put in the wheel: each found package's .py files and its package-data, as [name in the wheel, path]. */
function packageFiles(project, setuptools) {
  const srcRoot = path.join(project, setuptools['package-dir']?.[''] ?? '.');
  const where = setuptools.packages?.find?.where ?? [setuptools['package-dir']?.[''] ?? '.'];
  const packageData = setuptools['package-data'] ?? {};
  const isPackage = (dir) => existsSync(path.join(dir, '__init__.py'));
  const glob = (pattern) => new RegExp(`^${pattern.split('*').map((p) => p.replace(/[.+?^${}()|[\]\\]/g, '\\$&')).join('[^/]*')}$`);
  const files = [];
  const walk = (dir, dotted) => {
    const patterns = [...(packageData['*'] ?? []), ...(packageData[dotted] ?? [])].map(glob);
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const full = path.join(dir, e.name);
      if (e.isDirectory()) { if (isPackage(full)) walk(full, `${dotted}.${e.name}`); }
      else if (e.isFile() && (e.name.endsWith('.py') || patterns.some((p) => p.test(e.name)))) {
        files.push([path.relative(srcRoot, full).split(path.sep).join('/'), full]);
      }
    }
  };
  for (const w of where) {
    const base = path.join(project, w);
    for (const e of readdirSync(base, { withFileTypes: true })) {
      if (e.isDirectory() && isPackage(path.join(base, e.name))) walk(path.join(base, e.name), e.name);
    }
  }
  if (files.length === 0) throw new Error(`no Python package found under ${where.join(', ')} in ${project}`);
  return files;
}

/** METADATA (core metadata 2.1) from pyproject.toml's [project] table. */
function metadata(project, p) {
  const lines = ['Metadata-Version: 2.1', `Name: ${p.name}`, `Version: ${p.version}`];
  if (p.description) lines.push(`Summary: ${p.description}`);
  if (p.keywords?.length) lines.push(`Keywords: ${p.keywords.join(',')}`);
  const authors = p.authors ?? [];
  const named = authors.filter((a) => !a.email).map((a) => a.name);
  const mailed = authors.filter((a) => a.email).map((a) => (a.name ? `${a.name} <${a.email}>` : a.email));
  if (named.length) lines.push(`Author: ${named.join(', ')}`);
  if (mailed.length) lines.push(`Author-email: ${mailed.join(', ')}`);
  if (typeof p.license === 'string') lines.push(`License: ${p.license}`);
  else if (p.license?.text) lines.push(`License: ${p.license.text}`);
  for (const [label, url] of Object.entries(p.urls ?? {})) lines.push(`Project-URL: ${label}, ${url}`);
  for (const c of p.classifiers ?? []) lines.push(`Classifier: ${c}`);
  if (p['requires-python']) lines.push(`Requires-Python: ${p['requires-python']}`);
  for (const d of p.dependencies ?? []) lines.push(`Requires-Dist: ${d}`);
  let description = '';
  if (p.readme) {
    const readme = typeof p.readme === 'string' ? { file: p.readme } : p.readme;
    const type = readme['content-type']
      ?? (/\.md$/i.test(readme.file ?? '') ? 'text/markdown' : /\.rst$/i.test(readme.file ?? '') ? 'text/x-rst' : 'text/plain');
    description = readme.text ?? readFileSync(path.join(project, readme.file), 'utf8');
    lines.push(`Description-Content-Type: ${type}`);
  }
  for (const l of lines) if (/[\r\n]/.test(l)) throw new Error(`pyproject.toml: a metadata field spans lines: ${l}`);
  return `${lines.join('\n')}\n\n${description}`;
}

const csvField = (s) => (/[",\r\n]/.test(s) ? `"${s.replaceAll('"', '""')}"` : s);

/**
 * Writes PROJECT's wheel into outDir and returns its path. licenseFile, when it exists, goes into the
 * .dist-info directory (pyproject's `license = { file = ... }` takes precedence).
 */
export function buildWheel({ project = path.join(root, 'packages/python'), outDir = path.join(root, 'dist/packages'), licenseFile = path.join(root, 'LICENSE') } = {}) {
  const pyproject = parseToml(readFileSync(path.join(project, 'pyproject.toml'), 'utf8'));
  const p = pyproject.project;
  if (!p?.name || !p.version) throw new Error(`${project}/pyproject.toml: [project] needs a name and a version`);
  // Fields whose meaning needs more than this builder writes are refused rather than dropped.
  for (const k of ['dynamic', 'optional-dependencies', 'scripts', 'gui-scripts', 'entry-points']) {
    if (p[k] && Object.keys(p[k]).length) throw new Error(`${project}/pyproject.toml: [project] ${k} is not supported by scripts/python-wheel.mjs`);
  }
  const dist = p.name.toLowerCase().replace(/[-_.]+/g, '_');
  if (!/^[A-Za-z0-9.!+]+$/.test(p.version)) throw new Error(`pyproject.toml: version ${p.version} is not a plain version`);
  const distInfo = `${dist}-${p.version}.dist-info`;
  const entries = packageFiles(project, pyproject.tool?.setuptools ?? {})
    .map(([name, file]) => ({ name, data: readFileSync(file) }))
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const license = p.license?.file ? path.join(project, p.license.file) : licenseFile;
  const info = [
    ['METADATA', Buffer.from(metadata(project, p), 'utf8')],
    ['WHEEL', Buffer.from('Wheel-Version: 1.0\nGenerator: shellbase scripts/python-wheel.mjs\nRoot-Is-Purelib: true\nTag: py3-none-any\n')],
  ];
  if (license && existsSync(license) && statSync(license).isFile()) info.push([path.basename(license), readFileSync(license)]);
  for (const [name, data] of info) entries.push({ name: `${distInfo}/${name}`, data });
  // RECORD: every file with its sha256 (urlsafe base64, no padding) and size; its own line has neither.
  const record = entries.map(({ name, data }) =>
    `${csvField(name)},sha256=${createHash('sha256').update(data).digest('base64url')},${data.length}`);
  record.push(`${distInfo}/RECORD,,`);
  entries.push({ name: `${distInfo}/RECORD`, data: Buffer.from(`${record.join('\n')}\n`) });
  mkdirSync(outDir, { recursive: true });
  const out = path.join(outDir, `${dist}-${p.version}-py3-none-any.whl`);
  writeFileSync(out, zip(entries));
  return out;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  console.log(buildWheel({ outDir: path.resolve(process.argv[2] ?? path.join(root, 'dist/packages')) }));
}

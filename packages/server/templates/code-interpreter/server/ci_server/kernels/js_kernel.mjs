// The JavaScript/TypeScript kernel: one long-lived node process per context, evaluating cells in
// its own global scope (vm.runInThisContext), so what a cell declares stays for the next one.
//
// Channels (the server passes the descriptors):
//   --cmd-fd N   JSON lines in:  {op: "execute", id, code, typescript, env, revert}
//   --msg-fd M   JSON lines out: {type: "ready"} once, then per cell {id, type: "count", execution_count},
//                {id, type: "result", data: {mime: value}, main}, {id, type: "error", name, value,
//                traceback}, and last {id, type: "done"}.
//   stdout/stderr (fd 1 and 2) are the cells' own output: console.log, process.stdout, child processes.
//   Writes to pipes are synchronous on Linux, so a cell's output is in its pipe before "done" is sent.
//
// A cell is rewritten before it runs (with acorn, when --acorn names it): top-level let/const/class
// become assignments to global variables (so re-running a cell works); a cell with top-level await
// or import declarations runs inside an async function whose last expression statement is its value;
// `import x from "m"` becomes `x = (await import("m")).default`. Modules resolve from the cwd.
// TypeScript cells are transpiled first (--typescript names Debian's node-typescript), types erased.
// SIGINT interrupts the running cell: synchronous code through vm's breakOnSigint, a pending await
// by rejecting it.
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import readline from 'node:readline';
import util from 'node:util';
import vm from 'node:vm';
import { builtinModules, createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';

const { values: args } = util.parseArgs({
  options: { 'cmd-fd': { type: 'string' }, 'msg-fd': { type: 'string' }, acorn: { type: 'string' }, typescript: { type: 'string' } },
});
const msgFd = Number(args['msg-fd']);
const self = fileURLToPath(import.meta.url);
const requireHere = createRequire(import.meta.url);
const acorn = args.acorn ? requireHere(args.acorn) : null;
let ts = null; // loaded on the first TypeScript cell (it is large)

const IMPORT = Symbol.for('shellbase.import');
const MODULE_VAR = '__shellbase_module';

function send(msg) {
  const buf = Buffer.from(JSON.stringify(msg) + '\n');
  for (let off = 0; off < buf.length;) off += fs.writeSync(msgFd, buf, off);
}

// Modules resolve as if required from a file in the current directory; node's own loader is the fallback.
function cwdRequire() { return createRequire(path.join(process.cwd(), '[cell]')); }
async function importModule(specifier) {
  if (specifier.startsWith('node:') || builtinModules.includes(specifier) || /^[a-z]+:/.test(specifier)) return import(specifier);
  if (specifier.startsWith('.') || specifier.startsWith('/')) return import(pathToFileURL(path.resolve(specifier)).href);
  let resolved;
  try { resolved = cwdRequire().resolve(specifier); } catch { return import(specifier); }
  return import(pathToFileURL(resolved).href);
}
Object.defineProperty(globalThis, IMPORT, { value: importModule });
globalThis.require = cwdRequire();

// ---- rewriting a cell ----------------------------------------------------------------------

function bindingNames(node, out) {
  if (!node) return out;
  switch (node.type) {
    case 'Identifier': out.push(node.name); break;
    case 'ObjectPattern': for (const p of node.properties) bindingNames(p.type === 'RestElement' ? p.argument : p.value, out); break;
    case 'ArrayPattern': for (const e of node.elements) bindingNames(e, out); break;
    case 'AssignmentPattern': bindingNames(node.left, out); break;
    case 'RestElement': bindingNames(node.argument, out); break;
  }
  return out;
}

// Whether the program awaits outside any function.
function hasTopLevelAwait(node) {
  if (!node || typeof node.type !== 'string') return false;
  if (node.type === 'AwaitExpression' || (node.type === 'ForOfStatement' && node.await)) return true;
  if (/Function/.test(node.type) || node.type === 'ClassBody') return false;
  for (const key of Object.keys(node)) {
    const v = node[key];
    if (Array.isArray(v) ? v.some(hasTopLevelAwait) : (v && typeof v === 'object' && hasTopLevelAwait(v))) return true;
  }
  return false;
}

function isDeclared(name) {
  if (Object.prototype.hasOwnProperty.call(globalThis, name)) return true;
  try { vm.runInThisContext(name); return true; } catch { return false; }
}

const parse = (code) => acorn.parse(code, { ecmaVersion: 'latest', sourceType: 'script', allowAwaitOutsideFunction: true, allowImportExportEverywhere: true, allowHashBang: true });

// `import(x)` anywhere becomes a call of importModule (vm scripts have no dynamic import of their own).
function rewriteDynamicImports(code, ast) {
  const starts = [];
  (function walk(node) {
    if (!node || typeof node.type !== 'string') return;
    if (node.type === 'ImportExpression') starts.push([node.start, node.source.start]);
    for (const key of Object.keys(node)) {
      const v = node[key];
      if (Array.isArray(v)) v.forEach(walk); else if (v && typeof v === 'object') walk(v);
    }
  })(ast);
  if (!starts.length) return null;
  starts.sort((a, b) => b[0] - a[0]);
  for (const [from, to] of starts) code = `${code.slice(0, from)}globalThis[Symbol.for('shellbase.import')](${code.slice(to)}`;
  return code;
}

// Returns {source, async}: the script to run, and whether it evaluates to a promise of {value}.
function rewrite(code) {
  let ast;
  try {
    ast = parse(code);
    const replaced = rewriteDynamicImports(code, ast);
    if (replaced !== null) { code = replaced; ast = parse(code); }
  } catch {
    return { source: code, async: false }; // let V8 report the syntax error in its own words
  }
  const text = (n) => code.slice(n.start, n.end);
  const isAsync = ast.body.some((s) => s.type === 'ImportDeclaration') || hasTopLevelAwait(ast);
  const names = new Set();
  const hoisted = [];
  const parts = [];
  let pos = 0;
  ast.body.forEach((st, i) => {
    const last = i === ast.body.length - 1;
    parts.push(code.slice(pos, st.start));
    pos = st.end;
    if (st.type === 'VariableDeclaration') {
      const pieces = st.declarations.map((d) => {
        bindingNames(d.id, []).forEach((n) => names.add(n));
        if (!d.init) return st.kind === 'var' ? '' : bindingNames(d.id, []).map((n) => `${n} = void 0;`).join(' ');
        return d.id.type === 'Identifier' ? `${d.id.name} = ${text(d.init)};` : `;(${text(d.id)} = ${text(d.init)});`;
      });
      parts.push(pieces.join(' ') + (last && !isAsync ? ' void 0;' : ''));
    } else if (st.type === 'ClassDeclaration') {
      names.add(st.id.name);
      parts.push(`${st.id.name} = ${text(st)};` + (last && !isAsync ? ' void 0;' : ''));
    } else if (st.type === 'FunctionDeclaration' && isAsync) {
      names.add(st.id.name);
      hoisted.push(`${st.id.name} = ${text(st)};`);
    } else if (st.type === 'ImportDeclaration') {
      const assign = st.specifiers.map((s) => {
        names.add(s.local.name);
        if (s.type === 'ImportDefaultSpecifier') return `${s.local.name} = ${MODULE_VAR}.default;`;
        if (s.type === 'ImportNamespaceSpecifier') return `${s.local.name} = ${MODULE_VAR};`;
        const imported = s.imported.type === 'Identifier' ? s.imported.name : s.imported.value;
        return `${s.local.name} = ${MODULE_VAR}[${JSON.stringify(imported)}];`;
      });
      parts.push(`{ const ${MODULE_VAR} = await globalThis[Symbol.for('shellbase.import')](${text(st.source)}); ${assign.join(' ')} }`);
    } else if (st.type === 'ExpressionStatement' && last && isAsync && !st.directive) {
      parts.push(`return { value: (${text(st.expression)}) };`);
    } else {
      parts.push(text(st));
    }
  });
  parts.push(code.slice(pos));
  const fresh = [...names].filter((n) => !isDeclared(n));
  const decl = fresh.length ? `var ${fresh.join(', ')}; ` : '';
  const body = parts.join('');
  if (!isAsync) return { source: decl + body, async: false };
  return { source: `${decl}(async () => { ${hoisted.join(' ')}\n${body}\n})()`, async: true };
}

function prepare(code) {
  if (acorn) return rewrite(code);
  try {
    new vm.Script(code);
    return { source: code, async: false };
  } catch (e) {
    // Without a parser: top-level await runs in an async function (declarations stay local, no value).
    if (e instanceof SyntaxError && /await|import/.test(e.message)) return { source: `(async () => {\n${code}\n})()`, async: true, noValue: true };
    return { source: code, async: false };
  }
}

function transpile(code) {
  ts ??= requireHere(args.typescript);
  const out = ts.transpileModule(code, {
    fileName: 'cell.ts',
    reportDiagnostics: true,
    compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext, preserveValueImports: true, isolatedModules: true, esModuleInterop: true },
  });
  if (out.diagnostics?.length) {
    const d = out.diagnostics[0];
    const where = d.file && d.start !== undefined ? d.file.getLineAndCharacterOfPosition(d.start) : null;
    const err = new SyntaxError(ts.flattenDiagnosticMessageText(d.messageText, '\n') + (where ? ` (${where.line + 1}:${where.character + 1})` : ''));
    err.stack = `${err.name}: ${err.message}`;
    throw err;
  }
  return out.outputText.replace(/\n?export \{\};\s*$/, '\n');
}

// ---- running a cell ------------------------------------------------------------------------

let count = 0;
let interruptCurrent = null;

function errorEvent(id, e) {
  if (e instanceof Error || (e && typeof e === 'object' && typeof e.stack === 'string')) {
    const stack = String(e.stack).split('\n').filter((l) => !l.includes(self) && !/^\s+at .*\bnode:/.test(l)).join('\n');
    const name = e.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED' ? 'Interrupted' : String(e.name ?? 'Error');
    return { id, type: 'error', name, value: String(e.message ?? ''), traceback: stack };
  }
  const value = util.inspect(e);
  return { id, type: 'error', name: 'Error', value, traceback: `Uncaught ${value}` };
}

async function execute({ id, code, typescript, env = {}, revert = {} }) {
  count += 1;
  send({ id, type: 'count', execution_count: count });
  for (const [k, v] of Object.entries(env)) process.env[k] = v;
  try {
    const prepared = prepare(typescript ? transpile(code) : code);
    const script = new vm.Script(prepared.source, { filename: `cell-${count}` });
    let value = script.runInThisContext({ breakOnSigint: true, displayErrors: false });
    if (prepared.async) {
      const interrupted = new Promise((_, reject) => {
        interruptCurrent = () => reject(Object.assign(new Error('Script execution was interrupted by `SIGINT`'), { name: 'Interrupted' }));
      });
      const settled = await Promise.race([value, interrupted]);
      value = prepared.noValue ? undefined : settled?.value;
    }
    if (value !== undefined) send({ id, type: 'result', main: true, data: { 'text/plain': util.inspect(value) } });
  } catch (e) {
    send(errorEvent(id, e));
  } finally {
    interruptCurrent = null;
    for (const [k, v] of Object.entries(revert)) { if (v === null) delete process.env[k]; else process.env[k] = v; }
    send({ id, type: 'done' });
  }
}

process.on('SIGINT', () => { if (interruptCurrent) interruptCurrent(); });
process.on('unhandledRejection', (reason) => { console.error('Unhandled promise rejection:', reason); });
process.on('uncaughtException', (err) => { console.error('Uncaught exception:', err); });

const commands = readline.createInterface({ input: new net.Socket({ fd: Number(args['cmd-fd']), readable: true, writable: false }) });
let queue = Promise.resolve();
commands.on('line', (line) => {
  const msg = JSON.parse(line);
  if (msg.op === 'execute') queue = queue.then(() => execute(msg));
});
commands.on('close', () => process.exit(0));
send({ type: 'ready' });

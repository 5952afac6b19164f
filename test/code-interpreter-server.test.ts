import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';

// The code interpreter server of the code-interpreter template (packages/server/templates/
// code-interpreter/server), run on this host with Debian's python3 and driven over HTTP as the
// @e2b/code-interpreter SDK drives it: real ipykernel, node, bash and IRkernel kernels, no mocks.
// Every process the server starts carries a marker variable in its environment, so the last test
// can check that none is left once the server has stopped.
const SERVER_DIR = path.resolve('packages/server/templates/code-interpreter/server');
const DISPLAY_DIR = path.resolve('packages/server/templates/code-interpreter/display');
const PYTHON = '/usr/bin/python3';
const MARK = `ci-test-${randomUUID()}`;
const RESULT_KEYS = new Set(['type', 'is_main_result', 'text', 'html', 'markdown', 'svg', 'png', 'jpeg', 'pdf', 'latex', 'json', 'javascript', 'data', 'chart', 'extra']);

interface Line { type: string; at: number; [key: string]: unknown }

/** Processes whose environment carries the marker: the server and everything it started. */
const marked = () => readdirSync('/proc').filter((p) => /^\d+$/.test(p) && p !== String(process.pid)).filter((p) => {
  try { return readFileSync(`/proc/${p}/environ`, 'latin1').split('\0').includes(`CI_TEST_MARK=${MARK}`); } catch { return false; }
});
interface Run { status: number; lines: Line[]; text: string; elapsed: number }

describe('code interpreter server (port 49999 in a sandbox)', () => {
  const home = mkdtempSync(path.join(tmpdir(), 'ci-server-'));
  let child: ChildProcess;
  let url = '';
  let log = '';

  before(async () => {
    // A stand-in for the template's shellbase_display package: register() adds IPython formatters
    // for the two E2B MIME types (objects with _repr_e2b_data_ / _repr_e2b_chart_ methods); its
    // fast_paths module is the template's own.
    mkdirSync(path.join(home, 'display', 'shellbase_display'), { recursive: true });
    mkdirSync(path.join(home, 'tmp')); // kernels' scratch (R's Rtmp* among it) goes with the home
    copyFileSync(path.join(DISPLAY_DIR, 'shellbase_display', 'fast_paths.py'), path.join(home, 'display', 'shellbase_display', 'fast_paths.py'));
    writeFileSync(path.join(home, 'display', 'shellbase_display', '__init__.py'), [
      'from IPython.core.formatters import BaseFormatter',
      'from traitlets import ObjectName, Unicode',
      'def _formatter(mime, method):',
      '    return type("F", (BaseFormatter,), {"format_type": Unicode(mime), "print_method": ObjectName(method), "_return_type": (dict, list)})',
      'def register(ip):',
      '    for mime, method in (("e2b/data", "_repr_e2b_data_"), ("e2b/chart", "_repr_e2b_chart_")):',
      '        ip.display_formatter.formatters[mime] = _formatter(mime, method)(parent=ip.display_formatter)',
      '',
    ].join('\n'));
    child = spawn(PYTHON, ['-m', 'ci_server', '--host', '127.0.0.1', '--port', '0', '--cwd', home, '--env-file', path.join(home, 'sandbox-envs.json')], {
      env: { PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', HOME: home, TMPDIR: path.join(home, 'tmp'), LANG: 'C.UTF-8', PYTHONPATH: `${SERVER_DIR}:${path.join(home, 'display')}`, CI_TEST_MARK: MARK, SANDBOX_WIDE: 'from-sandbox' },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    child.stderr!.setEncoding('utf8');
    url = await new Promise<string>((resolve, reject) => {
      child.stderr!.on('data', (d: string) => {
        log += d;
        const m = /listening on ([\d.]+):(\d+)/.exec(log);
        if (m) resolve(`http://${m[1]}:${m[2]}`);
      });
      child.once('exit', (code) => reject(new Error(`the server exited (${code}): ${log}`)));
    });
  });
  after(async () => {
    if (child && child.exitCode === null && child.signalCode === null) { const done = new Promise((r) => child.once('exit', r)); child.kill('SIGKILL'); await done; }
    // Whatever a failed run left (the last test checks there is nothing in a good one).
    for (const pid of marked()) { try { process.kill(Number(pid), 'SIGKILL'); } catch { /* already gone */ } }
    rmSync(home, { recursive: true, force: true });
  });

  const call = async (method: string, route: string, body?: unknown, raw?: string) => {
    const res = await fetch(`${url}${route}`, { method, headers: { 'content-type': 'application/json' }, body: raw ?? (body === undefined ? undefined : JSON.stringify(body)) });
    const text = await res.text();
    let json: unknown;
    try { json = JSON.parse(text); } catch { /* a text body */ }
    return { status: res.status, text, json, headers: res.headers };
  };

  /** POST /execute, reading the stream line by line as it comes; `until` may abort it mid-way. */
  async function execute(body: Record<string, unknown>, until?: (line: Line) => boolean): Promise<Run> {
    const started = Date.now();
    const ac = new AbortController();
    const res = await fetch(`${url}/execute`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal: ac.signal });
    if (res.status !== 200) return { status: res.status, lines: [], text: await res.text(), elapsed: Date.now() - started };
    const lines: Line[] = [];
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let pending = '';
    let raw = '';
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      const chunk = decoder.decode(value, { stream: true });
      raw += chunk;
      pending += chunk;
      const parts = pending.split('\n');
      pending = parts.pop()!;
      for (const p of parts) {
        const line = { ...(JSON.parse(p) as { type: string }), at: Date.now() - started };
        lines.push(line);
        if (until?.(line)) { ac.abort(); return { status: 200, lines, text: raw, elapsed: Date.now() - started }; }
      }
    }
    assert.equal(pending, '', 'every line ends with a newline');
    return { status: 200, lines, text: raw, elapsed: Date.now() - started };
  }

  const of = (run: Run, type: string) => run.lines.filter((l) => l.type === type);
  const stdout = (run: Run) => of(run, 'stdout').map((l) => l.text).join('');
  const main = (run: Run) => of(run, 'result').find((l) => l.is_main_result === true);
  const newContext = async (body: Record<string, unknown> = {}) => {
    const r = await call('POST', '/contexts', body);
    assert.equal(r.status, 200, r.text);
    return r.json as { id: string; language: string; cwd: string };
  };
  const shape = (run: Run) => run.lines.map((l) => l.type).filter((t) => t !== 'keepalive');

  test('health answers OK, and the python and javascript contexts exist from the start', async () => {
    // Asked right after the server listens: its default kernels take longer than that to start.
    const starting = await call('GET', '/health?kernels=started');
    const health = await call('GET', '/health');
    assert.equal(health.status, 200);
    assert.equal(health.text, 'OK');
    assert.deepEqual([starting.status, starting.text], [503, 'the default kernels are starting']);
    // A machine template waits for this before its memory is saved.
    let ready = starting;
    for (let i = 0; i < 600 && ready.status !== 200; i++) {
      await new Promise((r) => setTimeout(r, 100));
      ready = await call('GET', '/health?kernels=started');
    }
    assert.deepEqual([ready.status, ready.text], [200, 'OK']);
    const list = (await call('GET', '/contexts')).json as { id: string; language: string; cwd: string }[];
    assert.deepEqual(list.map((c) => [c.language, c.cwd]), [['python', home], ['javascript', home]]);
    assert.ok(list.every((c) => typeof c.id === 'string' && c.id.length > 0));
  });

  test('python: state persists, the first cell is execution 1, the stream is in order and streamed', async () => {
    const ctx = await newContext({ language: 'Python ' });
    assert.equal(ctx.language, 'python');
    const first = await execute({ context_id: ctx.id, code: 'import time\nx = 41\nprint("a", flush=True)\ntime.sleep(1)\nprint("b")\nx + 1' });
    assert.deepEqual(shape(first), ['number_of_executions', 'stdout', 'stdout', 'result', 'end_of_execution']);
    assert.equal(of(first, 'number_of_executions')[0].execution_count, 1);
    assert.deepEqual(of(first, 'stdout').map((l) => l.text), ['a\n', 'b\n']);
    assert.ok(of(first, 'number_of_executions')[0].at < of(first, 'end_of_execution')[0].at - 700, 'the number came before the cell slept');
    assert.ok(!Number.isNaN(Date.parse(String(of(first, 'stdout')[0].timestamp))), 'stdout lines carry an ISO timestamp');
    assert.ok(of(first, 'stdout')[0].at < of(first, 'end_of_execution')[0].at - 700, 'the first line came before the cell slept');
    assert.equal(main(first)?.text, '42');
    const second = await execute({ context_id: ctx.id, code: 'x * 2' });
    assert.equal(of(second, 'number_of_executions')[0].execution_count, 2);
    assert.equal(main(second)?.text, '82');
    // The session's history is kept in memory (no history database is written).
    const third = await execute({ context_id: ctx.id, code: 'Out[2], In[2], _' });
    assert.equal(main(third)?.text, "(82, 'x * 2', 82)");
    assert.ok(!existsSync(path.join(home, '.ipython', 'profile_default', 'history.sqlite')), 'no history database');
    // Without a context or language: the default python context, which has its own state.
    assert.equal(of(await execute({ code: 'x' }), 'error')[0]?.name, 'NameError');
  });

  test('python results: text without its quotes, html, markdown, json, png from matplotlib, extra', async () => {
    const run = await execute({ code: [
      'from IPython.display import HTML, Markdown, JSON, display',
      'display(HTML("<b>bold</b>"))',
      'display(Markdown("# Title"))',
      'display(JSON({"a": [1, 2]}))',
      'display({"application/x-shellbase": "custom", "text/plain": "plain"}, raw=True)',
      'import matplotlib.pyplot as plt',
      'plt.plot([1, 2, 3])',
      'plt.show()',
      '"quoted"',
    ].join('\n') });
    const results = of(run, 'result');
    for (const r of results) for (const k of Object.keys(r)) assert.ok(k === 'at' || RESULT_KEYS.has(k), `unknown result key ${k}`);
    assert.equal(results.find((r) => r.html)?.html, '<b>bold</b>');
    assert.equal(results.find((r) => r.markdown)?.markdown, '# Title');
    assert.deepEqual(results.find((r) => r.json)?.json, { a: [1, 2] });
    assert.deepEqual(results.find((r) => r.extra)?.extra, { 'application/x-shellbase': 'custom' });
    const png = results.find((r) => r.png);
    assert.ok(png, 'a PNG result for the figure');
    assert.equal(png.is_main_result, false);
    assert.deepEqual([...Buffer.from(String(png.png), 'base64').subarray(1, 4)], [...Buffer.from('PNG')]);
    assert.equal(main(run)?.text, 'quoted');
    assert.equal(results.filter((r) => r.is_main_result).length, 1);
  });

  test('python: shellbase_display is registered at kernel start, unseen; e2b/data is data, e2b/chart is chart', async () => {
    const ctx = await newContext();
    const run = await execute({ context_id: ctx.id, code: [
      'class Frame:',
      '    def _repr_e2b_data_(self): return {"a": [1, 2]}',
      'class Chart:',
      '    def _repr_e2b_chart_(self): return {"type": "line", "title": "t", "elements": []}',
      'display(Chart())',
      'Frame()',
    ].join('\n') });
    assert.equal(of(run, 'number_of_executions')[0].execution_count, 1, 'the setup cell is not counted');
    assert.deepEqual(main(run)?.data, { a: [1, 2] });
    assert.match(String(main(run)?.text), /__main__.Frame/);
    const chart = of(run, 'result').find((r) => !r.is_main_result);
    assert.deepEqual(chart?.chart, { type: 'line', title: 't', elements: [] });
    assert.equal(chart?.extra, undefined);
    // The kernel's per-cell fast paths are on too (shellbase_display/fast_paths.py), no sleep follows a
    // cell, and the kernel sends neither a busy status nor execute_input, nor flushes its control queue.
    const on = await execute({ context_id: ctx.id, code: [
      'import ipykernel.iostream, ipykernel.ipkernel, jupyter_client.session, IPython.core.formatters',
      'k = get_ipython().kernel',
      '([getattr(f, "_shellbase", False) for f in (ipykernel.iostream.OutStream.flush, ipykernel.ipkernel._accepts_cell_id, jupyter_client.session.extract_dates, IPython.core.formatters.PlainTextFormatter.__call__)],',
      ' k._execute_sleep, k.log.isEnabledFor(10), sorted(n for n in ("_publish_status", "_publish_execute_input", "_flush_control_queue") if n in vars(k)))',
    ].join('\n') });
    assert.equal(String(main(on)?.text).replace(/\s+/g, ' '), "([True, True, True, True], 0.0, False, ['_flush_control_queue', '_publish_execute_input', '_publish_status'])");
  });

  test('python errors: one error with name, value and a traceback string; the context carries on', async () => {
    const ctx = await newContext();
    const run = await execute({ context_id: ctx.id, code: 'y = 1\nprint("before")\n1 / 0' });
    const errors = of(run, 'error');
    assert.equal(errors.length, 1);
    assert.equal(errors[0].name, 'ZeroDivisionError');
    assert.equal(errors[0].value, 'division by zero');
    assert.equal(typeof errors[0].traceback, 'string');
    assert.match(String(errors[0].traceback), /ZeroDivisionError/);
    assert.equal(stdout(run), 'before\n');
    assert.equal(shape(run).at(-1), 'end_of_execution');
    assert.equal(main(await execute({ context_id: ctx.id, code: 'y + 1' }))?.text, '2');
  });

  test('python: a kernel that exits mid-cell ends the stream with a KernelDied error; the next cell gets a fresh kernel', async () => {
    const ctx = await newContext();
    await execute({ context_id: ctx.id, code: 'kept = 1' });
    const run = await execute({ context_id: ctx.id, code: 'import os, time\nprint("bye", flush=True)\ntime.sleep(0.2)\nos._exit(3)' });
    assert.equal(stdout(run), 'bye\n');
    assert.deepEqual(of(run, 'error').map((e) => [e.name, e.value]), [['KernelDied', 'the kernel exited (status 3)']]);
    assert.equal(shape(run).at(-1), 'end_of_execution');
    const next = await execute({ context_id: ctx.id, code: 'kept' });
    assert.equal(of(next, 'number_of_executions')[0].execution_count, 1);
    assert.equal(of(next, 'error')[0]?.name, 'NameError');
  });

  test('python: every cell is numbered as the kernel numbers it: after errors, env_vars and a count the code set', async () => {
    // The kernel publishes no execute_input: the server numbers a cell from the kernel's last reply.
    // A cell's own `get_ipython().execution_count` is the number the kernel gives it.
    const ctx = await newContext();
    const own = 'print(get_ipython().execution_count)';
    const cells: Record<string, unknown>[] = [
      { code: own }, { code: '1 / 0' }, { code: own }, { code: 'def broken(:' }, { code: own },
      { code: own, env_vars: { ONLY_NOW: 'yes' } }, { code: 'get_ipython().execution_count = 10' }, { code: own },
    ];
    const numbers: number[] = [];
    for (const cell of cells) {
      const run = await execute({ context_id: ctx.id, ...cell });
      assert.equal(shape(run)[0], 'number_of_executions', `${String(cell.code)}: the number leads the stream`);
      numbers.push(Number(of(run, 'number_of_executions')[0].execution_count));
      if (cell.code === own) assert.equal(stdout(run).trim(), String(numbers.at(-1)), `${String(cell.code)} as cell ${numbers.length}`);
    }
    assert.deepEqual(numbers, [1, 2, 3, 4, 5, 6, 7, 11]);
  });

  test('env_vars apply to one execution and are reverted, to the sandbox-wide value if there is one', async () => {
    const cases: [string, string][] = [
      ['python', 'import os\nprint(os.environ.get("SANDBOX_WIDE"), os.environ.get("ONLY_NOW"))'],
      ['javascript', 'console.log(process.env.SANDBOX_WIDE, process.env.ONLY_NOW ?? null)'],
      ['bash', 'echo "$SANDBOX_WIDE ${ONLY_NOW:-None}"'],
      ['r', 'cat(Sys.getenv("SANDBOX_WIDE"), Sys.getenv("ONLY_NOW", "None"), "\\n")'],
    ];
    for (const [language, code] of cases) {
      const ctx = await newContext({ language });
      const norm = (s: string) => s.trim().replace('null', 'None');
      assert.equal(norm(stdout(await execute({ context_id: ctx.id, code }))), 'from-sandbox None', `${language} before`);
      const during = await execute({ context_id: ctx.id, code, env_vars: { SANDBOX_WIDE: 'overridden', ONLY_NOW: 'yes' } });
      assert.equal(norm(stdout(during)), 'overridden yes', `${language} during`);
      assert.equal(norm(stdout(await execute({ context_id: ctx.id, code }))), 'from-sandbox None', `${language} after`);
    }
  });

  test('the env file: variables written after start-up reach running kernels and new ones, under a run\'s own', async () => {
    const cases: [string, string][] = [
      ['python', 'import os\nprint(os.environ.get("LATE"), os.environ.get("SANDBOX_WIDE"))'],
      ['javascript', 'console.log(process.env.LATE ?? null, process.env.SANDBOX_WIDE)'],
      ['bash', 'echo "${LATE:-None} $SANDBOX_WIDE"'],
    ];
    const norm = (s: string) => s.trim().replace('null', 'None');
    const running = [];
    for (const [language, code] of cases) running.push({ language, code, ctx: await newContext({ language }) });
    for (const { language, code, ctx } of running) assert.equal(norm(stdout(await execute({ context_id: ctx.id, code }))), 'None from-sandbox', `${language} before the file`);
    const file = path.join(home, 'sandbox-envs.json');
    // Not shell names are skipped; the file's values win over the server's own.
    writeFileSync(file, JSON.stringify({ version: 1, envs: { LATE: 'from-file', SANDBOX_WIDE: 'file-wins', 'NOT A NAME': 'x' } }));
    try {
      for (const { language, code, ctx } of running) {
        assert.equal(norm(stdout(await execute({ context_id: ctx.id, code }))), 'from-file file-wins', `${language} after the file`);
        assert.equal(norm(stdout(await execute({ context_id: ctx.id, code, env_vars: { LATE: 'run' } }))), 'run file-wins', `${language} with a run's own`);
        assert.equal(norm(stdout(await execute({ context_id: ctx.id, code }))), 'from-file file-wins', `${language} reverted to the file's`);
      }
      const fresh = await newContext({ language: 'python' });
      assert.equal(norm(stdout(await execute({ context_id: fresh.id, code: cases[0][1] }))), 'from-file file-wins', 'a kernel started after the file');
      writeFileSync(file, '{"version": 2}');
      assert.equal(norm(stdout(await execute({ context_id: fresh.id, code: cases[0][1], env_vars: { LATE: 'x' } }))), 'x from-sandbox', 'a file of another version counts as none');
    } finally {
      rmSync(file, { force: true });
    }
  });

  test('cwd: contexts start in theirs (created if missing), the default is the server\'s --cwd', async () => {
    const dir = path.join(home, 'work', 'sub');
    const cases: [string, string][] = [['python', 'import os; os.getcwd()'], ['javascript', 'process.cwd()'], ['bash', 'pwd'], ['typescript', 'process.cwd() as string']];
    for (const [language, code] of cases) {
      const ctx = await newContext({ language, cwd: dir });
      assert.equal(ctx.cwd, dir);
      const run = await execute({ context_id: ctx.id, code });
      assert.equal(String(main(run)?.text ?? stdout(run)).trim(), dir, language);
    }
    assert.ok(existsSync(dir));
    assert.equal(main(await execute({ language: 'python', code: 'import os; os.getcwd()' }))?.text, home);
    assert.equal((await call('POST', '/contexts', { cwd: 'relative/dir' })).status, 422);
  });

  test('javascript: persistent declarations, console.log, top-level await, imports, errors', async () => {
    const ctx = await newContext({ language: 'JS' });
    assert.equal(ctx.language, 'javascript');
    const first = await execute({ context_id: ctx.id, code: 'const x = 20; let y = await Promise.resolve(1); console.log("hello", { a: 1 }); x + y' });
    assert.equal(of(first, 'number_of_executions')[0].execution_count, 1);
    assert.equal(stdout(first), "hello { a: 1 }\n");
    assert.equal(main(first)?.text, '21');
    // Re-running a cell that declares works; functions and classes persist.
    assert.equal(main(await execute({ context_id: ctx.id, code: 'const x = 40; function twice(n) { return 2 * n } class K { v() { return 1 } }; x' }))?.text, '40');
    assert.equal(main(await execute({ context_id: ctx.id, code: 'twice(x) + new K().v()' }))?.text, '81');
    assert.equal(main(await execute({ context_id: ctx.id, code: 'import { join } from "node:path"; join("a", "b")' }))?.text, 'a/b');
    assert.equal(main(await execute({ context_id: ctx.id, code: '"text"' }))?.text, 'text');
    const err = await execute({ context_id: ctx.id, code: 'console.log("before"); throw new TypeError("bad thing")' });
    assert.deepEqual(of(err, 'error').map((e) => [e.name, e.value]), [['TypeError', 'bad thing']]);
    assert.match(String(of(err, 'error')[0].traceback), /TypeError: bad thing/);
    assert.equal(stdout(err), 'before\n');
    assert.equal(main(await execute({ context_id: ctx.id, code: 'x' }))?.text, '40');
  });

  test('typescript: types are erased, state persists, type syntax errors are errors', async () => {
    const ctx = await newContext({ language: 'ts' });
    assert.equal(ctx.language, 'typescript');
    const run = await execute({ context_id: ctx.id, code: 'interface P { n: number }\nconst p: P = { n: 2 };\nconst sq = (v: number): number => v * v;\nsq(p.n)' });
    assert.equal(main(run)?.text, '4', JSON.stringify(run.lines));
    assert.equal(main(await execute({ context_id: ctx.id, code: 'sq(3) as number' }))?.text, '9');
    assert.equal(of(await execute({ context_id: ctx.id, code: 'const bad: = 1' }), 'error')[0]?.name, 'SyntaxError');
  });

  test('bash: variables and cd persist, output streams, a non-zero status is an ExitCode error', async () => {
    const ctx = await newContext({ language: 'bash' });
    const first = await execute({ context_id: ctx.id, code: 'v=7; cd /tmp; echo one; sleep 0.6; echo two >&2' });
    assert.deepEqual(shape(first), ['number_of_executions', 'stdout', 'stderr', 'end_of_execution']);
    assert.ok(of(first, 'stdout')[0].at < of(first, 'stderr')[0].at - 400, 'stdout came before the sleep ended');
    assert.equal(stdout(await execute({ context_id: ctx.id, code: 'echo "$v $(pwd)"' })), '7 /tmp\n');
    const failed = await execute({ context_id: ctx.id, code: 'echo out; false' });
    assert.deepEqual(of(failed, 'error').map((e) => [e.name, e.value]), [['ExitCode', '1']]);
    const exited = await execute({ context_id: ctx.id, code: 'exit 3' });
    assert.deepEqual(of(exited, 'error').map((e) => [e.name, e.value]), [['ExitCode', '3']]);
    assert.equal(stdout(await execute({ context_id: ctx.id, code: 'echo "fresh:${v:-unset}"' })), 'fresh:unset\n');
  });

  test('r: IRkernel keeps state and reports errors', async () => {
    const ctx = await newContext({ language: 'R' });
    assert.equal(ctx.language, 'r');
    const first = await execute({ context_id: ctx.id, code: 'x <- 20\nprint("hi")\nx * 2' });
    assert.equal(of(first, 'number_of_executions')[0].execution_count, 1);
    assert.equal(stdout(first), '[1] "hi"\n');
    assert.equal(of(first, 'result').at(-1)?.text, '[1] 40');
    assert.equal(of(await execute({ context_id: ctx.id, code: 'x + 1' }), 'result').at(-1)?.text, '[1] 21');
    const err = await execute({ context_id: ctx.id, code: 'stop("boom")' });
    assert.equal(of(err, 'error').length, 1);
    assert.match(String(of(err, 'error')[0].value), /boom/);
  });

  test('contexts: create, list in creation order, restart keeps the id and drops the state, delete', async () => {
    const before = ((await call('GET', '/contexts')).json as { id: string }[]).map((c) => c.id);
    const a = await newContext({ language: 'python' });
    const b = await newContext({ language: 'javascript' });
    const list = ((await call('GET', '/contexts')).json as { id: string }[]).map((c) => c.id);
    assert.deepEqual(list, [...before, a.id, b.id]);
    await execute({ context_id: a.id, code: 'kept = 1' });
    await execute({ context_id: a.id, code: 'kept += 1' });
    const restart = await call('POST', `/contexts/${a.id}/restart`);
    assert.equal(restart.status, 200);
    const after = await execute({ context_id: a.id, code: 'kept' });
    assert.equal(of(after, 'error')[0]?.name, 'NameError');
    assert.equal(of(after, 'number_of_executions')[0].execution_count, 1);
    assert.equal((await call('POST', '/contexts/nope/restart')).status, 404);
    assert.equal((await call('DELETE', `/contexts/${b.id}`)).status, 200);
    assert.ok(!((await call('GET', '/contexts')).json as { id: string }[]).some((c) => c.id === b.id));
    assert.equal((await call('DELETE', `/contexts/${b.id}`)).status, 404);
    const gone = await execute({ context_id: b.id, code: '1' });
    assert.equal(gone.status, 404);
    assert.match(gone.text, new RegExp(b.id));
  });

  test('a dropped stream interrupts the cell; the next execution runs, with the state kept', async () => {
    for (const [language, setup, endless, check, expect] of [
      ['python', 'kept = "yes"', 'import time\nprint("started", flush=True)\ntime.sleep(120)', 'kept', 'yes'],
      ['javascript', 'var kept = "yes"', 'console.log("started"); while (true) {}', 'kept', 'yes'],
      ['bash', 'kept=yes', 'echo started; sleep 120', 'echo $kept', 'yes\n'],
    ]) {
      const ctx = await newContext({ language });
      await execute({ context_id: ctx.id, code: setup });
      const dropped = await execute({ context_id: ctx.id, code: endless }, (l) => l.type === 'stdout');
      assert.equal(stdout(dropped), 'started\n');
      const next = await execute({ context_id: ctx.id, code: check });
      assert.ok(next.elapsed < 8000, `${language}: the next execution waited ${next.elapsed} ms`);
      assert.equal(main(next)?.text ?? stdout(next), expect, `${language}: ${JSON.stringify(next.lines)}`);
    }
  });

  test('executions in one context wait for each other', async () => {
    const ctx = await newContext();
    const first = execute({ context_id: ctx.id, code: 'import time\ntime.sleep(1)\nv = "first"' });
    await new Promise((r) => setTimeout(r, 200));
    const started = Date.now();
    const second = await execute({ context_id: ctx.id, code: 'v' });
    assert.equal(main(second)?.text, 'first');
    assert.ok(Date.now() - started > 600, 'the second waited');
    assert.equal(of(await first, 'error').length, 0);
  });

  test('a silent cell gets its number within a tick, and keepalive lines every 5 seconds', async () => {
    const run = await execute({ code: 'import time\ntime.sleep(6.5)\n"done"' });
    // Held to go out with the next line, the response's head and number are written at the next tick (0.25 s).
    assert.ok(of(run, 'number_of_executions')[0].at < 2000, `number at ${of(run, 'number_of_executions')[0].at} ms`);
    const keep = of(run, 'keepalive');
    assert.equal(keep.length, 1, JSON.stringify(run.lines));
    assert.ok(keep[0].at >= 4900 && keep[0].at < 6400, `keepalive at ${keep[0].at} ms`);
    assert.deepEqual(Object.keys(keep[0]).sort(), ['at', 'type']);
    assert.equal(main(run)?.text, 'done');
  });

  test('bad requests: statuses and short bodies', async () => {
    const expect = async (status: number, method: string, route: string, body?: unknown, raw?: string) => {
      const r = await call(method, route, body, raw);
      assert.equal(r.status, status, `${method} ${route} ${raw ?? JSON.stringify(body)}: ${r.text}`);
      assert.ok(r.text.length > 0 && r.text.length < 300, r.text);
      return r;
    };
    await expect(422, 'POST', '/execute', { code: 42 });
    await expect(422, 'POST', '/execute', {});
    await expect(400, 'POST', '/execute', undefined, 'not json');
    await expect(400, 'POST', '/execute', undefined, '[1]');
    const both = await expect(400, 'POST', '/execute', { code: '1', context_id: 'x', language: 'python' });
    assert.equal(both.headers.get('x-error-code'), 'bad_request');
    await expect(400, 'POST', '/execute', { code: '1', language: 'cobol' });
    await expect(400, 'POST', '/contexts', { language: 'java' });
    await expect(404, 'POST', '/execute', { code: '1', context_id: 'no-such-context' });
    await expect(422, 'POST', '/execute', { code: '1', env_vars: { 'BAD NAME': 'x' } });
    await expect(422, 'POST', '/execute', { code: '1', env_vars: { OK: 1 } });
    await expect(422, 'POST', '/execute', { code: 'x'.repeat(10 * 1024 * 1024 + 1) });
    await expect(404, 'GET', '/nothing-here');
    await expect(405, 'DELETE', '/execute');
    // Still serving after all that.
    assert.equal(main(await execute({ code: '6 * 7' }))?.text, '42');
  });

  test('stopping the server stops every kernel it started', async () => {
    assert.ok(marked().length >= 3, 'the server and its kernels carry the marker');
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    child.kill('SIGTERM');
    assert.equal(await exited, 0);
    for (let i = 0; i < 50 && marked().length > 0; i++) await new Promise((r) => setTimeout(r, 100));
    assert.deepEqual(marked(), [], 'processes left behind');
  });
});

test('code interpreter server: an execution\'s worker thread is one kept from before when one is idle, a new one when all are busy', async () => {
  // ci_server/execution.py `_Workers`, driven directly on Debian's python3.
  const script = [
    'import threading, time',
    'from ci_server.execution import _Workers',
    'w = _Workers(2)',
    'def ident(out, hold=None):',
    '    def task():',
    '        out.append(threading.get_native_id())',
    '        if hold: hold.wait(5)',
    '    return task',
    'def settle():',
    '    for _ in range(500):',
    '        if len(w._idle) == want: return',
    '        time.sleep(0.01)',
    'seen = []',
    'for want in (1, 1, 1):',
    '    w.run(ident(seen)); settle()',
    'hold = threading.Event(); busy = []',
    'for _ in range(3): w.run(ident(busy, hold))',
    'for _ in range(500):',
    '    if len(busy) == 3: break',
    '    time.sleep(0.01)',
    'hold.set(); want = 2; settle(); time.sleep(0.1)',
    'print(len(set(seen)), len(set(busy)), seen[0] in busy, len(w._idle))',
  ].join('\n');
  const { execFileSync } = await import('node:child_process');
  const out = execFileSync(PYTHON, ['-c', script], { env: { PATH: '/usr/bin:/bin', PYTHONPATH: SERVER_DIR, PYTHONDONTWRITEBYTECODE: '1' }, encoding: 'utf8', timeout: 60_000 });
  // Three tasks one after another ran on one thread; three at once on three threads, the first of them
  // the kept one; afterwards two wait (the third ended: at most two are kept).
  assert.equal(out.trim(), '1 3 True 2');
});

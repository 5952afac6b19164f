import { randomBytes } from 'node:crypto';

/**
 * The chaos run's clients and what they saw. Each client loops over random operations against a
 * random worker (through its relay) and records every one: when it started and ended, what it
 * asked, and its outcome: acknowledged (`ok`, with the version the server named), refused with a
 * typed error (its code), cut off before an answer (`unreachable`: a killed or unreachable
 * worker), or `hung` (no answer within the client's timeout, a violation). The checker
 * (checker.ts) reads this history against the final state.
 */
export type OpKind = 'write' | 'shared' | 'put' | 'read' | 'fork' | 'merge' | 'quota' | 'service';

export interface Op {
  id: number;
  kind: OpKind;
  worker: string;
  context: string;
  start: number;
  end: number;
  outcome: 'ok' | 'error' | 'unreachable' | 'hung';
  /** The typed error's code (`outcome: error`), or `conflict` for a query whose writes overlapped. */
  code?: string;
  /** The file written (write, put, merge, shared) or read, and its bytes. */
  path?: string;
  value?: string;
  /** The version the server acknowledged (the new head, a fork's head). */
  version?: string;
  /** What a read got back. */
  read?: string;
  /** A quota query's own start and end on the host's clock (ns). */
  ran?: [bigint, bigint];
  fork?: string;
}

export interface Target { name: string; url: string; gatewayUrl: string }

export interface WorkloadOptions {
  /** Workers' APIs; `targets()` is read for each operation (a killed worker stays in it: its calls are `unreachable`). */
  targets: () => Target[];
  adminKey: string;
  /** A tenant's key whose `concurrentQueries` quota is `quota`. */
  quotaKey: string;
  contexts: string[];
  /** The path of a service (SERVICE_APP) on every worker's gateway. */
  servicePath: string;
  clients: number;
  timeoutMs: number;
}

export interface Workload {
  history: Op[];
  stop(): Promise<void>;
}

const pick = <T>(xs: readonly T[]): T => xs[Math.floor(Math.random() * xs.length)];
/** Each kind's share of the operations. */
const MIX: [OpKind, number][] = [['write', 28], ['shared', 12], ['put', 12], ['read', 18], ['fork', 8], ['merge', 6], ['quota', 8], ['service', 8]];

/**
 * The service every worker may run (one at a time, by its lease): each run appends the host's
 * clock (ns) to a file of its own under /root/runs every 50 ms and at each request, which it
 * answers with the run's id. Its writes commit when it sleeps or stops, fenced by its lease:
 * the checker finds two runs whose committed spans overlap (a double run).
 */
export const SERVICE_APP = `import http.server, os, secrets, threading, time
run = secrets.token_hex(6)
os.makedirs('/root/runs', exist_ok=True)
out = open('/root/runs/' + run, 'a')
lock = threading.Lock()
def beat():
    with lock:
        out.write(str(time.time_ns()) + '\\n'); out.flush()
def beats():
    while True:
        beat(); time.sleep(0.05)
threading.Thread(target=beats, daemon=True).start()
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        beat()
        body = run.encode()
        self.send_response(200); self.send_header('content-length', str(len(body))); self.end_headers(); self.wfile.write(body)
    def log_message(self, *args): pass
http.server.ThreadingHTTPServer(('0.0.0.0', 8080), Handler).serve_forever()
`;

interface Reply { status: number; body: unknown; text: string }

/** One HTTP call; `hung` when nothing came back within the timeout, `unreachable` when the connection failed. */
async function call(url: string, key: string, method: string, route: string, body: unknown, timeoutMs: number, raw = false): Promise<Reply | 'hung' | 'unreachable'> {
  try {
    const res = await fetch(`${url}${route}`, {
      method,
      headers: { authorization: `Bearer ${key}`, ...(body !== undefined && !raw ? { 'content-type': 'application/json' } : {}) },
      body: body === undefined ? undefined : raw ? (body as string) : JSON.stringify(body),
      signal: AbortSignal.timeout(timeoutMs),
    });
    const text = await res.text();
    let parsed: unknown = null;
    try { parsed = JSON.parse(text); } catch { /* bytes */ }
    return { status: res.status, body: parsed, text };
  } catch (e) {
    const name = (e as Error).name;
    return name === 'TimeoutError' || name === 'AbortError' ? 'hung' : 'unreachable';
  }
}

const codeOf = (r: Reply) => (r.body as { error?: { code?: string } } | null)?.error?.code ?? `http ${r.status}`;

export function startWorkload(o: WorkloadOptions): Workload {
  const history: Op[] = [];
  let next = 0;
  let running = true;
  const total = MIX.reduce((n, [, w]) => n + w, 0);
  const kindOf = () => {
    let r = Math.random() * total;
    for (const [k, w] of MIX) if ((r -= w) < 0) return k;
    return MIX[0][0];
  };

  /** Files acknowledged so far (what a read may ask for). */
  const written = () => history.filter((h) => h.outcome === 'ok' && h.end > 0 && (h.kind === 'write' || h.kind === 'put' || h.kind === 'merge'));
  const one = async (): Promise<Op> => {
    let kind = kindOf();
    // Nothing to read yet: a write instead.
    if (kind === 'read' && written().length === 0) kind = 'write';
    const target = pick(o.targets());
    const op: Op = { id: ++next, kind, worker: target.name, context: pick(o.contexts), start: Date.now(), end: 0, outcome: 'ok' };
    const value = randomBytes(6).toString('hex');
    const key = kind === 'quota' ? o.quotaKey : o.adminKey;
    const req = (method: string, route: string, body?: unknown, raw = false) => call(target.url, key, method, route, body, o.timeoutMs, raw);
    const settle = (r: Reply | 'hung' | 'unreachable', ok: (r: Reply) => boolean): r is Reply => {
      if (r === 'hung' || r === 'unreachable') op.outcome = r;
      else if (!ok(r)) { op.outcome = 'error'; op.code = codeOf(r); }
      return op.outcome === 'ok';
    };
    const exec = async (context: string, command: string, extra: object = {}) => {
      const r = await req('POST', `/v1/contexts/${context}/exec`, { command, ...extra });
      if (!settle(r, (x) => x.status === 200)) return null;
      const res = r.body as { exitCode: number; committed: boolean; version: string; conflict?: unknown; stdout: string };
      if (res.conflict) { op.outcome = 'error'; op.code = 'conflict'; return null; }
      if (res.exitCode !== 0) { op.outcome = 'error'; op.code = `exit ${res.exitCode}`; return null; }
      return res;
    };
    history.push(op);
    switch (kind) {
      case 'write': {
        op.path = `/root/u/${op.id}`;
        op.value = value;
        const r = await exec(op.context, `mkdir -p /root/u && printf %s ${value} > ${op.path}`);
        if (r) op.version = r.version;
        break;
      }
      case 'shared': {
        op.path = '/root/shared';
        op.value = value;
        const r = await exec(op.context, `printf %s ${value} > ${op.path}`);
        if (r) op.version = r.version;
        break;
      }
      case 'put': {
        op.path = `/root/p/${op.id}`;
        op.value = value;
        const r = await req('PUT', `/v1/contexts/${op.context}/files${op.path}`, value, true);
        if (settle(r, (x) => x.status === 200)) op.version = (r.body as { version: string }).version;
        break;
      }
      case 'read': {
        // A file acknowledged before this read began: it must come back as written.
        const of = pick(written());
        op.context = of.context;
        op.path = of.path;
        op.value = of.value;
        const r = await req('GET', `/v1/contexts/${of.context}/files${of.path}`);
        if (settle(r, (x) => x.status === 200)) op.read = r.text;
        break;
      }
      case 'fork': {
        op.fork = `f${op.id}`;
        const r = await req('POST', `/v1/contexts/${op.context}/fork`, { name: op.fork });
        if (settle(r, (x) => x.status === 201)) op.version = (r.body as { head: string }).head;
        break;
      }
      case 'merge': {
        // A fork, a file written in it, the fork merged back: acknowledged only when the merge is.
        op.fork = `m${op.id}`;
        op.path = `/root/m/${op.id}`;
        op.value = value;
        const f = await req('POST', `/v1/contexts/${op.context}/fork`, { name: op.fork });
        if (!settle(f, (x) => x.status === 201)) break;
        if (!(await exec(op.fork, `mkdir -p /root/m && printf %s ${value} > ${op.path}`))) break;
        const m = await req('POST', `/v1/contexts/${op.context}/merge`, { from: op.fork });
        if (settle(m, (x) => x.status === 200)) op.version = (m.body as { version: string }).version;
        break;
      }
      case 'service': {
        op.context = 'svc';
        const r = await call(target.gatewayUrl, o.adminKey, 'GET', o.servicePath, undefined, o.timeoutMs);
        if (settle(r, (x) => x.status === 200)) op.read = r.text;
        break;
      }
      case 'quota': {
        op.context = 'quota';
        const r = await exec('quota', 'a=$(date +%s%N); sleep 0.2; echo $a $(date +%s%N)', { commit: 'never' });
        if (r) {
          const [a, b] = r.stdout.trim().split(' ');
          op.ran = [BigInt(a), BigInt(b)];
        }
        break;
      }
    }
    op.end = Date.now();
    return op;
  };

  const loops = Array.from({ length: o.clients }, async () => {
    while (running) {
      const op = await one();
      // After a refused or cut-off call a client waits a little before the next.
      if (op.outcome !== 'ok') await new Promise((r) => setTimeout(r, 100));
    }
  });
  return {
    history,
    async stop() {
      running = false;
      await Promise.all(loops);
    },
  };
}

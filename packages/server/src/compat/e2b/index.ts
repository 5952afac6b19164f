import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import { forwardedHere, forwardRequest, forwardUpgrade } from '../../api/forward.js';
import { checkKey } from '../../api/gateway.js';
import type { Caller } from '../../core/deps.js';
import type { PortTarget } from '../../util/pipe.js';
import type { Cluster } from '../../core/cluster.js';
import type { Peers } from '../../core/peers.js';
import { ShellbaseError } from '../../errors.js';
import type { Operations } from '../../ops/dispatch.js';
import { ControlPlane, isControlPath } from './control.js';
import { E2bEvents, isEventsPath } from './events.js';
import { Envd, type PassOn } from './envd.js';
import { fileRoutes } from './files.js';
import { signedBy } from './signed-urls.js';
import { filesystemService } from './filesystem.js';
import { sendError } from './http.js';
import { E2bPortProxy, SandboxNotRunning } from './ports.js';
import { processService } from './process.js';
import { Sandboxes } from './sandboxes.js';
import { E2bVolumes, isVolumePath } from './volumes.js';

/** The envd port: with E2B's routing, the sandbox's own API rather than a guest port. */
const ENVD_PORT = 49983;

/**
 * A guest port named by headers: `E2b-Sandbox-Id` with `E2b-Sandbox-Port` (what E2B's SDKs send
 * with `E2B_SANDBOX_URL`, e.g. the code interpreter's 49999); null for envd's port or none.
 */
export function portHeaders(headers: IncomingMessage['headers']): { port: number; id: string } | null {
  const id = headers['e2b-sandbox-id'];
  const raw = headers['e2b-sandbox-port'];
  if (typeof id !== 'string' || typeof raw !== 'string' || !/^\d{1,5}$/.test(raw.trim())) return null;
  const port = Number(raw.trim());
  return port >= 1 && port <= 65535 && port !== ENVD_PORT ? { port, id: id.toLowerCase() } : null;
}

/** `<port>-<sandbox id>.<domain>`: a sandbox's guest port, as `Sandbox.getHost(port)` names it. */
export function portHost(host: string | undefined): { port: number; id: string } | null {
  const m = /^(\d{1,5})-(m_[0-9a-z]{1,64})\.[^:]+(?::\d+)?$/i.exec(host ?? '');
  if (!m) return null;
  const port = Number(m[1]);
  return port >= 1 && port <= 65535 ? { port, id: m[2].toLowerCase() } : null;
}

/**
 * An E2B-compatible API on the API port, so that programs written against E2B's SDK run on
 * shellbase unchanged (docs/e2b.md). Requests are told apart as E2B's own proxy does: an
 * `E2b-Sandbox-Id` header is envd traffic unless `E2b-Sandbox-Port` names another port, a Host of
 * `<port>-<id>.<domain>` (or that header) is traffic to a guest port, and the control plane's paths (`/sandboxes`, `/v2/sandboxes`, `/snapshots`, `/templates`)
 * are the control plane; everything else is shellbase's own API.
 *
 * In a cluster, a request about a sandbox whose machine another live worker runs is passed to
 * that worker's API as it came (as api/routing.ts does for shellbase's own machine calls),
 * with a proof under the cluster secret, after the credentials it carries (an API key, the
 * sandbox's access token or a traffic token) were found good here; the worker that serves it
 * checks them again. A signed `/files` URL that names its sandbox (a header or an envd Host) is
 * checked here before it is passed on, and again by the worker that serves it. A request passed here is served here, never passed on again.
 */
export class E2bCompat {
  readonly sandboxes: Sandboxes;
  private readonly control: ControlPlane;
  private readonly events: E2bEvents;
  private readonly volumes: E2bVolumes;
  private readonly envd: Envd;
  private readonly proxy: E2bPortProxy;
  private readonly peers: Peers | undefined;

  /** `o.cluster` and `o.peers`: cluster mode (locks, and proofs for requests passed to the worker that runs a sandbox). */
  constructor(private readonly ops: Operations, o: { cluster?: Pick<Cluster, 'exclusive'>; peers?: Peers }, private readonly log: Logger) {
    this.sandboxes = new Sandboxes(ops, { log, ...(o.cluster ? { cluster: o.cluster } : {}) });
    this.peers = o.peers;
    this.control = new ControlPlane(ops, this.sandboxes);
    this.events = new E2bEvents(ops);
    this.volumes = new E2bVolumes(ops);
    this.envd = new Envd(this.sandboxes, ops, { 'process.Process': processService, 'filesystem.Filesystem': filesystemService() }, fileRoutes);
    this.proxy = new E2bPortProxy(log, (req) => portHeaders(req.headers) ?? portHost(req.headers.host));
  }

  open(): Promise<void> { return this.sandboxes.open(); }

  close(): void {
    this.sandboxes.close();
    this.proxy.close();
  }

  /** Whether a request is E2B's (and `handle` should take it). */
  claims(req: IncomingMessage): boolean {
    const path = (req.url ?? '/').split('?')[0];
    return typeof req.headers['e2b-sandbox-id'] === 'string' || portHost(req.headers.host) !== null || isControlPath(path) || isEventsPath(path) || isVolumePath(path) || path === '/files';
  }

  handle(req: IncomingMessage, res: ServerResponse): void {
    const work = async () => {
      const passOn = this.passOn(forwardedHere(req, this.peers));
      const id = req.headers['e2b-sandbox-id'];
      const port = portHeaders(req.headers) ?? portHost(req.headers.host);
      if (typeof id === 'string' && !port) await this.envd.handle(req, res, id, passOn);
      else if (port?.port === ENVD_PORT) await this.envd.handle(req, res, port.id, passOn);
      else if (port) {
        await this.toPort(port.id, port.port, req, async (to) => { this.forward(to, req, res); }, async (caller, target) => {
          res.once('close', () => caller.hold.release());
          await this.proxy.request(target, req, res, req.url ?? '/');
        }, passOn !== undefined).catch((err: unknown) => this.proxy.fail(res, err));
      } else if ((req.url ?? '/').split('?')[0] === '/files') await this.signed(req, res, passOn);
      else if (isEventsPath((req.url ?? '/').split('?')[0])) await this.events.handle(req, res);
      else if (isVolumePath((req.url ?? '/').split('?')[0])) await this.volumes.handle(req, res);
      else await this.control.handle(req, res, passOn);
    };
    work().catch((err: unknown) => {
      // A proof that does not hold (unauthorized) is the caller's error; anything else is ours.
      if (err instanceof ShellbaseError) { sendError(res, err); return; }
      this.log.error({ err }, 'E2B-compatible API error');
      if (!res.headersSent) res.writeHead(500, { 'content-type': 'application/json' }).end(JSON.stringify({ code: 500, message: 'internal error' }));
      else res.destroy();
    });
  }

  /** In a cluster, unless the request was passed here: what passes a request about a sandbox to the worker running it. */
  private passOn(passed: boolean): PassOn | undefined {
    if (passed || !this.peers) return undefined;
    return async (id, req, res) => {
      const to = await this.ops.where({ machine: id }, null, false);
      if (!to) return false;
      this.forward(to, req, res);
      return true;
    };
  }

  private forward(to: string, req: IncomingMessage, res: ServerResponse): void {
    forwardRequest(to, req, res, (err) => sendError(res, err), this.peers!);
  }

  /**
   * `/files` with no sandbox named: a signed URL (`uploadUrl`, `downloadUrl`) made with
   * E2B_SANDBOX_URL, which carries no sandbox id; the sandbox whose token made the signature.
   */
  private async signed(req: IncomingMessage, res: ServerResponse, passOn: PassOn | undefined): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://envd');
    const id = url.searchParams.has('signature') ? await this.sandboxes.bySignature((token) => signedBy(url, req.method, token)) : undefined;
    if (id) {
      // Passed on (in a cluster), it names its sandbox: the worker serving it need not look for the signature's token.
      if (passOn) req.headers['e2b-sandbox-id'] = id;
      await this.envd.handle(req, res, id, passOn);
      return;
    }
    const body = JSON.stringify({ code: 401, message: 'no sandbox made this signature (or none was sent): use a signed URL, or send E2b-Sandbox-Id and X-Access-Token' });
    res.writeHead(401, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }).end(body);
  }

  /** A WebSocket (or other upgrade) to a guest port. */
  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): boolean {
    const port = portHeaders(req.headers) ?? portHost(req.headers.host);
    if (!port) return false;
    const work = async () => {
      const passed = forwardedHere(req, this.peers);
      await this.toPort(port.id, port.port, req, async (to) => { forwardUpgrade(to, req, socket, head, this.peers!); }, async (caller, target) => {
        socket.once('close', () => caller.hold.release());
        await this.proxy.upgrade(target, req, socket, head, req.url ?? '/');
      }, !passed && this.peers !== undefined);
    };
    work().catch((err: unknown) => this.proxy.failUpgrade(req, socket, err));
    return true;
  }

  /**
   * Finds the guest port a Host names, exposing it on first use. Public unless the sandbox was
   * made with allowPublicTraffic false (then `e2b-traffic-access-token` must carry its token);
   * a paused sandbox answers 502 unless traffic resumes it. `mayPass`: in a cluster (and not
   * passed here already), a sandbox another live worker runs is reached there (`pass`, with that
   * worker's API), once its traffic token was checked here.
   */
  private async toPort(id: string, port: number, req: IncomingMessage, pass: (to: string) => Promise<void>,
    use: (caller: Caller, target: PortTarget) => Promise<void>, mayPass: boolean): Promise<void> {
    const gone = () => new SandboxNotRunning(id);
    const tenant = await this.sandboxes.tenantOf(id);
    if (!tenant) throw gone();
    const caller = await this.sandboxes.callerFor(tenant);
    try {
      const s = await this.sandboxes.get(caller, id);
      if (s.e2b.trafficToken && req.headers['e2b-traffic-access-token'] !== s.e2b.trafficToken) {
        throw new ShellbaseError('forbidden', 'this sandbox\'s ports need its traffic access token', { hint: 'send e2b-traffic-access-token: sandbox.trafficAccessToken' });
      }
      const to = await this.ops.where({ machine: id }, caller, !mayPass);
      if (to) {
        await pass(to);
        caller.hold.release();
        return;
      }
      if (this.sandboxes.isPaused(s)) {
        if (!s.e2b.autoResume) throw gone();
        await this.sandboxes.connect(caller, id, 300);
      }
      const target = await this.ops.run(caller, 'machine.portTarget', { id, port });
      // A port exposed with access "key" wants the tenant's API key here as on the gateway.
      if (target.owner.requireKey) await checkKey(req, target, (authorization) => this.ops.authenticate(authorization));
      await use(caller, target);
    } catch (e) {
      caller.hold.release();
      throw e;
    }
  }
}

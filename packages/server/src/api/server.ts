import { SerializerSelector } from '@fastify/fast-json-stringify-compiler';
import swagger from '@fastify/swagger';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { createServer as createTlsServer, type ServerOptions as TlsOptions } from 'node:https';
import type { Duplex } from 'node:stream';
import Fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import type { ServerConfig } from '../config.js';
import type { Operations } from '../ops/dispatch.js';
import type { Caller } from '../core/deps.js';
import type { Peers } from '../core/peers.js';
import { forwardedHere } from './forward.js';
import { internalTunnels } from './internal-tunnel.js';
import { ShellbaseError } from '../errors.js';
import { consoleRoutes } from './console.js';
import { routeRequests } from './routing.js';
import { clientErrorHandler, errorHandler } from './errors.js';
import { contextRoutes } from './routes/contexts.js';
import { execRoutes } from './routes/exec.js';
import { fileRoutes } from './routes/files.js';
import { gcRoutes } from './routes/gc.js';
import { historyRoutes } from './routes/history.js';
import { imageRoutes } from './routes/images.js';
import { transferRoutes } from './routes/transfer.js';
import { serviceRoutes } from './routes/services.js';
import { networkRoutes } from './routes/network.js';
import { eventRoutes } from './routes/events.js';
import { serviceTunnels, tunnelUpgrades } from './tunnel.js';
import { machineRoutes } from './routes/machines.js';
import { ptyUpgrades } from './pty.js';
import { tenantRoutes } from './routes/tenants.js';
import { usageRoutes } from './routes/usage.js';
import { Context, ErrorResponse, ExecResult, Version } from './schemas.js';

declare module 'fastify' {
  interface FastifyRequest {
    caller: Caller;
    /** Passed here by another worker of the cluster (with a valid proof): served here, never passed on. */
    forwarded: boolean;
  }
}

export const BODY_LIMIT = 10 * 1024 * 1024;
/** Request line and headers together; more is 431. */
export const MAX_HEADER_BYTES = 16 * 1024;

/** Another API on the API's port: it says which requests (and upgrades) are its own, and serves them. */
export interface FrontDoor {
  claims(req: IncomingMessage): boolean;
  handle(req: IncomingMessage, res: ServerResponse): void;
  /** Takes an upgrade that is its own (true), or leaves it (false). */
  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): boolean;
}

export interface ApiOptions {
  /** The operations every request is turned into, and where each runs (ops/). */
  ops: Operations;
  /** Another API served on the same port, which claims its own requests (compat/e2b: E2B's). */
  e2b?: FrontDoor;
  log: Logger;
  metrics: Registry;
  http: ServerConfig['http'];
  /** In a cluster: proofs between workers, and how calls reach them (core/peers.ts). */
  peers?: Peers;
  /** Serve HTTPS with this certificate and key. */
  tls?: TlsOptions;
}

/**
 * Fastify's response serializers (fast-json-stringify), each built at its route's first response
 * instead of all at start: building them held a fresh server's event loop ~0.9 s before it
 * listened (docs/performance.md). What each writes is the same; a schema that cannot be built
 * fails its route's responses (500) instead of the start. Validators stay Fastify's own (built
 * at start, ~0.45 s): a compiler of ours would turn off some of Fastify's checks of schemas.
 */
function lazySerializers() {
  const serializers = SerializerSelector();
  const buildSerializer: typeof serializers = (externalSchemas, options) => {
    const compile = serializers(externalSchemas, options);
    return (route) => {
      let serialize: ((doc: unknown) => string) | null = null;
      return (doc) => (serialize ??= compile(route))(doc);
    };
  };
  return { buildSerializer };
}

/**
 * The HTTP API: turns requests into operations (ops/operations.ts), which never see Fastify,
 * and their answers into responses. Each operation pins, admits and syncs what it needs itself;
 * the API only ends the caller's hold when the response is done.
 */
export async function buildApi({ ops, e2b, log, metrics, http: limits, peers, tls }: ApiOptions): Promise<FastifyInstance> {
  const app = Fastify({
    loggerInstance: log as FastifyBaseLogger,
    bodyLimit: BODY_LIMIT,
    routerOptions: { maxParamLength: 4096 },
    keepAliveTimeout: 5_000,
    clientErrorHandler,
    frameworkErrors: (err, req, reply) => errorHandler(err, req, reply),
    // A slow client holds one socket for at most these times: its headers within headersTimeout,
    // its whole request (not the response, which may stream for as long as a query runs) within
    // requestTimeout. Node checks both every connectionsCheckingInterval.
    serverFactory: (handler) => {
      const options = {
        headersTimeout: limits.headersTimeoutMs,
        requestTimeout: limits.requestTimeoutMs,
        connectionsCheckingInterval: Math.min(1000, limits.headersTimeoutMs),
        maxHeaderSize: MAX_HEADER_BYTES,
      };
      const serve: typeof handler = e2b ? (req, res) => { if (e2b.claims(req)) e2b.handle(req, res); else handler(req, res); } : handler;
      return tls ? createTlsServer({ ...options, ...tls }, serve) : createServer(options, serve);
    },
    ajv: { customOptions: { removeAdditional: false, coerceTypes: 'array', useDefaults: true, allErrors: false } },
    schemaController: { compilersFactory: lazySerializers() },
  });
  await app.register(swagger, {
    openapi: {
      info: { title: 'shellbase', version: '1' },
      components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
      security: [{ bearer: [] }],
    },
  });
  for (const schema of [ErrorResponse, Context, Version, ExecResult]) app.addSchema(schema);
  // Every request of the API is one operation (ops/operations.ts): a route that names none fails the start.
  app.addHook('onRoute', (route) => {
    if (route.url.startsWith('/v1/') && route.url !== '/v1/openapi.json' && !route.config?.op) throw new Error(`route ${String(route.method)} ${route.url} names no operation (config.op)`);
  });
  app.decorateRequest('caller', null as unknown as Caller);
  app.decorateRequest('forwarded', false);
  app.setErrorHandler(errorHandler);
  app.setNotFoundHandler((req, reply) => {
    const e = new ShellbaseError('not_found', `no route ${req.method} ${req.url.split('?')[0]}`, { hint: 'see GET /v1/openapi.json' });
    void reply.status(404).send({ error: e.toBody() });
  });
  app.addHook('onRequest', async (req, reply) => {
    // A request marked as passed by another worker is served only with a valid proof.
    req.forwarded = forwardedHere(req.raw, peers);
    if (req.url.startsWith('/v1/') || req.url === '/v1') {
      req.caller = await ops.begin(req.headers.authorization);
      // What the request looked up stays pinned until its response is done, streamed bodies included.
      reply.raw.once('close', () => req.caller.hold.release());
    }
  });
  // Cluster mode: requests another worker must serve go there (after the key is checked here).
  if (peers) routeRequests(app, ops, peers);

  app.get('/healthz', { schema: { hide: true } }, async () => {
    const accel = ops.accel();
    return { ok: true, machines: accel ? { accel: accel.accel, reason: accel.reason } : { accel: null, reason: 'machine assets are not built' } };
  });
  // Prometheus scrapes without a key, as it does /healthz (the server listens on loopback by default).
  app.get('/metrics', { schema: { hide: true } }, async (_req, reply) =>
    reply.type(metrics.contentType).send(await metrics.metrics()));
  app.get('/v1/openapi.json', { schema: { hide: true } }, async () => app.swagger());
  contextRoutes(app, ops);
  execRoutes(app, ops);
  fileRoutes(app, ops);
  historyRoutes(app, ops);
  tenantRoutes(app, ops);
  usageRoutes(app, ops);
  gcRoutes(app, ops);
  serviceRoutes(app, ops);
  networkRoutes(app, ops);
  eventRoutes(app, ops);
  imageRoutes(app, ops);
  transferRoutes(app, ops);
  machineRoutes(app, ops);
  consoleRoutes(app);
  // Upgrades: the E2B API's guest ports claim theirs, machines' PTYs theirs; the rest are TCP tunnels to services (or refused there).
  const tunnel = tunnelUpgrades(ops, serviceTunnels((caller, context, service) => ops.run(caller, 'service.target', { context, service })), log, peers);
  const internal = internalTunnels(peers, (token) => ops.serviceByToken(token), log);
  const pty = ptyUpgrades(ops, log, peers);
  app.server.on('upgrade', (req, socket, head) => { if (!internal(req, socket, head) && !e2b?.upgrade(req, socket, head) && !pty(req, socket, head)) tunnel(req, socket, head); });
  return app;
}

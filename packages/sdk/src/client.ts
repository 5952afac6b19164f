import { existsSync, readFileSync } from 'node:fs';
import type { Socket } from 'node:net';
import type { BuildEvent, BuildResult } from '@shellbase/protocol';
import { Shellbase as CoreShellbase } from './core/client.js';
import { ConnectionError } from './core/errors.js';
import { machinesApi } from './core/machine.js';
import { ContextHandle } from './context.js';
import { MachineHandle } from './machine.js';
import { withTarContext, type BuildOptions } from './images.js';
import { openTunnel } from './tunnel.js';
import { apiKeyOf, keepApiKey, type NodeTransport } from './transport.js';

export type { RequestOptions } from './core/transport.js';

const DEFAULT_URL = 'http://127.0.0.1:7070';

export interface ShellbaseOptions {
  /** Server URL; defaults to SHELLBASE_URL or http://127.0.0.1:7070. */
  url?: string;
  /** API key; defaults to SHELLBASE_API_KEY, then to the admin key file of a server on this host. */
  apiKey?: string;
}

function defaultKey(): string | undefined {
  if (process.env.SHELLBASE_API_KEY) return process.env.SHELLBASE_API_KEY;
  const file = `${process.env.SHELLBASE_HOME || '/var/lib/shellbase'}/admin.key`;
  try { return existsSync(file) ? readFileSync(file, 'utf8').trim() : undefined; } catch { return undefined; }
}

/**
 * The shellbase client: `new Shellbase().context('demo').exec('ls')`. The core's client
 * (./core/client.ts) with what needs Node: the URL and key from the environment or this host,
 * TCP tunnels to services, machine terminals, builds from a directory, files read as Buffers.
 */
export class Shellbase extends CoreShellbase implements NodeTransport {
  /** Where `url` came from, for messages when the server cannot be reached. */
  readonly urlSource: 'the url option' | 'SHELLBASE_URL' | 'the default';

  constructor(options: ShellbaseOptions = {}) {
    const fromEnv = process.env.SHELLBASE_URL || undefined;
    const apiKey = options.apiKey ?? defaultKey();
    super({ url: options.url ?? fromEnv ?? DEFAULT_URL, apiKey });
    this.urlSource = options.url !== undefined ? 'the url option' : fromEnv !== undefined ? 'SHELLBASE_URL' : 'the default';
    keepApiKey(this, apiKey);
  }

  /** A handle on a context; nothing is sent until it is used (exec creates it if missing). */
  override context(name: string): ContextHandle {
    return new ContextHandle(this, name);
  }

  /** Machines (microVMs): `await sb.machines.create()` then `machine.exec(...)`, `machine.fork(2)`, `machine.pty()`. */
  override readonly machines = machinesApi(this, (id) => new MachineHandle(this, id));

  /**
   * Builds a Dockerfile into the context `tag` (steps the cache has are not run
   * again); `onEvent` sees steps and RUN output as they come.
   */
  override async build(options: BuildOptions & { onEvent?: (e: BuildEvent) => void }): Promise<BuildResult> {
    return super.build(withTarContext(options));
  }

  /** The same build as a stream of events, ending with `result`. */
  override async *buildStream(options: BuildOptions): AsyncGenerator<BuildEvent> {
    yield* super.buildStream(withTarContext(options));
  }

  /** A TCP tunnel the API opens at `path` (a service's `/connect`). */
  tunnel(path: string): Promise<Socket> {
    return openTunnel(this.url, path, apiKeyOf(this));
  }

  /** The error for a request that never reached the server, said with the URL and where it came from. */
  protected override unreachable(why: string, err: unknown): ConnectionError {
    const source = this.urlSource;
    const hint = source === 'SHELLBASE_URL'
      ? 'check that SHELLBASE_URL names a running shellbase server (`shellbase serve` or `npm start` starts one)'
      : source === 'the default'
        ? `start a server on this host (\`npm start\` in the checkout, or \`shellbase serve\`), or set SHELLBASE_URL to a server's URL; `
          + 'agent hosts (MCP) must pass SHELLBASE_URL and SHELLBASE_API_KEY in the server entry\'s env'
        : 'check the url option';
    return new ConnectionError({
      code: 'unavailable', message: `cannot reach the shellbase server at ${this.url} (from ${source}): ${why}`, hint, details: { url: this.url, source },
    }, 0, { cause: err });
  }
}

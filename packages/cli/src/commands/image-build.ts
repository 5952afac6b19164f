import { readFileSync } from 'node:fs';
import path from 'node:path';
import { Shellbase, ShellbaseError, type BuildEvent } from '@shellbase/sdk';
import type { DockerfileBuild, DockerfileBuilder } from '@shellbase/server';

type ServerModule = typeof import('@shellbase/server');

/**
 * Builds a built-in Dockerfile image (`shellbase image build code-interpreter`) without a server
 * running: a server of its own over a temporary home in the build's work directory (its own
 * SQLite, btrfs store and cgroups, on loopback, port chosen by the system) builds the Dockerfile
 * as any build (`POST /v1/builds`, RUN steps in sandboxes under the host's egress policy, the
 * debian image's apt sources), then writes the built version's whole tree into the image cache.
 * The server is closed and its home removed (by the caller: images/index.ts `buildImage`) however
 * the build ends; Ctrl-C cancels the build.
 */
export function engineBuilder({ loadConfig, startServer }: ServerModule): DockerfileBuilder {
  return (b) => buildWithEngine(b, loadConfig, startServer);
}

async function buildWithEngine(b: DockerfileBuild, loadConfig: ServerModule['loadConfig'], startServer: ServerModule['startServer']): Promise<void> {
  const config = loadConfig({ cluster: null, home: path.join(b.work, 'home'), host: '127.0.0.1', port: 0, gatewayPort: 0, warm: false, durable: false });
  delete config.tls;
  delete config.metadataUrl;
  config.machines.readyPerTemplate = 0;
  // The server's own log: warnings only, unless asked otherwise (the build reports its progress itself).
  process.env.SHELLBASE_LOG_LEVEL ??= 'warn';
  b.progress(`  a build server over a temporary home (${config.home})`);
  const running = await startServer(config);
  const abort = new AbortController();
  const cancel = () => abort.abort();
  process.once('SIGINT', cancel);
  process.once('SIGTERM', cancel);
  try {
    const sb = new Shellbase({ url: running.url, apiKey: readFileSync(running.adminKeyFile, 'utf8').trim() });
    const started = Date.now();
    const result = await sb.build({ context: b.context, tag: b.name, signal: abort.signal, onEvent: eventLines(b.progress) }).catch((e: unknown) => {
      if (abort.signal.aborted) throw new ShellbaseError({ code: 'unavailable', message: `the build of image ${b.name} was cancelled` }, 503);
      throw e;
    });
    b.progress(`  built in ${Math.round((Date.now() - started) / 1000)} s; writing the image's root file system`);
    await running.writeRootfs(result.version, b.rootfs);
  } finally {
    process.off('SIGINT', cancel);
    process.off('SIGTERM', cancel);
    await running.close();
  }
}

/** A build's events as progress lines: each step, then its output a line at a time, indented. */
function eventLines(progress: (line: string) => void): (e: BuildEvent) => void {
  const partial = { stdout: '', stderr: '' };
  const flush = () => {
    for (const s of ['stdout', 'stderr'] as const) {
      if (partial[s].trim()) progress(`    ${partial[s].trimEnd()}`);
      partial[s] = '';
    }
  };
  return (e) => {
    if (e.type === 'stdout' || e.type === 'stderr') {
      const lines = (partial[e.type] + e.data).split('\n');
      partial[e.type] = lines.pop() ?? '';
      // What a terminal would show of a line that a carriage return rewrote (dpkg's percentages): its last state.
      for (const l of lines.map((x) => x.replace(/\r$/, '').split('\r').pop()!)) if (l.trim()) progress(`    ${l.trimEnd()}`);
      return;
    }
    flush();
    if (e.type === 'step') progress(`  #${e.index + 1}/${e.total} ${e.instruction.split('\n')[0]}${e.instruction.includes('\n') ? ' …' : ''}`);
    else if (e.type === 'stepDone') progress(`    ${e.cached ? 'cached' : `done in ${(e.ms / 1000).toFixed(1)} s`}`);
  };
}

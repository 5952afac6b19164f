import { formatDuration, type BuildEvent, type BuildResult, type BuildStep } from '@shellbase/protocol';
import { ShellbaseError, invalid } from '../../errors.js';
import { durably, type Caller, type Deps } from '../../core/deps.js';
import { overQuota, quotasOf } from '../../core/quotas.js';
import { checkName, raiseAdvice } from '../../core/validate.js';
import type { ContextRow, VersionRow } from '../../store/metadata/types.js';
import type { VersionView } from '../files/view.js';
import type { ImageStart } from '../images/images.js';
import { resolveUser } from '../users.js';
import { parseDockerfile, syntaxError, type Instruction, type Stage } from './dockerfile.js';
import { BuildContext, copyEntries, digestEntries, versionTree, type CopyEntry, type SourceTree } from './sources.js';
import { applyConfig, declareArgs, defaultsOf, runEnv, stepKey, varsOf, workdirOf, type StageState } from './state.js';
import { fillLayer, recordStep, writeEntries } from './steps.js';
import { expand, splitWords } from './words.js';
import type { ExecRunner } from '../exec.js';

export interface BuildRequest {
  /** The context the build makes, or whose head it moves to the built version. */
  tag: string;
  /** The Dockerfile's path in the build context. */
  dockerfile?: string;
  noCache?: boolean;
  buildArgs?: Record<string, string>;
}

interface Lookups {
  start(caller: Caller, image: string): Promise<ImageStart>;
  pull(caller: Caller, ref: string, report: (message: string) => void): Promise<void>;
  version(caller: Caller, id: string): Promise<VersionRow>;
  view(v: VersionRow): Promise<VersionView>;
  exec: ExecRunner;
}

type Report = (e: BuildEvent) => void;

/** One build as it runs: its stages' states, the steps done, the events it reports. */
interface Run {
  caller: Caller;
  req: BuildRequest;
  ctx: BuildContext;
  report: Report;
  signal?: AbortSignal;
  globals: Record<string, string>;
  stages: Map<string, StageState>;
  steps: BuildStep[];
  index: number;
  total: number;
}

/**
 * Dockerfile builds (docs/api.md, Builds): each stage starts from an image, a
 * context or an earlier stage; each step that changes files is a version
 * whose parent is the step before, found in the tenant's build cache by
 * (parent version, instruction as resolved, digest of its inputs) or made
 * and recorded there. The tag context's head moves to the last stage's
 * version when every step succeeded; a failing step leaves the earlier ones
 * cached.
 */
export class Builds {
  constructor(private readonly deps: Deps, private readonly lookups: Lookups) {}

  async build(caller: Caller, req: BuildRequest, body: AsyncIterable<Buffer>, report: Report, signal?: AbortSignal): Promise<BuildResult> {
    checkName(req.tag);
    const ctx = await BuildContext.read(body);
    const name = req.dockerfile ?? 'Dockerfile';
    const text = ctx.file(name);
    if (!text) throw invalid(`the build context has no ${name}`, 'put a Dockerfile at the root of the build context, or pass dockerfile=PATH');
    const file = parseDockerfile(text.toString('utf8'));
    const globals: Record<string, string> = {};
    for (const a of file.globalArgs) declareArgs(globals, a, req.buildArgs ?? {}, {}, globals);
    const run: Run = {
      caller, req, ctx, report, signal, globals, stages: new Map(), steps: [], index: 0,
      total: file.stages.reduce((n, s) => n + 1 + s.steps.length, 0),
    };
    let last: StageState | null = null;
    for (const stage of file.stages) {
      last = await this.stage(run, stage);
      run.stages.set(String(stage.index), last);
      if (stage.name) run.stages.set(stage.name, last);
    }
    await durably(this.deps.durability, () => this.moveTag(caller, req.tag, last!));
    return { context: req.tag, version: last!.version.id, steps: run.steps };
  }

  private async stage(run: Run, stage: Stage): Promise<StageState> {
    const label = (k: number) => `[${stage.name ?? stage.index} ${k}/${stage.steps.length + 1}]`;
    let state = await this.step(run, { line: stage.fromLine, text: `FROM ${stage.from}${stage.name ? ` AS ${stage.name}` : ''}` }, label(1), async () => {
      const from = expand(stage.from, run.globals, stage.fromLine);
      const { state: s, pulled } = await this.from(run, from, stage.fromLine);
      return { state: s, cached: !pulled };
    });
    for (const [i, ins] of stage.steps.entries()) {
      state = await this.step(run, ins, label(i + 2), () => this.apply(run, state, ins));
    }
    return state;
  }

  /** Runs one step with its events around it. */
  private async step(run: Run, ins: { line: number; text: string }, label: string,
    body: () => Promise<{ state: StageState; cached: boolean }>): Promise<StageState> {
    if (run.signal?.aborted) throw new ShellbaseError('unavailable', 'the build was cancelled');
    const instruction = `${label} ${ins.text}`;
    run.report({ type: 'step', index: run.index++, total: run.total, instruction, line: ins.line });
    const started = performance.now();
    const { state, cached } = await body();
    run.caller.hold.version(state.version.id);
    const done: BuildStep = { instruction, cached, version: state.version.id, ms: Math.round(performance.now() - started) };
    run.steps.push(done);
    run.report({ type: 'stepDone', ...done });
    return state;
  }

  /** A FROM: an earlier stage, `context:NAME`, or an image (pulled first when the tenant has not). */
  private async from(run: Run, from: string, line: number): Promise<{ state: StageState; pulled: boolean }> {
    const earlier = run.stages.get(from.toLowerCase());
    if (earlier) return { state: clone(earlier), pulled: false };
    if (from === 'scratch') throw syntaxError(line, 'FROM scratch is not supported', 'start from an image (e.g. FROM debian, or an image with a shell)');
    let start: ImageStart;
    let pulled = false;
    if (from.startsWith('context:')) {
      const row = await this.contextRow(run.caller, from.slice('context:'.length), line);
      start = { version: await this.lookups.version(run.caller, row.head), image: row.image, ...(row.defaults ? { defaults: row.defaults } : {}), ...(row.config ? { config: row.config } : {}) };
    } else {
      try {
        start = await this.lookups.start(run.caller, from);
      } catch (e) {
        if (!(e instanceof ShellbaseError && e.code === 'not_found')) throw e;
        await this.lookups.pull(run.caller, from, (m) => run.report({ type: 'stdout', data: `${m}\n` }));
        start = await this.lookups.start(run.caller, from);
        pulled = true;
      }
    }
    const d = start.defaults ?? {};
    return {
      pulled,
      state: {
        version: start.version, image: start.image, env: { ...(d.env ?? {}) }, ...(d.cwd ? { cwd: d.cwd } : {}), ...(d.user ? { user: d.user } : {}),
        config: { ...(start.config ?? {}) }, args: {}, shell: ['/bin/sh', '-c'],
      },
    };
  }

  private async contextRow(caller: Caller, name: string, line: number): Promise<ContextRow> {
    const row = await this.deps.metadata.contexts.get(caller.tenantId, name);
    if (!row) throw new ShellbaseError('not_found', `Dockerfile line ${line}: context ${JSON.stringify(name)} does not exist`, { details: { line, context: name } });
    return row;
  }

  /** One instruction after FROM. */
  private async apply(run: Run, prev: StageState, ins: Instruction): Promise<{ state: StageState; cached: boolean }> {
    const s = clone(prev);
    if (applyConfig(s, ins, run.req.buildArgs ?? {}, run.globals)) return { state: s, cached: true };
    if (ins.name === 'WORKDIR') {
      s.cwd = workdirOf(s, ins);
      const segments = s.cwd.split('/').filter(Boolean);
      const view = await this.lookups.view(s.version);
      if (segments.length === 0 || view.find(segments)?.type === 'dir') return { state: s, cached: true };
      // Made as BuildKit makes it: owned by the stage's USER.
      const u = s.user ? resolveUser(view, s.user).user : null;
      const own = u ? { uid: u.uid, gid: u.gid } : { uid: 0, gid: 0 };
      const entries: CopyEntry[] = segments.map((_, i) => ({ segments: segments.slice(0, i + 1), type: 'dir', mode: 0o755, ...own }));
      return this.layerStep(run, s, ['WORKDIR', s.cwd, own], (w, v) => writeEntries(w, v, entries), `WORKDIR ${s.cwd}`);
    }
    if (ins.name === 'RUN') return this.runStep(run, s, ins);
    return this.copyStep(run, s, ins);
  }

  /** A step that makes a layer: from the cache when it has the key (and --no-cache is not given), else made and cached. */
  private async layerStep(run: Run, s: StageState, parts: unknown[], fill: Parameters<typeof fillLayer>[3] | null,
    command: string, make?: () => Promise<VersionRow>): Promise<{ state: StageState; cached: boolean }> {
    const { metadata } = this.deps;
    const key = stepKey(s.version.id, parts);
    if (!run.req.noCache) {
      const id = await metadata.buildCache.get(run.caller.tenantId, key);
      // Pinned before it is read: collection either keeps the version now or has already dropped it (and the entry).
      if (id) run.caller.hold.version(id);
      const v = id ? await metadata.versions.get(id) : null;
      if (v && v.tenantId === run.caller.tenantId) return { state: { ...s, version: v }, cached: true };
    }
    let version: VersionRow;
    if (make) version = await make();
    else {
      const diskMb = Math.min(this.deps.config.defaults.diskMb, quotasOf(this.deps.config, run.caller).maximums.diskMb);
      const layer = await fillLayer(this.deps, await this.lookups.view(s.version), diskMb, fill!);
      version = layer ? await recordStep(this.deps, run.caller.tenantId, run.req.tag, s.version, layer, { kind: 'build', command }) : s.version;
    }
    run.caller.hold.version(version.id);
    await metadata.buildCache.put(run.caller.tenantId, key, version.id, new Date().toISOString());
    return { state: { ...s, version }, cached: false };
  }

  private async runStep(run: Run, s: StageState, ins: Instruction): Promise<{ state: StageState; cached: boolean }> {
    const argv = ins.json ?? [...s.shell, ins.args];
    const env = runEnv(s);
    const cwd = s.cwd ?? '/';
    return this.layerStep(run, s, ['RUN', argv, Object.entries(env).sort(), cwd, s.user ?? 'root'], null, ins.text, async () => {
      const view = await this.lookups.view(s.version);
      const user = s.user ? resolveUser(view, s.user) : { user: null };
      if (user.home && env.HOME === undefined) env.HOME = user.home;
      const { run: r, layer } = await this.lookups.exec.runStep(run.caller, run.req.tag, s.version, { argv, env, cwd, ...(user.user ? { user: user.user } : {}) }, {
        onOutput: (stream, data) => run.report({ type: stream, data }), ...(run.signal ? { signal: run.signal } : {}),
      });
      if (r.aborted) throw new ShellbaseError('unavailable', 'the build was cancelled');
      if (r.exitCode !== 0 || r.timedOut || r.oomKilled) {
        const max = quotasOf(this.deps.config, run.caller).maximums.timeoutMs;
        const why = r.timedOut ? `timed out after ${formatDuration(max)} (the tenant's maximum timeoutMs, ${max}${raiseAdvice(max)})` : r.oomKilled ? 'ran out of memory' : r.signal ? `was killed by ${r.signal}` : `exited with ${r.exitCode}`;
        throw new ShellbaseError('invalid_argument', `Dockerfile line ${ins.line}: RUN ${why}`, {
          details: { line: ins.line, exitCode: r.exitCode, stderr: r.stderr.slice(-2000) }, hint: 'fix the command; the steps before it are cached',
        });
      }
      return layer ? recordStep(this.deps, run.caller.tenantId, run.req.tag, s.version, layer, { kind: 'build', command: ins.text }) : s.version;
    });
  }

  private async copyStep(run: Run, s: StageState, ins: Instruction): Promise<{ state: StageState; cached: boolean }> {
    const vars = varsOf(s);
    const words = (ins.json ?? splitWords(ins.args, ins.line)).map((w) => expand(w, vars, ins.line));
    if (words.length < 2) throw syntaxError(ins.line, `${ins.name} needs a source and a destination`, `${ins.name} SRC... DEST`);
    const sources = words.slice(0, -1);
    if (ins.name === 'ADD') {
      const bad = sources.find((w) => /^[a-z]+:\/\//i.test(w) || /\.(tar|tgz|tar\.(gz|bz2|xz|zst))$/i.test(w));
      if (bad) throw syntaxError(ins.line, `ADD ${bad}: URLs and archives are not supported`, 'use COPY for files, RUN curl … for URLs and RUN tar … for archives');
    }
    const tree = ins.flags.from ? await this.sourceOf(run, expand(ins.flags.from, vars, ins.line), ins.line) : run.ctx;
    const view = await this.lookups.view(s.version);
    let owner: { uid: number; gid: number } | null = null;
    if (ins.flags.chown) {
      const u = resolveUser(view, expand(ins.flags.chown, vars, ins.line)).user;
      owner = u ? { uid: u.uid, gid: u.gid } : { uid: 0, gid: 0 };
    }
    let chmod: number | null = null;
    if (ins.flags.chmod) {
      if (!/^[0-7]{3,4}$/.test(ins.flags.chmod)) throw syntaxError(ins.line, `--chmod=${ins.flags.chmod} is not an octal mode`, '--chmod=0644');
      chmod = parseInt(ins.flags.chmod, 8);
    }
    const entries = copyEntries(tree, { sources, dest: words[words.length - 1], cwd: s.cwd ?? '/', owner, chmod, line: ins.line });
    return this.layerStep(run, s, [ins.name, digestEntries(entries)], (w, v) => writeEntries(w, v, entries), ins.text);
  }

  /** COPY --from: an earlier stage (by name or index), `context:NAME`, or an image. */
  private async sourceOf(run: Run, from: string, line: number): Promise<SourceTree> {
    const earlier = run.stages.get(from.toLowerCase());
    if (earlier) return versionTree(await this.lookups.view(earlier.version));
    const { state } = await this.from(run, from, line);
    return versionTree(await this.lookups.view(state.version));
  }

  /** Creates the tag context at the built version, or moves its head there (with the build's defaults and config). */
  private async moveTag(caller: Caller, tag: string, s: StageState): Promise<void> {
    const { metadata } = this.deps;
    const defaults = defaultsOf(s);
    for (let attempt = 0; attempt < 5; attempt++) {
      const now = new Date().toISOString();
      const row = await metadata.contexts.get(caller.tenantId, tag);
      if (row) {
        if (await metadata.contexts.update(caller.tenantId, tag, { head: { expected: row.head, to: s.version.id }, image: s.image, defaults, config: s.config, updatedAt: now })) {
          this.deps.events.emit({ tenantId: caller.tenantId, kind: 'version.committed', context: tag, data: { version: s.version.id, parent: row.head, cause: { kind: 'build', command: `build --tag ${tag}` } } });
          return;
        }
        continue;
      }
      const { contexts } = quotasOf(this.deps.config, caller);
      if ((await metadata.contexts.count(caller.tenantId)) >= contexts) {
        throw overQuota('contexts', contexts, 'delete contexts you no longer need, or build into an existing context');
      }
      const fresh: ContextRow = { tenantId: caller.tenantId, name: tag, head: s.version.id, image: s.image, createdAt: now, updatedAt: now, defaults, config: s.config };
      if (await metadata.contexts.create(fresh)) {
        this.deps.events.emit({ tenantId: caller.tenantId, kind: 'version.committed', context: tag, data: { version: s.version.id, parent: null, cause: { kind: 'build', command: `build --tag ${tag}` } } });
        return;
      }
    }
    throw new ShellbaseError('conflict', `context ${tag} kept changing while the build finished`, { hint: 'build again' });
  }
}

function clone(s: StageState): StageState {
  return { ...s, env: { ...s.env }, args: { ...s.args }, config: { ...s.config }, shell: [...s.shell] };
}

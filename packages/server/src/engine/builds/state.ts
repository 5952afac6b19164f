import { createHash } from 'node:crypto';
import type { ContextConfig, ContextDefaults } from '@shellbase/protocol';
import type { VersionRow } from '../../store/metadata/types.js';
import { checkUser } from '../users.js';
import { syntaxError, type Instruction } from './dockerfile.js';
import { expand, keyValues, splitWords } from './words.js';

/** What a stage has come to after its steps so far. */
export interface StageState {
  version: VersionRow;
  /** The image the built context records (the first stage's FROM, followed through stages). */
  image: string;
  env: Record<string, string>;
  cwd?: string;
  user?: string;
  config: ContextConfig;
  /** ARGs declared in the stage so far (their values). */
  args: Record<string, string>;
  /** RUN's shell form runs under this (SHELL changes it). */
  shell: string[];
}

/** Cache keys change with this (a different key computation must never reuse old entries). */
const KEY_FORMAT = 1;

/** A step's cache key: its parent version, the instruction as it resolved, and the digest of its inputs. */
export function stepKey(parent: string, parts: unknown[]): string {
  return createHash('sha256').update(JSON.stringify([KEY_FORMAT, parent, ...parts])).digest('hex');
}

/** Variables an instruction's words expand with: ARGs, then ENV over them. */
export const varsOf = (s: StageState): Record<string, string> => ({ ...s.args, ...s.env });

/** The environment a RUN sees: ARGs (not kept in the image) and ENV over them. */
export const runEnv = (s: StageState): Record<string, string> => ({ ...s.args, ...s.env });

/** The context defaults a finished stage gives the built context. */
export function defaultsOf(s: StageState): ContextDefaults {
  return {
    ...(Object.keys(s.env).length ? { env: s.env } : {}), ...(s.cwd ? { cwd: s.cwd } : {}), ...(s.user ? { user: s.user } : {}),
  };
}

/** A path WORKDIR names, made absolute against the current one. */
export function workdirOf(s: StageState, ins: Instruction): string {
  const p = expand(ins.args, varsOf(s), ins.line);
  const abs = p.startsWith('/') ? p : `${(s.cwd ?? '/').replace(/\/$/, '')}/${p}`;
  const segments: string[] = [];
  for (const part of abs.split('/')) {
    if (part === '' || part === '.') continue;
    if (part === '..') segments.pop(); else segments.push(part);
  }
  return `/${segments.join('/')}`;
}

/**
 * An ARG's names into `into`: the build's value, else the default given
 * (expanded), else (re-declared in a stage) the value before the first FROM.
 */
export function declareArgs(into: Record<string, string>, ins: Instruction, buildArgs: Record<string, string>,
  globals: Record<string, string>, vars: Record<string, string>): void {
  for (const w of splitWords(ins.args, ins.line)) {
    const eq = w.indexOf('=');
    const name = eq < 0 ? w : w.slice(0, eq);
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) throw syntaxError(ins.line, `${JSON.stringify(name)} is not an ARG name`);
    const value = buildArgs[name] ?? (eq < 0 ? globals[name] : expand(w.slice(eq + 1), vars, ins.line));
    if (value !== undefined) into[name] = value;
  }
}

/**
 * Applies an instruction that only changes the stage's settings (ENV, ARG,
 * USER, LABEL, CMD, ENTRYPOINT, EXPOSE, SHELL, MAINTAINER); false for those
 * that make a layer.
 */
export function applyConfig(s: StageState, ins: Instruction, buildArgs: Record<string, string>, globals: Record<string, string>): boolean {
  const vars = varsOf(s);
  switch (ins.name) {
    case 'ENV':
      for (const [k, v] of keyValues(ins.args, vars, ins.line, true)) {
        if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(k)) throw syntaxError(ins.line, `${JSON.stringify(k)} is not an environment variable name`);
        s.env[k] = v;
      }
      return true;
    case 'ARG':
      declareArgs(s.args, ins, buildArgs, globals, vars);
      return true;
    case 'USER': {
      const user = expand(ins.args, vars, ins.line);
      try { checkUser(user); } catch { throw syntaxError(ins.line, `USER ${JSON.stringify(user)} is not a user`, 'USER name, name:group, uid or uid:gid'); }
      s.user = user === 'root' || user === '0' || user === '0:0' ? undefined : user;
      return true;
    }
    case 'LABEL':
    case 'MAINTAINER': {
      const pairs: [string, string][] = ins.name === 'LABEL' ? keyValues(ins.args, vars, ins.line, false) : [['maintainer', ins.args]];
      s.config = { ...s.config, labels: { ...(s.config.labels ?? {}), ...Object.fromEntries(pairs) } };
      return true;
    }
    case 'CMD':
    case 'ENTRYPOINT': {
      const argv = ins.json ?? (ins.args === '' ? [] : [...s.shell, ins.args]);
      s.config = { ...s.config, [ins.name === 'CMD' ? 'cmd' : 'entrypoint']: argv };
      return true;
    }
    case 'EXPOSE': {
      const ports = expand(ins.args, vars, ins.line).split(/\s+/).filter(Boolean).map((p) => {
        if (!/^\d{1,5}(-\d{1,5})?(\/(tcp|udp|sctp))?$/i.test(p)) throw syntaxError(ins.line, `${JSON.stringify(p)} is not a port`, 'EXPOSE 8080 or 8080/tcp');
        return p.includes('/') ? p.toLowerCase() : `${p}/tcp`;
      });
      s.config = { ...s.config, exposedPorts: [...new Set([...(s.config.exposedPorts ?? []), ...ports])] };
      return true;
    }
    case 'SHELL':
      s.shell = ins.json!;
      return true;
    default:
      return false;
  }
}

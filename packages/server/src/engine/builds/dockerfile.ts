import { ShellbaseError } from '../../errors.js';

/**
 * Dockerfiles, parsed: lines joined at a trailing `\`, comments and blank
 * lines dropped, each instruction with the line it starts on, its flags
 * (`--from=…`) and its arguments, split into stages at each FROM. Variables
 * are expanded later, as each step runs (engine/builds/words.ts), since ARG
 * and ENV change them step by step.
 */
export const INSTRUCTIONS = ['FROM', 'RUN', 'COPY', 'ADD', 'ENV', 'ARG', 'WORKDIR', 'USER', 'LABEL', 'CMD', 'ENTRYPOINT', 'EXPOSE', 'SHELL', 'MAINTAINER'] as const;
export type InstructionName = (typeof INSTRUCTIONS)[number];

/** Instructions Docker knows that shellbase does not run: refused, naming the line. */
const REFUSED: Record<string, string> = {
  VOLUME: 'a context is all one file system: drop VOLUME',
  HEALTHCHECK: 'health checks are not run: drop HEALTHCHECK',
  ONBUILD: 'ONBUILD triggers are not kept: drop ONBUILD',
  STOPSIGNAL: 'services stop with SIGTERM: drop STOPSIGNAL',
};

/** Flags each instruction takes (others are a syntax error). */
const FLAGS: Partial<Record<InstructionName, string[]>> = {
  FROM: ['platform'], COPY: ['from', 'chown', 'chmod', 'link'], ADD: ['chown', 'chmod', 'link'],
};

export interface Instruction {
  name: InstructionName;
  /** 1-based line of the Dockerfile where it starts. */
  line: number;
  /** As written, continuations joined (what build events and step keys show). */
  text: string;
  flags: Record<string, string>;
  /** The rest of the line after the flags, trimmed. */
  args: string;
  /** For RUN, CMD, ENTRYPOINT, SHELL, COPY, ADD: the JSON (exec) form's array when that form is used. */
  json?: string[];
}

export interface Stage {
  /** The stage's position (0-based) and its `AS` name, if any. */
  index: number;
  name?: string;
  /** The FROM's image, unexpanded (`debian`, `python:3.12`, `context:NAME`, another stage's name). */
  from: string;
  fromLine: number;
  /** The instructions after FROM. */
  steps: Instruction[];
}

export interface Dockerfile {
  /** ARGs before the first FROM (usable in FROM lines). */
  globalArgs: Instruction[];
  stages: Stage[];
}

export function syntaxError(line: number, message: string, hint = 'see https://docs.docker.com/reference/dockerfile/'): ShellbaseError {
  return new ShellbaseError('invalid_argument', `Dockerfile line ${line}: ${message}`, { details: { line }, hint });
}

interface HereDoc { word: string; stripTabs: boolean; body: string }
interface LogicalLine { line: number; text: string; heredocs: HereDoc[] }

/** `<<WORD`, `<<-WORD`, `<<"WORD"`, `<<'WORD'` in RUN, COPY and ADD lines (BuildKit's here-documents). */
const HEREDOC = /<<(-?)(["']?)([A-Za-z_][A-Za-z0-9_]*)\2/g;

/** Joined logical lines with their first physical line number, and the here-documents they open. */
function logicalLines(text: string): LogicalLine[] {
  const out: LogicalLine[] = [];
  const lines = text.split(/\r?\n/);
  let current: { line: number; text: string } | null = null;
  for (let i = 0; i < lines.length; i++) {
    const raw = lines[i];
    const trimmed = raw.trim();
    if (current === null && (trimmed === '' || trimmed.startsWith('#'))) {
      if (i === 0 || out.length === 0) {
        const m = /^#\s*escape\s*=\s*(\S)/i.exec(trimmed);
        if (m && m[1] !== '\\') throw syntaxError(i + 1, 'the escape directive is not supported', 'use the default escape character \\');
      }
      continue;
    }
    if (current !== null && (trimmed === '' || trimmed.startsWith('#'))) continue; // inside a continuation
    const continued = /\\\s*$/.test(raw);
    const piece = continued ? raw.replace(/\\\s*$/, '') : raw;
    if (current === null) current = { line: i + 1, text: piece };
    else current.text += piece;
    if (!continued) {
      const done: LogicalLine = { line: current.line, text: current.text.trim(), heredocs: [] };
      if (/^(RUN|COPY|ADD)\s/i.test(done.text)) {
        for (const m of done.text.matchAll(HEREDOC)) {
          const body: string[] = [];
          const stripTabs = m[1] === '-';
          for (i++; ; i++) {
            if (i >= lines.length) throw syntaxError(done.line, `the here-document ${m[3]} has no end`, `end it with a line that is ${m[3]} alone`);
            const l = stripTabs ? lines[i].replace(/^\t+/, '') : lines[i];
            if (l === m[3]) break;
            body.push(l);
          }
          done.heredocs.push({ word: m[3], stripTabs, body: body.join('\n') });
        }
      }
      out.push(done);
      current = null;
    }
  }
  if (current !== null && current.text.trim() !== '') out.push({ line: current.line, text: current.text.trim(), heredocs: [] });
  return out;
}

/**
 * A RUN with here-documents as its shell sees it: a RUN that is only `<<WORD` runs the document
 * as its script (with a `#!` line, as a program of its own); otherwise the documents follow the
 * command, as in a shell script, and the shell feeds them to it.
 */
function runWithHeredocs(line: number, args: string, docs: HereDoc[]): string {
  const sole = /^<<-?(["']?)([A-Za-z_][A-Za-z0-9_]*)\1$/.exec(args);
  if (sole) {
    const body = docs[0].body;
    if (!body.startsWith('#!')) return body;
    const end = `SHELLBASE_HEREDOC_${line}`;
    return `f=$(mktemp) && cat > "$f" <<'${end}'\n${body}\n${end}\nchmod +x "$f" && "$f"; s=$?; rm -f "$f"; exit $s`;
  }
  return [args, ...docs.flatMap((d) => [d.body, d.word])].join('\n');
}

/** A JSON array of strings, if `args` is one. */
function jsonForm(args: string): string[] | undefined {
  if (!args.startsWith('[')) return undefined;
  try {
    const v: unknown = JSON.parse(args);
    if (Array.isArray(v) && v.every((s) => typeof s === 'string')) return v;
  } catch { /* the shell form, which may start with [ */ }
  return undefined;
}

function parseInstruction(line: number, text: string, heredocs: HereDoc[] = []): Instruction {
  const m = /^(\S+)\s*(.*)$/s.exec(text)!;
  const word = m[1].toUpperCase();
  if (word in REFUSED) throw syntaxError(line, `${word} is not supported`, REFUSED[word]);
  if (!(INSTRUCTIONS as readonly string[]).includes(word)) {
    throw syntaxError(line, `unknown instruction ${JSON.stringify(m[1])}`, `instructions shellbase builds: ${INSTRUCTIONS.join(', ')}`);
  }
  const name = word as InstructionName;
  let rest = m[2];
  const flags: Record<string, string> = {};
  for (;;) {
    const f = /^--([A-Za-z-]+)(?:=(\S*))?\s*/.exec(rest);
    if (!f || (name === 'RUN' && !['mount', 'network', 'security'].includes(f[1]))) break;
    if (name === 'RUN') throw syntaxError(line, `RUN --${f[1]} is not supported`, 'RUN steps get the build\'s network and no extra mounts');
    if (!(FLAGS[name] ?? []).includes(f[1])) throw syntaxError(line, `${name} has no flag --${f[1]}`);
    flags[f[1]] = f[2] ?? 'true';
    rest = rest.slice(f[0].length);
  }
  let args = rest.trim();
  if (heredocs.length) {
    if (name !== 'RUN') throw syntaxError(line, `${name} of a here-document is not supported`, 'put the file in the build context and COPY it');
    args = runWithHeredocs(line, args, heredocs);
    text = [text, ...heredocs.flatMap((d) => [d.body, d.word])].join('\n');
  }
  const json = ['RUN', 'CMD', 'ENTRYPOINT', 'SHELL', 'COPY', 'ADD'].includes(name) && !heredocs.length ? jsonForm(args) : undefined;
  if (args === '' && !['CMD', 'ENTRYPOINT'].includes(name)) throw syntaxError(line, `${name} needs arguments`);
  if (name === 'SHELL' && (!json || json.length === 0)) throw syntaxError(line, 'SHELL takes a JSON array, e.g. ["/bin/bash", "-c"]');
  return { name, line, text, flags, args, ...(json ? { json } : {}) };
}

export function parseDockerfile(text: string): Dockerfile {
  const globalArgs: Instruction[] = [];
  const stages: Stage[] = [];
  for (const l of logicalLines(text)) {
    const ins = parseInstruction(l.line, l.text, l.heredocs);
    if (ins.name === 'FROM') {
      const m = /^(\S+)(?:\s+AS\s+([A-Za-z0-9][A-Za-z0-9_.-]*))?$/i.exec(ins.args);
      if (!m) throw syntaxError(ins.line, 'FROM takes an image and an optional AS name', 'FROM python:3.12-slim AS build');
      const name = m[2]?.toLowerCase();
      if (name && stages.some((s) => s.name === name)) throw syntaxError(ins.line, `stage name ${JSON.stringify(name)} is used twice`);
      stages.push({ index: stages.length, ...(name ? { name } : {}), from: m[1], fromLine: ins.line, steps: [] });
    } else if (stages.length === 0) {
      if (ins.name !== 'ARG') throw syntaxError(ins.line, `${ins.name} before the first FROM`, 'a Dockerfile starts with FROM (only ARG may come before it)');
      globalArgs.push(ins);
    } else {
      stages[stages.length - 1].steps.push(ins);
    }
  }
  if (stages.length === 0) throw syntaxError(1, 'no FROM', 'start the Dockerfile with FROM IMAGE');
  return { globalArgs, stages };
}

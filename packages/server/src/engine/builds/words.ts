import { syntaxError } from './dockerfile.js';

/**
 * The words of Dockerfile arguments: variables expanded as Docker does
 * (`$NAME`, `${NAME}`, `${NAME:-default}`, `${NAME:+alternative}`, `\$` for
 * a literal `$`), quotes and backslashes of ENV, LABEL and ARG values.
 */
export function expand(text: string, vars: Record<string, string>, line: number): string {
  let out = '';
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '\\' && text[i + 1] === '$') { out += '$'; i++; continue; }
    if (c !== '$') { out += c; continue; }
    if (text[i + 1] === '{') {
      const end = text.indexOf('}', i + 2);
      if (end < 0) throw syntaxError(line, 'a ${ without its }');
      const body = text.slice(i + 2, end);
      const m = /^([A-Za-z_][A-Za-z0-9_]*)(?::([-+])(.*))?$/s.exec(body);
      if (!m) throw syntaxError(line, `bad substitution \${${body}}`, 'use ${NAME}, ${NAME:-default} or ${NAME:+alternative}');
      const value = vars[m[1]];
      if (m[2] === '-') out += value ? value : expand(m[3], vars, line);
      else if (m[2] === '+') out += value ? expand(m[3], vars, line) : '';
      else out += value ?? '';
      i = end;
      continue;
    }
    const m = /^[A-Za-z_][A-Za-z0-9_]*/.exec(text.slice(i + 1));
    if (!m) { out += '$'; continue; }
    out += vars[m[0]] ?? '';
    i += m[0].length;
  }
  return out;
}

/** Splits on unquoted whitespace, removing quotes and backslash escapes (as ENV, LABEL and ARG read their values). */
export function splitWords(text: string, line: number): string[] {
  const words: string[] = [];
  let cur = '';
  let any = false;
  let quote: '"' | "'" | null = null;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quote) {
      if (c === quote) quote = null;
      else if (c === '\\' && quote === '"' && i + 1 < text.length) cur += text[++i];
      else cur += c;
    } else if (c === '"' || c === "'") { quote = c; any = true; }
    else if (c === '\\' && i + 1 < text.length) { cur += text[++i]; any = true; }
    else if (/\s/.test(c)) { if (any || cur) words.push(cur); cur = ''; any = false; }
    else { cur += c; any = true; }
  }
  if (quote) throw syntaxError(line, `unterminated ${quote} quote`);
  if (any || cur) words.push(cur);
  return words;
}

/**
 * `KEY=VALUE …` pairs (ENV, LABEL), or the legacy `ENV KEY VALUE` form
 * (everything after the key is the value). Values are expanded first.
 */
export function keyValues(args: string, vars: Record<string, string>, line: number, legacy: boolean): [string, string][] {
  const first = /^(\S+)\s+(.*)$/s.exec(args);
  if (legacy && first && !first[1].includes('=')) return [[first[1], expand(first[2], vars, line)]];
  const pairs: [string, string][] = [];
  for (const w of splitWords(expand(args, vars, line), line)) {
    const eq = w.indexOf('=');
    if (eq <= 0) throw syntaxError(line, `${JSON.stringify(w)} is not KEY=VALUE`);
    pairs.push([w.slice(0, eq), w.slice(eq + 1)]);
  }
  return pairs;
}

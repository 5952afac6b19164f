/**
 * `.dockerignore` as Docker reads it: one pattern a line (`#` comments, blank
 * lines skipped), `!` re-includes, `*` `?` `[…]` within one path segment and
 * `**` across any number of them; a pattern that matches a directory matches
 * everything below it; the last pattern that matches a path decides. What a
 * build context means is part of the API: the server applies it to COPY and
 * ADD, the SDK to what it sends.
 */
interface Rule { re: RegExp; negate: boolean }

export interface Dockerignore {
  /** Whether a context path (relative, `/`-separated) is left out. */
  ignores(path: string): boolean;
  /** Whether a directory can be skipped whole (it is left out and no `!` pattern could bring back anything below it). */
  prunes(dir: string): boolean;
}

const clean = (p: string) => p.split('/').filter((s) => s !== '' && s !== '.').reduce<string[]>((out, s) => {
  if (s === '..') out.pop(); else out.push(s);
  return out;
}, []).join('/');

function toRegExp(pattern: string): RegExp {
  let re = '';
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i];
    if (c === '*') {
      if (pattern[i + 1] === '*') {
        i++;
        if (pattern[i + 1] === '/') { i++; re += '(?:.*/)?'; } else re += '.*';
      } else re += '[^/]*';
    } else if (c === '?') re += '[^/]';
    else if (c === '[') {
      const end = pattern.indexOf(']', i + 1);
      if (end < 0) { re += '\\['; continue; }
      let cls = pattern.slice(i + 1, end).replace(/\\/g, '\\\\');
      if (cls.startsWith('!') || cls.startsWith('^')) cls = `^${cls.slice(1)}`;
      re += `[${cls}]`;
      i = end;
    } else if (c === '\\' && i + 1 < pattern.length) re += `\\${pattern[++i]}`;
    else re += c.replace(/[.+^${}()|/\\]/g, '\\$&');
  }
  return new RegExp(`^${re}$`);
}

export function parseDockerignore(text: string): Dockerignore {
  const rules: Rule[] = [];
  for (const raw of text.split(/\r?\n/)) {
    let line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    const negate = line.startsWith('!');
    if (negate) line = line.slice(1).trim();
    const p = clean(line);
    if (p === '') continue;
    rules.push({ re: toRegExp(p), negate });
  }
  const matches = (re: RegExp, path: string) => {
    const parts = path.split('/');
    for (let n = parts.length; n > 0; n--) if (re.test(parts.slice(0, n).join('/'))) return true;
    return false;
  };
  const ignores = (path: string) => {
    const p = clean(path);
    let out = false;
    for (const r of rules) if (matches(r.re, p)) out = !r.negate;
    return out;
  };
  const anyNegation = rules.some((r) => r.negate);
  return { ignores, prunes: (dir) => ignores(dir) && !anyNegation };
}

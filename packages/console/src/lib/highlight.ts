import hljs from 'highlight.js/lib/core';
import bash from 'highlight.js/lib/languages/bash';
import c from 'highlight.js/lib/languages/c';
import cpp from 'highlight.js/lib/languages/cpp';
import css from 'highlight.js/lib/languages/css';
import diff from 'highlight.js/lib/languages/diff';
import dockerfile from 'highlight.js/lib/languages/dockerfile';
import go from 'highlight.js/lib/languages/go';
import ini from 'highlight.js/lib/languages/ini';
import java from 'highlight.js/lib/languages/java';
import javascript from 'highlight.js/lib/languages/javascript';
import json from 'highlight.js/lib/languages/json';
import makefile from 'highlight.js/lib/languages/makefile';
import markdown from 'highlight.js/lib/languages/markdown';
import python from 'highlight.js/lib/languages/python';
import ruby from 'highlight.js/lib/languages/ruby';
import rust from 'highlight.js/lib/languages/rust';
import sql from 'highlight.js/lib/languages/sql';
import typescript from 'highlight.js/lib/languages/typescript';
import xml from 'highlight.js/lib/languages/xml';
import yaml from 'highlight.js/lib/languages/yaml';

/** Syntax colouring for diffs and previews (loaded only when one is shown): the languages sandboxes hold most. */
const LANGS = { bash, c, cpp, css, diff, dockerfile, go, ini, java, javascript, json, makefile, markdown, python, ruby, rust, sql, typescript, xml, yaml };
for (const [name, lang] of Object.entries(LANGS)) hljs.registerLanguage(name, lang);

const BY_EXT: Record<string, string> = {
  sh: 'bash', bash: 'bash', zsh: 'bash', c: 'c', h: 'c', cc: 'cpp', cpp: 'cpp', hpp: 'cpp', css: 'css', diff: 'diff', patch: 'diff',
  go: 'go', ini: 'ini', toml: 'ini', cfg: 'ini', conf: 'ini', java: 'java', js: 'javascript', mjs: 'javascript', cjs: 'javascript',
  jsx: 'javascript', json: 'json', md: 'markdown', py: 'python', rb: 'ruby', rs: 'rust', sql: 'sql', ts: 'typescript', tsx: 'typescript',
  mts: 'typescript', html: 'xml', htm: 'xml', xml: 'xml', svg: 'xml', yml: 'yaml', yaml: 'yaml',
};
const BY_NAME: Record<string, string> = { Dockerfile: 'dockerfile', Makefile: 'makefile', '.bashrc': 'bash', '.profile': 'bash' };

export function languageOf(path: string): string | undefined {
  const base = path.split('/').pop() ?? '';
  if (BY_NAME[base]) return BY_NAME[base];
  const ext = base.includes('.') ? base.split('.').pop()!.toLowerCase() : '';
  return BY_EXT[ext];
}

const escape = (s: string) => s.replace(/[&<>"]/g, (ch) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[ch]!);

/** HTML for lines of `lang` (escaped text when there is none), one string per line; state carries across lines. */
export function highlightLines(lines: string[], lang: string | undefined): string[] {
  if (!lang) return lines.map(escape);
  // Highlighting the block at once keeps multi-line strings and comments right; splitting keeps open spans per line.
  const html = hljs.highlight(lines.join('\n'), { language: lang, ignoreIllegals: true }).value;
  return splitHtmlLines(html);
}

/** Splits highlighted HTML at newlines, closing and reopening the spans open at each break. */
function splitHtmlLines(html: string): string[] {
  const out: string[] = [];
  const open: string[] = [];
  let cur = '';
  const re = /(<span[^>]*>)|(<\/span>)|(\n)|([^<\n]+|<)/g;
  for (let m = re.exec(html); m; m = re.exec(html)) {
    if (m[1]) { open.push(m[1]); cur += m[1]; }
    else if (m[2]) { open.pop(); cur += m[2]; }
    else if (m[3]) { out.push(cur + '</span>'.repeat(open.length)); cur = open.join(''); }
    else cur += m[4];
  }
  out.push(cur + '</span>'.repeat(open.length));
  return out;
}

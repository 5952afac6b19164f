/** One simple command of the in-memory runtime's shell language, and what joins it to the next. */
export interface Command {
  argv: string[];
  /** How the next command runs: always (`;`), on success (`&&`), on failure (`||`). */
  op: ';' | '&&' | '||';
  /** `> FILE`, `>> FILE` (append) or `>&2` (stdout to stderr). */
  redirect?: { to: string | 'stderr'; append: boolean };
}

/**
 * Parses a script of simple commands: words split on blanks, single and
 * double quotes (no expansion), `;` `&&` `||` between commands and newlines as `;`.
 */
export function parseScript(script: string): Command[] {
  const out: Command[] = [];
  let words: string[] = [];
  let word: string | null = null;
  let redirect: Command['redirect'];
  let pending: 'write' | 'append' | null = null;
  const endWord = () => {
    if (word === null) return;
    if (pending) { redirect = { to: word, append: pending === 'append' }; pending = null; } else words.push(word);
    word = null;
  };
  const endCommand = (op: Command['op']) => {
    endWord();
    if (words.length || redirect) out.push({ argv: words, op, ...(redirect ? { redirect } : {}) });
    words = [];
    redirect = undefined;
  };
  for (let i = 0; i < script.length; i++) {
    const c = script[i];
    if (c === "'" || c === '"') {
      const end = script.indexOf(c, i + 1);
      if (end < 0) throw new Error('unterminated quote');
      word = (word ?? '') + script.slice(i + 1, end);
      i = end;
    } else if (c === ' ' || c === '\t') {
      endWord();
    } else if (c === ';' || c === '\n') {
      endCommand(';');
    } else if ((c === '&' || c === '|') && script[i + 1] === c) {
      endCommand(c === '&' ? '&&' : '||');
      i++;
    } else if (c === '>') {
      endWord();
      if (script.startsWith('>&2', i)) { redirect = { to: 'stderr', append: false }; i += 2; continue; }
      pending = script[i + 1] === '>' ? 'append' : 'write';
      if (pending === 'append') i++;
    } else {
      word = (word ?? '') + c;
    }
  }
  endCommand(';');
  return out;
}

import { FitAddon } from '@xterm/addon-fit';
import { Terminal } from '@xterm/xterm';
import '@xterm/xterm/css/xterm.css';

/**
 * xterm.js and its fit add-on, in their own chunk: loaded when a terminal is first shown. `raw`:
 * the output is a PTY's (it ends lines with CR LF itself); else a bare LF also returns the carriage.
 */
export function createTerminal(el: HTMLElement, input: boolean, raw = false): { term: Terminal; fit: () => void } {
  const dark = matchMedia('(prefers-color-scheme: dark)').matches;
  const term = new Terminal({
    convertEol: !raw,
    cursorBlink: input,
    disableStdin: !input,
    fontFamily: 'ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace',
    fontSize: 13,
    scrollback: 10_000,
    theme: dark ? { background: '#0f1217', foreground: '#d8dee9' } : { background: '#fbfbfc', foreground: '#1f2430', cursor: '#1f2430', selectionBackground: '#c9d7f0' },
  });
  const fit = new FitAddon();
  term.loadAddon(fit);
  term.open(el);
  const refit = () => { try { fit.fit(); } catch { /* not laid out yet */ } };
  refit();
  return { term, fit: refit };
}

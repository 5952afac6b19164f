import type { Cursor, MachineInput } from '@shellbase/protocol';
import { ShellbaseError } from '../errors.js';
import type { Agent, RawResult } from './vm/agent.js';

/** The display a machine's screen is: the `desktop` image's Xvfb serves it (templates/desktop). */
export const SCREEN_DISPLAY = ':0';
/** The largest capture kept (a 16384 × 16384 screen's PNG is far smaller than this in practice). */
const CAPTURE_BYTES = 64 << 20;
/** A capture or a short input's time limit; typing gets its delays on top. */
const STEP_MS = 15_000;
/** xdotool's pause between two typed characters when the input names none. */
const TYPE_DELAY_MS = 12;

const BUTTONS = { left: '1', middle: '2', right: '3' } as const;
const WHEEL = { up: '4', down: '5', left: '6', right: '7' } as const;

/** The desktop image's capture from Xvfb's framebuffer file (templates/desktop/fbshot): the PNG on stdout. */
const FBSHOT = '/opt/shellbase/desktop/bin/fbshot';
/** The desktop image's xdotool for moves and clicks (templates/desktop/xpointer): XTEST without Xlib. */
const XPOINTER = '/opt/shellbase/desktop/bin/xpointer';
/** fbshot's exit when display :0 has no framebuffer file (another Xvfb serves it): nothing written. */
const NO_FRAMEBUFFER = 3;

/** What a guest run on the machine's display gets: DISPLAY, its limits, the caller's signal. */
function onDisplay(timeoutMs: number, outputBytes: number, signal?: AbortSignal) {
  return { env: { DISPLAY: SCREEN_DISPLAY }, timeoutMs, outputBytes, ...(signal ? { signal } : {}) };
}

/**
 * The machine's display as a PNG, with the pointer unless told otherwise. With the pointer, the
 * desktop image's fbshot reads it from Xvfb's framebuffer (no X connection, a cheap PNG); without
 * fbshot or its framebuffer, and without the pointer, scrot's capture of display :0, written to a
 * temporary file in the guest and sent back through the agent in one run.
 */
export async function captureScreen(agent: Agent, o: { pointer?: boolean; signal?: AbortSignal } = {}): Promise<Buffer> {
  const common = onDisplay(STEP_MS, CAPTURE_BYTES, o.signal);
  if (o.pointer !== false) {
    const r = await agent.run({ argv: [FBSHOT, '-'], ...common });
    if (r.exitCode !== 127 && r.exitCode !== NO_FRAMEBUFFER) return captured(r, 'fbshot');
  }
  const script = 'f=$(mktemp /tmp/shellbase-screen-XXXXXXXX.png) || exit 1\n'
    + `scrot --overwrite${o.pointer === false ? '' : ' --pointer'} "$f" >&2 && cat "$f"\ns=$?\nrm -f "$f"\nexit $s`;
  return captured(await agent.run({ argv: ['/bin/sh', '-c', script], ...common }), 'scrot');
}

/** A capture's PNG, or the error of its run. */
function captured(r: RawResult, tool: string): Buffer {
  checked(r, tool);
  if (r.truncated) throw new ShellbaseError('limit_exceeded', `the screen's capture is larger than ${CAPTURE_BYTES} bytes`);
  return r.stdout;
}

/** xdotool's arguments for one input (a chain of its commands), and how long it may take. */
export function inputCommand(input: MachineInput): { argv: string[]; timeoutMs: number } {
  const at = (x?: number, y?: number): string[] => {
    if ((x === undefined) !== (y === undefined)) throw new ShellbaseError('invalid_argument', 'give both x and y, or neither', { hint: 'without them the input happens where the pointer is' });
    // Not `--sync`: it waits for the pointer to move, and one already there never does. Events of
    // one chain reach the X server in order, so what follows happens at the new position anyway.
    return x === undefined ? [] : ['mousemove', String(x), String(y)];
  };
  switch (input.type) {
    case 'move': return { argv: at(input.x, input.y), timeoutMs: STEP_MS };
    case 'click': return { argv: [...at(input.x, input.y), 'click', '--repeat', String(input.count ?? 1), BUTTONS[input.button ?? 'left']], timeoutMs: STEP_MS };
    case 'scroll': return { argv: [...at(input.x, input.y), 'click', '--repeat', String(input.amount ?? 1), WHEEL[input.direction]], timeoutMs: STEP_MS };
    // `--` ends type's options: the text is typed as it is, a leading dash included.
    case 'type': {
      const delay = input.delayMs ?? TYPE_DELAY_MS;
      return { argv: ['type', '--delay', String(delay), '--', input.text], timeoutMs: STEP_MS + delay * input.text.length };
    }
    case 'key': return { argv: ['key', input.key], timeoutMs: STEP_MS };
  }
}

/**
 * Sends one input to the machine's display; answers where the pointer is then. Moves, clicks and
 * scrolls go to the desktop image's xpointer, with the pointer's place asked in the same run;
 * typing and keys (and pointer inputs where the image has no xpointer) go to xdotool.
 */
export async function sendInput(agent: Agent, input: MachineInput, o: { signal?: AbortSignal } = {}): Promise<Cursor> {
  const { argv, timeoutMs } = inputCommand(input);
  const common = onDisplay(timeoutMs, 4096, o.signal);
  let r: RawResult | undefined;
  if (input.type !== 'type' && input.type !== 'key') {
    r = await agent.run({ argv: [XPOINTER, ...argv, 'getmouselocation'], ...common });
    if (r.exitCode !== 127) checked(r, 'xpointer');
  }
  if (!r || r.exitCode === 127) {
    // A chain ending in `type` would type what follows it, so where the pointer is comes from a second xdotool.
    r = await agent.run({ argv: ['/bin/sh', '-c', 'xdotool "$@" && exec xdotool getmouselocation', 'sh', ...argv], ...common });
    checked(r, 'xdotool');
  }
  // xdotool skips a key name it does not know (with a word on stderr) and exits 0: that is the caller's mistake.
  const unknown = /No such key name '([^']*)'/.exec(r.stderr.toString());
  if (unknown) throw new ShellbaseError('invalid_argument', `${JSON.stringify(unknown[1])} is not an X key name`, { hint: 'use X key names: Return, Escape, Tab, BackSpace, Page_Down, F5, ctrl+l' });
  const m = /x:(-?\d+)\s+y:(-?\d+)/.exec(r.stdout.toString());
  if (!m) throw new ShellbaseError('unavailable', `the machine did not say where the pointer is: ${r.stdout.toString().trim().slice(0, 200)}`);
  return { x: Number(m[1]), y: Number(m[2]) };
}

/** A guest tool's run as an error when it failed: no display or no tool is the machine's image's lack. */
function checked(r: RawResult, tool: string): void {
  if (r.exitCode === 0 && !r.timedOut) return;
  const said = r.stderr.toString().trim().slice(-500);
  if (r.aborted) throw new ShellbaseError('unavailable', 'the caller went away');
  if (r.timedOut) throw new ShellbaseError('unavailable', `${tool} did not finish in the machine in time`);
  if (r.exitCode === 127 || /can't open display|cannot open display|Can't open X display|No such file/i.test(said)) {
    throw new ShellbaseError('failed_precondition', `the machine has no screen (display ${SCREEN_DISPLAY} with ${tool}): ${said || `exit ${r.exitCode}`}`, {
      hint: 'make the machine from the desktop image (image: "desktop")',
    });
  }
  throw new ShellbaseError('unavailable', `${tool} failed in the machine (exit ${r.exitCode}): ${said}`);
}

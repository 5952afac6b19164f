import { writeFileSync } from 'node:fs';
import type { MachineInput } from '@shellbase/protocol';
import { UsageError, flag, type Command, type ParsedArgs } from '../args.js';
import { sb } from './client.js';

/** A whole, non-negative pixel coordinate from the command line. */
function coord(value: string, name: string, usage: string): number {
  const n = Number(value);
  if (value.trim() === '' || !Number.isInteger(n) || n < 0) throw new UsageError(`${name} must be a whole number of pixels, not ${JSON.stringify(value)}\n\nusage: ${usage}`);
  return n;
}

/**
 * `machine input`'s words as one input: `click [X Y]`, `move X Y`, `scroll up|down|left|right [N]`,
 * `type TEXT` (or `type -- TEXT`, for text that starts with a dash), `key KEY`.
 */
export function parseInput(words: string[], args: ParsedArgs, usage: string): MachineInput {
  const [what, ...rest] = words;
  const wrong = (why: string) => new UsageError(`${why}\n\nusage: ${usage}`);
  if (what !== 'type' && args.rest.length) throw wrong('only type takes text after --');
  const at = (): { x?: number; y?: number } => {
    if (rest.length === 0) return {};
    if (rest.length !== 2) throw wrong(`${what} takes X and Y, or neither`);
    return { x: coord(rest[0], 'X', usage), y: coord(rest[1], 'Y', usage) };
  };
  switch (what) {
    case 'click': {
      const button = flag(args, 'button') ?? 'left';
      if (button !== 'left' && button !== 'middle' && button !== 'right') throw wrong(`--button is left, middle or right, not ${JSON.stringify(button)}`);
      return { type: 'click', ...at(), button, ...(args.flags.has('double') ? { count: 2 } : {}) };
    }
    case 'move': {
      if (rest.length !== 2) throw wrong('move takes X and Y');
      return { type: 'move', x: coord(rest[0], 'X', usage), y: coord(rest[1], 'Y', usage) };
    }
    case 'scroll': {
      const [direction, amount] = rest;
      if (direction !== 'up' && direction !== 'down' && direction !== 'left' && direction !== 'right') throw wrong('scroll takes up, down, left or right');
      if (rest.length > 2) throw wrong('scroll takes a direction and at most a number of steps');
      return { type: 'scroll', direction, ...(amount !== undefined ? { amount: coord(amount, 'N', usage) } : {}) };
    }
    case 'type': {
      const text = [...rest, ...args.rest].join(' ');
      if (text === '') throw wrong('type takes the text to type');
      return { type: 'type', text };
    }
    case 'key':
      if (rest.length !== 1) throw wrong('key takes one key or chord, such as Return or ctrl+l');
      return { type: 'key', key: rest[0] };
    default:
      throw wrong(`unknown input ${JSON.stringify(what ?? '')}`);
  }
}

/** A machine's screen (the desktop image's display) and input to it. */
export const screenCommands: Command[] = [
  {
    name: 'machine screen',
    spec: { usage: 'shellbase machine screen ID [-o FILE] [--no-pointer]      (its screen as a PNG; to stdout without -o)', flags: { output: 'string', 'no-pointer': 'boolean' }, short: { o: 'output' }, positionals: [1, 1] },
    async run(args) {
      const png = await sb().machines.get(args.positionals[0]).screen({ pointer: !args.flags.has('no-pointer') });
      const out = flag(args, 'output');
      if (out !== undefined) writeFileSync(out, png);
      else if (process.stdout.isTTY) throw new UsageError(`the PNG would go to a terminal: give -o FILE or redirect stdout\n\nusage: ${this.spec.usage}`);
      else process.stdout.write(png);
      return 0;
    },
  },
  {
    name: 'machine input',
    spec: {
      usage: 'shellbase machine input ID click [X Y] [--button left|middle|right] [--double] | move X Y | scroll up|down|left|right [N] | type TEXT | type -- TEXT | key KEY',
      flags: { button: 'string', double: 'boolean' }, positionals: [2, 100], rest: 'optional',
    },
    async run(args) {
      const [id, ...words] = args.positionals;
      const cursor = await sb().machines.get(id).input(parseInput(words, args, this.spec.usage));
      console.log(`${cursor.x} ${cursor.y}`);
      return 0;
    },
  },
];

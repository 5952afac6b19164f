import { Type } from 'typebox';
import { strict } from './common.js';

/**
 * A machine's screen and input (`GET /v1/machines/{id}/screen`, `POST /v1/machines/{id}/input`):
 * display :0 of a machine that has one (the `desktop` image's Xvfb and Xfce session), captured as a
 * PNG and driven with mouse and keys.
 */

/** A position on the screen, in pixels from its top left corner. */
const Coord = Type.Integer({ minimum: 0, maximum: 16383 });

export const MouseButtonSchema = Type.Union([Type.Literal('left'), Type.Literal('middle'), Type.Literal('right')]);

export const ScreenQuerySchema = Type.Object({
  /** Whether the mouse pointer is drawn into the capture (default true, as the desktop SDK's screenshot has it). */
  pointer: Type.Optional(Type.Boolean()),
}, strict);

/** One input: moves, clicks and scrolls of the mouse (at `x`,`y` when given), typed text, keys. */
export const MachineInputSchema = Type.Union([
  Type.Object({ type: Type.Literal('move'), x: Coord, y: Coord }, strict),
  Type.Object({
    type: Type.Literal('click'), x: Type.Optional(Coord), y: Type.Optional(Coord),
    button: Type.Optional(MouseButtonSchema),
    /** Clicks in a row: 2 for a double click (default 1). */
    count: Type.Optional(Type.Integer({ minimum: 1, maximum: 3 })),
  }, strict),
  Type.Object({
    type: Type.Literal('scroll'), x: Type.Optional(Coord), y: Type.Optional(Coord),
    direction: Type.Union([Type.Literal('up'), Type.Literal('down'), Type.Literal('left'), Type.Literal('right')]),
    /** Wheel steps (default 1). */
    amount: Type.Optional(Type.Integer({ minimum: 1, maximum: 100 })),
  }, strict),
  Type.Object({
    type: Type.Literal('type'), text: Type.String({ minLength: 1, maxLength: 10_000 }),
    /** Pause between two characters (default 12 ms). */
    delayMs: Type.Optional(Type.Integer({ minimum: 0, maximum: 1000 })),
  }, strict),
  Type.Object({
    type: Type.Literal('key'),
    /** X key names joined by `+` for a chord: `Return`, `ctrl+l`, `shift+Tab`, `F5`. */
    key: Type.String({ minLength: 1, maxLength: 128, pattern: '^[A-Za-z0-9_]+(\\+[A-Za-z0-9_]+)*$' }),
  }, strict),
]);

/** Where the mouse pointer is after an input. */
export const CursorSchema = Type.Object({ x: Type.Integer(), y: Type.Integer() }, { ...strict, title: 'Cursor', description: 'Where the mouse pointer is on a machine\'s screen, in pixels from its top left corner.' });

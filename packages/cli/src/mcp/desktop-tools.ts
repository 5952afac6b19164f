import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { MachineInput, Shellbase } from '@shellbase/sdk';
import { z } from 'zod';
import { guarded, type ToolAnswer } from './result.js';

const machineId = z.string().min(1).max(128).describe('The machine\'s id (m_...) of a machine made from the desktop image');
const coord = z.number().int().min(0).max(16383);

/**
 * Tools for computer use on a machine of the `desktop` image (create_machine with image
 * "desktop"): look at its screen, click, type and press keys. Each input answers with a
 * screenshot taken after it, so the model sees what it did.
 */
export function registerDesktopTools(server: McpServer, sb: Shellbase): void {
  const screenAfter = async (machine: string, what: string, input?: MachineInput): Promise<ToolAnswer> => {
    const m = sb.machines.get(machine);
    const cursor = input ? await m.input(input) : undefined;
    const png = await m.screen();
    return {
      text: `${what}${cursor ? `; the pointer is at ${cursor.x},${cursor.y}` : ''}`,
      structured: { machine, ...(cursor ? { cursor } : {}) },
      images: [{ data: Buffer.from(png).toString('base64'), mimeType: 'image/png' }],
    };
  };
  const output = { machine: z.string(), cursor: z.object({ x: z.number(), y: z.number() }).optional() };

  server.registerTool('screenshot', {
    title: 'Look at a machine\'s screen',
    description: 'A screenshot of a desktop machine\'s screen (1024x768 unless it was started otherwise) as a PNG image, with the mouse pointer.',
    inputSchema: { machine: machineId },
    outputSchema: output,
  }, async (a) => guarded(() => screenAfter(a.machine, `the screen of ${a.machine}`)));

  server.registerTool('click', {
    title: 'Click on a machine\'s screen',
    description: 'Moves the mouse to x,y (pixels from the top left corner) and clicks; returns a screenshot taken after the click.',
    inputSchema: {
      machine: machineId, x: coord, y: coord,
      button: z.enum(['left', 'middle', 'right']).optional().describe('Default left'),
      double: z.boolean().optional().describe('A double click'),
    },
    outputSchema: output,
  }, async (a) => guarded(() => screenAfter(a.machine, `clicked ${a.button ?? 'left'}${a.double ? ' twice' : ''} at ${a.x},${a.y}`,
    { type: 'click', x: a.x, y: a.y, button: a.button ?? 'left', ...(a.double ? { count: 2 } : {}) })));

  server.registerTool('type', {
    title: 'Type text on a machine\'s screen',
    description: 'Types text as keystrokes into what has the keyboard focus (click into a field first); returns a screenshot taken after.',
    inputSchema: { machine: machineId, text: z.string().min(1).max(10_000) },
    outputSchema: output,
  }, async (a) => guarded(() => screenAfter(a.machine, `typed ${a.text.length} characters`, { type: 'type', text: a.text })));

  server.registerTool('key', {
    title: 'Press a key on a machine\'s screen',
    description: 'Presses a key or a chord, by X key names joined with +: Return, Escape, Tab, BackSpace, ctrl+l, ctrl+shift+t, Page_Down. Returns a screenshot taken after.',
    inputSchema: { machine: machineId, key: z.string().min(1).max(128).regex(/^[A-Za-z0-9_]+(\+[A-Za-z0-9_]+)*$/) },
    outputSchema: output,
  }, async (a) => guarded(() => screenAfter(a.machine, `pressed ${a.key}`, { type: 'key', key: a.key })));
}

#!/usr/bin/env node
import { readFileSync } from 'node:fs';
import { ShellbaseError } from '@shellbase/sdk';
import { parseArgs, UsageError, type Command } from './args.js';
import { clientCommands } from './commands/client.js';
import { fileCommands } from './commands/files.js';
import { machineCommands } from './commands/machines.js';
import { screenCommands } from './commands/screen.js';
import { serverCommands } from './commands/serve.js';
import { serviceCommands } from './commands/services.js';
import { networkCommands } from './commands/network.js';
import { eventCommands } from './commands/events.js';
import { imageCommands } from './commands/images.js';
import { transferCommands } from './commands/transfer.js';
import { backupCommands } from './commands/backup.js';
import { mcpCommand } from './mcp/server.js';

/** Every command, in the order the usage lists them. */
const COMMANDS: Command[] = [...serverCommands.slice(0, 1), ...clientCommands.slice(0, 4), ...fileCommands, ...clientCommands.slice(4),
  ...serviceCommands, ...networkCommands, ...eventCommands, ...imageCommands, ...transferCommands, ...backupCommands, mcpCommand, ...machineCommands, ...screenCommands, ...serverCommands.slice(1)];

const VERSION: string = (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version;

const USAGE = `shellbase ${VERSION}: serverless sandboxes over versioned file systems

${COMMANDS.map((c) => `  ${c.spec.usage}`).join('\n')}

DURATION: 90s, 30m, 2h, 1h30m, 1500ms, or a number of milliseconds.
Clients read SHELLBASE_URL (default http://127.0.0.1:7070) and SHELLBASE_API_KEY
(default: the admin key of a server on this host). \`shellbase CMD --help\` shows one command.`;

/** The command `argv` names (two words for a subcommand such as `machine exec`), and its arguments. */
function find(argv: string[]): { cmd: Command; args: string[] } {
  const [first, second] = argv;
  const two = COMMANDS.find((c) => c.name === `${first} ${second}`);
  if (two) return { cmd: two, args: argv.slice(2) };
  const one = COMMANDS.find((c) => c.name === first);
  if (one) return { cmd: one, args: argv.slice(1) };
  const group = COMMANDS.filter((c) => c.name.startsWith(`${first} `));
  if (group.length) {
    const what = second === undefined ? `shellbase ${first} needs a subcommand` : `unknown command shellbase ${first} ${second}`;
    throw new UsageError(`${what}\n\n${group.map((c) => `  ${c.spec.usage}`).join('\n')}`);
  }
  throw new UsageError(`unknown command ${JSON.stringify(first)}\n\n${USAGE}`);
}

async function main(argv: string[]): Promise<number> {
  const [first] = argv;
  if (first === undefined || first === 'help' || first === '--help' || first === '-h') { console.log(USAGE); return 0; }
  if (first === '--version' || first === 'version') { console.log(`${VERSION} (Node.js ${process.version})`); return 0; }
  const { cmd, args } = find(argv);
  const dashdash = args.indexOf('--');
  const own = dashdash === -1 ? args : args.slice(0, dashdash);
  if (own.includes('--help') || own.includes('-h')) { console.log(`usage: ${cmd.spec.usage}`); return 0; }
  return cmd.run(parseArgs(args, cmd.spec));
}

main(process.argv.slice(2)).then((code) => process.exit(code), (err: unknown) => {
  if (err instanceof UsageError) { console.error(`shellbase: ${err.message}`); process.exit(2); }
  if (err instanceof ShellbaseError) { console.error(`shellbase: ${err.code}: ${err.message}`); process.exit(1); }
  console.error(err);
  process.exit(1);
});

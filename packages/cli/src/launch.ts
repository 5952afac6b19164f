#!/usr/bin/env node
/**
 * The `shellbase` command's entry point (package.json `bin`). shellbase needs Node.js 22 or
 * later. Started by an older Node (`npx shellbase` in a checkout runs the machine's own `node`),
 * it runs the command again on the checkout's Node (bin/node, installed by the set-up) when
 * there is one, and otherwise says which Node it needs. It passes signals on and exits as the
 * command does.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const NEEDS = 22;

if (Number(process.versions.node.split('.')[0]) >= NEEDS) {
  await import('./main.js');
} else {
  const node = fileURLToPath(new URL('../../../bin/node', import.meta.url));
  const setup = fileURLToPath(new URL('../../../scripts/setup', import.meta.url));
  if (!existsSync(node) || !existsSync(setup)) {
    console.error(`error: shellbase needs Node.js ${NEEDS} or later; this is ${process.version} (${process.execPath})\n`
      + 'hint: install a current Node.js LTS, or run the checkout\'s bin/shellbase');
    process.exit(1);
  }
  const child = spawn(node, [fileURLToPath(new URL('./main.js', import.meta.url)), ...process.argv.slice(2)], { stdio: 'inherit' });
  // Ctrl-C and a hang-up reach the whole process group, the command included: the launcher only
  // outlives them; a SIGTERM sent to the launcher alone is passed on.
  process.on('SIGINT', () => undefined);
  process.on('SIGHUP', () => undefined);
  process.on('SIGTERM', () => child.kill('SIGTERM'));
  child.on('error', (e) => { console.error(`error: cannot run ${node}: ${e.message}`); process.exit(1); });
  child.on('exit', (code, signal) => {
    if (signal) { process.removeAllListeners(signal); process.kill(process.pid, signal); } // dies as the command did
    process.exit(code ?? 1);
  });
}

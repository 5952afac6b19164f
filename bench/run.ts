// npm run bench [-- --quick]: every scenario against a server it starts with a throw-away data
// directory, each framed by baselines run in the same process and minute. Prints a table and
// writes bench/results.json. Nothing here is asserted: it measures.
import { imageInfo, loadConfig } from '@shellbase/server';
import { startTestServer } from '../test/harness.ts';
import { baselines } from './baselines.ts';
import { print, save, type Bench } from './lib.ts';
import { durability } from './scenarios/durability.ts';
import { files } from './scenarios/files.ts';
import { history } from './scenarios/history.ts';
import { isolation } from './scenarios/isolation.ts';
import { queries } from './scenarios/queries.ts';
import { services } from './scenarios/services.ts';
import { machines } from './scenarios/machines.ts';
import { idleContexts } from './scenarios/scale.ts';
import { historyAtScale } from './scenarios/history-scale.ts';
import { egress } from './scenarios/egress.ts';
import { e2b } from './scenarios/e2b.ts';
import { images } from './scenarios/images.ts';
import { warm } from './scenarios/warm.ts';
import { codeInterpreter } from './scenarios/code-interpreter.ts';
import { events } from './scenarios/events.ts';
import { transfer } from './scenarios/transfer.ts';
import { backup } from './scenarios/backup.ts';
import { mounts } from './scenarios/mounts.ts';
import { desktop } from './scenarios/desktop.ts';

const quick = process.argv.includes('--quick');
const started = performance.now();
const t = await startTestServer({ storeSizeGb: 32 });
// The server's default, not the tests' (which count QEMU processes): machines restored ahead per hot template.
t.config.machines.readyPerTemplate = loadConfig().machines.readyPerTemplate;
const b: Bench = { t, quick, n: quick ? 20 : 100, rows: [], baselines: new Map() };
try {
  const rootfs = imageInfo(loadConfig().cache, 'debian').rootfs;
  await baselines(b, rootfs);
  const scenarios: [string, (b: Bench) => Promise<void>][] = [
    ['queries', queries], ['files', files], ['history', history], ['durability', durability],
    ['services', (x) => services(x, rootfs)], ['noisy neighbours', isolation], ['idle contexts', idleContexts],
    ['machines', machines], ['history at scale', historyAtScale], ['e2b', e2b], ['egress', egress], ['images', images],
    ['warm sandboxes', (x) => warm(x, rootfs)], ['code interpreter', codeInterpreter], ['events', events], ['export', transfer], ['backup', backup],
    ['mounts', mounts], ['desktop', desktop],
  ];
  // `--only NAME` (repeatable) runs just those scenarios (results.json then holds only theirs).
  const only = process.argv.flatMap((a, i) => (process.argv[i - 1] === '--only' ? [a] : []));
  for (const [name, scenario] of scenarios.filter(([name]) => only.length === 0 || only.includes(name))) {
    console.error(`bench: ${name} (${Math.round((performance.now() - started) / 1000)} s)`);
    await scenario(b);
  }
} finally {
  await t.close();
}
print(b.rows);
save(b.rows, 'bench/results.json');
console.error(`bench: done in ${Math.round((performance.now() - started) / 1000)} s; bench/results.json written`);

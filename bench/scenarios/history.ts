import { latency, time, type Bench } from '../lib.ts';

/** Scenarios 4–5: fork whatever the size, and queries on long histories. */
export async function history(b: Bench): Promise<void> {
  const { t } = b;
  const big = b.quick ? 50 : 500;
  const sizes: [string, string][] = [
    ['1 file', 'echo one > /root/one'],
    ['10,000 files', 'mkdir -p /root/many && cd /root/many && seq 10000 | xargs touch'],
    [`${big} MB`, `head -c ${big}M /dev/urandom > /root/big`],
  ];
  for (const [label, cmd] of sizes) {
    const src = t.sb.context(`bench-fork-src-${label.replace(/\W+/g, '-')}`);
    await src.exec(cmd, { timeoutMs: 300_000, limits: { diskMb: big * 2 } });
    let i = 0;
    latency(b, `fork of a context holding ${label}`, await time(b.n, () => src.fork(`${src.name}-${i++}`)));
  }

  // A long history against a new context (squashing keeps the layer chain short).
  const versions = b.quick ? 200 : 1000;
  const long = t.sb.context('bench-long');
  for (let v = 0; v < versions; v++) await long.exec(['sh', '-c', `echo ${v} > /root/v${v % 50}`]);
  await t.server.engine.squasher.idle();
  const fresh = t.sb.context('bench-new');
  const one = await time(b.n, () => fresh.exec(['true']));
  b.baselines.set('1 version', latency(b, 'query argv [true] on a context with 1 version', one));
  latency(b, `query argv [true] on a context with ${versions} versions`, await time(b.n, () => long.exec(['true'])), '1 version');
}

import type { UsageItem } from '@shellbase/protocol';
import { useMemo, useState } from 'preact/hooks';
import { sb } from '../api/session.js';
import { DayBars, TopBars } from '../components/charts.js';
import { ErrorBox } from '../components/errors.js';
import { bytes, compact, seconds } from '../lib/format.js';
import { href } from '../lib/router.js';
import { useAsync } from '../lib/use-async.js';
import { MetricsPanel } from './metrics.js';

const DAY = 86_400_000;

/** UTC days from `from` to today, as the API keys them (YYYY-MM-DD). */
function daysSince(from: Date): string[] {
  const out: string[] = [];
  for (let t = Date.UTC(from.getUTCFullYear(), from.getUTCMonth(), from.getUTCDate()); t <= Date.now(); t += DAY) out.push(new Date(t).toISOString().slice(0, 10));
  return out;
}

type Measure = 'queries' | 'wallMs' | 'cpuMs' | 'serviceSeconds' | 'machineSeconds' | 'egressBytes' | 'ingressBytes' | 'bytesStored';
const MEASURES: [Measure, string, (n: number) => string][] = [
  ['queries', 'Queries', compact], ['wallMs', 'Wall time', (n) => seconds(n / 1000)], ['cpuMs', 'CPU time', (n) => seconds(n / 1000)],
  ['serviceSeconds', 'Service time', seconds], ['machineSeconds', 'Machine time', seconds],
  ['egressBytes', 'Egress (sent)', bytes], ['ingressBytes', 'Egress (received)', bytes], ['bytesStored', 'Stored', bytes],
];

/** Usage per day and per kind, a per-context top list, and (admin) the server's /metrics figures. */
export function UsageView({ admin }: { admin: boolean }) {
  const [span, setSpan] = useState(30);
  const [tenant, setTenant] = useState('');
  const [top, setTop] = useState<Measure>('queries');
  const tenants = useAsync(() => (admin ? sb.tenants.list() : Promise.resolve([])), [admin]);
  const data = useAsync(async () => {
    const from = new Date(Date.now() - (span - 1) * DAY);
    const q = { from: new Date(Date.UTC(from.getUTCFullYear(), from.getUTCMonth(), from.getUTCDate())).toISOString(), tenant: tenant || undefined };
    const [day, kind, context] = await Promise.all([
      sb.usage({ groupBy: 'day', ...q }), sb.usage({ groupBy: 'kind', ...q }), sb.usage({ groupBy: 'context', ...q }),
    ]);
    return { day, kind, context, days: daysSince(from) };
  }, [span, tenant]);
  const series = useMemo(() => {
    if (!data.data) return null;
    const by = new Map(data.data.day.items.map((i) => [i.key, i]));
    const pick = (f: (i: UsageItem) => number) => data.data!.days.map((d) => { const i = by.get(d); return i ? f(i) : 0; });
    return {
      queries: pick((i) => i.queries), cpu: pick((i) => i.cpuMs / 1000), wall: pick((i) => i.wallMs / 1000),
      service: pick((i) => i.serviceSeconds), machine: pick((i) => i.machineSeconds), egress: pick((i) => i.egressBytes + i.ingressBytes),
    };
  }, [data.data]);
  const measure = MEASURES.find((m) => m[0] === top)!;
  const d = data.data;
  return (
    <section aria-labelledby="usage-title" class="usage">
      <div class="bar">
        <h1 id="usage-title">Usage</h1>
        <label>Period <select value={span} onChange={(e) => setSpan(Number(e.currentTarget.value))}>
          <option value={7}>7 days</option><option value={30}>30 days</option><option value={90}>90 days</option>
        </select></label>
        {admin && <label>Tenant <select value={tenant} onChange={(e) => setTenant(e.currentTarget.value)}>
          <option value="">(this key's)</option>
          {(tenants.data ?? []).map((t) => <option key={t.id} value={t.name}>{t.name}</option>)}
        </select></label>}
        <span class="muted">Days are UTC.</span>
      </div>
      <ErrorBox error={data.error} />
      {d && series && (<>
        <dl class="facts totals">
          <div><dt>Queries</dt><dd>{compact(d.day.total.queries)}</dd></div>
          <div><dt>Wall time</dt><dd title="queries' and services' run time">{seconds(d.day.total.wallMs / 1000)}</dd></div>
          <div><dt>CPU</dt><dd>{seconds(d.day.total.cpuMs / 1000)}</dd></div>
          <div><dt>Services</dt><dd>{seconds(d.day.total.serviceSeconds)}</dd></div>
          <div><dt>Machines</dt><dd>{seconds(d.day.total.machineSeconds)}</dd></div>
          <div><dt>Egress</dt><dd title="bytes sent and received through the egress proxy by queries, services and machines">{bytes(d.day.total.egressBytes)} out · {bytes(d.day.total.ingressBytes)} in</dd></div>
          <div><dt>Stored now</dt><dd title="layers of all versions (shared ones once) and machines' disks, snapshots, hibernated memory">{bytes(d.day.total.bytesStored)}</dd></div>
        </dl>
        <div class="charts">
          <DayBars title="Queries" days={d.days} values={series.queries} format={compact} />
          <DayBars title="Wall time (queries, services)" days={d.days} values={series.wall} format={seconds} />
          <DayBars title="Service seconds" days={d.days} values={series.service} format={seconds} />
          <DayBars title="Machine seconds" days={d.days} values={series.machine} format={seconds} />
          <DayBars title="Egress bytes (sent and received)" days={d.days} values={series.egress} format={bytes} />
        </div>
        <p class="muted">Stored bytes are a figure of now (per context: its head's layers); the ledger keeps no daily history of storage. Egress counts what went through the egress proxy.</p>
        <div class="charts">
          <TopBars title="Time by kind" format={seconds}
            rows={d.kind.items.map((i) => [i.key, i.wallMs / 1000] as [string, number]).sort((a, b) => b[1] - a[1])} />
          <figure class="chart">
            <figcaption>By kind</figcaption>
            <div class="scroll-x"><table class="list compact">
              <thead><tr><th>Kind</th><th class="num">Runs</th><th class="num">Wall</th><th class="num">CPU</th><th class="num">Service</th><th class="num">Machine</th><th class="num">Egress</th></tr></thead>
              <tbody>{d.kind.items.map((i) => (
                <tr key={i.key}><td>{i.key}</td><td class="num">{compact(i.queries)}</td><td class="num">{seconds(i.wallMs / 1000)}</td>
                  <td class="num">{seconds(i.cpuMs / 1000)}</td><td class="num">{seconds(i.serviceSeconds)}</td><td class="num">{seconds(i.machineSeconds)}</td>
                  <td class="num">{bytes(i.egressBytes + i.ingressBytes)}</td></tr>
              ))}</tbody>
            </table></div>
            {d.kind.items.length === 0 && <p class="muted">Nothing in this period.</p>}
          </figure>
          <div>
            <label class="top-select">Top contexts by <select value={top} onChange={(e) => setTop(e.currentTarget.value as Measure)}>
              {MEASURES.map(([k, label]) => <option key={k} value={k}>{label}</option>)}
            </select></label>
            <TopBars title={`Top contexts: ${measure[1].toLowerCase()}`} format={measure[2]}
              href={(k) => (k.startsWith('machine:') ? href('machines', k.slice(8)) : href('contexts', k))}
              rows={d.context.items.map((i) => [i.key, i[top]] as [string, number]).filter((r) => r[1] > 0).sort((a, b) => b[1] - a[1]).slice(0, 10)} />
          </div>
        </div>
      </>)}
      {admin && <MetricsPanel />}
    </section>
  );
}

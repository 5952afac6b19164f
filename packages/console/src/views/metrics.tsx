import { sb } from '../api/session.js';
import { TopBars } from '../components/charts.js';
import { ErrorBox } from '../components/errors.js';
import { bytes, compact, seconds } from '../lib/format.js';
import { byLabel, parsePrometheus, sum } from '../lib/prometheus.js';
import { useAsync, useInterval } from '../lib/use-async.js';

const uptime = (start: number) => (start > 0 ? seconds(Date.now() / 1000 - start) : '—');

/** The server's /metrics (Prometheus text), parsed: for the admin, refreshed every 10 s. */
export function MetricsPanel() {
  const m = useAsync(async () => parsePrometheus(await (await sb.request('GET', '/metrics', { accept: 'text/plain' })).text()), []);
  useInterval(m.reload, 10_000);
  const s = m.data;
  const count = s ? sum(s, 'shellbase_query_duration_seconds_count') : 0;
  const total = s ? sum(s, 'shellbase_query_duration_seconds_sum') : 0;
  return (
    <section aria-labelledby="metrics-title" class="metrics">
      <h2 id="metrics-title">Server metrics <span class="muted">(/metrics, all tenants)</span></h2>
      <ErrorBox error={m.error} />
      {s && (<>
        <dl class="facts">
          <div><dt>Queries</dt><dd>{compact(sum(s, 'shellbase_queries_total'))}</dd></div>
          <div><dt>Mean query time</dt><dd>{count ? seconds(total / count) : '—'}</dd></div>
          <div><dt>Stored</dt><dd>{bytes(sum(s, 'shellbase_stored_bytes'))}</dd></div>
          <div><dt>Squashes</dt><dd>{compact(sum(s, 'shellbase_squashes_total'))}</dd></div>
          <div><dt>GC runs</dt><dd>{compact(sum(s, 'shellbase_gc_runs_total'))}</dd></div>
          <div><dt>GC freed</dt><dd>{bytes(sum(s, 'shellbase_gc_freed_bytes_total'))}</dd></div>
          <div><dt>Versions dropped</dt><dd>{compact(sum(s, 'shellbase_gc_versions_dropped_total'))}</dd></div>
          <div><dt>Server memory</dt><dd>{bytes(sum(s, 'shellbase_process_resident_memory_bytes'))}</dd></div>
          <div><dt>Server CPU</dt><dd>{seconds(sum(s, 'shellbase_process_cpu_seconds_total'))}</dd></div>
          <div><dt>Up for</dt><dd>{uptime(sum(s, 'shellbase_process_start_time_seconds'))}</dd></div>
        </dl>
        <div class="charts">
          <TopBars title="Queries by outcome" rows={byLabel(s, 'shellbase_queries_total', 'outcome')} format={compact} />
          <TopBars title="Queries by commit" rows={byLabel(s, 'shellbase_queries_total', 'commit')} format={compact} />
          <TopBars title="File operations" rows={byLabel(s, 'shellbase_file_operations_total', 'op')} format={compact} />
        </div>
      </>)}
    </section>
  );
}

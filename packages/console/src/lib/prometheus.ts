/** Prometheus text exposition parsed into samples (enough for the figures the console shows). */
export interface Sample { name: string; labels: Record<string, string>; value: number }

export function parsePrometheus(text: string): Sample[] {
  const out: Sample[] = [];
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = {};
    if (m[3]) {
      const re = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
      for (let l = re.exec(m[3]); l; l = re.exec(m[3])) labels[l[1]!] = l[2]!.replace(/\\n/g, '\n').replace(/\\(.)/g, '$1');
    }
    const v = m[4]!;
    out.push({ name: m[1]!, labels, value: v === '+Inf' ? Infinity : v === '-Inf' ? -Infinity : Number(v) });
  }
  return out;
}

/** The sum of a metric's samples whose labels match `where`. */
export function sum(samples: Sample[], name: string, where: Record<string, string> = {}): number {
  return samples.filter((s) => s.name === name && Object.entries(where).every(([k, v]) => s.labels[k] === v))
    .reduce((a, s) => a + s.value, 0);
}

/** A metric's samples grouped by one label. */
export function byLabel(samples: Sample[], name: string, label: string): [string, number][] {
  const m = new Map<string, number>();
  for (const s of samples) if (s.name === name) m.set(s.labels[label] ?? '', (m.get(s.labels[label] ?? '') ?? 0) + s.value);
  return [...m.entries()].sort((a, b) => b[1] - a[1]);
}

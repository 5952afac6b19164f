/** Human figures: bytes, durations, times. */

export function bytes(n: number | undefined): string {
  if (n === undefined || !Number.isFinite(n)) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  let v = n;
  while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return `${i === 0 ? v : v.toFixed(v < 10 ? 1 : 0)} ${units[i]}`;
}

export function seconds(s: number): string {
  if (s < 60) return `${s < 10 ? s.toFixed(1) : Math.round(s)} s`;
  if (s < 3600) return `${(s / 60).toFixed(1)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

/** "3 min ago"; the exact time belongs in a title attribute (`exact`). */
export function ago(iso: string, now = Date.now()): string {
  const d = (now - Date.parse(iso)) / 1000;
  if (!Number.isFinite(d)) return iso;
  if (d < 5) return 'just now';
  if (d < 60) return `${Math.round(d)} s ago`;
  if (d < 3600) return `${Math.round(d / 60)} min ago`;
  if (d < 86400) return `${Math.round(d / 3600)} h ago`;
  return `${Math.round(d / 86400)} d ago`;
}

export const exact = (iso: string): string => new Date(iso).toLocaleString();

export const shortId = (id: string): string => (id.length > 12 ? id.slice(0, 12) : id);

export function compact(n: number): string {
  if (Math.abs(n) < 1000) return String(Math.round(n * 100) / 100);
  if (Math.abs(n) < 1e6) return `${(n / 1e3).toFixed(1)}k`;
  if (Math.abs(n) < 1e9) return `${(n / 1e6).toFixed(1)}M`;
  return `${(n / 1e9).toFixed(1)}G`;
}

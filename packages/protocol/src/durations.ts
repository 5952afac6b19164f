/**
 * Durations as people write them: `90s`, `30m`, `2h`, `1h30m`, `1500ms`, `1.5h`, `1d`, or a bare
 * number of milliseconds. The CLI reads its time flags with `parseDuration`; messages about time
 * limits write them with `formatDuration`, whose output `parseDuration` reads back.
 */

const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };
const PART = /(\d+(?:\.\d+)?)(ms|s|m|h|d)/y;

/** Milliseconds (a whole number above 0) of `text`, or an Error that says what is accepted. */
export function parseDuration(text: string): number {
  const s = text.trim();
  const wrong = (why: string) => new Error(`${JSON.stringify(text)} ${why}: write a duration such as 90s, 30m, 2h, 1h30m, 1500ms, or a number of milliseconds`);
  if (s === '') throw wrong('is empty');
  let ms: number;
  if (/^\d+$/.test(s)) {
    ms = Number(s);
  } else {
    ms = 0;
    PART.lastIndex = 0;
    while (PART.lastIndex < s.length) {
      const at = PART.lastIndex;
      const m = PART.exec(s);
      if (!m) throw wrong(`is not a duration (at ${JSON.stringify(s.slice(at))})`);
      ms += Number(m[1]) * UNIT_MS[m[2]];
    }
  }
  if (!Number.isSafeInteger(ms)) throw wrong(Number.isFinite(ms) && ms < Number.MAX_SAFE_INTEGER ? 'is not a whole number of milliseconds' : 'is too long');
  if (ms <= 0) throw wrong('is not more than 0');
  return ms;
}

/** `ms` in the largest units that fit: 3600000 is `1h`, 5400000 `1h30m`, 90500 `1m30.5s`, 500 `500ms`. */
export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms) || ms < 1000) return `${ms}ms`;
  const h = Math.floor(ms / 3_600_000);
  const m = Math.floor((ms % 3_600_000) / 60_000);
  const s = (ms % 60_000) / 1000;
  return `${h ? `${h}h` : ''}${m ? `${m}m` : ''}${s ? `${Number(s.toFixed(3))}s` : ''}`;
}

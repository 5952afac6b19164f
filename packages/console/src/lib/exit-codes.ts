/**
 * Exit codes of the queries this tab ran, by the version they left. A version's cause carries
 * the command but not its exit code, so the timeline shows one only for runs it saw.
 */
const KEY = 'shellbase.exitCodes';

function all(): Record<string, number> {
  try { return JSON.parse(sessionStorage.getItem(KEY) ?? '{}') as Record<string, number>; } catch { return {}; }
}

export function rememberExit(version: string, code: number): void {
  const m = all();
  m[version] = code;
  const keys = Object.keys(m);
  for (const k of keys.slice(0, Math.max(0, keys.length - 2000))) delete m[k];
  sessionStorage.setItem(KEY, JSON.stringify(m));
}

export const exitOf = (version: string): number | undefined => all()[version];

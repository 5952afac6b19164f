import { useEffect, useState } from 'preact/hooks';

/**
 * Hash routes (`#/contexts/web/files?path=/root`): the server serves one index.html and
 * never sees the route, so any route reloads and bookmarks.
 */
export interface Route { parts: string[]; query: URLSearchParams }

export function parse(hash: string): Route {
  const h = hash.replace(/^#/, '');
  const [p, q = ''] = h.split('?', 2);
  const parts = (p ?? '').split('/').filter(Boolean).map((s) => { try { return decodeURIComponent(s); } catch { return s; } });
  return { parts, query: new URLSearchParams(q) };
}

/** `href('contexts', name, 'files', {path})` → `#/contexts/NAME/files?path=...` */
export function href(...args: (string | Record<string, string | undefined>)[]): string {
  const q = new URLSearchParams();
  const parts: string[] = [];
  for (const a of args) {
    if (typeof a === 'string') parts.push(encodeURIComponent(a));
    else for (const [k, v] of Object.entries(a)) if (v !== undefined) q.set(k, v);
  }
  const qs = q.toString();
  return `#/${parts.join('/')}${qs ? `?${qs}` : ''}`;
}

export const go = (h: string): void => { location.hash = h; };

export function useRoute(): Route {
  const [route, setRoute] = useState(() => parse(location.hash));
  useEffect(() => {
    const on = () => setRoute(parse(location.hash));
    addEventListener('hashchange', on);
    return () => removeEventListener('hashchange', on);
  }, []);
  return route;
}

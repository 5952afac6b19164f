import { invalid } from '../../errors.js';

/** The most sandboxes a page holds, and what a listing without `limit` gets (as E2B's API). */
export const PAGE_MAX = 100;

/** What a listed sandbox is ordered by: when it started, then its id (two may start in the same millisecond). */
export interface Listed { sandboxID: string; startedAt: string }

export interface PageQuery {
  /** `asc` or `desc` (absent: `desc`, newest first). */
  order: string | null;
  limit: string | null;
  /** The `X-Next-Token` of the page before. */
  nextToken: string | null;
}

/** A position in the listing: the last sandbox of a page, as `(startedAt, id)`. */
type Cursor = [startedAt: string, id: string];

const compare = (a: Cursor, b: Cursor): number => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0);
const cursorOf = (s: Listed): Cursor => [s.startedAt, s.sandboxID];

/** A token is its cursor, opaque to the caller: base64url of `["<startedAt>", "<id>"]`. */
function encode(c: Cursor): string {
  return Buffer.from(JSON.stringify(c)).toString('base64url');
}

function decode(token: string): Cursor {
  const bad = () => invalid('nextToken is not a token of this listing', 'pass the X-Next-Token of the page before, or none for the first page');
  let c: unknown;
  try { c = JSON.parse(Buffer.from(token, 'base64url').toString('utf8')); } catch { throw bad(); }
  if (!Array.isArray(c) || c.length !== 2 || typeof c[0] !== 'string' || typeof c[1] !== 'string' || Number.isNaN(Date.parse(c[0]))) throw bad();
  return [c[0], c[1]];
}

/**
 * One page of `items` (already filtered: states, metadata, template, start time), sorted by start
 * time and id, newest first unless `order` is `asc`; the page after the token's cursor. The next
 * token names the page's last sandbox, so that sandboxes made or gone between two pages move no
 * other one across a page's edge: every sandbox there from the first page to the last is listed
 * exactly once (one made meanwhile is listed only if it sorts after the cursor: with `asc`).
 * `next` is null on the last page.
 */
export function pageOf<T extends Listed>(items: readonly T[], q: PageQuery): { page: T[]; next: string | null } {
  const order = q.order ?? 'desc';
  if (order !== 'asc' && order !== 'desc') throw invalid('order is asc or desc');
  const limit = q.limit === null ? PAGE_MAX : Number(q.limit);
  if (!Number.isInteger(limit) || limit < 1 || limit > PAGE_MAX) throw invalid(`limit must be 1 to ${PAGE_MAX}`);
  const sign = order === 'asc' ? 1 : -1;
  const from = q.nextToken ? decode(q.nextToken) : null;
  const rest = [...items].sort((a, b) => sign * compare(cursorOf(a), cursorOf(b)))
    .filter((s) => !from || sign * compare(cursorOf(s), from) > 0);
  const page = rest.slice(0, limit);
  return { page, next: rest.length > limit ? encode(cursorOf(page[page.length - 1])) : null };
}

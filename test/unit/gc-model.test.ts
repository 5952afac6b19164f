import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import fc from 'fast-check';
import { garbage, type GraphVersion } from '../../packages/server/src/engine/gc.ts';
import { SqliteMetadataStore } from '../../packages/server/src/store/metadata/sqlite/sqlite-store.ts';

/** One step of a tenant's history. */
type Op =
  | { kind: 'commit'; ctx: number; days: number; merge: number | null }
  | { kind: 'conflict'; ctx: number; back: number; days: number }
  | { kind: 'fork'; from: number; back: number }
  | { kind: 'delete'; ctx: number };

const op: fc.Arbitrary<Op> = fc.oneof(
  { weight: 6, arbitrary: fc.record({ kind: fc.constant('commit' as const), ctx: fc.nat(4), days: fc.nat(2), merge: fc.option(fc.nat(4), { freq: 4 }) }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('conflict' as const), ctx: fc.nat(4), back: fc.nat(5), days: fc.nat(2) }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('fork' as const), from: fc.nat(4), back: fc.nat(5) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('delete' as const), ctx: fc.nat(4) }) },
);

const at = (day: number) => new Date(Date.UTC(2026, 0, 1) + day * 86_400_000).toISOString();

/**
 * The SQL that selects garbage a page at a time (VersionRepository.garbage)
 * agrees with the reference model over the whole graph (engine/gc.ts,
 * `garbage`) on random histories: commits, merges, conflicts, forks (at
 * attached versions) and deleted contexts, for any retention.
 */
test('gc model: the store\'s SQL selects exactly what the reference model drops', async () => {
  // One store for every run, each run a tenant of its own (the selection is per tenant): opening
  // and closing a store per run (its reader and checkpointer threads) cost ~0.2 s each, most of
  // the fast tier's time. Earlier runs' tenants stay beside the current one, so a selection that
  // reached across tenants would fail here too.
  const dir = mkdtempSync(path.join(tmpdir(), 'shellbase-gcmodel-'));
  const md = new SqliteMetadataStore(path.join(dir, 'meta.db'));
  let run = 0;
  try {
    await md.versions.ensureImage({ id: 'img', tenantId: '', parent: null, depth: 0, layers: ['image:x:1'], changes: null, cause: { kind: 'image' }, bytes: 0, createdAt: at(0) },
      { id: 'image:x:1', kind: 'image', bytes: 0, createdAt: at(0) });
    await fc.assert(fc.asyncProperty(fc.array(op, { minLength: 1, maxLength: 40 }), fc.nat(30), fc.integer({ min: 1, max: 4 }), async (ops, cutoffDay, keep) => {
      const t = `t${++run}`;
      await md.tenants.create({ id: t, name: t, admin: false, createdAt: at(0) });
      const graph: GraphVersion[] = [];
      const heads = new Map<number, string>();
      /** Each live context's attached history, newest last. */
      const attached = new Map<number, string[]>();
      const depth = new Map<string, number>([['img', 0]]);
      let day = 1;
      let n = 0;
      let next = 5;
      const add = async (ctx: number, parent: string, merged: string | null, detached: boolean) => {
        const id = `${t}v${n++}`;
        const d = Math.max(depth.get(parent)!, merged ? depth.get(merged)! : 0) + 1;
        depth.set(id, d);
        const ok = await md.versions.commit({
          version: { id, tenantId: t, parent, merged, context: `c${ctx}`, depth: d, layers: ['image:x:1'], changes: [], cause: { kind: 'exec' }, bytes: 0, createdAt: at(day) },
          ...(detached ? {} : { moveHead: { tenantId: t, context: `c${ctx}`, expectedHead: parent } }),
        });
        assert.ok(ok);
        graph.push({ id, tenantId: t, parent, merged, context: `c${ctx}`, createdAt: at(day) });
        return id;
      };
      const ensure = async (ctx: number) => {
        if (heads.has(ctx)) return;
        await md.contexts.create({ tenantId: t, name: `c${ctx}`, head: 'img', image: 'x', createdAt: at(day), updatedAt: at(day) });
        heads.set(ctx, 'img');
        attached.set(ctx, ['img']);
      };
      for (const o of ops) {
        if (o.kind === 'commit') {
          await ensure(o.ctx);
          day += o.days;
          const other = o.merge !== null && o.merge !== o.ctx ? heads.get(o.merge) : undefined;
          const merged = other && other !== 'img' ? other : null;
          const id = await add(o.ctx, heads.get(o.ctx)!, merged, false);
          heads.set(o.ctx, id);
          attached.get(o.ctx)!.push(id);
        } else if (o.kind === 'conflict') {
          if (!heads.has(o.ctx)) continue;
          day += o.days;
          const hist = attached.get(o.ctx)!;
          await add(o.ctx, hist[Math.max(0, hist.length - 1 - o.back)], null, true);
        } else if (o.kind === 'fork') {
          if (!heads.has(o.from)) continue;
          const hist = attached.get(o.from)!;
          const base = hist[Math.max(0, hist.length - 1 - o.back)];
          const ctx = next++;
          await md.contexts.create({ tenantId: t, name: `c${ctx}`, head: base, image: 'x', createdAt: at(day), updatedAt: at(day) });
          heads.set(ctx, base);
          attached.set(ctx, [base]);
        } else {
          if (!heads.has(o.ctx)) continue;
          await md.contexts.delete(t, `c${o.ctx}`);
          heads.delete(o.ctx);
          attached.delete(o.ctx);
          for (const v of graph) if (v.context === `c${o.ctx}`) v.context = null;
        }
      }
      const retention = { cutoff: new Date(Date.parse(at(cutoffDay)) + 43_200_000).toISOString(), keepVersions: keep };
      const want = garbage(graph, [...heads.values()], new Set(), () => retention).sort();
      const got = (await md.versions.garbage(t, retention, [], 10_000)).sort();
      assert.deepEqual(got, want);
    }), { numRuns: 150 });
  } finally {
    await md.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

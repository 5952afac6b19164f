import type { Context } from '@shellbase/protocol';
import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import { ShellbaseError, invalid } from '../../errors.js';
import { durably, type Caller, type Deps } from '../../core/deps.js';
import { checkStoredBytes, overQuota, quotasOf } from '../../core/quotas.js';
import { ociLayerTar } from '../../images/oci/layer-tar.js';
import { unpackOciTar } from '../../images/oci/unpack.js';
import { packedTar } from '../../store/blobs/pack.js';
import { checkName } from '../../core/validate.js';
import type { ContextRow, NewVersion, VersionRow } from '../../store/metadata/types.js';
import { readTar, type TarEntry } from '../../util/tar.js';
import { transferOf } from './export.js';
import { MANIFEST, MAX_MANIFEST, SUMS, layerEntry, parseManifest, parseSums, pieceEntry, type Manifest } from './format.js';

export interface ImportOptions {
  /** The new context's name (default: the archive's). */
  as?: string;
}

/** What the import needs of the engine: a built-in image's root version on this server. */
export type ImageVersionOf = (image: string) => Promise<VersionRow>;

const damaged = (why: string, details?: Record<string, unknown>): ShellbaseError =>
  invalid(`the archive is damaged: ${why}`, 'export the context again and send the whole file', details);

/**
 * Recreates a context from an archive (format.ts) with the same version ids. The manifest is
 * checked before any layer is read: its format, the new name (free), and each version id (one
 * that exists here is reused when it is the caller's with the same parents and layers, else
 * refused with `conflict`). Layers are unpacked as they stream in, hashed on the way; after
 * `SHA256SUMS` proved every part, the layer rows, the versions (parents first) and the context
 * row are written. Any failure removes what the import made (rows and layer trees); what a
 * crash interrupts, start-up recovery and garbage collection remove (rows without a context,
 * trees without a row).
 */
export function importContext(deps: Deps, imageVersion: ImageVersionOf, caller: Caller, body: Readable, opts: ImportOptions): Promise<Context> {
  return durably(deps.durability, () => new Import(deps, imageVersion, caller).run(body, opts));
}

class Import {
  private readonly madeLayers: string[] = [];
  private readonly madeVersions: string[] = [];

  constructor(private readonly deps: Deps, private readonly imageVersion: ImageVersionOf, private readonly caller: Caller) {}

  async run(body: Readable, opts: ImportOptions): Promise<Context> {
    // The admin's layers unpack with the host's tar as root, every attribute kept (as a cluster's
    // own fetches do); a tenant's confined, as an image's layers are (importLayerConfined).
    const transfer = transferOf(this.deps.snapshotter);
    const importLayer = this.caller.admin ? transfer.importLayer.bind(transfer) : (id: string, r: Readable) => this.importLayerConfined(id, r);
    const quotas = quotasOf(this.deps.config, this.caller);
    if (!this.caller.admin) await checkStoredBytes(this.deps.metadata, this.caller.tenantId, quotas);
    // A tenant's stored bytes with what this import has unpacked so far: checked after each layer.
    const stored = this.caller.admin || !Number.isFinite(quotas.storedBytes) ? null : await this.deps.metadata.tenants.storedBytes(this.caller.tenantId);
    let unpacked = 0;
    const bytes = body[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
    try {
      const entries = readTar({ [Symbol.asyncIterator]: () => bytes })[Symbol.asyncIterator]();
      const first = await next(entries);
      if (!first || first.header.path !== MANIFEST) throw invalid(`not a context archive: it does not start with ${MANIFEST}`, 'pass a file `shellbase export` wrote');
      const hashes = new Map<string, string>();
      const manifestBytes = await readWhole(first, MAX_MANIFEST);
      hashes.set(MANIFEST, sha256(manifestBytes));
      const m = parseManifest(manifestBytes);
      const name = checkName(opts.as ?? m.context.name);
      const plan = await this.plan(m, name);
      let sums: Map<string, string> | null = null;
      let at = 0;
      // The entry read past a layer's last piece (format 2), for the next turn.
      let ahead: TarEntry | null = null;
      for (let e = await next(entries); e; e = ahead ?? await next(entries)) {
        ahead = null;
        if (e.header.path === SUMS) { sums = parseSums((await readWhole(e, 1 << 20)).toString('utf8')); break; }
        const layer = m.layers[at];
        const whole = m.format === 1;
        if (!layer || e.header.path !== (whole ? layerEntry(layer.id) : pieceEntry(layer.id, 0))) throw damaged(`unexpected entry ${JSON.stringify(e.header.path)}`);
        at++;
        // The layer's pack: its one entry (format 1), or its pieces in order (format 2), each entry hashed.
        const first = e;
        const pack = async function* (): AsyncGenerator<Buffer> {
          let cur: TarEntry | null = first;
          for (let k = 1; cur; k++) {
            const hash = createHash('sha256');
            for await (const c of cur.body) { hash.update(c as Buffer); yield c as Buffer; }
            hashes.set(cur.header.path, hash.digest('hex'));
            if (whole) return;
            const n = await next(entries);
            if (n && n.header.path === pieceEntry(layer.id, k)) cur = n;
            else { ahead = n; return; }
          }
        };
        if (plan.reuse.has(layer.id)) {
          for await (const _ of pack()) { /* hashed only */ }
        } else {
          this.caller.hold.layerIds([layer.id]);
          // A tree already here is not this import's to remove on failure (another import's, at once).
          const made = transfer.has(layer.id) ? () => undefined : () => { this.madeLayers.push(layer.id); };
          const bytes = await this.unpack(importLayer, layer.id, pack(), made);
          plan.bytes.set(layer.id, bytes);
          unpacked += bytes;
          if (stored !== null && stored + unpacked > quotas.storedBytes) {
            throw overQuota('storedBytes', quotas.storedBytes, 'import into a tenant with room for the archive\'s layers, or delete contexts you no longer need');
          }
        }
        if (ahead === null && !whole) {
          // The archive ended right after the layer's last piece: no SHA256SUMS follows.
          break;
        }
      }
      if (!sums) throw damaged(`it ends before its ${SUMS} (the archive was cut short)`);
      if (at !== m.layers.length) throw damaged(`it holds ${at} of its ${m.layers.length} layers`);
      for (const [part, hex] of hashes) {
        if (sums.get(part) !== hex) throw damaged(`${part} does not match its sha256 in ${SUMS}`, { part });
      }
      // And the other way: every part the sums name was read (a piece dropped from the middle or the end).
      for (const part of sums.keys()) if (!hashes.has(part)) throw damaged(`${SUMS} names ${part}, which the archive lacks`, { part });
      await this.deps.durability.layers();
      return await this.commit(m, name, plan);
    } catch (e) {
      await this.undo();
      // The rest of the request is read (and dropped), so the connection can carry the answer and the next request.
      await drain(bytes);
      throw e;
    }
  }

  /** Checks what the archive names against this server before any layer is read. */
  private async plan(m: Manifest, name: string) {
    const { metadata, config } = this.deps;
    const tenantId = this.caller.tenantId;
    if (await metadata.contexts.get(tenantId, name)) {
      throw new ShellbaseError('already_exists', `context ${JSON.stringify(name)} already exists`, {
        details: { context: name }, hint: 'import it under another name (--as NAME), or delete the existing context',
      });
    }
    const { contexts } = quotasOf(config, this.caller);
    if ((await metadata.contexts.count(tenantId)) >= contexts) throw overQuota('contexts', contexts, 'delete contexts you no longer need, or ask the admin for a higher quota');
    // Built-in images: this server's build of each (its own root version and layer).
    const ids = new Map<string, string>();
    for (const i of m.images) {
      const local = await this.imageVersion(i.name);
      ids.set(i.version, local.id);
      ids.set(i.layer, local.layers[0]);
    }
    const map = (id: string | null) => (id === null ? null : ids.get(id) ?? id);
    const depth = new Map<string, number>();
    for (const i of m.images) depth.set(map(i.version)!, 0);
    const versions: NewVersion[] = [];
    const existing = new Set<string>();
    for (const v of m.versions) {
      const parents = [map(v.parent), map(v.merged)].filter((p): p is string => p !== null);
      const row: NewVersion = {
        id: v.id, tenantId, parent: map(v.parent), merged: map(v.merged), context: name, layers: v.layers.map((l) => map(l)!),
        depth: parents.length ? Math.max(...parents.map((p) => depth.get(p) ?? 0)) + 1 : 0,
        cause: v.cause, bytes: v.bytes, createdAt: v.createdAt, changes: v.changes,
      };
      const here = await metadata.versions.get(v.id);
      if (here) {
        // A parent the archive leaves out (null) is not compared: a version exported alone.
        const same = here.tenantId === tenantId && JSON.stringify(here.layers) === JSON.stringify(row.layers)
          && (row.parent === null || here.parent === row.parent) && (row.merged === null || (here.merged ?? null) === row.merged);
        if (!same) {
          throw new ShellbaseError('conflict', `version ${v.id} exists on this server with other content`, {
            details: { version: v.id }, hint: 'an archive can be imported where its versions are absent, or present as they were exported',
          });
        }
        this.caller.hold.version(v.id);
        existing.add(v.id);
        depth.set(v.id, here.depth);
        continue;
      }
      depth.set(v.id, row.depth);
      versions.push(row);
    }
    const reuse = await metadata.versions.knownLayers(m.layers.map((l) => l.id));
    for (const id of reuse) {
      if (!(await metadata.versions.tenantRefersTo(tenantId, id))) {
        throw new ShellbaseError('conflict', `layer ${id} exists on this server and is not the caller's`, {
          details: { layer: id }, hint: 'an archive can be imported where its layers are absent, or the caller\'s own',
        });
      }
    }
    this.caller.hold.layerIds([...reuse]);
    for (const v of m.versions) this.caller.hold.version(v.id);
    return { versions, reuse, existing, bytes: new Map<string, number>(), head: m.context.head };
  }

  /**
   * A layer of a tenant's import: its pack decompressed here, rewritten as an OCI layer's tar
   * (images/oci/layer-tar.ts: whiteouts and opaque directories as marker files, owners as the
   * sandbox's ids), unpacked by the runtime's confined tar as an image's layer is (no device node
   * or FIFO, nothing outside the layer's root, no extended attributes), and its markers made
   * overlayfs' again by the snapshotter, under the archive's layer id.
   */
  private async importLayerConfined(id: string, packed: Readable): Promise<{ bytes: number }> {
    const { snapshotter, runtime, config } = this.deps;
    const tar = ociLayerTar(packedTar(packed));
    try {
      const { layer } = await unpackOciTar(snapshotter, runtime, tar, { diskMb: quotasOf(config, this.caller).maximums.diskMb, layerId: id });
      return { bytes: layer.bytes };
    } catch (e) {
      // The layer's tree appeared meanwhile: another import of it, at once.
      if ((e as NodeJS.ErrnoException).code === 'ENOTEMPTY' || (e as NodeJS.ErrnoException).code === 'EEXIST') {
        throw new ShellbaseError('conflict', `layer ${id} is being imported by another import at once`, { details: { layer: id }, hint: 'import the archive again once the other import has ended' });
      }
      throw e;
    }
  }

  /** Unpacks one layer's pack, reading every byte of it (what the unpacker leaves unread too: its entries are hashed as read). */
  private async unpack(importLayer: (id: string, r: Readable) => Promise<{ bytes: number }>, id: string, pack: AsyncGenerator<Buffer>, made: () => void): Promise<number> {
    const it = pack;
    const source = new Readable({
      read() {
        it.next().then((r) => { if (r.done) this.push(null); else this.push(r.value); }, (err: Error) => this.destroy(err));
      },
    });
    let bytes: number;
    try {
      bytes = (await importLayer(id, source)).bytes;
      made();
    } catch (err) {
      if (err instanceof ShellbaseError) throw err;
      throw damaged(`layer ${id} could not be unpacked: ${(err as Error).message}`, { layer: id });
    }
    for (let r = await it.next(); !r.done; r = await it.next()) { /* hashed as read */ }
    return bytes;
  }

  private async commit(m: Manifest, name: string, plan: Awaited<ReturnType<Import['plan']>>): Promise<Context> {
    const { metadata } = this.deps;
    const now = new Date().toISOString();
    for (const l of m.layers) {
      if (plan.reuse.has(l.id)) continue;
      // An OCI layer's digest is what image pulls find a stored layer by: only the admin's import
      // says it (a tenant's could name an image's diff_id over files of its own).
      const digest = this.caller.admin ? l.digest : undefined;
      await metadata.versions.addLayer({ id: l.id, kind: l.kind, bytes: plan.bytes.get(l.id) ?? l.bytes, createdAt: now, ...(digest ? { digest } : {}) });
    }
    for (const v of plan.versions) {
      this.madeVersions.push(v.id);
      await metadata.versions.commit({ version: v });
    }
    const c = m.context;
    const row: ContextRow = {
      tenantId: this.caller.tenantId, name, head: plan.head, image: c.image, createdAt: now, updatedAt: now,
      ...(c.defaults ? { defaults: c.defaults } : {}), ...(c.config ? { config: c.config } : {}), ...(c.network ? { network: c.network } : {}),
    };
    if (!(await metadata.contexts.create(row))) {
      throw new ShellbaseError('already_exists', `context ${JSON.stringify(name)} already exists`, { details: { context: name }, hint: 'import it under another name (--as NAME)' });
    }
    this.madeVersions.length = 0;
    this.madeLayers.length = 0;
    return {
      name, head: row.head, image: row.image, createdAt: now, updatedAt: now,
      ...(row.network ? { network: row.network } : {}), ...(row.defaults ? { defaults: row.defaults } : {}), ...(row.config ? { config: row.config } : {}),
    };
  }

  /** Removes the rows and layer trees this import made. */
  private async undo(): Promise<void> {
    const { metadata, snapshotter } = this.deps;
    // Dropping the versions drops the rows of layers nothing else refers to; a row recorded for
    // a version that was never written is left to garbage collection (it refers to nothing).
    if (this.madeVersions.length) await metadata.versions.drop(this.madeVersions, new Set());
    if (this.madeLayers.length) await snapshotter.remove(this.madeLayers);
  }
}

async function next(it: AsyncIterator<TarEntry>): Promise<TarEntry | null> {
  const r = await it.next();
  return r.done ? null : r.value;
}

async function readWhole(e: TarEntry, max: number): Promise<Buffer> {
  if (e.header.size > max) throw invalid(`not a context archive: ${e.header.path} is too large`, 'pass a file `shellbase export` wrote');
  const parts: Buffer[] = [];
  for await (const c of e.body) parts.push(c);
  const all = Buffer.concat(parts);
  if (all.length !== e.header.size) throw damaged(`it ends in the middle of ${e.header.path} (the archive was cut short)`);
  return all;
}

async function drain(it: AsyncIterator<Buffer>): Promise<void> {
  try { while (!(await it.next()).done) { /* dropped */ } } catch { /* the request failed itself */ }
}

const sha256 = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

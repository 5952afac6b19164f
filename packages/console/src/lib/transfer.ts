import { tarBlob, type TarBlobInput } from '@shellbase/sdk/core';
import { sb } from '../api/session.js';

/** Saves a Blob as a download named `name`. */
export function save(blob: Blob, name: string): void {
  const a = document.createElement('a');
  a.href = URL.createObjectURL(blob);
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 60_000);
}

export const join = (dir: string, name: string) => `${dir.replace(/\/+$/, '')}/${name}`;

/** Limits of a directory download: the browser holds the whole archive in memory and reads each file with its own request. */
export const TAR_LIMITS = { files: 5000, bytes: 512 * 1024 * 1024 };

/**
 * A directory at a version as a tar archive (the SDK's writer), built here from the files API (one
 * listing per directory, one read per file): the API has no archive download of its own.
 */
export async function tarDirectory(ctx: string, dir: string, version: string, progress: (files: number, bytes: number) => void): Promise<Blob> {
  const api = sb.context(ctx).files;
  const entries: TarBlobInput[] = [];
  let files = 0;
  let total = 0;
  const base = dir.replace(/\/+$/, '');
  const rel = (p: string) => p.slice(base.length + 1);
  const queue = [base || '/'];
  while (queue.length) {
    const d = queue.shift()!;
    for (const e of await api.list(d, { version })) {
      const p = join(d === '/' ? '' : d, e.name);
      const mtime = Date.parse(e.mtime) / 1000;
      if (e.type === 'dir') { entries.push({ path: rel(p), type: 'dir', mode: e.mode, mtime }); queue.push(p); }
      else if (e.type === 'symlink' && e.target !== undefined) entries.push({ path: rel(p), type: 'symlink', mode: e.mode, mtime, linkname: e.target });
      else if (e.type === 'file') {
        if (++files > TAR_LIMITS.files) throw new Error(`more than ${TAR_LIMITS.files} files: download a smaller directory, or archive it with a query (tar -C ${dir} -cf ...)`);
        total += e.size;
        if (total > TAR_LIMITS.bytes) throw new Error(`more than ${TAR_LIMITS.bytes >> 20} MiB: archive it with a query instead`);
        const data = await (await api.open(p, { version })).blob();
        entries.push({ path: rel(p), type: 'file', mode: e.mode, mtime, data });
        progress(files, total);
      }
    }
  }
  return tarBlob(entries);
}

/** What a drop or a file picker gave: plain files, and folders (walked) as paths relative to the drop. */
export async function droppedFiles(dt: DataTransfer): Promise<{ path: string; file: File }[]> {
  const items = [...dt.items].filter((i) => i.kind === 'file');
  const roots = items.map((i) => i.webkitGetAsEntry?.()).filter((e): e is FileSystemEntry => !!e);
  if (roots.length === 0) return [...dt.files].map((file) => ({ path: file.name, file }));
  const out: { path: string; file: File }[] = [];
  async function walk(entry: FileSystemEntry, prefix: string): Promise<void> {
    if (entry.isFile) {
      const file = await new Promise<File>((res, rej) => (entry as FileSystemFileEntry).file(res, rej));
      out.push({ path: prefix + entry.name, file });
    } else if (entry.isDirectory) {
      const reader = (entry as FileSystemDirectoryEntry).createReader();
      for (;;) {
        const batch = await new Promise<FileSystemEntry[]>((res, rej) => reader.readEntries(res, rej));
        if (batch.length === 0) break;
        for (const e of batch) await walk(e, `${prefix}${entry.name}/`);
      }
    }
  }
  for (const r of roots) await walk(r, '');
  return out;
}

/**
 * Uploads files below `dir`: one file as a plain write, several (or folders) as one tar (the SDK's
 * writer; the Files are not read into memory): one version either way.
 */
export async function upload(ctx: string, dir: string, files: { path: string; file: File }[]): Promise<string> {
  const api = sb.context(ctx).files;
  if (files.length === 1 && !files[0]!.path.includes('/')) {
    return (await api.write(join(dir, files[0]!.path), files[0]!.file)).version;
  }
  const dirs = new Set<string>();
  for (const f of files) {
    const parts = f.path.split('/').slice(0, -1);
    for (let i = 1; i <= parts.length; i++) dirs.add(parts.slice(0, i).join('/'));
  }
  const now = Date.now();
  const entries: TarBlobInput[] = [
    ...[...dirs].sort().map((d): TarBlobInput => ({ path: d, type: 'dir', mode: 0o755, mtime: now / 1000 })),
    ...files.map((f): TarBlobInput => ({ path: f.path, type: 'file', mode: 0o644, mtime: (f.file.lastModified || now) / 1000, data: f.file })),
  ];
  return (await api.writeTar(dir, tarBlob(entries))).version;
}

import { chmodSync, lchownSync, lstatSync, lutimesSync, mkdirSync, renameSync } from 'node:fs';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { spawn } from 'node:child_process';
import { ShellbaseError } from '../../errors.js';
import { USERNS_SPEC } from '../../util/idmap.js';
import { SBX } from '../../util/native.js';
import { scanLayer } from '../../store/layers/scan.js';
import { ancestorsOf, makeParents, place } from './writer.js';
import type { VersionView } from './view.js';

/**
 * Unpacks a tar stream into `staging` with GNU tar inside a throw-away
 * bubblewrap sandbox, in the sandboxes' user namespace, that sees only the
 * host's /usr (read-only) and the staging directory: whatever the archive
 * holds (absolute names, `..`, symlinks followed by members below them,
 * device nodes), nothing outside staging can be reached, no device node can
 * be made, and owners are stored as a sandbox maps them (ids past 65535 fail).
 */
export async function unpackTar(body: Readable, staging: string): Promise<void> {
  const args = [
    '--unshare-ipc', '--unshare-pid', '--unshare-net', '--unshare-uts', '--unshare-cgroup', '--die-with-parent', '--new-session',
    '--ro-bind', '/usr', '/usr',
    '--symlink', 'usr/lib', '/lib', '--symlink', 'usr/lib64', '/lib64', '--symlink', 'usr/bin', '/bin',
    '--bind', staging, '/out', '--proc', '/proc', '--dev', '/dev', '--chdir', '/out', '--clearenv',
    '--setenv', 'PATH', '/usr/bin', '--cap-drop', 'ALL', '--cap-add', 'CAP_CHOWN', '--cap-add', 'CAP_FOWNER',
    '--cap-add', 'CAP_DAC_OVERRIDE', '--cap-add', 'CAP_FSETID',
    '--', 'tar', '-x', '--numeric-owner', '--no-overwrite-dir', '-f', '-',
  ];
  const child = spawn(SBX, ['userns', USERNS_SPEC, '--', 'bwrap', ...args], { stdio: ['pipe', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (c: Buffer) => { if (stderr.length < 4096) stderr += c.toString(); });
  child.stdin.on('error', () => undefined);
  body.pipe(child.stdin);
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  if (code !== 0) {
    const full = /Disk quota exceeded|No space left/.test(stderr);
    throw new ShellbaseError(full ? 'payload_too_large' : 'invalid_argument', `the tar stream could not be unpacked: ${stderr.trim().slice(0, 500)}`, {
      hint: full ? 'upload less than limits.diskMb at once' : 'send a tar archive of regular files, directories and symlinks',
    });
  }
}

/**
 * Moves what was unpacked into the layer tree below `dir` (segments), each
 * entry placed as a write of that path would be: through symlinked parents of
 * the version, keeping the attributes of directories that exist there.
 */
export async function moveIntoLayer(staging: string, tree: string, view: VersionView, dir: readonly string[]): Promise<void> {
  const { changes } = await scanLayer(staging);
  const dirs: [string, string][] = [];
  for (const [rel, type] of changes) {
    const segments = [...dir, ...rel.slice(1).split('/')];
    if (type === 'd') {
      // A directory the version has (maybe behind a symlink, as /bin) keeps its own attributes.
      const existing = view.find(segments);
      if (existing?.type === 'dir') {
        makeParents(tree, { ancestors: ancestorsOf(view, existing.segments)!, missing: [], name: '' });
        continue;
      }
    }
    // Below a directory made in this layer the view knows nothing: place by the nearest existing parent.
    const p = place(view, segments);
    const target = path.join(makeParents(tree, p), p.name);
    const source = path.join(staging, rel);
    if (type === 'd') {
      mkdirSync(target, { recursive: true });
      dirs.push([source, target]);
    } else {
      renameSync(source, target);
    }
  }
  // Directory attributes last (children changed their times), deepest first.
  for (const [source, target] of dirs.reverse()) {
    const st = lstatSync(source);
    lchownSync(target, st.uid, st.gid);
    chmodSync(target, st.mode & 0o7777);
    lutimesSync(target, st.atime, st.mtime);
  }
}

import { execFileSync } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { tar, type TarInput } from '../packages/sdk/src/tar.ts';

/** What the base layer's busybox answers to (links in /bin). */
const APPLETS = ['sh', 'cat', 'ls', 'id', 'env', 'pwd', 'echo', 'mkdir', 'touch', 'test', 'rm', 'true', 'false', 'sleep', 'wc', 'stat', 'cp', 'chmod', 'head', 'grep', 'mv', 'sed'];

/**
 * The bottom layer of the test images: the host's static busybox as /bin, a
 * user `app` (1000:1000, home /home/app, also in group staff 50), /etc/motd,
 * /opt/{a,b}, /root, /tmp. Small, and a shell for queries to run.
 */
export function baseLayer(extra: TarInput[] = []): Buffer {
  return tar([
    { path: 'bin', type: 'dir' },
    { path: 'bin/busybox', data: readFileSync('/bin/busybox'), mode: 0o755 },
    ...APPLETS.map((a): TarInput => ({ path: `bin/${a}`, type: 'symlink', linkname: 'busybox' })),
    { path: 'etc', type: 'dir' },
    { path: 'etc/passwd', data: 'root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/home/app:/bin/sh\n' },
    { path: 'etc/group', data: 'root:x:0:\napp:x:1000:\nstaff:x:50:app\n' },
    { path: 'etc/motd', data: 'welcome\n' },
    { path: 'root', type: 'dir', mode: 0o700 },
    { path: 'home', type: 'dir' },
    { path: 'home/app', type: 'dir', uid: 1000, gid: 1000 },
    { path: 'tmp', type: 'dir', mode: 0o1777 },
    { path: 'opt', type: 'dir' }, { path: 'opt/a', data: 'a' }, { path: 'opt/b', data: 'b' },
    ...extra,
  ]);
}

/** A second layer: an app, a whiteout of /etc/motd and /opt made opaque (only c below it). */
export function appLayer(): Buffer {
  return tar([
    { path: 'app', type: 'dir' },
    { path: 'app/hello.txt', data: 'hello from the image\n' },
    { path: 'etc', type: 'dir' },
    { path: 'etc/.wh.motd', data: '' },
    { path: 'opt', type: 'dir' },
    { path: 'opt/.wh..wh..opq', data: '' },
    { path: 'opt/c', data: 'c' },
  ]);
}

export const APP_CONFIG = { Env: ['PATH=/bin', 'GREETING=hi'], WorkingDir: '/app', User: 'app', Cmd: ['/bin/sh'], ExposedPorts: { '8080/tcp': {} } };

/** Imported layers in a data directory's store (their trees are named `o_…`). */
export function importedLayers(home: string): string[] {
  return readdirSync(path.join(home, 'store', 'layers')).filter((n) => n.startsWith('o_') && !n.endsWith('.json'));
}

/** `skopeo copy` from a plain-HTTP registry to another transport (an archive, a directory). */
export function skopeoCopy(from: string, to: string): void {
  execFileSync('skopeo', ['copy', '--quiet', '--src-tls-verify=false', '--insecure-policy', from, to], { stdio: ['ignore', 'ignore', 'pipe'] });
}

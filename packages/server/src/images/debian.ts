import { readFileSync, readdirSync } from 'node:fs';

/**
 * The recipe of the `debian` image. Changing anything here means a new image:
 * bump `version`, and every host rebuilds it on its next set-up.
 */
export const debianRecipe = {
  name: 'debian',
  version: 3,
  suite: 'bookworm',
  variant: 'minbase',
  include: ['bash', 'coreutils', 'python3', 'git', 'procps', 'ca-certificates', 'curl', 'xz-utils',
    // Machines boot the same tree: systemd as PID 1, udev for its device units (queries never start them).
    'systemd-sysv', 'udev'],
  /** Added to every uid and gid: files are stored as the sandboxes' user namespace maps them (util/idmap.ts). */
  idShift: 100_000,
} as const;

/** The Debian mirror apt is already configured with (deb822 `.sources` files or sources.list). */
export function configuredMirror(): string {
  const candidates: string[] = [];
  const dir = '/etc/apt/sources.list.d';
  let files: string[] = [];
  try { files = readdirSync(dir).map((f) => `${dir}/${f}`); } catch { /* no directory */ }
  for (const file of ['/etc/apt/sources.list', ...files]) {
    let text = '';
    try { text = readFileSync(file, 'utf8'); } catch { continue; }
    for (const line of text.split('\n')) {
      const deb = /^\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)/.exec(line);
      if (deb && !deb[2].includes('security')) candidates.push(deb[1]);
      const uris = /^\s*URIs:\s*(\S+)/i.exec(line);
      if (uris && !uris[1].includes('security')) candidates.push(uris[1]);
    }
  }
  return candidates[0] ?? 'http://deb.debian.org/debian';
}

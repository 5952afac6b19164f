import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';

/**
 * A flat Debian repository of one package (`shellbase-hello`, built with
 * dpkg-deb): its files by name, served by the upstream under /repo/.
 */
export function debianRepository(dir: string): Map<string, Buffer> {
  const root = path.join(dir, 'pkg');
  mkdirSync(path.join(root, 'DEBIAN'), { recursive: true });
  mkdirSync(path.join(root, 'usr/bin'), { recursive: true });
  writeFileSync(path.join(root, 'DEBIAN/control'), 'Package: shellbase-hello\nVersion: 1.0\nArchitecture: all\nMaintainer: shellbase tests <t@example.test>\nDescription: says hello\n');
  writeFileSync(path.join(root, 'usr/bin/shellbase-hello'), '#!/bin/sh\necho hello from a Debian package\n', { mode: 0o755 });
  const deb = path.join(dir, 'shellbase-hello_1.0_all.deb');
  execFileSync('dpkg-deb', ['--root-owner-group', '--build', root, deb], { stdio: 'ignore' });
  const debBytes = readFileSync(deb);
  const sha = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');
  const packages = `${readFileSync(path.join(root, 'DEBIAN/control'), 'utf8')}Filename: ./shellbase-hello_1.0_all.deb\nSize: ${debBytes.length}\nSHA256: ${sha(debBytes)}\n\n`;
  const release = `Origin: shellbase-tests\nLabel: shellbase-tests\nDate: ${new Date().toUTCString()}\nSHA256:\n ${sha(packages)} ${Buffer.byteLength(packages)} Packages\n`;
  return new Map([['Packages', Buffer.from(packages)], ['Release', Buffer.from(release)], ['shellbase-hello_1.0_all.deb', debBytes]]);
}

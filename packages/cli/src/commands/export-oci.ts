import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as WebStream } from 'node:stream/web';
import { flag, UsageError, type ParsedArgs } from '../args.js';
import { sb } from './client.js';

export const EXPORT_OCI = 'shellbase export CTX --oci DIR|REF [--version V] [--tag T] [--username U --password-stdin] [--insecure]\n'
  + '    (an OCI image: DIR gets an image layout, REF (registry/repository:tag) a push)';

/**
 * Whether `--oci`'s value names a registry rather than a directory: `host/…` where the host has a
 * dot or a port, or is `localhost`, and no such path exists here (`./x` is always a directory).
 */
export function isRegistryRef(target: string): boolean {
  if (/^[./~]/.test(target) || existsSync(target)) return false;
  const slash = target.indexOf('/');
  if (slash <= 0) return false;
  const host = target.slice(0, slash);
  return /[.:]/.test(host) || host === 'localhost';
}

async function readStdin(): Promise<string> {
  const parts: Buffer[] = [];
  for await (const c of process.stdin) parts.push(c as Buffer);
  return Buffer.concat(parts).toString('utf8').replace(/\r?\n$/, '');
}

/** `shellbase export CTX --oci DIR|REF`. */
export async function exportOci(args: ParsedArgs): Promise<number> {
  const target = flag(args, 'oci')!;
  const name = args.positionals[0];
  const version = flag(args, 'version');
  if (args.flags.has('history')) throw new UsageError(`an OCI image holds one version: drop --history\n\nusage: ${EXPORT_OCI}`);
  if (isRegistryRef(target)) {
    const username = flag(args, 'username');
    if (args.flags.has('password-stdin') && !username) throw new UsageError(`--password-stdin needs --username\n\nusage: ${EXPORT_OCI}`);
    const credentials = username ? { username, password: args.flags.has('password-stdin') ? await readStdin() : '' } : undefined;
    const r = await sb().contexts.push(name, target, { version, credentials, insecure: args.flags.has('insecure') });
    console.log(`${r.ref}@${r.digest}`);
    return 0;
  }
  if (existsSync(target) && readdirSync(target).length > 0) throw new UsageError(`${target} is not empty: an image layout goes into a new or empty directory`);
  // The server checks what was asked before the layout's first byte: nothing is made here for a refusal.
  const body = await sb().contexts.exportOci(name, { version, tag: flag(args, 'tag') });
  const made = !existsSync(target);
  mkdirSync(target, { recursive: true });
  try {
    const tar = spawn('tar', ['-x', '-f', '-', '-C', target, '--no-same-owner'], { stdio: ['pipe', 'ignore', 'pipe'] });
    let said = '';
    tar.stderr.on('data', (c: Buffer) => { said += c.toString(); });
    const exited = new Promise<number | null>((resolve) => tar.on('close', resolve));
    await pipeline(Readable.fromWeb(body as WebStream<Uint8Array>), tar.stdin);
    const code = await exited;
    if (code !== 0) throw new Error(`tar could not write the layout into ${target}: ${said.trim()}`);
  } catch (e) {
    if (made) rmSync(target, { recursive: true, force: true });
    else for (const f of readdirSync(target)) rmSync(`${target}/${f}`, { recursive: true, force: true });
    throw e;
  }
  return 0;
}

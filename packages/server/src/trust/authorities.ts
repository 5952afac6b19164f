import { createHash, X509Certificate } from 'node:crypto';
import { readFileSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import type { Logger } from 'pino';
import { run } from '../util/proc.js';

/** One certificate authority the host trusts beyond its system store. */
export interface Authority {
  /** The certificate as PEM (one block, ending in a newline). */
  pem: string;
  /** OpenSSL's subject hash (`openssl x509 -subject_hash`): the name of its link in a hashed directory. */
  subjectHash: string;
  /** Where it was read from (a file of the host's directory, or the operator's bundle). */
  source: string;
}

/** The host's authorities as last read: `fingerprint` changes whenever the set does. */
export interface AuthoritySet {
  authorities: readonly Authority[];
  fingerprint: string;
}

export interface HostAuthoritiesOptions {
  /** Directory of the host's local authorities, read as update-ca-certificates reads it (every `*.crt` below it). */
  hostDir: string;
  /** A PEM bundle the operator names (SHELLBASE_EXTRA_CA_FILE). */
  extraFile?: string;
  log?: Logger;
  /** How long a read is trusted before the files are looked at again. */
  recheckMs?: number;
}

const PEM_BLOCK = /-----BEGIN CERTIFICATE-----\r?\n[\s\S]*?-----END CERTIFICATE-----/g;

/**
 * The TLS authorities this host trusts on top of the public ones: Debian's local authorities
 * (`/usr/local/share/ca-certificates/**.crt`, what `update-ca-certificates` adds to the host's
 * store) and the operator's bundle. Read when first asked for, then looked at again (names, sizes,
 * times) at most every `recheckMs`, and read anew when anything changed. A file that holds no valid
 * certificate is skipped with a warning; a missing directory or bundle is an empty set.
 */
export class HostAuthorities {
  private checkedAt = 0;
  private stamp = '';
  private current: AuthoritySet = { authorities: [], fingerprint: '' };
  private reading: Promise<AuthoritySet> | null = null;

  constructor(private readonly o: HostAuthoritiesOptions) {}

  /** The current set (an empty one when the host has none). */
  async get(): Promise<AuthoritySet> {
    if (Date.now() - this.checkedAt < (this.o.recheckMs ?? 1000)) return this.current;
    if (this.reading) return this.reading;
    this.reading = this.refresh().finally(() => { this.reading = null; });
    return this.reading;
  }

  private async refresh(): Promise<AuthoritySet> {
    const files = this.files();
    const stamp = files.map((f) => `${f.file}:${f.size}:${f.mtimeMs}:${f.ino}`).join('\n');
    if (stamp !== this.stamp) {
      this.current = await this.read(files.map((f) => f.file));
      this.stamp = stamp;
    }
    this.checkedAt = Date.now();
    return this.current;
  }

  /** The files that make the set, in a stable order: the directory's `*.crt` (sorted), then the bundle. */
  private files(): { file: string; size: number; mtimeMs: number; ino: number }[] {
    const found: string[] = [];
    const seen = new Set<string>();
    const walk = (dir: string) => {
      let names: string[];
      try {
        const s = statSync(dir);
        const id = `${s.dev}:${s.ino}`;
        if (seen.has(id)) return; // a directory reached again through a link
        seen.add(id);
        names = readdirSync(dir).sort();
      } catch { return; }
      for (const name of names) {
        const p = path.join(dir, name);
        let isDir = false;
        try { isDir = statSync(p).isDirectory(); } catch { continue; }
        if (isDir) walk(p);
        else if (name.endsWith('.crt')) found.push(p);
      }
    };
    walk(this.o.hostDir);
    if (this.o.extraFile) found.push(this.o.extraFile);
    return found.flatMap((file) => {
      try {
        const s = statSync(file);
        return s.isFile() ? [{ file, size: s.size, mtimeMs: s.mtimeMs, ino: s.ino }] : [];
      } catch {
        return [];
      }
    });
  }

  private async read(files: string[]): Promise<AuthoritySet> {
    const authorities: Authority[] = [];
    const seen = new Set<string>();
    for (const file of files) {
      let text: string;
      try { text = readFileSync(file, 'latin1'); } catch { continue; }
      const blocks = text.match(PEM_BLOCK) ?? [];
      if (blocks.length === 0) this.o.log?.warn({ file }, 'no PEM certificate in a file of the host\'s authorities: skipped');
      for (const block of blocks) {
        const pem = `${block.replace(/\r\n/g, '\n')}\n`;
        let cert: X509Certificate;
        try { cert = new X509Certificate(pem); } catch (e) {
          this.o.log?.warn({ file, err: (e as Error).message }, 'an invalid certificate among the host\'s authorities: skipped');
          continue;
        }
        if (seen.has(cert.fingerprint256)) continue;
        seen.add(cert.fingerprint256);
        let hash: string;
        try { hash = await subjectHash(pem); } catch (e) {
          this.o.log?.warn({ file, err: (e as Error).message }, 'a certificate among the host\'s authorities whose subject hash openssl could not give: skipped');
          continue;
        }
        authorities.push({ pem, subjectHash: hash, source: file });
      }
    }
    const fingerprint = authorities.length === 0 ? ''
      : createHash('sha256').update(authorities.map((a) => a.pem).join('')).digest('hex').slice(0, 16);
    if (fingerprint !== this.current.fingerprint) this.o.log?.info({ authorities: authorities.length }, 'the host\'s TLS authorities for sandboxes and machines');
    return { authorities, fingerprint };
  }
}

/** OpenSSL's hash of the certificate's subject (8 hex digits), as c_rehash names its link. */
async function subjectHash(pem: string): Promise<string> {
  const r = await run('openssl', ['x509', '-noout', '-subject_hash'], { input: pem });
  const hash = r.stdout.toString().trim();
  if (r.code !== 0 || !/^[0-9a-f]{8}$/.test(hash)) throw new Error(`openssl x509 -subject_hash failed: ${r.stderr.trim() || hash}`);
  return hash;
}

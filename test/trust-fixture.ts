import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { ServerConfig } from '@shellbase/server';

/** Where the TLS upstream listens: an address the test server lets through, standing for a company's site. */
export const UPSTREAM = '127.0.0.2';
export const HOST = 'secure.example.test';
/** A commit id the upstream's Git repository (served the "dumb" way) names for main. */
export const COMMIT = '0123456789abcdef0123456789abcdef01234567';

/**
 * An authority of a company (made here by openssl), an HTTPS upstream on loopback whose certificate
 * it signed (`/` answers `trusted`; `/repo.git` is a Git repository for `git ls-remote`), and the
 * server settings that trust it: `extraFile` (SHELLBASE_EXTRA_CA_FILE) holds nothing until `trust()`.
 */
export interface TlsUpstream {
  dir: string;
  port: number;
  /** The authority's certificate (PEM). */
  ca: string;
  config: Pick<ServerConfig, 'egress' | 'trust'>;
  /** Writes the authority into the operator's bundle. */
  trust(): void;
  close(): void;
}

export async function tlsUpstream(): Promise<TlsUpstream> {
  const dir = mkdtempSync(path.join(tmpdir(), 'shellbase-ca-'));
  const f = (name: string) => path.join(dir, name);
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  execFileSync('openssl', ['req', '-x509', ...ec, '-days', '1', '-subj', '/CN=Shellbase Test Company Root', '-addext', 'basicConstraints=critical,CA:TRUE',
    '-addext', 'keyUsage=critical,keyCertSign,cRLSign', '-keyout', f('ca.key'), '-out', f('ca.pem')], { stdio: 'ignore' });
  execFileSync('openssl', ['req', ...ec, '-subj', `/CN=${HOST}`, '-keyout', f('site.key'), '-out', f('site.csr')], { stdio: 'ignore' });
  writeFileSync(f('site.ext'), `subjectAltName=DNS:${HOST}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n`);
  execFileSync('openssl', ['x509', '-req', '-in', f('site.csr'), '-CA', f('ca.pem'), '-CAkey', f('ca.key'), '-CAcreateserial', '-days', '1',
    '-extfile', f('site.ext'), '-out', f('site.pem')], { stdio: 'ignore' });
  const server: Server = createServer({ key: readFileSync(f('site.key')), cert: readFileSync(f('site.pem')) }, (req, res) => {
    const url = req.url ?? '';
    if (url.startsWith('/repo.git/info/refs')) { res.writeHead(200, { 'content-type': 'text/plain' }).end(`${COMMIT}\trefs/heads/main\n`); return; }
    if (url === '/repo.git/HEAD') { res.writeHead(200, { 'content-type': 'text/plain' }).end('ref: refs/heads/main\n'); return; }
    if (url === '/') { res.end('trusted\n'); return; }
    res.writeHead(404).end();
  });
  await new Promise<void>((r) => server.listen(0, UPSTREAM, r));
  const hostDir = f('host-authorities');
  mkdirSync(hostDir);
  const ca = readFileSync(f('ca.pem'), 'utf8');
  return {
    dir, port: (server.address() as AddressInfo).port, ca,
    config: {
      egress: { default: { egress: 'public' }, allowCidrs: [`${UPSTREAM}/32`], hosts: { [HOST]: UPSTREAM }, maxPerSandbox: 16, maxPerTenant: 1024, logDays: 7 },
      trust: { enabled: true, hostDir, extraFile: f('extra.pem') },
    },
    trust: () => writeFileSync(f('extra.pem'), ca),
    close: () => { server.close(); rmSync(dir, { recursive: true, force: true }); },
  };
}

/** A script that fetches the upstream four ways, each line saying which one and what came back. */
export function fetchAll(port: number): string {
  const url = `https://${HOST}:${port}/`;
  return [
    `echo "curl: $(curl -sS ${url} 2>&1)"`,
    `echo "python: $(python3 -c "import urllib.request; print(urllib.request.urlopen('${url}').read().decode(), end='')" 2>&1 | tail -1)"`,
    `echo "git: $(git ls-remote ${url}repo.git 2>&1 | tail -1)"`,
  ].join('; ');
}

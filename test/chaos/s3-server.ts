// The S3 test server (fauxqs, as test/s3.ts starts it) as a process of its own, so the chaos
// harness can run it in a node's network namespace and kill and restart it over the same objects.
// Usage: s3-server.ts HOST PORT DIR BUCKET; prints `ready` once the bucket exists.
import { readFileSync, readdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import { CreateBucketCommand, S3Client } from '@aws-sdk/client-s3';
import { startFauxqs } from 'fauxqs';

const [host, port, dir, bucket] = process.argv.slice(2);
// A PUT in S3 is atomic; fauxqs writes an object's data, then its `.meta.json`, in place. One
// killed mid-write leaves a metadata file cut short, which its next start cannot load: such an
// object (never acknowledged) is dropped, as S3 would never have shown it.
for (const e of readdirSync(dir, { recursive: true, withFileTypes: true })) {
  if (!e.isFile() || !e.name.endsWith('.meta.json')) continue;
  const meta = path.join(e.parentPath, e.name);
  try { JSON.parse(readFileSync(meta, 'utf8')); } catch {
    rmSync(meta, { force: true });
    rmSync(`${meta.slice(0, -'.meta.json'.length)}.data`, { force: true });
  }
}
const server = await startFauxqs({ port: Number(port), host, logger: false, s3StorageDir: dir });
const client = new S3Client({ endpoint: `http://${host}:${port}`, forcePathStyle: true, region: 'us-east-1', credentials: { accessKeyId: 'test', secretAccessKey: 'test' } });
try {
  await client.send(new CreateBucketCommand({ Bucket: bucket }));
} catch (e) {
  if ((e as { name?: string }).name !== 'BucketAlreadyOwnedByYou' && (e as { name?: string }).name !== 'BucketAlreadyExists') throw e;
}
client.destroy();
process.stdout.write('ready\n');
process.on('SIGTERM', () => { void server.stop().then(() => process.exit(0)); });

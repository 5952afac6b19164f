// The S3 test server (fauxqs, as test/s3.ts starts it) as a process of its own, so the chaos
// harness can run it in a node's network namespace and kill and restart it over the same objects.
// Usage: s3-server.ts HOST PORT DIR BUCKET; prints `ready` once the bucket exists.
import { CreateBucketCommand, S3Client } from '@aws-sdk/client-s3';
import { startFauxqs } from 'fauxqs';

const [host, port, dir, bucket] = process.argv.slice(2);
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

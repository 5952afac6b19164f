import { MemorySnapshotter } from '../../packages/server/src/store/snapshotter/memory/memory-snapshotter.ts';
import { snapshotterConformance } from './snapshotter.ts';

snapshotterConformance('memory snapshotter', async () => {
  const store = new MemorySnapshotter();
  await store.open();
  return { store, done: () => store.close() };
});

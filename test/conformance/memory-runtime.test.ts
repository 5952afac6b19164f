import { MemoryRuntime } from '../../packages/server/src/runtime/memory/memory-runtime.ts';
import { MemorySnapshotter } from '../../packages/server/src/store/snapshotter/memory/memory-snapshotter.ts';
import { runtimeConformance } from './runtime.ts';

runtimeConformance('memory runtime', async () => {
  const snapshotter = new MemorySnapshotter();
  snapshotter.addImage('image:test:1', { '/etc/motd': 'welcome\n', '/root/': '', '/tmp/': '' });
  return { runtime: new MemoryRuntime(snapshotter), snapshotter, image: 'image:test:1', imageFile: '/etc/motd', done: async () => undefined };
});

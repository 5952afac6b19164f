import { defineConfig } from 'vite';

// The console is served by `shellbase serve` at /console/ (packages/server/src/api/console.ts):
// every asset is relative to that base, hashed (cached for long), and nothing comes from a CDN.
export default defineConfig({
  base: '/console/',
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  build: { outDir: 'dist', emptyOutDir: true, target: 'es2022', chunkSizeWarningLimit: 400, reportCompressedSize: true },
});

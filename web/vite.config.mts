import preact from '@preact/preset-vite';
import { defineConfig } from 'vite';

// The console is built from web/ into dist/web, which the api role serves at /. Paths are relative
// to the repository root, where the npm scripts run. Nothing is loaded from another origin.
export default defineConfig({
  root: 'web',
  base: '/',
  plugins: [preact()],
  build: {
    outDir: '../dist/web',
    emptyOutDir: true,
    assetsDir: 'assets',
    // A strict CSP allows scripts and styles from this origin only: no inlined data: modules.
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
    sourcemap: false,
    target: 'es2022',
    // elkjs is one chunk of its own, loaded only by the pages that draw a graph.
    chunkSizeWarningLimit: 1600,
  },
});

import path from 'node:path';

/**
 * The compiled tree that process tests run: built once per jest run by test/support/global-setup.ts
 * (tsc, as `npm run build` does) into .ordo-test/dist, so they run what is in the tree without
 * racing other work over dist/. It sits inside the project, so it finds package.json,
 * migrations/ and node_modules/.
 */
export function buildPrivateDist(): { dir: string; main: string; cli: string; remove(): void } {
  const dir = process.env.ORDO_TEST_DIST;
  if (!dir) throw new Error('no compiled tree: run through jest (test/support/global-setup.ts builds it)');
  return {
    dir,
    main: path.join(dir, 'src', 'main.js'),
    cli: path.join(dir, 'src', 'cli', 'main.js'),
    remove: () => undefined,
  };
}

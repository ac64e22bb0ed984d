import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { projectRoot } from '../../src/core/home/project-root';

/**
 * Compiles the current sources (swc, as `npm run build` does) into a private directory under
 * .ordo-test/, so process tests run what is in the tree without racing other test files over dist/.
 * The output sits inside the project, so it finds package.json, migrations/ and node_modules/.
 */
export function buildPrivateDist(): { dir: string; main: string; cli: string; remove(): void } {
  const root = projectRoot();
  const dir = path.join(root, '.ordo-test', `dist-${process.pid}-${randomBytes(4).toString('hex')}`);
  fs.mkdirSync(dir, { recursive: true });
  execFileSync(path.join(root, 'node_modules', '.bin', 'swc'), ['src', 'plugins', '-d', dir, '-q'], {
    cwd: root,
    stdio: 'pipe',
  });
  return {
    dir,
    main: path.join(dir, 'src', 'main.js'),
    cli: path.join(dir, 'src', 'cli', 'main.js'),
    remove: () => fs.rmSync(dir, { recursive: true, force: true }),
  };
}

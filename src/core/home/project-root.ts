import fs from 'node:fs';
import path from 'node:path';

let cached: string | undefined;

/** The directory holding Ordo's package.json (works from `src/` under ts and from `dist/`). */
export function projectRoot(): string {
  if (cached) return cached;
  let dir = __dirname;
  for (;;) {
    const pkg = path.join(dir, 'package.json');
    if (fs.existsSync(pkg) && (JSON.parse(fs.readFileSync(pkg, 'utf8')) as { name?: string }).name === 'ordo') {
      cached = dir;
      return dir;
    }
    const up = path.dirname(dir);
    if (up === dir) throw new Error('cannot find the ordo package root');
    dir = up;
  }
}

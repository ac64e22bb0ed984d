import fs from 'node:fs';
import path from 'node:path';

/**
 * The nearest directory above `file` that other users cannot pass through (no `o+x`), with its
 * mode; undefined when every one lets them.
 * Processes Ordo starts as another user (PostgreSQL as `postgres`, sandboxes as their own uids)
 * must pass through each directory above what they open.
 */
export function closedAncestor(file: string): { dir: string; mode: string } | undefined {
  for (let d = path.dirname(path.resolve(file)); ; d = path.dirname(d)) {
    const { mode } = fs.statSync(d);
    if ((mode & 0o001) === 0) return { dir: d, mode: (mode & 0o777).toString(8).padStart(4, '0') };
    if (d === path.dirname(d)) return undefined;
  }
}

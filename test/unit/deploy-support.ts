import fs from 'node:fs';
import path from 'node:path';
import { PATH_METADATA } from '@nestjs/common/constants';
import { parseAllDocuments } from 'yaml';
import { envSchema } from '../../src/core/config/config';
import { SystemController } from '../../src/core/http/system.controller';

/** Helpers of the deployment tests (docker/, deploy/): the repository's files and Ordo's own facts. */

export const ROOT = path.resolve(__dirname, '..', '..');

export const read = (rel: string): string => fs.readFileSync(path.join(ROOT, rel), 'utf8');

/** Every variable Ordo reads: the keys of its one configuration schema. */
export const ORDO_SETTINGS: ReadonlySet<string> = new Set(Object.keys(envSchema.shape));

/** The paths every role serves without auth (`/healthz`, `/readyz`, …), from the controller's routes. */
export function systemRoutes(): string[] {
  const proto = SystemController.prototype as unknown as Record<string, unknown>;
  return Object.getOwnPropertyNames(proto)
    .map((name) => Reflect.getMetadata(PATH_METADATA, proto[name] as object) as string | undefined)
    .filter((p): p is string => typeof p === 'string')
    .map((p) => `/${p.replace(/^\//, '')}`);
}

/** Every YAML document of a file, failing on any parse error or warning (YAML 1.2, as kubectl reads it). */
export function yamlDocuments(rel: string): Record<string, unknown>[] {
  const docs = parseAllDocuments(read(rel));
  if (!Array.isArray(docs)) throw new Error(`${rel}: not a YAML stream`);
  return docs.map((d, i) => {
    const problems = [...d.errors, ...d.warnings].map((e) => e.message);
    if (problems.length > 0) throw new Error(`${rel} document ${i + 1}: ${problems.join('; ')}`);
    return d.toJS() as Record<string, unknown>;
  });
}

/**
 * A path under dist/ that `npm run build` writes, mapped to the tree the test run compiled with the
 * same tsconfig (test/support/global-setup.ts): `dist/src/main.js` → `<that tree>/src/main.js`.
 */
export function compiledPath(distPath: string): string {
  const dir = process.env.ORDO_TEST_DIST;
  if (!dir) throw new Error('no compiled tree: run through jest (test/support/global-setup.ts builds it)');
  if (!distPath.startsWith('dist/')) throw new Error(`${distPath} is not under dist/`);
  return path.join(dir, distPath.slice('dist/'.length));
}

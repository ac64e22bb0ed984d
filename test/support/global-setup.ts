import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import pg from 'pg';
import { startEmbeddedPostgres, type EmbeddedPostgresHandle } from '../../src/core/database/embedded';
import { migrate } from '../../src/core/database/migrator';

declare global {
  var __ORDO_TEST_PG__:
    { handle?: EmbeddedPostgresHandle; dir?: string; serverUrl: string; template: string } | undefined;
}

/**
 * Provides a PostgreSQL server for the medium and e2e projects: DATABASE_URL's server when set,
 * else an embedded one in a temporary directory. Migrates a template database once; each test
 * file clones it (test/support/test-database.ts).
 */
export default async function globalSetup(): Promise<void> {
  process.env.ORDO_TEST_DIST = buildTestDist();
  let serverUrl = process.env.DATABASE_URL;
  let handle: EmbeddedPostgresHandle | undefined;
  let dir: string | undefined;
  if (!serverUrl) {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-test-pg-'));
    const port = 55000 + (process.pid % 5000);
    handle = await startEmbeddedPostgres(dir, { port, database: 'postgres' });
    serverUrl = handle.ownerUrl;
  }
  const template = `ordo_tpl_${process.pid}`;
  const admin = new pg.Client({ connectionString: serverUrl });
  await admin.connect();
  await admin.query(`drop database if exists ${template} with (force)`);
  await admin.query(`create database ${template}`);
  await admin.end();
  const u = new URL(serverUrl);
  u.pathname = `/${template}`;
  await migrate(u.toString());
  process.env.ORDO_TEST_SERVER_URL = serverUrl;
  process.env.ORDO_TEST_TEMPLATE = template;
  globalThis.__ORDO_TEST_PG__ = { handle, dir, serverUrl, template };
}

/** Compiles the tree once (incrementally) for the tests that start real Ordo processes. */
function buildTestDist(): string {
  const root = path.resolve(__dirname, '..', '..');
  const dir = path.join(root, '.ordo-test', 'dist');
  execFileSync(
    path.join(root, 'node_modules', '.bin', 'tsc'),
    ['-p', 'tsconfig.build.json', '--outDir', dir, '--tsBuildInfoFile', path.join(dir, '.tsbuildinfo')],
    { cwd: root, stdio: 'inherit' },
  );
  return dir;
}

// Regenerates src/core/database/db.generated.ts from the migrated schema (kysely-codegen).
// `--verify` fails when the checked-in file is stale. Uses DATABASE_URL's server when set,
// else a throwaway embedded PostgreSQL.
'use strict';
require('./check-node.cjs');
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const pg = require('pg');

const root = path.resolve(__dirname, '..');
const verify = process.argv.includes('--verify');
const out = path.join(root, 'src/core/database/db.generated.ts');

async function main() {
  execFileSync('npm', ['run', '-s', 'build'], { cwd: root, stdio: 'inherit' });
  const { migrate } = require(path.join(root, 'dist/src/core/database/migrator.js'));
  let stop = async () => {};
  let serverUrl = process.env.DATABASE_URL;
  if (!serverUrl) {
    const { startEmbeddedPostgres } = require(path.join(root, 'dist/src/core/database/embedded.js'));
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-codegen-'));
    const h = await startEmbeddedPostgres(dir, { port: 54420 + Math.floor(Math.random() * 500) });
    serverUrl = h.ownerUrl;
    stop = async () => {
      await h.stop();
      fs.rmSync(dir, { recursive: true, force: true });
    };
  }
  const dbName = `ordo_codegen_${process.pid}`;
  const admin = new pg.Client({ connectionString: serverUrl });
  await admin.connect();
  await admin.query(`create database ${dbName}`);
  const u = new URL(serverUrl);
  u.pathname = `/${dbName}`;
  try {
    await migrate(u.toString());
    const args = [
      path.join(root, 'node_modules/kysely-codegen/dist/cli/bin.js'),
      '--dialect',
      'postgres',
      '--url',
      u.toString(),
      '--out-file',
      out,
      '--default-schema',
      'public',
      '--exclude-pattern',
      'ordo_migration',
      '--type-mapping',
      JSON.stringify({ int8: 'number' }),
      '--log-level',
      'error',
    ];
    if (verify) args.push('--verify');
    execFileSync(process.execPath, args, { cwd: root, stdio: 'inherit' });
  } finally {
    await admin.query(`drop database if exists ${dbName} with (force)`);
    await admin.end();
    await stop();
  }
}
main().catch((e) => {
  console.error(e.message || e);
  process.exit(1);
});

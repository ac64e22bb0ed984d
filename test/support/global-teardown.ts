import fs from 'node:fs';
import pg from 'pg';

export default async function globalTeardown(): Promise<void> {
  const t = globalThis.__ORDO_TEST_PG__;
  if (!t) return;
  const admin = new pg.Client({ connectionString: t.serverUrl });
  await admin.connect();
  const { rows } = await admin.query<{ datname: string }>(
    `select datname from pg_database where datname = $1 or datname like $2`,
    [t.template, `ordo_t_${process.pid}_%`],
  );
  for (const r of rows) await admin.query(`drop database if exists ${r.datname} with (force)`);
  await admin.end();
  await t.handle?.stop();
  if (t.dir) fs.rmSync(t.dir, { recursive: true, force: true });
}

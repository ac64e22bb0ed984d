import { randomBytes } from 'node:crypto';
import pg from 'pg';

/** An empty database on the test server (no template, no migrations), dropped by the returned function. */
export async function createEmptyDatabase(): Promise<{ url: string; drop(): Promise<void> }> {
  const server = process.env.ORDO_TEST_SERVER_URL!;
  const name = `ordo_t_${process.env.ORDO_TEST_TEMPLATE!.replace('ordo_tpl_', '')}_e${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: server });
  await admin.connect();
  await admin.query(`create database ${name}`);
  await admin.end();
  const u = new URL(server);
  u.pathname = `/${name}`;
  return {
    url: u.toString(),
    async drop() {
      const c = new pg.Client({ connectionString: server });
      await c.connect();
      await c.query(`drop database if exists ${name} with (force)`).finally(() => c.end());
    },
  };
}

import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { Database } from '../../src/core/database/database';
import { applicationUrls } from '../../src/core/database/migrator';

export interface TestDatabase {
  name: string;
  ownerUrl: string;
  appUrl: string;
  systemUrl: string;
  /** A Database connected as the application and system roles (RLS applies to the app role). */
  db: Database;
  drop(): Promise<void>;
}

function serverUrl(): string {
  const url = process.env.ORDO_TEST_SERVER_URL;
  if (!url) throw new Error('no test PostgreSQL: run through jest (test/support/global-setup.ts)');
  return url;
}

/** Clones the migrated template into a fresh database for one test file. */
export async function createTestDatabase(): Promise<TestDatabase> {
  const template = process.env.ORDO_TEST_TEMPLATE!;
  const parentPid = template.replace('ordo_tpl_', '');
  const name = `ordo_t_${parentPid}_${randomBytes(5).toString('hex')}`;
  const admin = new pg.Client({ connectionString: serverUrl() });
  await admin.connect();
  try {
    for (let attempt = 0; ; attempt++) {
      try {
        await admin.query(`create database ${name} template ${template}`);
        break;
      } catch (e) {
        // Another file cloning the template at the same moment holds it briefly.
        if ((e as { code?: string }).code !== '55006' || attempt > 50) throw e;
        await new Promise((r) => setTimeout(r, 100 + Math.random() * 200));
      }
    }
  } finally {
    await admin.end();
  }
  const u = new URL(serverUrl());
  u.pathname = `/${name}`;
  const ownerUrl = u.toString();
  const { appUrl, systemUrl } = applicationUrls(ownerUrl);
  const db = new Database({ app: appUrl, system: systemUrl }, { poolSize: 6, applicationName: 'ordo:test' });
  return {
    name,
    ownerUrl,
    appUrl,
    systemUrl,
    db,
    async drop() {
      await db.close();
      const c = new pg.Client({ connectionString: serverUrl() });
      await c.connect();
      await c.query(`drop database if exists ${name} with (force)`).finally(() => c.end());
    },
  };
}

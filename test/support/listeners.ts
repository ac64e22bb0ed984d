import pg from 'pg';

/**
 * Cuts the listening connections named `applicationName` on the test database: they are ended
 * (waited for until gone), `meanwhile` runs (given the owner's connection it used) before their
 * processes listen again (each after its backoff), and once as many listen as before (within 10 s) resolves with how many listened
 * before and after, and what `meanwhile` gave.
 */
export async function cutListeners<T>(
  ownerUrl: string,
  applicationName: string,
  meanwhile: (owner: pg.Client) => Promise<T>,
): Promise<{ before: number; after: number; result: T }> {
  const owner = new pg.Client({ connectionString: ownerUrl });
  await owner.connect();
  const listening = async () =>
    (
      await owner.query<{ n: number }>(
        `select count(*)::int n from pg_stat_activity where application_name = $1 and datname = current_database()`,
        [applicationName],
      )
    ).rows[0].n;
  try {
    const before = await listening();
    await owner.query(
      `select pg_terminate_backend(pid, 5000) from pg_stat_activity
       where application_name = $1 and datname = current_database()`,
      [applicationName],
    );
    const result = await meanwhile(owner);
    let after = await listening();
    for (let i = 0; i < 200 && after < before; i++) {
      await new Promise((r) => setTimeout(r, 50));
      after = await listening();
    }
    return { before, after, result };
  } finally {
    await owner.end();
  }
}

import http from 'node:http';
import { startTestApp, type TestApp } from '../support/test-app';

/** What a client on a kept-alive connection sees while Ordo closes, against real Ordo and PostgreSQL. */
describe('closing the server', () => {
  let app: TestApp | undefined;

  afterEach(async () => {
    await app?.close();
    app = undefined;
  });

  it('ends the kept-alive connection of a request answered while it closes, so the close does not wait for it', async () => {
    app = await startTestApp({ ORDO_ROLES: 'api' });
    const as = { token: app.adminToken, tenantId: app.tenantId };
    const minted = await app.request('POST', '/api/v1/tokens', {
      as,
      body: { scopes: ['worker'], pool: 'default', subject: 'closing' },
    });
    const w = { token: minted.body.token as string, tenantId: app.tenantId };
    const registered = await app.request('POST', '/api/v1/workers', {
      as: w,
      body: { name: 'closing', taskTypes: [{ name: 'noop' }] },
    });
    expect(registered.status).toBe(201);
    const agent = new http.Agent({ keepAlive: true });
    // A long-poll with nothing to hand out is in flight when the close begins and is answered after.
    const answered = new Promise<http.IncomingMessage>((resolve, reject) => {
      const req = http.get(
        `${app!.url}/api/v1/workers/${registered.body.workerId as string}/tasks/next?waitMs=2000`,
        { agent, headers: { authorization: `Bearer ${w.token}`, 'x-tenant-id': w.tenantId } },
        (res) => {
          res.resume();
          res.once('end', () => resolve(res));
        },
      );
      req.once('error', reject);
    });
    await new Promise((r) => setTimeout(r, 300));
    const closed = app.close();
    const res = await answered;
    expect(res.statusCode).toBe(204);
    expect(res.headers.connection).toBe('close');
    // Without the connection's end, the close would wait out Fastify's keep-alive timeout (72 s).
    await closed;
    app = undefined;
    agent.destroy();
  });
});

import http from 'node:http';
import { startTestApp, type TestApp } from '../support/test-app';

/** What a client on a kept-alive connection sees while Ordo closes, against real Ordo and PostgreSQL. */
describe('closing the server', () => {
  let app: TestApp | undefined;

  afterEach(async () => {
    await app?.close();
    app = undefined;
  });

  it('answers a waiting long-poll at once when it closes, on a connection it then ends, so the close waits for neither', async () => {
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
    const waitMs = 30_000;
    const sent = Date.now();
    // A long-poll with nothing to hand out is waiting when the close begins.
    const answered = new Promise<http.IncomingMessage>((resolve, reject) => {
      const req = http.get(
        `${app!.url}/api/v1/workers/${registered.body.workerId as string}/tasks/next?waitMs=${waitMs}`,
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
    // Answered by the close, not at the end of its wait.
    expect(Date.now() - sent).toBeLessThan(waitMs);
    expect(res.headers.connection).toBe('close');
    // Kept alive, the connection would hold the close for Fastify's keep-alive timeout (72 s).
    await closed;
    app = undefined;
    agent.destroy();
  });

  it('ends the kept-alive connection of a request still being answered when the HTTP server closes', async () => {
    app = await startTestApp({ ORDO_ROLES: 'api' });
    const agent = new http.Agent({ keepAlive: true });
    const body = JSON.stringify({ dagId: 'none', inputs: {} });
    let req!: http.ClientRequest;
    const answered = new Promise<http.IncomingMessage>((resolve, reject) => {
      req = http.request(
        `${app!.url}/api/v1/runs`,
        {
          method: 'POST',
          agent,
          headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
        },
        (res) => {
          res.resume();
          res.once('end', () => resolve(res));
        },
      );
      req.once('error', reject);
    });
    // Half the body now: the request is in flight while the server closes.
    req.write(body.slice(0, 10));
    await new Promise((r) => setTimeout(r, 200));
    const closed = app.close();
    // Once the server takes no new request, the rest of the body.
    for (;;) {
      const probe = await fetch(`${app.url}/healthz`).catch(() => null);
      if (probe === null || probe.status === 503) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    req.end(body.slice(10));
    const res = await answered;
    expect(res.statusCode).toBe(401);
    expect(res.headers.connection).toBe('close');
    await closed;
    app = undefined;
    agent.destroy();
  });
});

import path from 'node:path';
import { keygen, readPrivateJwk, readPublicJwk, signBundle } from '../../src/modules/bundles/bundle-offline';
import { packBundle } from '../../src/modules/bundles/bundle-pack';
import fs from 'node:fs';
import os from 'node:os';
import { startTestApp, type TestApp } from '../support/test-app';
import { waitForRun } from './runs-support';

const EXAMPLE_DIR = path.join(__dirname, '../../bundles/example');

/** The README walkthrough of bundles/example, end to end, with the api, worker and scheduler roles. */
describe('example bundle walkthrough', () => {
  let app: TestApp;
  let keysDir: string;
  beforeAll(async () => {
    app = await startTestApp({ ORDO_ROLES: 'api,worker,scheduler' });
    keysDir = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-walkthrough-keys-'));
  });
  afterAll(async () => {
    await app?.close();
    fs.rmSync(keysDir, { recursive: true, force: true });
  });

  it('keygen → pack → sign → trust → import → run → outputs', async () => {
    const as = { token: app.adminToken, tenantId: app.tenantId };
    const { privateFile, publicFile } = await keygen(keysDir, 'walkthrough');
    const packed = await packBundle(EXAMPLE_DIR, { created: new Date('2026-01-01T00:00:00Z') });
    const { signature } = await signBundle(packed.tarball, await readPrivateJwk(privateFile));

    const trusted = await app.request('POST', '/api/v1/trust/keys', {
      as,
      body: { kid: 'walkthrough', owner: 'example-publisher', publicJwk: await readPublicJwk(publicFile) },
    });
    expect(trusted.status).toBe(201);
    const imported = await app.request('POST', '/api/v1/bundles', {
      as,
      body: { bundle: packed.tarball.toString('base64'), signature },
    });
    expect(imported.status).toBe(201);

    const hello = await app.request('POST', '/api/v1/runs', {
      as,
      body: { dagId: 'example-hello', runToken: 'walk-hello' },
    });
    expect(hello.status).toBe(201);
    const helloRun = await waitForRun(app, as, hello.body.runId as string);
    expect(helloRun.status).toBe('succeeded');
    const helloSteps = new Map(
      (helloRun.steps as { stepId: string; outputs: unknown }[]).map((s) => [s.stepId, s.outputs]),
    );
    expect(helloSteps.get('first')).toEqual({ message: 'hello from a signed bundle' });
    expect(helloSteps.get('second')).toEqual({ done: true });

    const greet = await app.request('POST', '/api/v1/runs', {
      as,
      body: { dagId: 'example-greet', inputs: { name: 'Ada' }, runToken: 'walk-greet' },
    });
    expect(greet.status).toBe(201);
    const greetRun = await waitForRun(app, as, greet.body.runId as string, 30_000);
    expect(greetRun.status).toBe('succeeded');
    expect((greetRun.steps as { stepId: string; outputs: unknown }[])[0].outputs).toEqual({ greeting: 'Hello, Ada!' });
  });
});

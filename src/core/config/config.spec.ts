import fs from 'node:fs';
import path from 'node:path';
import { envSchema } from './config';

const ROOT = path.resolve(__dirname, '../../..');
const SCANNED = ['src', 'plugins'];
const SOURCE = /\.(ts|js|mjs|cjs)$/;
const SPEC = /\.spec\.(ts|js)$/;

/**
 * The files of src/ and plugins/ that may read process.env, and why. Every other file gets its
 * settings from the parsed configuration (ORDO_CONFIG, or a parameter); tests, bench/ and
 * scripts/ are not scanned.
 */
const ALLOWED: Record<string, string> = {
  'src/core/config/config.ts': "loadConfig: the one parser of Ordo's settings",
  'src/cli/main.ts':
    "the `ordo` entry point hands its environment to the commands (CliIo.env): Ordo's settings in it " +
    'go through loadConfig; besides them `bundle pack` reads SOURCE_DATE_EPOCH, the reproducible-builds ' +
    'standard, which is not an Ordo setting',
};

// Matched over the whole text, so a destructuring or an import spread over lines counts too.
const PROCESS_ENV = [
  /\bprocess\s*(\?\.|\.)\s*env\b/g, // process.env, process?.env
  /\bprocess\s*(\?\.)?\[\s*['"`]env['"`]\s*\]/g, // process['env']
  /\{[^{}]*\benv\b[^{}]*\}\s*=\s*(globalThis\s*\.\s*)?process\b/g, // const { env } = process
  /import\s*\{[^{}]*\benv\b[^{}]*\}\s*from\s*['"](node:)?process['"]/g, // import { env } from 'node:process'
];

/** Ordo's settings by name: those of the schema, and any ORDO_* or OTEL_* name. */
const SETTING = new RegExp(`^(${Object.keys(envSchema.shape).join('|')}|ORDO_\\w+|OTEL_\\w+)$`);
/** `env.NAME` or `env['NAME']` on any object called env (a CLI's io.env, a parameter). */
const ENV_MEMBER = /\benv\s*(?:\?\.|\.)\s*(\w+)|\benv\s*(?:\?\.)?\[\s*['"`](\w+)['"`]\s*\]/g;

interface Hit {
  file: string;
  line: number;
  text: string;
}

/** Lines (1-based) where `text` reaches process.env. */
function processEnvReads(text: string): number[] {
  const lines = new Set<number>();
  for (const re of PROCESS_ENV) for (const m of text.matchAll(re)) lines.add(text.slice(0, m.index).split('\n').length);
  return [...lines].sort((a, b) => a - b);
}

/** Lines (1-based) where `text` reads one of Ordo's settings by name from an object called env. */
function settingReads(text: string): number[] {
  return text.split('\n').flatMap((l, i) => {
    for (const m of l.matchAll(ENV_MEMBER)) if (SETTING.test(m[1] ?? m[2])) return [i + 1];
    return [];
  });
}

function sources(): string[] {
  const out: string[] = [];
  const walk = (dir: string) => {
    for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
      const full = path.join(dir, e.name);
      if (e.isDirectory()) {
        if (e.name !== 'node_modules') walk(full);
      } else if (SOURCE.test(e.name) && !SPEC.test(e.name)) {
        out.push(path.relative(ROOT, full).split(path.sep).join('/'));
      }
    }
  };
  for (const d of SCANNED) walk(path.join(ROOT, d));
  return out.sort();
}

function hits(read: (text: string) => number[]): Hit[] {
  return sources().flatMap((file) => {
    const text = fs.readFileSync(path.join(ROOT, file), 'utf8');
    const lines = text.split('\n');
    return read(text).map((line) => ({ file, line, text: lines[line - 1].trim() }));
  });
}

describe('environment readers', () => {
  it('recognises every way of reaching process.env, and no look-alike', () => {
    for (const read of [
      'const a = process.env.ORDO_X;',
      'const a = process?.env?.X;',
      "const a = process['env'];",
      'const { env } = process;',
      'const { argv, env: e } = globalThis.process;',
      "import { env } from 'node:process';",
      'const {\n  env,\n} = process;',
    ])
      expect({ read, lines: processEnvReads(read) }).toEqual({ read, lines: [1] });
    for (const other of ['const env = io.env;', 'processEnv(x)', 'const { env } = io;', 'spawn(cmd, { env: {} })'])
      expect({ other, lines: processEnvReads(other) }).toEqual({ other, lines: [] });
  });

  it('recognises a setting read from another environment object by its name', () => {
    expect(settingReads('if (io.env.ORDO_DEBUG) x();')).toEqual([1]);
    expect(settingReads("const u = env['REDIS_URL'];")).toEqual([1]);
    expect(settingReads('const v = opts.env?.LOG_LEVEL;')).toEqual([1]);
    expect(settingReads('const v = env.SOURCE_DATE_EPOCH;')).toEqual([]);
    expect(settingReads('const v = config.ORDO_DEBUG;')).toEqual([]);
  });

  it('finds process.env only in the allowed files of src/ and plugins/', () => {
    const files = sources();
    expect(files.length).toBeGreaterThan(100);
    expect(files).toContain('src/core/config/config.ts');
    const found = hits(processEnvReads);
    expect(found.filter((h) => !(h.file in ALLOWED))).toEqual([]);
    // An entry that no longer reads the environment leaves the list.
    expect(Object.keys(ALLOWED).filter((f) => !found.some((h) => h.file === f))).toEqual([]);
  });

  it('reads no Ordo setting by name outside config.ts, from process.env or any other environment object', () => {
    expect(hits(settingReads).filter((h) => h.file !== 'src/core/config/config.ts')).toEqual([]);
  });
});

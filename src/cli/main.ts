import '../node-version';
import 'reflect-metadata';
import { OrdoApiError } from '../../sdk/client/src/errors';
import { DomainError } from '../core/errors/domain-error';
import { UsageError, type CliIo, type Command, type CommandEntry } from './command';
import type * as ConfigExports from '../core/config/config';

/** A command module's `command`, loaded (CommonJS require) when it runs or prints its help. */
// eslint-disable-next-line @typescript-eslint/no-require-imports
const commandIn = (id: string): Command => (require(id) as { command: Command }).command;

/**
 * The commands of `ordo`, in help order. A command's module (and what it imports: Nest, the
 * database, the sandbox) loads only when that command runs.
 */
const COMMANDS: CommandEntry[] = [
  {
    name: 'migrate',
    summary: 'Apply pending database migrations',
    load: () => commandIn('./commands/migrate'),
  },
  {
    name: 'tenants',
    summary: 'Create, list, disable and enable tenants',
    load: () => commandIn('./commands/tenants'),
  },
  {
    name: 'tokens',
    summary: 'Mint, list and revoke API tokens',
    load: () => commandIn('./commands/tokens'),
  },
  {
    name: 'keys',
    summary: 'Rotate, list and export the instance signing keys',
    load: () => commandIn('./commands/keys'),
  },
  {
    name: 'export',
    summary: 'Write a signed NDJSON audit export of runs, or verify one offline',
    load: () => commandIn('./commands/export'),
  },
  {
    name: 'bundle',
    summary: 'Build, sign, verify and import signed offline bundles',
    load: () => commandIn('./commands/bundle'),
  },
  {
    name: 'dags',
    summary: 'Publish, list and show DAGs and their graphs (over the API: --url, --token)',
    load: () => commandIn('./commands/dags'),
  },
  {
    name: 'runs',
    summary: 'Start, list, show, watch, cancel and rerun runs (over the API: --url, --token)',
    load: () => commandIn('./commands/runs'),
  },
];

const EXIT_FAILURE = 1;
const EXIT_USAGE = 2;

function mainHelp(commands: CommandEntry[]): string {
  const width = Math.max(...commands.map((c) => c.name.length));
  return [
    'Usage: ordo <command> [arguments]',
    '',
    'Commands:',
    ...commands.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`),
    '',
    'Run `ordo <command> --help` for a command. Configuration comes from the same environment as the',
    'server (DATABASE_URL, ORDO_HOME, ORDO_SIGNING_KEYS_DIR, …); `dags` and `runs` talk to a running Ordo over',
    "its API instead (ORDO_URL, ORDO_TOKEN). Exit codes: 0 ok, 1 failure, 2 usage error (`runs watch`: the run's outcome).",
    '',
  ].join('\n');
}

/** Runs one `ordo` invocation; resolves to the process exit code. */
export async function runCli(argv: string[], io: CliIo = processIo()): Promise<number> {
  const commands = COMMANDS;
  const [name, ...args] = argv;
  if (name === undefined) {
    io.err(mainHelp(commands));
    return EXIT_USAGE;
  }
  if (name === '--help' || name === '-h' || name === 'help') {
    const target = name === 'help' ? commands.find((c) => c.name === args[0]) : undefined;
    io.out(target ? `${target.load().help}\n` : mainHelp(commands));
    return 0;
  }
  const entry = commands.find((c) => c.name === name);
  if (!entry) {
    io.err(`ordo: unknown command "${name}"\n\n${mainHelp(commands)}`);
    return EXIT_USAGE;
  }
  try {
    const code = await entry.load().run(args, io);
    return code ?? 0;
  } catch (e) {
    if (e instanceof UsageError) {
      io.err(`ordo ${entry.name}: ${e.message}\nRun \`ordo ${entry.name} --help\` for usage.\n`);
      return EXIT_USAGE;
    }
    // The configuration (and zod) loads here, not up front: `ordo --help` and offline verbs do without.
    const { ConfigError } = lazyConfig();
    if (e instanceof ConfigError) {
      io.err(`ordo: ${e.message}\n`);
      return EXIT_USAGE;
    }
    if (e instanceof OrdoApiError) {
      const trace = e.traceId ? `, trace ${e.traceId}` : '';
      io.err(`ordo ${entry.name}: ${e.message} (${e.code}, HTTP ${e.status}${trace})\n`);
      return EXIT_FAILURE;
    }
    if (e instanceof DomainError) {
      io.err(`ordo ${entry.name}: ${e.message} (${e.code})\n`);
      return EXIT_FAILURE;
    }
    io.err(`ordo ${entry.name}: ${e instanceof Error ? e.message : String(e)}\n`);
    if (debugging(io) && e instanceof Error && e.stack) io.err(`${e.stack}\n`);
    return EXIT_FAILURE;
  }
}

/** ORDO_DEBUG from the configuration; false when the environment does not parse. */
function debugging(io: CliIo): boolean {
  const { loadConfig } = lazyConfig();
  try {
    return loadConfig(io.env).ORDO_DEBUG;
  } catch {
    return false;
  }
}

/** The configuration module, loaded when first needed. */
// eslint-disable-next-line @typescript-eslint/no-require-imports
const lazyConfig = () => require('../core/config/config') as typeof ConfigExports;

function processIo(): CliIo {
  return {
    out: (t) => process.stdout.write(t),
    err: (t) => process.stderr.write(t),
    // The command's environment, read here once: Ordo's settings in it are parsed by loadConfig
    // only; besides them, `bundle pack` reads SOURCE_DATE_EPOCH (the reproducible-builds standard,
    // not an Ordo setting). Tests pass their own.
    env: process.env,
  };
}

if (require.main === module) {
  void runCli(process.argv.slice(2)).then((code) => process.exit(code));
}

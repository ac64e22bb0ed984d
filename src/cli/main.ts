import 'reflect-metadata';
import { ConfigError, loadConfig } from '../core/config/config';
import { DomainError } from '../core/errors/domain-error';
import { registeredCommands, UsageError, type CliIo, type Command } from './command';

// The commands of `ordo`, in help order. Registering one is one line: import its module here
// (the module defines its command with `defineCommand`).
import './commands/migrate';
import './commands/tenants';
import './commands/tokens';
import './commands/keys';
import './commands/export';
import './commands/bundle';

const EXIT_FAILURE = 1;
const EXIT_USAGE = 2;

function mainHelp(commands: Command[]): string {
  const width = Math.max(...commands.map((c) => c.name.length));
  return [
    'Usage: ordo <command> [arguments]',
    '',
    'Commands:',
    ...commands.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`),
    '',
    'Run `ordo <command> --help` for a command. Configuration comes from the same environment as the',
    'server (DATABASE_URL, ORDO_HOME, ORDO_SIGNING_KEYS_DIR, …). Exit codes: 0 ok, 1 failure, 2 usage error.',
    '',
  ].join('\n');
}

/** Runs one `ordo` invocation; resolves to the process exit code. */
export async function runCli(argv: string[], io: CliIo = processIo()): Promise<number> {
  const commands = registeredCommands();
  const [name, ...args] = argv;
  if (name === undefined) {
    io.err(mainHelp(commands));
    return EXIT_USAGE;
  }
  if (name === '--help' || name === '-h' || name === 'help') {
    const target = name === 'help' ? commands.find((c) => c.name === args[0]) : undefined;
    io.out(target ? `${target.help}\n` : mainHelp(commands));
    return 0;
  }
  const command = commands.find((c) => c.name === name);
  if (!command) {
    io.err(`ordo: unknown command "${name}"\n\n${mainHelp(commands)}`);
    return EXIT_USAGE;
  }
  try {
    await command.run(args, io);
    return 0;
  } catch (e) {
    if (e instanceof UsageError) {
      io.err(`ordo ${command.name}: ${e.message}\nRun \`ordo ${command.name} --help\` for usage.\n`);
      return EXIT_USAGE;
    }
    if (e instanceof ConfigError) {
      io.err(`ordo: ${e.message}\n`);
      return EXIT_USAGE;
    }
    if (e instanceof DomainError) {
      io.err(`ordo ${command.name}: ${e.message} (${e.code})\n`);
      return EXIT_FAILURE;
    }
    io.err(`ordo ${command.name}: ${e instanceof Error ? e.message : String(e)}\n`);
    if (debugging(io) && e instanceof Error && e.stack) io.err(`${e.stack}\n`);
    return EXIT_FAILURE;
  }
}

/** ORDO_DEBUG from the configuration; false when the environment does not parse. */
function debugging(io: CliIo): boolean {
  try {
    return loadConfig(io.env).ORDO_DEBUG;
  } catch {
    return false;
  }
}

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

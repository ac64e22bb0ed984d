import { parseArgs, type ParseArgsConfig } from 'node:util';

/** Where a command writes: results on `out` (stdout), messages on `err` (stderr). */
export interface CliIo {
  out(text: string): void;
  err(text: string): void;
  env: NodeJS.ProcessEnv;
}

/**
 * A command's module: its help and what it does. `run` throws a UsageError (exit 2) or any other
 * error (exit 1); it may resolve to an exit code of its own (`runs watch`: the run's outcome).
 */
export interface Command {
  /** Full help text, printed by `ordo <name> --help`. */
  help: string;
  run(args: string[], io: CliIo): Promise<number | void>;
}

/**
 * One `ordo <name> …` command as the command list knows it: its module loads only when the
 * command runs (or prints its help), so a command pays for what it uses and `ordo --help` for
 * nothing but this list.
 */
export interface CommandEntry {
  name: string;
  summary: string;
  load(): Command;
}

/** A mistake in how the command was called: unknown command or flag, missing or bad argument. */
export class UsageError extends Error {
  constructor(
    message: string,
    readonly help?: string,
  ) {
    super(message);
    this.name = 'UsageError';
  }
}

type Options = NonNullable<ParseArgsConfig['options']>;

/**
 * Parses flags strictly (an unknown flag or a missing value is a UsageError). Returns undefined
 * after printing the help when `--help` or `-h` is among the arguments.
 */
export interface ParsedFlags {
  values: Record<string, string | boolean | (string | boolean)[] | undefined>;
  positionals: string[];
}

export function parseFlags(args: string[], options: Options, help: string, io: CliIo): ParsedFlags | undefined {
  if (args.includes('--help') || args.includes('-h')) {
    io.out(help.endsWith('\n') ? help : `${help}\n`);
    return undefined;
  }
  try {
    const r = parseArgs({ args, options, allowPositionals: true, strict: true });
    return { values: r.values, positionals: r.positionals };
  } catch (e) {
    throw new UsageError((e as Error).message.replace(/\. To specify a positional argument.*$/s, ''), help);
  }
}

/** A string flag's value, or undefined. */
export function flag(values: ParsedFlags['values'], name: string): string | undefined {
  const v = values[name];
  return typeof v === 'string' ? v : undefined;
}

/** Exactly `n` positional arguments, named for the message. */
export function positionals(given: string[], names: string[], help: string): string[] {
  if (given.length < names.length) throw new UsageError(`missing argument <${names[given.length]}>`, help);
  if (given.length > names.length) throw new UsageError(`unexpected argument "${given[names.length]}"`, help);
  return given;
}

/** Formats rows as aligned columns (the first row is the header). */
export function table(rows: string[][]): string {
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)));
  return rows.map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]))).join('  ')).join('\n') + '\n';
}

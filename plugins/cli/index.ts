import os from 'node:os';
import { z } from 'zod';
import { definePlugin, type ErrorClass, type PluginContext, type PluginResult } from '../../src/modules/plugins/plugin';
import { resolveCommand, SandboxUnavailableError } from '../../src/modules/sandbox/cli-runner';

const MIB = 1024 * 1024;
const num = (min: number, max: number) => z.union([z.number().int().min(min).max(max), z.string().min(1)]);

const config = z.strictObject({
  /**
   * An absolute path under /usr, /bin, /sbin or /lib* (what the sandbox shows), or a bare name
   * looked up in /usr/bin:/bin. Never run through a shell.
   */
  command: z.string().regex(/^(\/[^\0]*|[A-Za-z0-9._+-]+|\$\{\{.*\}\})$/, 'an absolute path or a bare command name'),
  /** Each argument is passed as is (after templating): `;`, `$(…)`, quotes and globs mean nothing. */
  args: z.array(z.string().max(131_072)).max(1000).default([]),
  /**
   * The only variables the command sees besides PATH=/usr/bin:/bin, HOME=/work, LANG=C and, when
   * the step declares egress, HTTP_PROXY/HTTPS_PROXY (its only way out).
   */
  env: z.record(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]{0,127}$/), z.string().max(131_072)).default({}),
  stdin: z
    .string()
    .max(16 * MIB)
    .optional(),
  /** Defaults to the step's timeout. */
  timeoutMs: num(1, 7 * 86_400_000).optional(),
  /** Bytes of stdout and of stderr kept (the tail); more output is dropped, the step goes on. */
  maxOutputBytes: num(0, 64 * MIB).default(MIB),
  /** CPU seconds (RLIMIT_CPU); defaults to the timeout in seconds, rounded up. */
  cpuSeconds: num(1, 7 * 86_400).optional(),
  /** Address space in MiB (RLIMIT_AS). */
  memoryMb: num(16, 1024 * 1024).default(2048),
  /** Largest file the command may write, in MiB (RLIMIT_FSIZE). */
  maxFileSizeMb: num(0, 1024 * 1024).default(100),
  /** Processes and threads of the sandbox's user (RLIMIT_NPROC), the sandbox's own two (a dozen with egress) included. */
  maxProcesses: num(1, 100_000).default(256),
  /** Size of the private working directory /work (a tmpfs, also HOME), in MiB. */
  workdirMb: num(1, 64 * 1024).default(256),
  /** Size of the private /tmp (a tmpfs), in MiB. */
  tmpMb: num(1, 64 * 1024).default(64),
});

type CliConfig = z.output<typeof config>;

class InvalidConfig extends Error {
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(message);
  }
}

function int(v: number | string | undefined, fallback: number, name: string, min: number, max: number): number {
  if (v === undefined) return fallback;
  const n = typeof v === 'number' ? v : Number(v);
  if (!Number.isInteger(n) || n < min || n > max)
    throw new InvalidConfig(name, `${name} must be an integer between ${min} and ${max}, got ${String(v)}`);
  return n;
}

async function run(cfg: CliConfig, ctx: PluginContext): Promise<PluginResult> {
  const command = resolveCommand(cfg.command);
  if (!command) {
    return {
      status: 'failed',
      error: {
        code: 'COMMAND_NOT_FOUND',
        message: `no executable ${cfg.command} in the sandbox (it shows /usr, /bin, /sbin and /lib*; bare names are looked up in /usr/bin:/bin)`,
        retryable: false,
      },
    };
  }
  const timeoutMs = int(cfg.timeoutMs, ctx.timeoutMs, 'timeoutMs', 1, 7 * 86_400_000);
  const maxOutputBytes = int(cfg.maxOutputBytes, MIB, 'maxOutputBytes', 0, 64 * MIB);
  let result;
  try {
    result = await ctx.sandbox.runCli({
      command,
      args: cfg.args,
      env: cfg.env,
      stdin: cfg.stdin,
      timeoutMs,
      maxOutputBytes,
      egress: ctx.egress,
      limits: {
        cpuSeconds: int(cfg.cpuSeconds, Math.max(1, Math.ceil(timeoutMs / 1000)), 'cpuSeconds', 1, 7 * 86_400),
        memoryBytes: int(cfg.memoryMb, 2048, 'memoryMb', 16, 1024 * 1024) * MIB,
        fileSizeBytes: int(cfg.maxFileSizeMb, 100, 'maxFileSizeMb', 0, 1024 * 1024) * MIB,
        processes: int(cfg.maxProcesses, 256, 'maxProcesses', 1, 100_000),
        workBytes: int(cfg.workdirMb, 256, 'workdirMb', 1, 64 * 1024) * MIB,
        tmpBytes: int(cfg.tmpMb, 64, 'tmpMb', 1, 64 * 1024) * MIB,
      },
      signal: ctx.signal,
      onLine: (stream, line) => ctx.log(stream === 'stdout' ? 'info' : 'warn', ctx.redact(line)),
      log: (level, message) => ctx.log(level, ctx.redact(message)),
    });
  } catch (e) {
    if (e instanceof SandboxUnavailableError) {
      ctx.log('error', `${e.message}; refusing to run unsandboxed (ORDO_CLI_SANDBOX_REQUIRED is true)`);
      return { status: 'failed', error: { code: 'SANDBOX_UNAVAILABLE', message: e.message, retryable: false } };
    }
    throw e;
  }
  if (!result.sandboxed) {
    ctx.log(
      'warn',
      `WARNING: this command ran WITHOUT the cli sandbox (the host's files, processes and network were in reach) because ORDO_CLI_SANDBOX_REQUIRED=false: ${result.sandboxProblem ?? ''}`,
    );
  }
  if (result.truncated)
    ctx.log('warn', `output exceeded ${maxOutputBytes} bytes per stream: only the tail is kept in the outputs`);
  if (result.droppedLines > 0)
    ctx.log('warn', `${result.droppedLines} more output lines were not logged (limit 1000 per step)`);

  const outputs = {
    exitCode: result.exitCode ?? -1,
    stdout: ctx.redact(result.stdout),
    stderr: ctx.redact(result.stderr),
    truncated: result.truncated,
  };
  if (result.aborted)
    return {
      status: 'failed',
      outputs,
      error: { code: 'ABORTED', message: 'the step was aborted; its processes were killed', retryable: false },
    };
  if (result.timedOut) {
    return {
      status: 'failed',
      outputs,
      error: {
        code: 'TIMEOUT',
        message: `the command exceeded its time limit of ${timeoutMs} ms and was killed`,
        retryable: true,
      },
    };
  }
  if (result.exitCode !== 0) {
    const how = result.exitCode === null ? `was killed by ${result.signal}` : exitText(result.exitCode);
    const last = outputs.stderr.trim().split('\n').pop() ?? '';
    const cls = exitClass(result.exitCode);
    return {
      status: 'failed',
      outputs,
      error: {
        code: 'EXIT_CODE',
        message: `${cfg.command} ${how}${last ? `: ${last.slice(0, 500)}` : ''}`,
        retryable: cls === 'transient',
        class: cls,
        ...(cls === 'invalid_input' ? { input: 'with.args' } : {}),
      },
    };
  }
  return { status: 'succeeded', outputs };
}

/**
 * A failed command's error class, by the sysexits(3) convention: 75 (EX_TEMPFAIL) is transient,
 * 64 (EX_USAGE) and 65 (EX_DATAERR) are invalid input; any other code, or a kill, is permanent.
 */
function exitClass(code: number | null): ErrorClass {
  if (code === 75) return 'transient';
  if (code === 64 || code === 65) return 'invalid_input';
  return 'permanent';
}

/** "exited with code 3", or for a status above 128 the signal it stands for (the sandbox reports 128 + n). */
function exitText(code: number): string {
  const signal = Object.entries(os.constants.signals).find(([, n]) => n === code - 128)?.[0];
  return code > 128 && signal ? `was killed by ${signal} (exit code ${code})` : `exited with code ${code}`;
}

/**
 * Runs a declared executable (no shell) in a bubblewrap sandbox as an unprivileged user: its own
 * namespaces, a read-only system view with no instance files, rlimits, a scrubbed environment,
 * private tmpfs /tmp and /work, and egress only through the checking proxy; exit code 0 succeeds.
 * Outputs: {exitCode, stdout, stderr, truncated} (stdout/stderr are tails of at most maxOutputBytes).
 */
export default definePlugin({
  name: 'cli',
  description:
    'Runs a declared executable without a shell in a bubblewrap sandbox (unprivileged, own namespaces, no instance files, rlimits, egress through a checking proxy).',
  configSchema: config,
  async execute(cfg, ctx) {
    try {
      return await run(cfg, ctx);
    } catch (e) {
      if (e instanceof InvalidConfig)
        // Its config passed the schema at publish: a value that fails now came from the run's data.
        return {
          status: 'failed',
          error: {
            code: 'INVALID_CONFIG',
            message: e.message,
            retryable: false,
            class: 'invalid_input',
            input: `with.${e.field}`,
          },
        };
      throw e;
    }
  },
});

import fs from 'node:fs';
import { randomUUID } from 'node:crypto';
import { unwrap, type Schemas } from '../../../sdk/client/src';
import { API_FLAGS, API_FLAGS_HELP, connect, intFlag, printJson, when, type ApiConnection } from '../api';
import {
  flag,
  parseFlags,
  positionals,
  table,
  UsageError,
  type CliIo,
  type Command,
  type ParsedFlags,
} from '../command';
import { RUN_EXIT, watchRun } from '../run-watch';

const RUN_STATUSES = ['scheduled', 'queued', 'running', 'succeeded', 'failed', 'cancelled'] as const;
type RunStatus = (typeof RUN_STATUSES)[number];

const help = `Usage:
  ordo runs start <dagId> [--version <n>] [--inputs <json>|@<file>] [--input <key>=<value>]...
                  [--run-token <token>] [--priority <0-9>] [--not-before <time>] [--watch [--timeout <d>]]
  ordo runs list [--dag <dagId>] [--status <status>] [--from <time>] [--to <time>] [--limit <n>] [--page-token <t>]
  ordo runs get <runId>
  ordo runs watch <runId> [--timeout <duration>]
  ordo runs cancel <runId>
  ordo runs rerun <runId> --from <stepId> [--watch [--timeout <d>]]

start begins a run of the DAG's latest active version (or --version): --inputs takes a JSON
object (or @file), --input sets one key (its value read as JSON when it parses, else as text).
The run token makes a start idempotent (default: a fresh one). watch follows the run live over
the stream, printing each step's progress, and exits with the run's outcome; start and rerun do
the same with --watch. rerun starts a new run of a failed run from a step, reusing the outputs of
the steps that succeeded upstream. --timeout takes seconds or a number with s, m or h.

Exit codes: 0 ok (watch: the run succeeded), 1 error, 2 usage error; watch: ${RUN_EXIT.failed} the run failed,
${RUN_EXIT.cancelled} the run was cancelled, ${RUN_EXIT.timedOut} --timeout elapsed before the run ended.

${API_FLAGS_HELP}`;

export const command: Command = {
  help,
  async run(args, io) {
    const [sub, ...rest] = args;
    switch (sub) {
      case 'start':
        return start(rest, io);
      case 'list':
        return list(rest, io);
      case 'get':
        return get(rest, io);
      case 'watch':
        return watch(rest, io);
      case 'cancel':
        return cancel(rest, io);
      case 'rerun':
        return rerun(rest, io);
      case '--help':
      case '-h':
        io.out(`${help}\n`);
        return;
      case undefined:
        throw new UsageError('missing subcommand (start, list, get, watch, cancel, rerun)', help);
      default:
        throw new UsageError(`unknown subcommand "${sub}"`, help);
    }
  },
};

const WATCH_FLAGS = { watch: { type: 'boolean' }, timeout: { type: 'string' } } as const;

/** --timeout in ms: seconds, or a number with s, m or h. */
function timeoutMs(values: ParsedFlags['values']): number | undefined {
  const v = flag(values, 'timeout');
  if (v === undefined) return undefined;
  const m = /^(\d+(?:\.\d+)?)(s|m|h)?$/.exec(v);
  if (!m || Number(m[1]) <= 0)
    throw new UsageError(`--timeout must be a duration like 90, 30s, 10m or 2h, not "${v}"`, help);
  return Number(m[1]) * { s: 1000, m: 60_000, h: 3_600_000 }[(m[2] ?? 's') as 's' | 'm' | 'h'];
}

/** Prints a created run, then watches it when --watch is given; returns the exit code. */
async function created(conn: ApiConnection, run: Schemas['CreatedRun'], values: ParsedFlags['values'], io: CliIo) {
  const ms = timeoutMs(values);
  if (values.watch !== true) {
    if (ms !== undefined) throw new UsageError('--timeout goes with --watch', help);
    if (conn.output === 'json') printJson(io, run);
    else io.out(`${run.runId}\n`);
    io.err(`run ${run.runId} ${run.created ? 'started' : 'already started with this run token'}: ${run.status}\n`);
    return 0;
  }
  if (conn.output === 'table') io.err(`run ${run.runId} ${run.created ? 'started' : 'already started'}\n`);
  return watchRun(conn.client, run.runId, io, { output: conn.output, timeoutMs: ms });
}

function parseInputs(values: ParsedFlags['values']): Record<string, unknown> {
  let inputs: Record<string, unknown> = {};
  const raw = flag(values, 'inputs');
  if (raw !== undefined) {
    let text = raw;
    if (raw.startsWith('@')) {
      try {
        text = fs.readFileSync(raw.slice(1), 'utf8');
      } catch (e) {
        throw new UsageError(`--inputs: cannot read ${raw.slice(1)}: ${(e as Error).message}`, help);
      }
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch (e) {
      throw new UsageError(`--inputs is not JSON: ${(e as Error).message}`, help);
    }
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
      throw new UsageError('--inputs must be a JSON object', help);
    }
    inputs = parsed as Record<string, unknown>;
  }
  const pairs = values.input;
  for (const pair of Array.isArray(pairs) ? pairs : []) {
    const s = String(pair);
    const eq = s.indexOf('=');
    if (eq < 1) throw new UsageError(`--input takes <key>=<value>, not "${s}"`, help);
    const value = s.slice(eq + 1);
    try {
      inputs[s.slice(0, eq)] = JSON.parse(value);
    } catch {
      inputs[s.slice(0, eq)] = value;
    }
  }
  return inputs;
}

async function start(args: string[], io: CliIo): Promise<number | void> {
  const f = parseFlags(
    args,
    {
      ...API_FLAGS,
      ...WATCH_FLAGS,
      version: { type: 'string' },
      inputs: { type: 'string' },
      input: { type: 'string', multiple: true },
      'run-token': { type: 'string' },
      priority: { type: 'string' },
      'not-before': { type: 'string' },
    },
    help,
    io,
  );
  if (!f) return;
  const [dagId] = positionals(f.positionals, ['dagId'], help);
  const conn = connect(f.values, io, help);
  const run = await unwrap(
    conn.client.api.POST('/api/v1/runs', {
      body: {
        dagId,
        version: intFlag(f.values, 'version', help),
        inputs: parseInputs(f.values),
        runToken: flag(f.values, 'run-token') ?? randomUUID(),
        priority: intFlag(f.values, 'priority', help, 0),
        notBefore: flag(f.values, 'not-before'),
      },
    }),
  );
  return created(conn, run, f.values, io);
}

async function list(args: string[], io: CliIo): Promise<void> {
  const f = parseFlags(
    args,
    {
      ...API_FLAGS,
      dag: { type: 'string' },
      status: { type: 'string' },
      from: { type: 'string' },
      to: { type: 'string' },
      limit: { type: 'string' },
      'page-token': { type: 'string' },
    },
    help,
    io,
  );
  if (!f) return;
  positionals(f.positionals, [], help);
  const conn = connect(f.values, io, help);
  const status = flag(f.values, 'status');
  if (status !== undefined && !(RUN_STATUSES as readonly string[]).includes(status)) {
    throw new UsageError(`--status must be one of ${RUN_STATUSES.join(', ')}, not "${status}"`, help);
  }
  // Without `Accept: application/x-ndjson` the answer is one JSON page (the NDJSON form is the other type).
  const page = (await unwrap(
    conn.client.api.GET('/api/v1/runs', {
      params: {
        query: {
          dagId: flag(f.values, 'dag'),
          status: status as RunStatus | undefined,
          from: flag(f.values, 'from'),
          to: flag(f.values, 'to'),
          limit: intFlag(f.values, 'limit', help),
          pageToken: flag(f.values, 'page-token'),
        },
      },
    }),
  )) as Schemas['RunList'];
  if (conn.output === 'json') return printJson(io, page);
  io.out(
    table([
      ['RUN', 'DAG', 'VERSION', 'STATUS', 'STEPS LEFT', 'STARTED', 'FINISHED'],
      ...page.items.map((r) => [
        r.runId,
        r.dagId,
        String(r.version),
        r.status,
        `${r.stepsRemaining}/${r.stepsTotal}`,
        when(r.startedUtc),
        when(r.finishedUtc),
      ]),
    ]),
  );
  if (page.nextPageToken) io.err(`more: --page-token ${page.nextPageToken}\n`);
}

const runPath = (runId: string) => ({ params: { path: { runId } } });

async function get(args: string[], io: CliIo): Promise<void> {
  const f = parseFlags(args, API_FLAGS, help, io);
  if (!f) return;
  const [runId] = positionals(f.positionals, ['runId'], help);
  const conn = connect(f.values, io, help);
  const run = await unwrap(conn.client.api.GET('/api/v1/runs/{runId}', runPath(runId)));
  if (conn.output === 'json') return printJson(io, run);
  io.out(
    `run ${run.runId}: ${run.dagId} v${run.version} ${run.status}${run.reason ? ` (${run.reason})` : ''}\n` +
      `started ${when(run.startedUtc)}, finished ${when(run.finishedUtc)}` +
      `${run.rerunOf ? `, rerun of ${run.rerunOf} from ${run.rerunFromStep}` : ''}` +
      `${run.replayOf ? `, replay of ${run.replayOf}` : ''}\n`,
  );
  io.out(
    table([
      ['STEP', 'PLUGIN', 'STATUS', 'ATTEMPTS', 'STARTED', 'FINISHED', 'ERROR'],
      ...run.steps.map((s) => {
        const err = s.error as { code?: string; message?: string } | null;
        return [
          s.stepId,
          s.plugin,
          s.fromRerun ? `${s.status} (reused)` : s.status,
          String(s.attempts),
          when(s.startedUtc),
          when(s.finishedUtc),
          err ? [err.code, err.message].filter(Boolean).join(': ') : '-',
        ];
      }),
    ]),
  );
}

async function watch(args: string[], io: CliIo): Promise<number | void> {
  const f = parseFlags(args, { ...API_FLAGS, timeout: { type: 'string' } }, help, io);
  if (!f) return;
  const [runId] = positionals(f.positionals, ['runId'], help);
  const conn = connect(f.values, io, help);
  return watchRun(conn.client, runId, io, { output: conn.output, timeoutMs: timeoutMs(f.values) });
}

async function cancel(args: string[], io: CliIo): Promise<void> {
  const f = parseFlags(args, API_FLAGS, help, io);
  if (!f) return;
  const [runId] = positionals(f.positionals, ['runId'], help);
  const conn = connect(f.values, io, help);
  const run = await unwrap(conn.client.api.POST('/api/v1/runs/{runId}/cancel', runPath(runId)));
  if (conn.output === 'json') return printJson(io, run);
  io.out(`run ${run.runId} ${run.status}\n`);
}

async function rerun(args: string[], io: CliIo): Promise<number | void> {
  const f = parseFlags(args, { ...API_FLAGS, ...WATCH_FLAGS, from: { type: 'string' } }, help, io);
  if (!f) return;
  const [runId] = positionals(f.positionals, ['runId'], help);
  const fromStep = flag(f.values, 'from');
  if (!fromStep) throw new UsageError('missing --from <stepId>: the step to rerun from', help);
  const conn = connect(f.values, io, help);
  const run = await unwrap(
    conn.client.api.POST('/api/v1/runs/{runId}/rerun', { ...runPath(runId), body: { fromStep } }),
  );
  return created(conn, run, f.values, io);
}

import fs from 'node:fs';
import path from 'node:path';
import { unwrap, type operations, type Schemas } from '../../../sdk/client/src';
import { API_FLAGS, API_FLAGS_HELP, connect, intFlag, printJson, when, type ApiConnection } from '../api';
import { flag, parseFlags, positionals, table, UsageError, type CliIo, type Command } from '../command';

/** The publish route's body: a definition object (or, sent as application/yaml, its YAML text). */
type DagDefinitionBody = operations['publishDag']['requestBody']['content']['application/json'];

const help = `Usage:
  ordo dags publish <file.yaml|file.json>
  ordo dags list [--dag <dagId>] [--status active|disabled] [--limit <n>] [--page-token <t>]
  ordo dags get <dagId> [--version <n>]
  ordo dags graph <dagId> [--version <n>] [--format text|dot]

publish sends a DAG definition file (YAML by its .yaml/.yml extension, else JSON); identical
content answers with the version already published. get and graph show the latest active version
unless --version names one. graph prints the steps in dispatch order with what each waits for
(text), or Graphviz DOT (--format dot, e.g. | dot -Tsvg > dag.svg); --output json prints the
graph's JSON {nodes, edges, order}.

${API_FLAGS_HELP}`;

export const command: Command = {
  help,
  async run(args, io) {
    const [sub, ...rest] = args;
    switch (sub) {
      case 'publish':
        return publish(rest, io);
      case 'list':
        return list(rest, io);
      case 'get':
        return get(rest, io);
      case 'graph':
        return graph(rest, io);
      case '--help':
      case '-h':
        io.out(`${help}\n`);
        return;
      case undefined:
        throw new UsageError('missing subcommand (publish, list, get, graph)', help);
      default:
        throw new UsageError(`unknown subcommand "${sub}"`, help);
    }
  },
};

async function publish(args: string[], io: CliIo): Promise<void> {
  const f = parseFlags(args, API_FLAGS, help, io);
  if (!f) return;
  const [file] = positionals(f.positionals, ['file'], help);
  const conn = connect(f.values, io, help);
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    throw new UsageError(`cannot read ${file}: ${(e as Error).message}`, help);
  }
  const yaml = /\.ya?ml$/i.test(path.extname(file));
  let body: unknown = text;
  if (!yaml) {
    try {
      body = JSON.parse(text);
    } catch (e) {
      throw new UsageError(`${file} is not JSON (${(e as Error).message}); name a YAML file .yaml or .yml`, help);
    }
  }
  const published = await unwrap(
    conn.client.api.POST('/api/v1/dags', {
      // YAML goes as text, which the route parses itself; the definition's type is the JSON form's.
      body: body as DagDefinitionBody,
      ...(yaml ? { headers: { 'content-type': 'application/yaml' }, bodySerializer: (b: unknown) => b as string } : {}),
    }),
  );
  if (conn.output === 'json') return printJson(io, published);
  io.out(
    `${published.created ? 'published' : 'already published'} ${published.dagId} version ${published.version} ` +
      `(${published.status}, content ${published.contentHash.slice(0, 12)})\n`,
  );
  for (const w of published.warnings) io.err(`warning ${w.code} at ${w.path} (${w.stepId}): ${w.message}\n`);
}

async function list(args: string[], io: CliIo): Promise<void> {
  const f = parseFlags(
    args,
    {
      ...API_FLAGS,
      dag: { type: 'string' },
      status: { type: 'string' },
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
  if (status !== undefined && status !== 'active' && status !== 'disabled') {
    throw new UsageError(`--status must be active or disabled, not "${status}"`, help);
  }
  const page = await unwrap(
    conn.client.api.GET('/api/v1/dags', {
      params: {
        query: {
          dagId: flag(f.values, 'dag'),
          status,
          limit: intFlag(f.values, 'limit', help),
          pageToken: flag(f.values, 'page-token'),
        },
      },
    }),
  );
  if (conn.output === 'json') return printJson(io, page);
  io.out(
    table([
      ['DAG', 'VERSION', 'STATUS', 'FORMAT', 'OWNER', 'CREATED'],
      ...page.items.map((d) => [d.dagId, String(d.version), d.status, d.sourceFormat, d.owner, when(d.createdAt)]),
    ]),
  );
  if (page.nextPageToken) io.err(`more: --page-token ${page.nextPageToken}\n`);
}

/** The version named by --version, else the latest active one. */
async function version(conn: ApiConnection, dagId: string, v: number | undefined): Promise<Schemas['DagVersion']> {
  return v === undefined
    ? unwrap(conn.client.api.GET('/api/v1/dags/{dagId}', { params: { path: { dagId } } }))
    : unwrap(
        conn.client.api.GET('/api/v1/dags/{dagId}/versions/{version}', { params: { path: { dagId, version: v } } }),
      );
}

async function get(args: string[], io: CliIo): Promise<void> {
  const f = parseFlags(args, { ...API_FLAGS, version: { type: 'string' } }, help, io);
  if (!f) return;
  const [dagId] = positionals(f.positionals, ['dagId'], help);
  const conn = connect(f.values, io, help);
  const d = await version(conn, dagId, intFlag(f.values, 'version', help));
  if (conn.output === 'json') return printJson(io, d);
  io.out(
    table([
      ['FIELD', 'VALUE'],
      ['dag', d.dagId],
      ['version', String(d.version)],
      ['status', d.status],
      ['content hash', d.contentHash],
      ['format', d.sourceFormat],
      ['owner', d.owner],
      ['signed by', d.signature ? `${d.signature.signer} (${d.signature.kid})` : '-'],
      ['created', when(d.createdAt)],
      ['steps', String(Array.isArray(d.definition.steps) ? d.definition.steps.length : 0)],
    ]),
  );
  for (const w of d.warnings) io.out(`warning ${w.code} at ${w.path} (${w.stepId}): ${w.message}\n`);
}

async function graph(args: string[], io: CliIo): Promise<void> {
  const f = parseFlags(args, { ...API_FLAGS, version: { type: 'string' }, format: { type: 'string' } }, help, io);
  if (!f) return;
  const [dagId] = positionals(f.positionals, ['dagId'], help);
  const format = flag(f.values, 'format') ?? 'text';
  if (format !== 'text' && format !== 'dot')
    throw new UsageError(`--format must be text or dot, not "${format}"`, help);
  const conn = connect(f.values, io, help);
  const v = intFlag(f.values, 'version', help) ?? (await version(conn, dagId, undefined)).version;
  const at = { path: { dagId, version: v } };
  if (format === 'dot' && conn.output !== 'json') {
    const dot = await unwrap(
      conn.client.api.GET('/api/v1/dags/{dagId}/versions/{version}/graph', {
        params: { ...at, query: { format: 'dot' } },
        parseAs: 'text',
      }),
    );
    io.out(dot.endsWith('\n') ? dot : `${dot}\n`);
    return;
  }
  const g = await unwrap(conn.client.api.GET('/api/v1/dags/{dagId}/versions/{version}/graph', { params: at }));
  if (conn.output === 'json') return printJson(io, g);
  io.out(textGraph(dagId, v, g));
}

/** The graph as text: one line a step, in dispatch order, with the steps it waits for. */
export function textGraph(dagId: string, version: number, g: Schemas['DagGraph']): string {
  const nodes = new Map(g.nodes.map((n) => [n.id, n]));
  const rows: string[][] = [['STEP', 'PLUGIN', 'AFTER', 'NOTES']];
  for (const id of g.order) {
    const n = nodes.get(id);
    if (!n) continue;
    const after = g.edges
      .filter((e) => e.to === id)
      .map((e) => (e.status ? `${e.from}[${e.status}]` : e.from))
      .join(', ');
    const notes = [
      n.disabled ? 'disabled' : '',
      n.when ? `when ${n.when}` : '',
      n.trigger ? `trigger ${n.trigger}` : '',
      n.map ? `map ${n.map}` : '',
      n.subDag ? `runs ${n.subDag.dag} v${n.subDag.version}` : '',
    ].filter(Boolean);
    rows.push([id, n.plugin, after || '-', notes.join('; ') || '-']);
  }
  return `${dagId} version ${version}: ${g.nodes.length} steps, ${g.edges.length} edges\n${table(rows)}`;
}

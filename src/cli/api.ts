import { createOrdoClient, type OrdoClient } from '../../sdk/client/src';
import { clientEnvironment } from '../core/config/config';
import { flag, UsageError, type CliIo, type ParsedFlags } from './command';

/** The flags of every command that talks to a running Ordo over its HTTP API. */
export const API_FLAGS = {
  url: { type: 'string' },
  token: { type: 'string' },
  tenant: { type: 'string' },
  output: { type: 'string', short: 'o' },
} as const;

export const API_FLAGS_HELP = `Connection (every subcommand):
  --url <url>        the API's address (ORDO_URL; default http://127.0.0.1:8080); a comma-separated
                     list names several api replicas, tried in turn when one cannot be reached
  --token <token>    a tenant token (ORDO_TOKEN)
  --tenant <id>      the tenant (ORDO_TENANT; default: the token's own tenant)
  --output, -o <f>   table (default) or json`;

export type Output = 'table' | 'json';

export interface ApiConnection {
  client: OrdoClient;
  output: Output;
}

const DEFAULT_URL = 'http://127.0.0.1:8080';

/** The client for the flags and environment given: --url/ORDO_URL, --token/ORDO_TOKEN, --tenant/ORDO_TENANT. */
export function connect(values: ParsedFlags['values'], io: CliIo, help: string): ApiConnection {
  const output = flag(values, 'output') ?? 'table';
  if (output !== 'table' && output !== 'json') {
    throw new UsageError(`--output must be table or json, not "${output}"`, help);
  }
  const fromEnv = clientEnvironment(io.env);
  const token = flag(values, 'token') ?? fromEnv.token;
  if (!token) throw new UsageError('no token: pass --token or set ORDO_TOKEN', help);
  const urls = (flag(values, 'url') ?? fromEnv.url ?? DEFAULT_URL)
    .split(',')
    .map((u) => u.trim())
    .filter(Boolean);
  for (const u of urls) {
    if (!/^https?:\/\/[^/]/.test(u)) throw new UsageError(`--url: "${u}" is not an http(s) URL`, help);
  }
  if (urls.length === 0) throw new UsageError('--url names no address', help);
  const tenantId = flag(values, 'tenant') ?? fromEnv.tenant;
  return { client: createOrdoClient({ baseUrl: urls, token, tenantId }), output };
}

/** Prints a value as indented JSON on stdout. */
export function printJson(io: CliIo, value: unknown): void {
  io.out(`${JSON.stringify(value, null, 2)}\n`);
}

/** A positive integer flag, or undefined when absent. */
export function intFlag(values: ParsedFlags['values'], name: string, help: string, min = 1): number | undefined {
  const v = flag(values, name);
  if (v === undefined) return undefined;
  if (!/^\d+$/.test(v) || Number(v) < min)
    throw new UsageError(`--${name} must be an integer ≥ ${min}, not "${v}"`, help);
  return Number(v);
}

/** A timestamp for a table: ISO 8601 to the second, or '-'. */
export function when(iso: string | null | undefined): string {
  return iso ? iso.replace(/\.\d+Z$/, 'Z') : '-';
}

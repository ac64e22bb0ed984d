import { z } from 'zod';
import { createTenantBody, tenantIdSchema } from '../../modules/tenants/tenants.dto';
import type { TenantsService } from '../../modules/tenants/tenants.service';
import { flag, parseFlags, positionals, table, UsageError, type CliIo, type Command } from '../command';
import type * as ContextExports from '../context';
import type * as TenantsModuleExports from '../../modules/tenants/tenants.module';
import type * as TenantsServiceExports from '../../modules/tenants/tenants.service';

const help = `Usage:
  ordo tenants create <id> [--name <name>]   create a tenant (name defaults to the id)
  ordo tenants list [--json]                 list every tenant by id
  ordo tenants disable <id>                  its tokens get 403 until it is enabled
  ordo tenants enable <id>

Tenant ids are lowercase letters, digits and dashes (at most 63). Works directly against the
database Ordo uses (DATABASE_URL, or the embedded PostgreSQL under ORDO_HOME).`;

export const command: Command = {
  help,
  async run(args, io) {
    const [sub, ...rest] = args;
    switch (sub) {
      case 'create': {
        const p = parseFlags(rest, { name: { type: 'string' } }, help, io);
        if (!p) return;
        const [id] = positionals(p.positionals, ['id'], help);
        const body = createTenantBody.safeParse({ id, name: flag(p.values, 'name') ?? id });
        if (!body.success)
          throw new UsageError(`${body.error.issues[0].path.join('.')}: ${body.error.issues[0].message}`, help);
        const t = await withTenants(io, (svc) => svc.create(body.data));
        io.out(`${t.id}\n`);
        io.err(`ordo: created tenant ${t.id} ("${t.name}")\n`);
        return;
      }
      case 'list': {
        const p = parseFlags(rest, { json: { type: 'boolean' } }, help, io);
        if (!p) return;
        positionals(p.positionals, [], help);
        const all = await withTenants(io, async (svc) => {
          const items = [];
          let pageToken: string | undefined;
          do {
            const page = await svc.list({ limit: 500, pageToken });
            items.push(...page.items);
            pageToken = page.nextPageToken ?? undefined;
          } while (pageToken);
          return items;
        });
        if (p.values.json) io.out(`${JSON.stringify(all, null, 2)}\n`);
        else
          io.out(
            table([['ID', 'STATUS', 'CREATED', 'NAME'], ...all.map((t) => [t.id, t.status, t.createdAt, t.name])]),
          );
        return;
      }
      case 'disable':
      case 'enable': {
        const p = parseFlags(rest, {}, help, io);
        if (!p) return;
        const [id] = positionals(p.positionals, ['id'], help);
        const tid = parseTenantId(id, help);
        const t = await withTenants(io, (svc) => svc.setStatus(tid, sub === 'disable' ? 'disabled' : 'active'));
        io.err(`ordo: tenant ${t.id} is ${t.status}\n`);
        return;
      }
      case '--help':
      case '-h':
        io.out(`${help}\n`);
        return;
      case undefined:
        throw new UsageError('missing subcommand (create, list, disable, enable)', help);
      default:
        throw new UsageError(`unknown subcommand "${sub}"`, help);
    }
  },
};

/** Runs `fn` with the tenants service against Ordo's database (Nest and the database load here). */
async function withTenants<T>(io: CliIo, fn: (svc: TenantsService) => Promise<T>): Promise<T> {
  /* eslint-disable @typescript-eslint/no-require-imports */
  const { withContext } = require('../context') as typeof ContextExports;
  const { TenantsModule } = require('../../modules/tenants/tenants.module') as typeof TenantsModuleExports;
  const { TenantsService } = require('../../modules/tenants/tenants.service') as typeof TenantsServiceExports;
  /* eslint-enable @typescript-eslint/no-require-imports */
  return withContext(io, [TenantsModule], (ctx) => fn(ctx.get(TenantsService)));
}

export function parseTenantId(id: string, help: string): string {
  const r = tenantIdSchema.safeParse(id);
  if (!r.success)
    throw new UsageError(`tenant id "${id}": ${z.prettifyError(r.error).replace(/^✖ /, '').split('\n')[0]}`, help);
  return r.data;
}

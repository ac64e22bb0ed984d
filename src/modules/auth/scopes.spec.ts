import type { TenantPrincipalT } from '../../core/http/request-context';
import { covers, grants } from './scopes';
import { TokensService } from './tokens.service';

describe('scopes', () => {
  it('orders admin over write over read', () => {
    expect(grants(['orchestrator:admin'], 'orchestrator:read')).toBe(true);
    expect(grants(['orchestrator:write'], 'orchestrator:read')).toBe(true);
    expect(grants(['orchestrator:write'], 'orchestrator:admin')).toBe(false);
    expect(grants(['orchestrator:read'], 'orchestrator:write')).toBe(false);
    expect(grants([], 'orchestrator:read')).toBe(false);
  });

  it('covers a request only when every requested scope is held or implied', () => {
    expect(covers(['orchestrator:admin'], ['orchestrator:read', 'orchestrator:write', 'orchestrator:admin'])).toBe(
      true,
    );
    expect(covers(['orchestrator:write'], ['orchestrator:read', 'orchestrator:admin'])).toBe(false);
    expect(covers(['orchestrator:read'], ['orchestrator:read'])).toBe(true);
  });

  it('refuses to mint more scopes than the caller holds (SCOPE_ESCALATION), before touching the database', async () => {
    const svc = new TokensService(undefined as never, undefined as never, undefined as never, undefined as never);
    const writer: TenantPrincipalT = {
      kind: 'tenant',
      tenantId: 't',
      subject: 's',
      scopes: ['orchestrator:write'],
      jti: 'j',
    };
    await expect(svc.create(writer, { scopes: ['orchestrator:admin'] })).rejects.toMatchObject({
      status: 403,
      code: 'SCOPE_ESCALATION',
    });
  });
});

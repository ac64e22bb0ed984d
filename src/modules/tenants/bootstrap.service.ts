import { Inject, Injectable } from '@nestjs/common';
import path from 'node:path';
import { ORDO_CONFIG } from '../../core/config/config.module';
import type { OrdoConfig } from '../../core/config/config';
import { Database } from '../../core/database/database';
import { writeSecretJson } from '../../core/home/secret-file';
import { AuthRepository } from '../auth/auth.repository';
import { TokenService } from '../auth/token.service';
import { TokensService } from '../auth/tokens.service';
import { TenantsRepository } from './tenants.repository';

export const ADMIN_CREDENTIALS_FILE = 'admin-credentials.json';

export type FirstStart =
  | { created: true; tenantId: string; adminToken: string; platformToken: string; file: string }
  | { created: false; file: string };

/**
 * On the very first start (no tenant at all), creates the bootstrap tenant and mints its admin
 * token and a platform operator token, shown once and saved with mode 0600 under ORDO_HOME.
 * Concurrent first starts are safe: only the process whose insert wins mints.
 */
@Injectable()
export class BootstrapService {
  constructor(
    @Inject(ORDO_CONFIG) private readonly config: OrdoConfig,
    private readonly db: Database,
    private readonly tenants: TenantsRepository,
    private readonly auth: AuthRepository,
    private readonly tokens: TokensService,
    private readonly jwt: TokenService,
  ) {}

  async ensureFirstStart(): Promise<FirstStart> {
    const file = path.join(this.config.home, ADMIN_CREDENTIALS_FILE);
    if ((await this.tenants.count(this.db.system)) > 0) return { created: false, file };
    const tenantId = this.config.ORDO_BOOTSTRAP_TENANT;
    const inserted = await this.tenants.insert(this.db.system, { id: tenantId, name: tenantId });
    if (!inserted) return { created: false, file };
    const admin = await this.tokens.mintFor(
      tenantId,
      `${tenantId}-admin`,
      ['orchestrator:admin'],
      'bootstrap',
      10 * 365 * 24 * 3600,
      'first-start admin token',
    );
    const platform = await this.jwt.mintPlatform('operator', 10 * 365 * 24 * 3600);
    await this.auth.insertPlatformToken(this.db.system, {
      jti: platform.jti,
      subject: 'operator',
      description: 'first-start platform operator token',
      expiresAt: platform.expiresAt,
    });
    writeSecretJson(file, {
      tenantId,
      adminToken: admin.token,
      adminTokenExpiresAt: admin.expiresAt,
      platformToken: platform.token,
      platformTokenExpiresAt: platform.expiresAt.toISOString(),
    });
    return { created: true, tenantId, adminToken: admin.token, platformToken: platform.token, file };
  }
}

import { Injectable } from '@nestjs/common';
import { Database } from '../../core/database/database';
import { notFound } from '../../core/errors/domain-error';
import { ArtifactsRepository } from './artifacts.repository';

@Injectable()
export class ArtifactsService {
  constructor(
    private readonly db: Database,
    private readonly repo: ArtifactsRepository,
  ) {}

  /** An artifact of this tenant; another tenant's (or no) artifact is 404. */
  async get(tenantId: string, sha256: string): Promise<{ mediaType: string; body: Buffer }> {
    const a = await this.db.withTenant(tenantId, (tx) => this.repo.find(tx, sha256));
    if (!a) throw notFound('artifact', 'ARTIFACT_NOT_FOUND');
    const body = a.body_bytes ?? Buffer.from(JSON.stringify(a.body_json), 'utf8');
    return { mediaType: a.media_type, body };
  }
}

import { Injectable } from '@nestjs/common';
import { Database } from '../../core/database/database';
import { badRequest } from '../../core/errors/domain-error';
import { AuditExportWriter, type AuditManifest } from './audit-export-format';
import { AuditLogRepository } from './audit-log.repository';
import { countingFailures } from './export-failures';
import { ExportService, type SignedManifest } from './export.service';

const PAGE = 1000;

export interface AuditExportRequest {
  tenantId?: string;
  fromSeq?: number;
  toSeq?: number;
}

/**
 * The operator audit log as signed NDJSON (audit-export-format.ts). The range ends at the log's
 * last entry when the export begins, so entries appended meanwhile are not half in it and the same
 * range exports byte-identically; entries are read page by page, so memory stays constant.
 */
@Injectable()
export class AuditExportService {
  constructor(
    private readonly db: Database,
    private readonly repo: AuditLogRepository,
    private readonly exports: ExportService,
  ) {}

  /** 400 INVALID_RANGE when fromSeq is after toSeq. */
  check(req: AuditExportRequest): void {
    if (req.fromSeq !== undefined && req.toSeq !== undefined && req.fromSeq > req.toSeq)
      throw badRequest('INVALID_RANGE', 'fromSeq is after toSeq');
  }

  /** Yields NDJSON lines (each ending in a newline); returns the signed manifest once they are all out. */
  lines(req: AuditExportRequest): AsyncGenerator<string, SignedManifest<AuditManifest>> {
    return countingFailures('audit', this.make(req));
  }

  private async *make(req: AuditExportRequest): AsyncGenerator<string, SignedManifest<AuditManifest>> {
    this.check(req);
    const head = await this.repo.headSeq(this.db.system);
    const toSeq = Math.min(req.toSeq ?? head, head);
    const w = new AuditExportWriter(req.tenantId ?? null, { fromSeq: req.fromSeq ?? null, toSeq });
    let after = (req.fromSeq ?? 1) - 1;
    for (;;) {
      const page = await this.repo.page(this.db.system, {
        tenantId: req.tenantId,
        afterSeq: after,
        toSeq,
        limit: PAGE,
        order: 'asc',
      });
      for (const e of page) yield w.line(e);
      if (page.length < PAGE) break;
      after = page[page.length - 1].seq;
    }
    return this.exports.sign(w.manifest());
  }
}

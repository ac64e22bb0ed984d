import { Module } from '@nestjs/common';
import { ArtifactsModule } from '../../modules/artifacts/artifacts.module';
import { AuthModule } from '../../modules/auth/auth.module';
import { IdempotencyModule } from '../../modules/idempotency/idempotency.module';
import { RunsModule } from '../../modules/runs/runs.module';
import { TenantsModule } from '../../modules/tenants/tenants.module';

/** The api role: REST + WebSocket API, auth, tenant isolation, idempotency, admin actions. */
@Module({
  imports: [AuthModule, IdempotencyModule, TenantsModule, RunsModule, ArtifactsModule],
})
export class ApiRoleModule {}

import { Module } from '@nestjs/common';
import { AdminModule } from '../../modules/admin/admin.module';
import { ArtifactsModule } from '../../modules/artifacts/artifacts.module';
import { AuthModule } from '../../modules/auth/auth.module';
import { BundlesModule } from '../../modules/bundles/bundles.module';
import { ConsoleModule } from '../../modules/console/console.module';
import { DagsModule } from '../../modules/dags/dags.module';
import { DeadLetterModule } from '../../modules/deadletter/deadletter.module';
import { ExportModule } from '../../modules/export/export.module';
import { FlowModule } from '../../modules/flow/flow.module';
import { IdempotencyModule } from '../../modules/idempotency/idempotency.module';
import { ObservabilityModule } from '../../modules/observability/observability.module';
import { PlansModule } from '../../modules/plans/plans.module';
import { RateLimitModule } from '../../modules/plans/rate-limit.module';
import { RunsModule } from '../../modules/runs/runs.module';
import { StreamModule } from '../../modules/stream/stream.module';
import { SchedulesModule } from '../../modules/scheduler/schedules.module';
import { SecretsModule } from '../../modules/secrets/secrets.module';
import { TenantsModule } from '../../modules/tenants/tenants.module';
import { TrustModule } from '../../modules/trust/trust.module';
import { WorkersModule } from '../../modules/workers/workers.module';

/** The api role: REST + WebSocket API, auth, tenant isolation, idempotency, admin actions, the web console. */
@Module({
  imports: [
    AuthModule,
    RateLimitModule,
    IdempotencyModule,
    TenantsModule,
    DagsModule,
    RunsModule,
    FlowModule,
    DeadLetterModule,
    ArtifactsModule,
    SchedulesModule,
    TrustModule,
    BundlesModule,
    StreamModule,
    ObservabilityModule,
    ExportModule,
    SecretsModule,
    WorkersModule,
    PlansModule,
    AdminModule,
    ConsoleModule,
  ],
})
export class ApiRoleModule {}

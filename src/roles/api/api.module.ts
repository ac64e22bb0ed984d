import { Module } from '@nestjs/common';
import { AuthModule } from '../../modules/auth/auth.module';
import { DagsModule } from '../../modules/dags/dags.module';
import { IdempotencyModule } from '../../modules/idempotency/idempotency.module';
import { TenantsModule } from '../../modules/tenants/tenants.module';

/** The api role: REST + WebSocket API, auth, tenant isolation, idempotency, admin actions. */
@Module({
  imports: [AuthModule, IdempotencyModule, TenantsModule, DagsModule],
})
export class ApiRoleModule {}

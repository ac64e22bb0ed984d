import { Global, Module, type DynamicModule, type Type } from '@nestjs/common';
import type { OrdoConfig, Role } from '../core/config/config';
import { ConfigModule } from '../core/config/config.module';
import type { Database } from '../core/database/database';
import { DatabaseModule } from '../core/database/database.module';
import { HttpModule } from '../core/http/http.module';
import { SigningKeys } from '../modules/auth/signing-keys';
import { ApiRoleModule } from './api/api.module';
import { SchedulerRoleModule } from './scheduler/scheduler.module';
import { WorkerRoleModule } from './worker/worker.module';

const ROLE_MODULES: Record<Role, Type> = {
  api: ApiRoleModule,
  scheduler: SchedulerRoleModule,
  worker: WorkerRoleModule,
};

@Global()
@Module({})
class KeysModule {
  static forRoot(keys: SigningKeys): DynamicModule {
    return { module: KeysModule, providers: [{ provide: SigningKeys, useValue: keys }], exports: [SigningKeys] };
  }
}

/** The process: shared plumbing plus the modules of the roles named in ORDO_ROLES. */
@Module({})
export class RootModule {
  static forRoles(config: OrdoConfig, database: Database, keys: SigningKeys): DynamicModule {
    return {
      module: RootModule,
      imports: [
        ConfigModule.forRoot(config),
        DatabaseModule.forRoot(database),
        KeysModule.forRoot(keys),
        HttpModule,
        ...config.ORDO_ROLES.map((r) => ROLE_MODULES[r]),
      ],
    };
  }
}

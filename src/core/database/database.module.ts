import { Global, Module, type DynamicModule } from '@nestjs/common';
import { Database } from './database';

/** Provides the process's Database (created and migrated before Nest starts). */
@Global()
@Module({})
export class DatabaseModule {
  static forRoot(database: Database): DynamicModule {
    return { module: DatabaseModule, providers: [{ provide: Database, useValue: database }], exports: [Database] };
  }
}

import { Global, Module, type DynamicModule } from '@nestjs/common';
import type { OrdoConfig } from './config';

export const ORDO_CONFIG = Symbol('ORDO_CONFIG');

@Global()
@Module({})
export class ConfigModule {
  static forRoot(config: OrdoConfig): DynamicModule {
    return { module: ConfigModule, providers: [{ provide: ORDO_CONFIG, useValue: config }], exports: [ORDO_CONFIG] };
  }
}

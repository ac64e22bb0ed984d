import { Inject, Injectable, Module, type OnApplicationShutdown } from '@nestjs/common';
import type { OrdoConfig } from '../../core/config/config';
import { ORDO_CONFIG } from '../../core/config/config.module';
import { Sandbox, sandboxSettings } from './sandbox';

/** The process's one Sandbox, built from the configuration and closed at shutdown. */
@Injectable()
export class SandboxService extends Sandbox implements OnApplicationShutdown {
  constructor(@Inject(ORDO_CONFIG) config: OrdoConfig) {
    super(sandboxSettings(config));
  }

  async onApplicationShutdown(): Promise<void> {
    await this.close();
  }
}

@Module({ providers: [SandboxService], exports: [SandboxService] })
export class SandboxModule {}

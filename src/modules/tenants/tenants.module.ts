import { Module } from '@nestjs/common';
import { AuthModule } from '../auth/auth.module';
import { BootstrapService } from './bootstrap.service';
import { TenantsController } from './tenants.controller';
import { TenantsRepository } from './tenants.repository';
import { TenantsService } from './tenants.service';

@Module({
  imports: [AuthModule],
  controllers: [TenantsController],
  providers: [TenantsRepository, TenantsService, BootstrapService],
  exports: [TenantsRepository, BootstrapService],
})
export class TenantsModule {}

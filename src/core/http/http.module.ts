import { Module } from '@nestjs/common';
import { DiscoveryModule } from '@nestjs/core';
import { RouteTable } from './openapi';
import { SystemController } from './system.controller';

@Module({
  imports: [DiscoveryModule],
  controllers: [SystemController],
  providers: [RouteTable],
  exports: [RouteTable],
})
export class HttpModule {}

import { Module } from '@nestjs/common';
import { DiscoveryModule } from '@nestjs/core';
import { HttpClosing } from './http-closing';
import { RouteTable } from './openapi';
import { SystemController } from './system.controller';

@Module({
  imports: [DiscoveryModule],
  controllers: [SystemController],
  providers: [RouteTable, HttpClosing],
  exports: [RouteTable],
})
export class HttpModule {}

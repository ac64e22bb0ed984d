import { Module } from '@nestjs/common';
import { PluginRegistry } from './plugin-registry';

@Module({ providers: [PluginRegistry], exports: [PluginRegistry] })
export class PluginsModule {}

import { Module } from '@nestjs/common';
import { ApplicationConfig, HttpAdapterHost } from '@nestjs/core';
import type { Server } from 'node:http';
import { AuthModule } from '../auth/auth.module';
import { RunsCoreModule } from '../runs/runs.module';
import { StreamAuthenticator } from './stream-auth';
import { StreamGateway } from './stream.gateway';
import { StreamHub } from './stream-hub';
import { StreamWsAdapter } from './stream-ws.adapter';
import { StreamRepository } from './stream.repository';

/** The live run-event stream (`/api/v1/stream`, WebSocket). */
@Module({
  imports: [AuthModule, RunsCoreModule],
  providers: [StreamRepository, StreamHub, StreamAuthenticator, StreamGateway],
  exports: [StreamHub],
})
export class StreamModule {
  /**
   * Gateways are bound to the application's WebSocket adapter when the application initialises,
   * after every module is built: unless the application chose an adapter, the stream brings the
   * `ws` one, on the API's own HTTP server.
   */
  constructor(appConfig: ApplicationConfig, adapterHost: HttpAdapterHost) {
    const server = adapterHost.httpAdapter?.getHttpServer() as Server | undefined;
    if (server && !appConfig.getIoAdapter()) appConfig.setIoAdapter(new StreamWsAdapter(server));
  }
}

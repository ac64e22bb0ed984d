import { Module } from '@nestjs/common';
import { AuthModule } from '../auth/auth.module';
import { StreamGateway } from './stream.gateway';
import { StreamHub } from './stream-hub';
import { StreamRepository } from './stream.repository';

/** The live run-event stream (`/api/v1/stream`, WebSocket). */
@Module({
  imports: [AuthModule],
  providers: [StreamRepository, StreamHub, StreamGateway],
  exports: [StreamHub],
})
export class StreamModule {}

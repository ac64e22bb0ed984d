import { Injectable, type OnModuleDestroy } from '@nestjs/common';

/**
 * Whether the application is closing, from its first shutdown hook on (onModuleDestroy runs
 * before every other): each response sent from then on ends its connection (see createHttpApp),
 * so no kept-alive client connection holds the HTTP server's close.
 */
@Injectable()
export class HttpClosing implements OnModuleDestroy {
  closing = false;

  onModuleDestroy(): void {
    this.closing = true;
  }
}

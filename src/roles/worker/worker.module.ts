import { Module } from '@nestjs/common';

/** The worker role: claims ready steps from the per-tenant queues and runs plugins in sandboxes. */
@Module({
  imports: [],
})
export class WorkerRoleModule {}

import { Controller, Delete, Get, HttpCode, Inject, Post, Put, Req, Res } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { z } from 'zod';
import { ORDO_CONFIG } from '../../core/config/config.module';
import type { OrdoConfig } from '../../core/config/config';
import {
  Body,
  Params,
  Query,
  TenantPrincipal,
  WorkerPrincipal,
  type TenantPrincipalT,
  type WorkerPrincipalT,
} from '../../core/http/request-context';
import { Route } from '../../core/http/route-spec';
import { TasksService } from './tasks.service';
import {
  drainAnswerSchema,
  heartbeatAnswerSchema,
  heartbeatBody,
  listWorkersQuery,
  nextQuery,
  poolBody,
  poolParams,
  poolSchema,
  progressBody,
  registerWorkerBody,
  registeredWorkerSchema,
  resetReputationBody,
  resultAnswerSchema,
  resultBody,
  resultsAnswerSchema,
  resultsBody,
  MAX_RESULTS_A_POST,
  syncAnswerSchema,
  syncBody,
  taskParams,
  tasksSchema,
  workerListSchema,
  workerParams,
  workerSchema,
  type ProgressBody,
  type RegisterWorkerBody,
  type ResultBody,
  type ResultsBody,
  type SyncBody,
} from './workers.dto';
import { WorkersService } from './workers.service';

type WorkerParams = z.infer<typeof workerParams>;
type TaskParams = z.infer<typeof taskParams>;

/** The worker protocol (worker tokens) and the tenant's view of its workers and pools. */
@Controller('api/v1')
export class WorkersController {
  constructor(
    @Inject(ORDO_CONFIG) private readonly config: OrdoConfig,
    private readonly workers: WorkersService,
    private readonly tasks: TasksService,
  ) {}

  @Post('workers')
  @Route({
    operationId: 'registerWorker',
    summary: 'Register an external worker instance in the token’s pool: task types, resources, models, cost',
    tags: ['workers'],
    access: 'worker',
    idempotent: false,
    body: registerWorkerBody,
    responses: { 201: { description: 'Registered', schema: registeredWorkerSchema } },
  })
  register(@WorkerPrincipal() p: WorkerPrincipalT, @Body() body: RegisterWorkerBody) {
    return this.workers.register(p, body);
  }

  @Post('workers/:workerId/heartbeat')
  @HttpCode(200)
  @Route({
    operationId: 'workerHeartbeat',
    summary: 'Renew a worker’s TTL; answers its status and the tasks it must stop',
    tags: ['workers'],
    access: 'worker',
    idempotent: false,
    params: workerParams,
    body: heartbeatBody,
    responses: { 200: { description: 'Recorded', schema: heartbeatAnswerSchema } },
  })
  heartbeat(
    @WorkerPrincipal() p: WorkerPrincipalT,
    @Params() params: WorkerParams,
    @Body() body: { loaded?: string[] },
  ) {
    return this.workers.heartbeat(p, params.workerId, body.loaded);
  }

  @Post('workers/:workerId/drain')
  @HttpCode(200)
  @Route({
    operationId: 'drainWorker',
    summary: 'The worker takes no new task and finishes the ones it holds',
    tags: ['workers'],
    access: 'worker',
    idempotent: false,
    params: workerParams,
    responses: { 200: { description: 'Draining', schema: drainAnswerSchema } },
  })
  drain(@WorkerPrincipal() p: WorkerPrincipalT, @Params() params: WorkerParams) {
    return this.workers.drain(p, params.workerId);
  }

  @Delete('workers/:workerId')
  @HttpCode(204)
  @Route({
    operationId: 'leaveWorker',
    summary: 'The worker leaves: offline at once; tasks it still holds are retried elsewhere',
    tags: ['workers'],
    access: 'worker',
    params: workerParams,
    responses: { 204: { description: 'Left' } },
  })
  async leave(@WorkerPrincipal() p: WorkerPrincipalT, @Params() params: WorkerParams): Promise<void> {
    await this.workers.leave(p, params.workerId);
  }

  @Get('workers/:workerId/tasks/next')
  @Route({
    operationId: 'nextWorkerTasks',
    summary: 'Long-poll for tasks: 200 with up to `max` tasks, or 204 when none came within `waitMs`',
    tags: ['workers'],
    access: 'worker',
    params: workerParams,
    query: nextQuery,
    responses: {
      200: { description: 'Tasks for the worker (each must get a result)', schema: tasksSchema },
      204: { description: 'No task within the wait, or the instance is stopping' },
    },
  })
  async next(
    @WorkerPrincipal() p: WorkerPrincipalT,
    @Params() params: WorkerParams,
    @Query() q: z.infer<typeof nextQuery>,
    @Req() req: FastifyRequest,
    @Res({ passthrough: true }) reply: FastifyReply,
  ) {
    const ac = new AbortController();
    const gone = () => ac.abort();
    req.raw.once('close', gone);
    try {
      const waitMs = Math.min(q.waitMs ?? this.config.ORDO_EXTERNAL_WORKER_LONG_POLL_MS, 120_000);
      const tasks = await this.workers.pull(p, params.workerId, q.max, waitMs, ac.signal);
      if (tasks.length === 0) {
        reply.status(204);
        return undefined;
      }
      return { tasks };
    } finally {
      req.raw.off('close', gone);
    }
  }

  @Post('workers/:workerId/tasks/sync')
  @HttpCode(200)
  @Route({
    operationId: 'syncWorkerTasks',
    summary:
      'After a lost connection: the tasks delivered to the worker that it does not hold are delivered again; its channel, if open anywhere, is closed',
    tags: ['workers'],
    access: 'worker',
    idempotent: false,
    params: workerParams,
    body: syncBody,
    responses: { 200: { description: 'Given back to the worker', schema: syncAnswerSchema } },
  })
  sync(@WorkerPrincipal() p: WorkerPrincipalT, @Params() params: WorkerParams, @Body() body: SyncBody) {
    return this.tasks.sync(p, params.workerId, body.holding, 'http');
  }

  @Post('workers/:workerId/tasks/:attemptId/result')
  @HttpCode(200)
  @Route({
    operationId: 'postWorkerTaskResult',
    summary: 'Post a task’s result (idempotent on the task and epoch); outputs checked against the output schema',
    tags: ['workers'],
    access: 'worker',
    idempotent: false,
    params: taskParams,
    body: resultBody,
    responses: { 200: { description: 'Applied (or applied before: duplicate)', schema: resultAnswerSchema } },
  })
  result(@WorkerPrincipal() p: WorkerPrincipalT, @Params() params: TaskParams, @Body() body: ResultBody) {
    return this.tasks.result(p, params.workerId, params.attemptId, body);
  }

  @Post('workers/:workerId/tasks/results')
  @HttpCode(200)
  @Route({
    operationId: 'postWorkerTaskResults',
    summary: `Post several tasks' results at once (up to ${MAX_RESULTS_A_POST}), each applied and answered as its own post would be`,
    tags: ['workers'],
    access: 'worker',
    idempotent: false,
    params: workerParams,
    body: resultsBody,
    responses: { 200: { description: 'One answer a result, in the order posted', schema: resultsAnswerSchema } },
  })
  results(@WorkerPrincipal() p: WorkerPrincipalT, @Params() params: WorkerParams, @Body() body: ResultsBody) {
    return this.tasks.results(p, params.workerId, body);
  }

  @Post('workers/:workerId/tasks/:attemptId/progress')
  @HttpCode(202)
  @Route({
    operationId: 'postWorkerTaskProgress',
    summary: 'Report a running task’s progress (kept on the step; on the run’s stream at most once a second)',
    tags: ['workers'],
    access: 'worker',
    idempotent: false,
    params: taskParams,
    body: progressBody,
    responses: { 202: { description: 'Recorded' } },
  })
  async progress(
    @WorkerPrincipal() p: WorkerPrincipalT,
    @Params() params: TaskParams,
    @Body() body: ProgressBody,
  ): Promise<void> {
    await this.tasks.progress(p, params.workerId, params.attemptId, body);
  }

  @Get('workers')
  @Route({
    operationId: 'listWorkers',
    summary: 'List the tenant’s external workers (newest first) with their load and reputation',
    tags: ['workers'],
    access: 'orchestrator:read',
    query: listWorkersQuery,
    responses: { 200: { description: 'One page of workers', schema: workerListSchema } },
  })
  list(@TenantPrincipal() p: TenantPrincipalT, @Query() q: z.infer<typeof listWorkersQuery>) {
    return this.workers.list(p, q);
  }

  @Get('workers/:workerId')
  @Route({
    operationId: 'getWorker',
    summary: 'An external worker of the tenant',
    tags: ['workers'],
    access: 'orchestrator:read',
    params: workerParams,
    responses: { 200: { description: 'The worker', schema: workerSchema } },
  })
  get(@TenantPrincipal() p: TenantPrincipalT, @Params() params: WorkerParams) {
    return this.workers.get(p, params.workerId);
  }

  @Post('workers/:workerId/reputation/reset')
  @HttpCode(200)
  @Route({
    operationId: 'resetWorkerReputation',
    summary: 'Reset the reputation of a worker’s name in its pool (unblocks it), with a reason',
    tags: ['workers'],
    access: 'orchestrator:admin',
    params: workerParams,
    body: resetReputationBody,
    responses: { 200: { description: 'The worker after the reset', schema: workerSchema } },
  })
  reset(@TenantPrincipal() p: TenantPrincipalT, @Params() params: WorkerParams, @Body() body: { reason: string }) {
    return this.workers.resetReputation(p, params.workerId, body.reason);
  }

  @Get('worker-pools/:pool')
  @Route({
    operationId: 'getWorkerPool',
    summary: 'A worker pool’s settings (404 for a pool that has none: it uses the default strategy)',
    tags: ['workers'],
    access: 'orchestrator:read',
    params: poolParams,
    responses: { 200: { description: 'The pool', schema: poolSchema } },
  })
  getPool(@TenantPrincipal() p: TenantPrincipalT, @Params() params: z.infer<typeof poolParams>) {
    return this.workers.getPool(p, params.pool);
  }

  @Put('worker-pools/:pool')
  @Route({
    operationId: 'putWorkerPool',
    summary: 'Set a worker pool’s dispatch strategy (a step’s own strategy wins)',
    tags: ['workers'],
    access: 'orchestrator:admin',
    params: poolParams,
    body: poolBody,
    responses: { 200: { description: 'The pool', schema: poolSchema } },
  })
  putPool(
    @TenantPrincipal() p: TenantPrincipalT,
    @Params() params: z.infer<typeof poolParams>,
    @Body() body: z.infer<typeof poolBody>,
  ) {
    return this.workers.setPool(p, params.pool, body.strategy);
  }
}

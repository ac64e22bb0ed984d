import { Controller, Delete, Get, HttpCode, Patch, Post } from '@nestjs/common';
import type { z } from 'zod';
import { Body, Params, Query, TenantPrincipal, type TenantPrincipalT } from '../../core/http/request-context';
import { Route } from '../../core/http/route-spec';
import {
  createScheduleBody,
  fireListQuery,
  fireListSchema,
  fireTimesSchema,
  nextQuery,
  previewQuery,
  scheduleListQuery,
  scheduleListSchema,
  scheduleParams,
  scheduleSchema,
  updateScheduleBody,
  type CreateScheduleBody,
  type UpdateScheduleBody,
} from './schedules.dto';
import { SchedulesService } from './schedules.service';

type IdParams = z.infer<typeof scheduleParams>;

@Controller('api/v1/schedules')
export class SchedulesController {
  constructor(private readonly schedules: SchedulesService) {}

  @Post()
  @Route({
    operationId: 'createSchedule',
    summary: 'Create a cron schedule for a DAG',
    tags: ['schedules'],
    access: 'orchestrator:admin',
    body: createScheduleBody,
    responses: { 201: { description: 'Created', schema: scheduleSchema } },
  })
  create(@TenantPrincipal() p: TenantPrincipalT, @Body() body: CreateScheduleBody) {
    return this.schedules.create(p, body);
  }

  @Get()
  @Route({
    operationId: 'listSchedules',
    summary: 'List schedules, oldest first',
    tags: ['schedules'],
    access: 'orchestrator:read',
    query: scheduleListQuery,
    responses: { 200: { description: 'A page of schedules', schema: scheduleListSchema } },
  })
  list(@TenantPrincipal() p: TenantPrincipalT, @Query() q: z.infer<typeof scheduleListQuery>) {
    return this.schedules.list(p, q);
  }

  @Get('preview')
  @Route({
    operationId: 'previewCron',
    summary: 'Preview the next fire times of a cron expression in a time zone',
    tags: ['schedules'],
    access: 'orchestrator:read',
    query: previewQuery,
    responses: { 200: { description: 'Fire times, UTC and local', schema: fireTimesSchema } },
  })
  preview(@Query() q: z.infer<typeof previewQuery>) {
    return this.schedules.preview(q.cron, q.timezone, q.count);
  }

  @Get(':id')
  @Route({
    operationId: 'getSchedule',
    summary: 'Get a schedule',
    tags: ['schedules'],
    access: 'orchestrator:read',
    params: scheduleParams,
    responses: { 200: { description: 'The schedule', schema: scheduleSchema } },
  })
  get(@TenantPrincipal() p: TenantPrincipalT, @Params() params: IdParams) {
    return this.schedules.get(p, params.id);
  }

  @Patch(':id')
  @Route({
    operationId: 'updateSchedule',
    summary: 'Change a schedule (fields are validated again; a new cron or zone starts from now)',
    tags: ['schedules'],
    access: 'orchestrator:admin',
    params: scheduleParams,
    body: updateScheduleBody,
    responses: { 200: { description: 'Updated', schema: scheduleSchema } },
  })
  update(@TenantPrincipal() p: TenantPrincipalT, @Params() params: IdParams, @Body() body: UpdateScheduleBody) {
    return this.schedules.update(p, params.id, body);
  }

  @Delete(':id')
  @HttpCode(204)
  @Route({
    operationId: 'deleteSchedule',
    summary: 'Delete a schedule (runs it created stay)',
    tags: ['schedules'],
    access: 'orchestrator:admin',
    params: scheduleParams,
    responses: { 204: { description: 'Deleted' } },
  })
  async delete(@TenantPrincipal() p: TenantPrincipalT, @Params() params: IdParams): Promise<void> {
    await this.schedules.delete(p, params.id);
  }

  @Post(':id/pause')
  @HttpCode(200)
  @Route({
    operationId: 'pauseSchedule',
    summary: 'Pause a schedule: no fires until resumed (idempotent)',
    tags: ['schedules'],
    access: 'orchestrator:admin',
    params: scheduleParams,
    responses: { 200: { description: 'Paused', schema: scheduleSchema } },
  })
  pause(@TenantPrincipal() p: TenantPrincipalT, @Params() params: IdParams) {
    return this.schedules.setPaused(p, params.id, true);
  }

  @Post(':id/resume')
  @HttpCode(200)
  @Route({
    operationId: 'resumeSchedule',
    summary: 'Resume a schedule; fires missed while paused follow its catch-up policy (idempotent)',
    tags: ['schedules'],
    access: 'orchestrator:admin',
    params: scheduleParams,
    responses: { 200: { description: 'Resumed', schema: scheduleSchema } },
  })
  resume(@TenantPrincipal() p: TenantPrincipalT, @Params() params: IdParams) {
    return this.schedules.setPaused(p, params.id, false);
  }

  @Get(':id/next')
  @Route({
    operationId: 'previewScheduleFireTimes',
    summary: "Preview a schedule's next fire times",
    tags: ['schedules'],
    access: 'orchestrator:read',
    params: scheduleParams,
    query: nextQuery,
    responses: { 200: { description: 'Fire times, UTC and local', schema: fireTimesSchema } },
  })
  next(@TenantPrincipal() p: TenantPrincipalT, @Params() params: IdParams, @Query() q: z.infer<typeof nextQuery>) {
    return this.schedules.next(p, params.id, q.count);
  }

  @Get(':id/fires')
  @Route({
    operationId: 'listScheduleFires',
    summary: "A schedule's recent fire times and what each did, newest first",
    tags: ['schedules'],
    access: 'orchestrator:read',
    params: scheduleParams,
    query: fireListQuery,
    responses: { 200: { description: 'Recent fires', schema: fireListSchema } },
  })
  fires(@TenantPrincipal() p: TenantPrincipalT, @Params() params: IdParams, @Query() q: z.infer<typeof fireListQuery>) {
    return this.schedules.fires(p, params.id, q.limit);
  }
}

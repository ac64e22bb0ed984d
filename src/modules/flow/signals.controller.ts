import { Controller, Get, Post, Res } from '@nestjs/common';
import type { FastifyReply } from 'fastify';
import type { z } from 'zod';
import { Body, Params, TenantPrincipal, type TenantPrincipalT } from '../../core/http/request-context';
import { Route } from '../../core/http/route-spec';
import { SignalsService } from '../engine/signals.service';
import type { JsonValue } from '../plugins/plugin';
import { signalBody, signalParams, signalSchema, type SignalBody } from './signals.dto';

@Controller('api/v1/signals')
export class SignalsController {
  constructor(private readonly signals: SignalsService) {}

  @Post()
  @Route({
    operationId: 'sendSignal',
    summary: 'Post a signal: delivered to a step waiting for its name and key, or kept until one waits',
    tags: ['signals'],
    access: 'orchestrator:write',
    body: signalBody,
    responses: {
      201: { description: 'Received (delivered or kept)', schema: signalSchema },
      200: {
        description: 'This signal id was posted before with the same content: the signal as it is',
        schema: signalSchema,
      },
    },
  })
  async send(
    @TenantPrincipal() p: TenantPrincipalT,
    @Body() body: SignalBody,
    @Res({ passthrough: true }) reply: FastifyReply,
  ) {
    const r = await this.signals.send(p.tenantId, p.subject, {
      ...(body.signalId !== undefined ? { signalId: body.signalId } : {}),
      name: body.name,
      correlationKey: body.correlationKey,
      payload: (body.payload ?? null) as JsonValue,
    });
    reply.status(r.created ? 201 : 200);
    return r.signal;
  }

  @Get(':signalId')
  @Route({
    operationId: 'getSignal',
    summary: 'A signal: pending, or delivered to which run and step',
    tags: ['signals'],
    access: 'orchestrator:read',
    params: signalParams,
    responses: { 200: { description: 'The signal', schema: signalSchema } },
  })
  get(@TenantPrincipal() p: TenantPrincipalT, @Params() params: z.infer<typeof signalParams>) {
    return this.signals.get(p.tenantId, params.signalId);
  }
}

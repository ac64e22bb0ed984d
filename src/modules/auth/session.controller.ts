import { Controller, Delete, Get, HttpCode, Post, Req, Res } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { forbidden } from '../../core/errors/domain-error';
import { Body } from '../../core/http/request-context';
import { Route } from '../../core/http/route-spec';
import { openSessionBody, sessionSchema, type OpenSessionBody } from './session.dto';
import { sessionSetCookie } from './session-cookie';
import { SessionService, sameOrigin, type SessionView } from './session.service';

/**
 * Console sign-in: a token exchanged once for an HttpOnly session cookie. The routes are public
 * (the cookie, not a bearer token, is their credential) and each answers 401 itself when the
 * session it needs is missing.
 */
@Controller('api/v1/session')
export class SessionController {
  constructor(private readonly sessions: SessionService) {}

  @Post()
  @Route({
    operationId: 'openSession',
    summary: 'Sign in to the console: exchange a token for a session cookie (ordo_session, HttpOnly)',
    tags: ['session'],
    access: 'public',
    body: openSessionBody,
    responses: { 201: { description: 'Signed in; the cookie is set', schema: sessionSchema } },
    // Each call opens a new session; the answer holds its CSRF token, which is never stored.
    idempotent: false,
  })
  async open(
    @Req() req: FastifyRequest,
    @Body() body: OpenSessionBody,
    @Res({ passthrough: true }) reply: FastifyReply,
  ): Promise<SessionView> {
    // A page of another origin cannot sign a browser in with a token of its choosing.
    if (req.headers.origin !== undefined && !sameOrigin(req.headers))
      throw forbidden('sign-in from another origin is refused', 'CSRF_FAILED');
    const s = await this.sessions.open(body.token);
    void reply.header('set-cookie', sessionSetCookie(s.id, s.maxAgeSeconds, req.protocol === 'https'));
    return s.view;
  }

  @Get()
  @Route({
    operationId: 'getSession',
    summary: 'The current console session (401 without one)',
    tags: ['session'],
    access: 'public',
    responses: { 200: { description: 'The session the cookie names', schema: sessionSchema } },
  })
  current(@Req() req: FastifyRequest): Promise<SessionView> {
    return this.sessions.current(req.headers);
  }

  @Delete()
  @HttpCode(204)
  @Route({
    operationId: 'closeSession',
    summary: 'Sign out: end the session and clear its cookie (X-CSRF-Token required with a session)',
    tags: ['session'],
    access: 'public',
    responses: { 204: { description: 'Signed out' } },
  })
  async close(@Req() req: FastifyRequest, @Res({ passthrough: true }) reply: FastifyReply): Promise<void> {
    await this.sessions.end(req.headers);
    void reply.header('set-cookie', sessionSetCookie('', 0, req.protocol === 'https'));
  }
}

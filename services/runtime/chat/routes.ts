import Router from '@koa/router';
import { z } from 'zod';
import { requireAuth, type AuthPrincipal } from '../../../core/auth/index.ts';
import { openSse } from '../../../core/http/sse.ts';
import { parseInput } from '../../../core/http/validate.ts';
import type { ChatService } from './chat.ts';
import { sessionView } from './sessions.ts';

const params = z.object({
  id: z.uuid('must be an agent id (a UUID)'),
  sessionId: z.uuid('must be a session id (a UUID)').optional(),
});

const SERVER_ID = /^[a-z0-9][a-z0-9._-]{0,99}$/;

/** `/agents/:id/sessions…`: the signed-in wallet's chat sessions and the chat stream (README: Chat). */
export function chatRouter(chat: ChatService): Router {
  const { settings } = chat;
  const sessionBody = z
    .object({
      servers: z.array(z.string().regex(SERVER_ID, 'a gateway server id')).optional(),
      system: z.string().max(settings.maxInputChars).optional(),
    })
    .strict();
  const messageBody = z
    .object({
      content: z
        .string()
        .min(1, 'must not be empty')
        .max(settings.maxInputChars, `at most ${settings.maxInputChars} characters`),
      id: z
        .string()
        .regex(/^[A-Za-z0-9._-]{1,100}$/, '1 to 100 characters of A-Z a-z 0-9 . _ -')
        .optional(),
    })
    .strict();
  const router = new Router({ prefix: '/agents/:id/sessions' });
  router.use(requireAuth());
  const wallet = (state: { auth?: AuthPrincipal }) => (state.auth as AuthPrincipal).address;

  router.post('/', async (ctx) => {
    const { id } = parseInput(params, ctx.params, 'params');
    const body = parseInput(sessionBody, ctx.request.body ?? {}, 'body');
    const session = await chat.openSession(wallet(ctx.state), id, body);
    ctx.status = 201;
    ctx.body = { ...sessionView(session), limits: limitsView(chat) };
  });
  router.get('/', async (ctx) => {
    const { id } = parseInput(params, ctx.params, 'params');
    await chat.deps().agents.get(wallet(ctx.state), id);
    ctx.body = { sessions: chat.sessions.forAgent(wallet(ctx.state), id).map(sessionView) };
  });
  router.get('/:sessionId', (ctx) => {
    const { id, sessionId } = parseInput(params, ctx.params, 'params');
    ctx.body = sessionView(chat.sessions.get(wallet(ctx.state), id, sessionId as string));
  });
  router.delete('/:sessionId', (ctx) => {
    const { id, sessionId } = parseInput(params, ctx.params, 'params');
    chat.sessions.close(wallet(ctx.state), id, sessionId as string);
    ctx.status = 204;
  });
  router.post('/:sessionId/messages', async (ctx) => {
    const { id, sessionId } = parseInput(params, ctx.params, 'params');
    const body = parseInput(messageBody, ctx.request.body ?? {}, 'body');
    const principal = ctx.state.auth as AuthPrincipal;
    const prepared = await chat.prepare(principal, id, sessionId as string, body);
    const sse = openSse(ctx);
    // Koa sends the headers once this handler returns: the loop streams on after it.
    void chat.run(principal, prepared, sse);
  });
  return router;
}

const limitsView = (chat: ChatService) => ({
  maxSessionsPerAgent: chat.settings.maxSessionsPerAgent,
  maxMessagesPerSession: chat.settings.maxMessagesPerSession,
  maxInputChars: chat.settings.maxInputChars,
  maxSteps: chat.settings.maxSteps,
  maxToolCallsPerTurn: chat.settings.maxToolCallsPerTurn,
  maxOutputTokens: chat.settings.maxOutputTokens,
  sessionIdleSeconds: chat.settings.sessionIdleSeconds,
});

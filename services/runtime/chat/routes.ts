import Router from '@koa/router';
import { z } from 'zod';
import { requireAuth, type AuthPrincipal } from '../../../core/auth/index.ts';
import { openSse } from '../../../core/http/sse.ts';
import { parseInput } from '../../../core/http/validate.ts';
import type { ChatService } from './chat.ts';
import { pageFields, pageQuery } from '../ledger/routes.ts';
import { messageView, sessionView } from './sessions.ts';

const params = z.object({
  id: z.uuid('must be an agent id (a UUID)'),
  sessionId: z.uuid('must be a session id (a UUID)').optional(),
});

const SERVER_ID = /^[a-z0-9][a-z0-9._-]{0,99}$/;
const MESSAGE_ID = z.string().regex(/^[A-Za-z0-9._-]{1,100}$/, '1 to 100 characters of A-Z a-z 0-9 . _ -');
const messageParams = params.extend({ messageId: MESSAGE_ID });
/** An event number (SSE id) of an answer's stream: the last one the client has. */
const eventNumber = z.coerce.number().int().min(0).max(Number.MAX_SAFE_INTEGER);
/** `GET …/events?after=`: where a resumed stream starts (`Last-Event-ID` says the same, and wins). */
export const eventsQuery = z.object({ after: eventNumber.optional() }).strict();

/** `?limit=&cursor=&state=`: an agent's sessions, open, ended or both (the default). */
export const listQuery = z
  .object({ ...pageFields, state: z.enum(['open', 'ended', 'all']).optional() })
  .strict();
const emptyBody = z.object({}).strict();
/** `DELETE …/:sessionId?forget=true`: what was learned only from the session goes too (opt-in). */
export const deleteQuery = z
  .object({ forget: z.enum(['true', 'false'], 'must be true or false').optional() })
  .strict();

/**
 * `/agents/:id/sessions…`: the signed-in wallet's chat sessions, their stored history and the chat
 * stream (docs/runtime-chat.md). Another wallet's agent or session is a 404.
 */
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
      id: MESSAGE_ID.optional(),
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
    ctx.body = { ...sessionView(session, false), limits: limitsView(chat) };
  });
  router.get('/', async (ctx) => {
    const { id } = parseInput(params, ctx.params, 'params');
    const query = parseInput(listQuery, ctx.query, 'query');
    await chat.deps().agents.get(wallet(ctx.state), id);
    const page = await chat.sessions.list(wallet(ctx.state), id, {
      limit: query.limit ?? 50,
      cursor: query.cursor,
      state: query.state ?? 'all',
    });
    const busy = await chat.sessions.busy(page.sessions);
    ctx.body = {
      sessions: page.sessions.map((session) => sessionView(session, busy.has(session.id))),
      nextCursor: page.nextCursor ?? null,
    };
  });
  router.get('/:sessionId', async (ctx) => {
    const { id, sessionId } = parseInput(params, ctx.params, 'params');
    const session = await chat.sessions.get(wallet(ctx.state), id, sessionId as string);
    ctx.body = {
      ...sessionView(session, await chat.sessions.isBusy(session)),
      system: chat.sessions.store.system(session) ?? null,
    };
  });
  router.get('/:sessionId/messages', async (ctx) => {
    const { id, sessionId } = parseInput(params, ctx.params, 'params');
    const query = parseInput(pageQuery, ctx.query, 'query');
    const page = await chat.sessions.messages(wallet(ctx.state), id, sessionId as string, {
      limit: query.limit ?? 50,
      cursor: query.cursor,
    });
    ctx.body = { messages: page.messages.map(messageView), nextCursor: page.nextCursor ?? null };
  });
  router.post('/:sessionId/end', async (ctx) => {
    const { id, sessionId } = parseInput(params, ctx.params, 'params');
    parseInput(emptyBody, ctx.request.body ?? {}, 'body');
    const session = await chat.sessions.end(wallet(ctx.state), id, sessionId as string);
    ctx.body = sessionView(session, await chat.sessions.isBusy(session));
  });
  router.delete('/:sessionId', async (ctx) => {
    const { id, sessionId } = parseInput(params, ctx.params, 'params');
    const forget = parseInput(deleteQuery, ctx.query, 'query').forget === 'true';
    const removed = await chat.sessions.delete(wallet(ctx.state), id, sessionId as string, { forget });
    // Without forget, what was learned from the session stays: nothing else to tell.
    if (!forget) ctx.status = 204;
    else ctx.body = { forgotten: { facets: 0, learnings: 0, skills: 0, ...removed } };
  });
  router.post('/:sessionId/messages', async (ctx) => {
    const { id, sessionId } = parseInput(params, ctx.params, 'params');
    const body = parseInput(messageBody, ctx.request.body ?? {}, 'body');
    const principal = ctx.state.auth as AuthPrincipal;
    const prepared = await chat.prepare(principal, id, sessionId as string, body);
    // Where the stream resumes if it is cut (the message's id is the runtime's when the body has none).
    ctx.set('Content-Location', `/agents/${id}/sessions/${sessionId}/messages/${prepared.messageId}/events`);
    const sse = openSse(ctx);
    // Koa sends the headers once this handler returns: the loop streams on after it.
    void chat.run(principal, prepared, sse);
  });
  router.get('/:sessionId/messages/:messageId/events', async (ctx) => {
    const { id, sessionId, messageId } = parseInput(messageParams, ctx.params, 'params');
    const query = parseInput(eventsQuery, ctx.query, 'query');
    const header = ctx.get('last-event-id');
    const after = header ? parseInput(eventNumber, header, 'headers') : (query.after ?? 0);
    const stream = await chat.resume(wallet(ctx.state), id, sessionId as string, messageId, after);
    const sse = openSse(ctx);
    // Koa sends the headers once this handler returns: the stream goes on after it.
    void stream(sse);
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

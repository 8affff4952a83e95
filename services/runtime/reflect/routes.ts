import Router from '@koa/router';
import { z } from 'zod';
import { requireAuth, type AuthPrincipal } from '../../../core/auth/index.ts';
import { parseInput } from '../../../core/http/validate.ts';
import { callerOf } from '../agent-routes.ts';
import { pageQuery } from '../ledger/routes.ts';
import type { ReflectRun } from './runs.ts';
import type { ReflectService } from './service.ts';
import { settingsDocument, settingsPatch } from './settings.ts';

export const runParams = z.object({ runId: z.uuid() });

/** `POST /wallet/self-improvement/trigger` takes no fields (an empty body or `{}`). */
export const triggerBody = z.object({}).strict();

const iso = (value: Date | null): string | null => value?.toISOString() ?? null;

/** A run as the status and history routes show it: what it produced and what it cost, once it did. */
export function runView(run: ReflectRun) {
  const { outcome } = run;
  return {
    id: run.id,
    trigger: run.trigger,
    status: run.status,
    pipelineVersion: run.pipelineVersion,
    createdAt: run.createdAt.toISOString(),
    startedAt: iso(run.startedAt),
    endedAt: iso(run.endedAt),
    retryAt: run.status === 'waiting_for_unlock' ? run.dueAt.toISOString() : null,
    attempts: run.attempt,
    resumes: run.resumes,
    outcome: outcome && {
      sessions: outcome.sessions,
      facets: outcome.facets,
      learnings: outcome.learnings,
      skills: outcome.skills,
      produced: outcome.produced,
    },
    cost: outcome && {
      llmCalls: outcome.llmCalls,
      inputTokens: outcome.inputTokens,
      outputTokens: outcome.outputTokens,
      charged: outcome.charged.toString(),
    },
    error: run.error,
  };
}

/**
 * `/wallet/settings` and `/wallet/self-improvement/…`: the signed-in wallet's own settings and runs,
 * nobody else's (docs/self-improvement.md).
 */
export function reflectRouter(reflect: ReflectService): Router {
  const router = new Router();
  const auth = requireAuth();

  router.get('/wallet/settings', auth, async (ctx) => {
    ctx.body = await reflect.settings(callerOf(ctx.state));
  });
  router.put('/wallet/settings', auth, async (ctx) => {
    const document = parseInput(settingsDocument, ctx.request.body ?? {}, 'body');
    ctx.body = await reflect.replaceSettings(callerOf(ctx.state), document);
  });
  router.patch('/wallet/settings', auth, async (ctx) => {
    const patch = parseInput(settingsPatch, ctx.request.body ?? {}, 'body');
    ctx.body = await reflect.patchSettings(callerOf(ctx.state), patch);
  });

  router.get('/wallet/self-improvement/status', auth, async (ctx) => {
    const status = await reflect.status(callerOf(ctx.state));
    ctx.body = {
      ...status,
      nextRunAt: iso(status.nextRunAt),
      currentRun: status.currentRun && runView(status.currentRun),
      lastRun: status.lastRun && runView(status.lastRun),
    };
  });
  router.post('/wallet/self-improvement/trigger', auth, async (ctx) => {
    parseInput(triggerBody, ctx.request.body ?? {}, 'body');
    const { run, created } = await reflect.trigger(ctx.state.auth as AuthPrincipal);
    ctx.status = created ? 202 : 200;
    ctx.body = { created, run: runView(run) };
  });
  router.get('/wallet/self-improvement/history', auth, async (ctx) => {
    const query = parseInput(pageQuery, ctx.query, 'query');
    const page = await reflect.history(callerOf(ctx.state), {
      limit: query.limit ?? 50,
      cursor: query.cursor,
    });
    ctx.body = { runs: page.runs.map(runView), nextCursor: page.nextCursor ?? null };
  });
  router.get('/wallet/self-improvement/history/:runId', auth, async (ctx) => {
    const { runId } = parseInput(runParams, ctx.params, 'params');
    const { run, produced } = await reflect.run(callerOf(ctx.state), runId);
    ctx.body = { ...runView(run), produced };
  });
  return router;
}

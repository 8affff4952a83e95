import { bearer, error, json, jsonBody, parametersOf } from '../../shared/openapi.ts';
import { pageQuery } from '../ledger/routes.ts';
import { triggerBody } from './routes.ts';
import { settingsDocument } from './settings.ts';

const RUN =
  'a run: { id, trigger (manual|schedule), status (queued|running|waiting_for_unlock|succeeded|failed), pipelineVersion, createdAt, startedAt, endedAt, retryAt, attempts, resumes, outcome { sessions, facets, learnings, skills, produced { facets, learnings, skills } }, cost { llmCalls, inputTokens, outputTokens, charged }, error { code, message } }';

const owned = (summary: string, extra: Record<string, unknown>) => ({ summary, security: bearer, ...extra });

/** OpenAPI paths of the wallet's settings and its self-improvement runs (docs/self-improvement.md). */
export function reflectPaths(): Record<string, unknown> {
  return {
    '/wallet/settings': {
      get: owned("The wallet's settings (the defaults until it saves its own)", {
        responses: { '200': json('{ selfImprovement: { enabled, schedule } }'), '401': error },
      }),
      put: owned(
        'Replace the settings document (a field left out takes its default); the next run follows the schedule',
        {
          requestBody: jsonBody(settingsDocument),
          responses: {
            '200': json('The stored document'),
            '400': error,
            '401': error,
          },
        },
      ),
    },
    '/wallet/self-improvement/status': {
      get: owned('Settings, the next run, the run under way, the last run and what the wallet has learned', {
        responses: {
          '200': json(
            `{ enabled, schedule, nextRunAt, pipelineVersion, currentRun, lastRun, counts { facets, learnings, skills } }, each run ${RUN}`,
          ),
          '401': error,
        },
      }),
    },
    '/wallet/self-improvement/trigger': {
      post: owned('Start a run now (202), or answer the run under way (200, created: false)', {
        requestBody: jsonBody(triggerBody, false),
        responses: {
          '200': json(`{ created: false, run }, ${RUN}`),
          '202': json(`{ created: true, run }, ${RUN}`),
          '400': error,
          '401': error,
        },
      }),
    },
    '/wallet/self-improvement/history': {
      get: owned("The wallet's runs, newest first, by pages (nextCursor: the next page's cursor)", {
        parameters: parametersOf(pageQuery, 'query'),
        responses: { '200': json(`{ runs, nextCursor }, each ${RUN}`), '400': error, '401': error },
      }),
    },
  };
}

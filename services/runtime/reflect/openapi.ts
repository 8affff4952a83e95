import { bearer, error, json, jsonBody, parametersOf } from '../../shared/openapi.ts';
import { pageQuery } from '../ledger/routes.ts';
import { editBody, learningParams, learningsQuery, skillParams } from './memory-routes.ts';
import { runParams, triggerBody } from './routes.ts';
import { settingsDocument, settingsPatch } from './settings.ts';

const RUN =
  'a run: { id, trigger (manual|schedule), status (queued|running|waiting_for_unlock|succeeded|failed), pipelineVersion, createdAt, startedAt, endedAt, retryAt, attempts, resumes, outcome { sessions, facets, learnings, skills, produced { facets, learnings, skills } }, cost { llmCalls, inputTokens, outputTokens, charged }, error { code, message } }';

const LEARNING =
  'a learning: { id, statement, confidence, status (active|superseded), supersededBy, sources { facets, sessions }, runId, createdAt, updatedAt, editedAt }';
const SKILL =
  'a skill: { id, name, version, description, instructions, tools, sources { facets, sessions }, runId, createdAt }';
const deleted = { '204': { description: 'Deleted' }, '401': error, '404': error };

const owned = (summary: string, extra: Record<string, unknown>) => ({ summary, security: bearer, ...extra });

/** OpenAPI paths of the wallet's settings and its self-improvement runs (docs/self-improvement.md). */
export function reflectPaths(): Record<string, unknown> {
  return {
    '/wallet/settings': {
      get: owned("The wallet's settings (the defaults until it saves its own)", {
        responses: { '200': json('{ selfImprovement: { enabled, useInChats, schedule } }'), '401': error },
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
      patch: owned('Change only the fields given (a merge patch); the next run follows the schedule', {
        requestBody: jsonBody(settingsPatch),
        responses: { '200': json('The stored document'), '400': error, '401': error },
      }),
    },
    '/wallet/self-improvement/status': {
      get: owned('Settings, the next run, the run under way, the last run and what the wallet has learned', {
        responses: {
          '200': json(
            `{ enabled, useInChats, schedule, nextRunAt, pipelineVersion, currentRun, lastRun, counts { facets, learnings, skills } }, each run ${RUN}`,
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
    '/wallet/self-improvement/history/{runId}': {
      get: owned('One run, with the facets, learnings and skills it produced read back', {
        parameters: parametersOf(runParams, 'path'),
        responses: {
          '200': json(
            `${RUN}, and produced { facets [{ id, kind, statement, sessionId }], learnings [{ id, statement, confidence, status }], skills [{ id, name, version, description }] } (null until it succeeded; what was since forgotten is left out)`,
          ),
          '400': error,
          '401': error,
          '404': error,
        },
      }),
    },
    '/wallet/learnings': {
      get: owned('What self-improvement learned about the wallet, most confident first', {
        parameters: parametersOf(learningsQuery, 'query'),
        responses: { '200': json(`{ learnings }, each ${LEARNING}`), '400': error, '401': error },
      }),
    },
    '/wallet/learnings/{id}': {
      patch: owned("Edit a learning's statement or confidence (marked editedAt)", {
        parameters: parametersOf(learningParams, 'path'),
        requestBody: jsonBody(editBody),
        responses: { '200': json(LEARNING), '400': error, '401': error, '404': error },
      }),
      delete: owned(
        "Delete a learning (its words are no longer stored): it leaves the next chat request's input",
        {
          parameters: parametersOf(learningParams, 'path'),
          responses: deleted,
        },
      ),
    },
    '/wallet/skills': {
      get: owned("The latest version of each of the wallet's skills", {
        responses: { '200': json(`{ skills }, each ${SKILL}`), '401': error },
      }),
    },
    '/wallet/skills/{name}': {
      get: owned('One skill', {
        parameters: parametersOf(skillParams, 'path'),
        responses: { '200': json(SKILL), '400': error, '401': error, '404': error },
      }),
      delete: owned('Delete every version of a skill', {
        parameters: parametersOf(skillParams, 'path'),
        responses: deleted,
      }),
    },
    '/wallet/skills/{name}/SKILL.md': {
      get: owned(
        'One skill as a SKILL.md file (front matter name, description, allowed-tools, metadata.version)',
        {
          parameters: parametersOf(skillParams, 'path'),
          responses: {
            '200': {
              description: 'text/markdown',
              content: { 'text/markdown': { schema: { type: 'string' } } },
            },
            '401': error,
            '404': error,
          },
        },
      ),
    },
  };
}

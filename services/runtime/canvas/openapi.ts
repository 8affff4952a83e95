import { bearer, error, json, jsonBody, parametersOf } from '../../shared/openapi.ts';
import { WORKFLOW_FORMAT } from './document.ts';
import {
  artifactParams,
  decisionBody,
  executeBody,
  listQuery,
  nodeParams,
  runParams,
  saveBody,
  versionQuery,
  workflowParams,
} from './routes.ts';

const run = parametersOf(runParams, 'path');
const workflow = parametersOf(workflowParams, 'path');
const owned = (summary: string, extra: Record<string, unknown> = {}) => ({
  summary,
  security: bearer,
  ...extra,
});
const answers = (description: string, extra: Record<string, unknown> = {}) => ({
  responses: { '200': json(description), '400': error, '401': error, '404': error, ...extra },
});
const events = {
  description:
    'Server-Sent Events, each with id = its number in the run (send it back as Last-Event-ID): run.started, run.status, node.status, node.log, node.output, node.artifact, node.retry, approval.required, approval.decided, cost, run.cancelling, run.resumed, run.ended; and, when the runtime stops first, shutdown (no id; reconnect with its lastEventId) (docs/canvas.md, "Events")',
  content: { 'text/event-stream': { schema: { type: 'string' } } },
};

/** OpenAPI paths of /canvas (docs/canvas.md). */
export function canvasPaths(): Record<string, unknown> {
  return {
    '/canvas/schema.json': {
      get: {
        summary: `JSON Schema of a workflow document (${WORKFLOW_FORMAT})`,
        responses: { '200': json('JSON Schema') },
      },
    },
    '/canvas/node-kinds': {
      get: owned(
        'The node kinds loaded plugins provide: effect, params (JSON Schema), ports, example',
        answers('{ nodeKinds }'),
      ),
    },
    '/canvas/workflows/validate': {
      post: owned(
        'Check a document: its nodes in topological order, or 400 with every problem and its path',
        {
          requestBody: jsonBody(saveBody),
          ...answers('{ valid, order }'),
        },
      ),
    },
    '/canvas/workflows': {
      get: owned("The wallet's saved workflows (latest versions)", answers('{ workflows }')),
      post: owned('Save a workflow (version 1)', {
        requestBody: jsonBody(saveBody),
        ...answers('{ id, version }'),
      }),
    },
    '/canvas/workflows/{id}': {
      get: owned('A saved workflow (the latest version, or ?version=)', {
        parameters: [...workflow, ...parametersOf(versionQuery, 'query')],
        ...answers('{ id, version, name, document }'),
      }),
      put: owned('Save its next version (expectedVersion: 409 when another was saved meanwhile)', {
        parameters: workflow,
        requestBody: jsonBody(saveBody),
        ...answers('{ id, version }', { '409': error }),
      }),
      delete: owned('Delete every version', {
        parameters: workflow,
        responses: { '204': { description: 'Deleted' }, '404': error },
      }),
    },
    '/canvas/workflows/{id}/versions': {
      get: owned('Its versions', { parameters: workflow, ...answers('{ versions }') }),
    },
    '/canvas/workflows/execute/stream': {
      post: owned('Run a document or a saved workflow, charged to an agent; the run streams as it goes', {
        requestBody: jsonBody(executeBody),
        responses: { '200': events, '400': error, '401': error, '404': error, '429': error },
      }),
    },
    '/canvas/runs': {
      get: owned("The wallet's runs, newest first", {
        parameters: parametersOf(listQuery, 'query'),
        ...answers('{ runs }'),
      }),
    },
    '/canvas/runs/{id}': {
      get: owned(
        'A run: status, document, inputs, each node (state, attempt, outputs, error, decision), artifacts',
        {
          parameters: run,
          ...answers('Run'),
        },
      ),
    },
    '/canvas/runs/{id}/events': {
      get: owned("A run's events after Last-Event-ID (or ?after=), then live ones until it ends", {
        parameters: run,
        responses: { '200': events, '401': error, '404': error },
      }),
    },
    '/canvas/runs/{id}/cancel': {
      post: owned(
        "Cancel a run: queued and waiting nodes cancelled, running ones aborted (by the run's replica, within runtime.canvas.replicaPollMs)",
        {
          parameters: run,
          responses: { '202': json('{ id, status }'), '404': error, '409': error },
        },
      ),
    },
    '/canvas/runs/{id}/nodes/{nodeId}/decision': {
      post: owned(
        "The owner's decision on a waiting approval node (optionally signed, EIP-191, over approval.required's message)",
        {
          parameters: parametersOf(nodeParams, 'path'),
          requestBody: jsonBody(decisionBody),
          ...answers('{ runId, nodeId, approved, valueHash }', { '403': error, '409': error }),
        },
      ),
    },
    '/canvas/runs/{id}/artifacts/{artifactId}': {
      get: owned('Download an artifact of the run (a screenshot)', {
        parameters: parametersOf(artifactParams, 'path'),
        responses: { '200': { description: 'The file' }, '401': error, '404': error },
      }),
    },
    '/canvas/preview/{token}/': {
      get: {
        summary: "A run's workspace index.html, to whoever holds the run's preview token (no sign-in)",
        responses: { '200': { description: 'The file' }, '404': error },
      },
    },
    '/canvas/preview/{token}/{path}': {
      get: {
        summary: "A run's workspace file, read-only, to whoever holds the run's preview token (no sign-in)",
        responses: { '200': { description: 'The file' }, '404': error },
      },
    },
  };
}

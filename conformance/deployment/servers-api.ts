import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import { ensure, pass } from '@sigil/plugin-api/kit';
import { findServableServer, listServerIds, path, readServer, TIERS } from './catalog.ts';
import type { Requirement } from './context.ts';
import { expectJson, expectStatus } from './expect.ts';

/**
 * The gateway's REST view of its MCP servers (gateway spec part 4, REST endpoints; part 3,
 * verification tiers), its package cache status, and the OpenAPI document that describes them.
 */

const SPEC_REST = 'gateway spec part 4, REST endpoints';

const unknownId = () => `sigil-conformance-${randomBytes(6).toString('hex')}`;

/** Path templates compared by shape: `/api/servers/{id}` and `/api/servers/{serverId}` are the same. */
const templateOf = (route: string): string => route.replace(/\{[^}]+\}|:[A-Za-z_]+/g, '{}');

const OPENAPI_ROUTES = [
  '/mcp',
  '/api/servers',
  '/api/servers/{}',
  '/api/servers/{}/tools',
  '/api/servers/{}/tools/{}',
];

export const serversApiRequirements: readonly Requirement[] = [
  {
    id: 'GW-4.rest-servers',
    level: 'MUST',
    title:
      'GET /api/servers lists servers by id; /api/servers/:id shows one, /api/servers/:id/tools its tools; an unknown id is 404',
    spec: `${SPEC_REST}: GET /api/servers, /api/servers/:id, /api/servers/:id/tools; part 2: a server is identified by :id and has tools, a tool by :name`,
    service: 'gateway',
    check: async (context) => {
      const ids = await listServerIds(context);
      ensure(new Set(ids).size === ids.length, `GET ${path.servers} lists an id twice: ${ids.join(', ')}`);
      for (const id of ids) {
        const view = await readServer(context, id);
        ensure(
          view.details.id === id,
          `GET ${path.server(id)} describes ${JSON.stringify(view.details.id)}, not ${id}`,
        );
      }
      const unknown = unknownId();
      expectStatus(
        await context.http.request({ service: 'gateway', path: path.server(unknown) }),
        404,
        `GET ${path.server(unknown)} (no such server)`,
      );
      expectStatus(
        await context.http.request({ service: 'gateway', path: path.tools(unknown) }),
        404,
        `GET ${path.tools(unknown)} (no such server)`,
      );
      // Tools of a server the gateway serves (verified on demand when it is not yet).
      const server = await findServableServer(context, { needSmokeTool: false });
      const names = server.tools.map((tool) => tool.name);
      ensure(
        new Set(names).size === names.length,
        `GET ${path.tools(server.view.id)} lists a tool name twice: ${names.join(', ')}`,
      );
      return pass();
    },
  },
  {
    id: 'GW-4.warmup-status-summary',
    level: 'MUST',
    title: 'GET /api/warmup/status reports the package cache with a summary field',
    spec: `${SPEC_REST}: GET /api/warmup/status, "package cache status; the response has a field summary"`,
    service: 'gateway',
    check: async (context) => {
      const response = await context.http.request({ service: 'gateway', path: '/api/warmup/status' });
      expectJson(
        response,
        200,
        z.object({
          summary: z.unknown().refine((value) => value !== null && value !== undefined, 'required'),
        }),
        'GET /api/warmup/status',
      );
      return pass();
    },
  },
  {
    id: 'GW-3.verification-tier',
    level: 'MUST',
    title: 'A verified server’s details show its verification tier: tools_listed or tool_smoke_passed',
    spec: 'gateway spec part 3, verification tiers (tools_listed, tool_smoke_passed); part 2: a server has a verification tier',
    service: 'gateway',
    check: async (context) => {
      const server = await findServableServer(context, { needSmokeTool: false });
      for (const view of server.all) {
        const shown = view.details.tier;
        ensure(
          shown === undefined || shown === null || (TIERS as readonly unknown[]).includes(shown),
          `GET ${path.server(view.id)} shows tier ${JSON.stringify(shown)}, not one of ${TIERS.join(', ')}`,
        );
      }
      const verified = await readServer(context, server.view.id);
      ensure(
        verified.tier !== undefined && verified.tier !== null,
        `${server.view.id} serves its tools, so it was verified, but GET ${path.server(server.view.id)} shows no verification tier (${TIERS.join(' or ')})`,
      );
      context.evidence.note(`${server.view.id} is verified with tier ${verified.tier}`);
      return pass();
    },
  },
  {
    id: 'GW-4.openapi',
    level: 'SHOULD',
    title: 'GET /api/openapi.json serves an OpenAPI 3 document of the MCP and REST server endpoints',
    spec: `${SPEC_REST} (request and response bodies are not shown there: a published OpenAPI document is how a client learns them)`,
    service: 'gateway',
    check: async (context) => {
      const response = await context.http.request({ service: 'gateway', path: '/api/openapi.json' });
      const document = expectJson(
        response,
        200,
        z.object({
          openapi: z.string().regex(/^3\.\d+\.\d+/, 'an OpenAPI 3.x version'),
          paths: z.record(z.string(), z.unknown()),
        }),
        'GET /api/openapi.json',
      );
      const documented = new Set(Object.keys(document.paths).map(templateOf));
      const missing = OPENAPI_ROUTES.filter((route) => !documented.has(route));
      ensure(
        missing.length === 0,
        `the OpenAPI document does not describe ${missing.join(', ')} (it has ${[...documented].join(', ')})`,
      );
      return pass();
    },
  },
];

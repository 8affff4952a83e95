import { z } from 'zod';
import { expectShape, notApplicableBecause } from '@sigil/plugin-api/kit';
import type { HttpResponse } from '../http.ts';
import type { DeploymentContext } from './context.ts';
import { expectJson, expectStatus } from './expect.ts';
import type { McpTool } from './mcp.ts';

/**
 * The gateway's MCP servers as its REST API shows them (gateway spec part 4: /api/servers, /:id,
 * /:id/tools). The spec names the resources and their properties (part 2: a security filter status, a
 * runnability check, a verification tier) but not the bodies, so this reads them leniently: a list is
 * an array or an object holding one, a server is an object with its `id`, and the properties are read
 * where Sigil puts them (`filter.status`, `runnable.ok`, `tier`, `smokeTool`, `registry`) or by their
 * values.
 */

export const TIERS = ['tools_listed', 'tool_smoke_passed'] as const;
export type Tier = (typeof TIERS)[number];

/** What the runner can tell about one server from its details. */
export interface ServerView {
  id: string;
  details: Record<string, unknown>;
  /** `allowed`, `blocked`, …; undefined when the details show no filter status the runner can read. */
  filter: string | undefined;
  /** undefined when the details show no runnability. */
  runnable: boolean | undefined;
  /** null: not verified (yet); undefined: the details show no tier at all. */
  tier: Tier | null | undefined;
  /** The server's side-effect-free tool for probes, where the deployment names one. */
  smokeTool: string | undefined;
  /** Its registry kind as the details name it (`npm`, `pypi`, …); undefined when they name none. */
  registry: string | undefined;
}

/** A server found fit for a check: allowed, runnable, verified; with the tools it serves. */
export interface ServableServer {
  view: ServerView;
  tools: McpTool[];
  /** Every server the gateway lists, as read on the way. */
  all: ServerView[];
}

const jsonObject = z.record(z.string(), z.unknown());
const idItem = z.object({ id: z.string().min(1) }).loose();
const serverList = z.union([z.array(idItem), z.object({ servers: z.array(idItem) }).loose()]);
const restTool = z.object({ name: z.string().min(1), inputSchema: jsonObject.optional() }).loose();
const toolList = z.union([z.array(restTool), z.object({ tools: z.array(restTool) }).loose()]);

/** Installing and verifying a server on demand may take this long on a cold gateway. */
const ON_DEMAND_TIMEOUT_MS = 45_000;

export const path = {
  servers: '/api/servers',
  server: (id: string) => `/api/servers/${encodeURIComponent(id)}`,
  tools: (id: string) => `/api/servers/${encodeURIComponent(id)}/tools`,
  tool: (id: string, name: string) =>
    `/api/servers/${encodeURIComponent(id)}/tools/${encodeURIComponent(name)}`,
};

export async function listServerIds(context: DeploymentContext): Promise<string[]> {
  const response = await context.http.request({ service: 'gateway', path: path.servers });
  const list = expectJson(response, 200, serverList, `GET ${path.servers}`);
  return (Array.isArray(list) ? list : list.servers).map((server) => server.id);
}

/** Every server the gateway lists, each read from its details. */
export async function readServers(context: DeploymentContext): Promise<ServerView[]> {
  const views: ServerView[] = [];
  for (const id of await listServerIds(context)) views.push(await readServer(context, id));
  return views;
}

export async function readServer(context: DeploymentContext, id: string): Promise<ServerView> {
  const response = await context.http.request({ service: 'gateway', path: path.server(id) });
  const details = expectJson(response, 200, jsonObject, `GET ${path.server(id)}`);
  return viewOf(id, details);
}

export function viewOf(id: string, details: Record<string, unknown>): ServerView {
  const filter = details.filter;
  const runnable = details.runnable;
  return {
    id,
    details,
    filter:
      typeof filter === 'string'
        ? filter
        : typeof (filter as { status?: unknown } | null)?.status === 'string'
          ? (filter as { status: string }).status
          : undefined,
    runnable:
      typeof runnable === 'boolean'
        ? runnable
        : typeof (runnable as { ok?: unknown } | null)?.ok === 'boolean'
          ? (runnable as { ok: boolean }).ok
          : undefined,
    tier: tierOf(details),
    smokeTool: typeof details.smokeTool === 'string' ? details.smokeTool : undefined,
    registry: registryOf(details),
  };
}

/** `registryKind`, `registry_kind`, `registry` as a string (Sigil's), or `registry.kind`. */
function registryOf(details: Record<string, unknown>): string | undefined {
  const nested = details.registry as { kind?: unknown } | null | undefined;
  const named = [details.registryKind, details.registry_kind, details.registry, nested?.kind].find(
    (value) => typeof value === 'string' && value !== '',
  );
  return named as string | undefined;
}

function tierOf(details: Record<string, unknown>): Tier | null | undefined {
  for (const key of ['tier', 'verificationTier', 'verification_tier']) {
    const value = details[key];
    if (value === null) return null;
    if ((TIERS as readonly unknown[]).includes(value)) return value as Tier;
  }
  const anywhere = Object.values(details).find((value) => (TIERS as readonly unknown[]).includes(value));
  return anywhere as Tier | undefined;
}

/** GET /api/servers/:id/tools, which may verify the server first. Returns the response and its tools. */
export async function readServerTools(
  context: DeploymentContext,
  id: string,
): Promise<{ response: HttpResponse; tools: McpTool[] | undefined }> {
  const response = await context.http.request({
    service: 'gateway',
    path: path.tools(id),
    timeoutMs: ON_DEMAND_TIMEOUT_MS,
  });
  if (response.status !== 200) return { response, tools: undefined };
  const list = expectShape(toolList, response.body, `GET ${path.tools(id)}`);
  const tools = (Array.isArray(list) ? list : list.tools).map((tool) => ({
    name: tool.name,
    inputSchema: tool.inputSchema ?? { type: 'object' },
  }));
  return { response, tools };
}

const servableNow = (view: ServerView): boolean =>
  (view.filter === undefined || view.filter === 'allowed') && view.runnable !== false;

/** Not refused yet: a server the filter has not judged (Sigil says `unverified`) may still turn out allowed. */
const mayBecomeServable = (view: ServerView): boolean =>
  view.filter !== 'blocked' && view.runnable !== false && view.tier === null;

/** A further condition a check puts on the server it needs (say, one that declares a secret). */
export interface ServerCondition {
  /** What the check wants, for the reason when no server fits: "declares a secret". */
  wanted: string;
  /** Why `view` does not meet the condition, or undefined when it does. */
  unfit(view: ServerView): string | undefined;
}

function fits(view: ServerView, needSmokeTool: boolean, where: ServerCondition | undefined): boolean {
  if (!servableNow(view) || where?.unfit(view) !== undefined) return false;
  if (needSmokeTool) return view.tier === 'tool_smoke_passed' && view.smokeTool !== undefined;
  return view.tier !== null;
}

function describeUnfit(view: ServerView, where: ServerCondition | undefined): string {
  const unmet = where?.unfit(view);
  if (unmet !== undefined) return `${view.id} (${unmet})`;
  if (view.filter !== undefined && view.filter !== 'allowed') return `${view.id} (filter ${view.filter})`;
  if (view.runnable === false) return `${view.id} (not runnable)`;
  if (view.tier === null || view.tier === undefined) return `${view.id} (not verified)`;
  if (view.tier !== 'tool_smoke_passed') return `${view.id} (tier ${view.tier})`;
  return `${view.id} (names no smoke tool)`;
}

/**
 * A server an MCP client could use right now: allowed by the filter, runnable, verified (with a smoke
 * tool whose probe passed when `needSmokeTool`), and meeting the check's own condition `where`, if
 * any. Servers not verified yet are verified on demand, one at a time, by asking for their tools.
 * When none fits, the check is not applicable, with why.
 */
export async function findServableServer(
  context: DeploymentContext,
  options: { needSmokeTool: boolean; where?: ServerCondition },
): Promise<ServableServer> {
  const { needSmokeTool, where } = options;
  const views = await readServers(context);
  if (views.length === 0) notApplicableBecause(`GET ${path.servers} lists no MCP servers`);
  const ready = views.find((view) => fits(view, needSmokeTool, where));
  if (ready) return withTools(context, ready, views);
  const started = performance.now();
  for (const [index, view] of views.entries()) {
    if (!mayBecomeServable(view) || where?.unfit(view) !== undefined) continue;
    if (performance.now() - started > ON_DEMAND_TIMEOUT_MS) continue;
    context.evidence.note(`${view.id} is not verified yet: asking for its tools verifies it on demand`);
    await readServerTools(context, view.id);
    const after = await readServer(context, view.id);
    views[index] = after;
    if (fits(after, needSmokeTool, where)) return withTools(context, after, views);
  }
  const wanted = [
    needSmokeTool
      ? 'allowed, runnable and verified with a passed smoke tool (tier tool_smoke_passed and a smokeTool)'
      : 'allowed, runnable and verified',
    ...(where ? [where.wanted] : []),
  ].join(', and ');
  notApplicableBecause(
    `no MCP server is ${wanted}: ${views.map((view) => describeUnfit(view, where)).join(', ')}`,
  );
}

async function withTools(
  context: DeploymentContext,
  view: ServerView,
  all: ServerView[],
): Promise<ServableServer> {
  const { response, tools } = await readServerTools(context, view.id);
  expectStatus(response, 200, `GET ${path.tools(view.id)} of a verified, allowed server`);
  if (!tools || tools.length === 0) notApplicableBecause(`${view.id} serves no tools`);
  return { view, tools, all };
}

import { z } from 'zod';
import { ensure, excerpt, expectShape, notApplicableBecause } from '@sigil/plugin-api/kit';
import type { HttpResponse } from '../http.ts';
import type { DeploymentContext } from './context.ts';
import { expectJson } from './expect.ts';
import { bearer } from './wallet.ts';

/**
 * Agents, as Sigil's runtime makes them (`POST /agents { name, model }`; the runtime spec names agents
 * but not the route). A black box cannot know which models a deployment offers, so the runner asks
 * for an agent with a model no one offers and reads the offered ones from the refusal
 * (`details.offered`): Sigil refuses such an agent at once (4xx); a runtime that creates it refuses
 * its session instead, and the runner reads that refusal.
 */

export const NO_SUCH_MODEL = 'conformance-no-such-model';

const idSchema = z.looseObject({ id: z.string().min(1) });
const refusalSchema = z.looseObject({
  details: z.looseObject({ offered: z.array(z.string()).optional() }).optional(),
});

export const is4xx = (response: HttpResponse) => response.status >= 400 && response.status < 500;
export const quote = (response: HttpResponse) => excerpt(response.text.replace(/\s+/g, ' '), 200);

export const requestAgent = (context: DeploymentContext, token: string, model: string) =>
  context.http.request({
    service: 'runtime',
    method: 'POST',
    path: '/agents',
    headers: bearer(token),
    json: { name: 'conformance', model },
    timeoutMs: 30_000,
  });

/** The id of a new agent of `token`'s wallet with `model`, which the runtime must accept. */
export async function createAgent(context: DeploymentContext, token: string, model: string): Promise<string> {
  const response = await requestAgent(context, token, model);
  ensure(
    response.status === 200 || response.status === 201,
    `POST /agents with model ${model}: expected HTTP 201, got ${response.status}: ${quote(response)}`,
  );
  return expectJson(response, response.status, idSchema, 'POST /agents').id;
}

/** The refusal of a model no one offers: of the agent, or (a runtime that creates it) of its session. */
export async function unofferedModelRefusal(
  context: DeploymentContext,
  token: string,
): Promise<HttpResponse> {
  const agent = await requestAgent(context, token, NO_SUCH_MODEL);
  if (is4xx(agent)) return agent;
  const agentId = expectJson(agent, agent.status, idSchema, 'POST /agents').id;
  const session = await context.http.request({
    service: 'runtime',
    method: 'POST',
    path: `/agents/${agentId}/sessions`,
    headers: bearer(token),
    json: {},
    timeoutMs: 30_000,
  });
  ensure(
    is4xx(session),
    `POST /agents/:id/sessions for an agent with model ${NO_SUCH_MODEL}, which no provider offers: expected a 4xx, got ${session.status}`,
  );
  return session;
}

/** A model the deployment offers, read from its refusal of a model no one offers. */
export async function offeredModel(context: DeploymentContext, token: string): Promise<string> {
  const refused = await unofferedModelRefusal(context, token);
  const offered = expectShape(refusalSchema, refused.body ?? {}, 'the refusal of an unoffered model').details
    ?.offered;
  if (!offered?.length)
    notApplicableBecause(
      'the refusal of an unoffered model lists no offered models (details.offered), so the runner cannot pick one',
    );
  return offered[0] as string;
}

/**
 * A new agent of `token`'s wallet, for checks that do not chat (budgets): with a model no one offers
 * where the runtime takes it, else with the first model it offers.
 */
export async function someAgent(context: DeploymentContext, token: string): Promise<string> {
  const agent = await requestAgent(context, token, NO_SUCH_MODEL);
  if (agent.status === 200 || agent.status === 201)
    return expectJson(agent, agent.status, idSchema, 'POST /agents').id;
  return createAgent(context, token, await offeredModel(context, token));
}

import { z } from 'zod';
import { ensure, notApplicableBecause, pass } from '@sigil/plugin-api/kit';
import type { HttpResponse } from '../http.ts';
import { quote } from './agents.ts';
import type { DeploymentContext, Requirement } from './context.ts';
import { expectJson } from './expect.ts';
import { bearer, RUNTIME_AUTH, signIn, type SignedIn } from './wallet.ts';

/**
 * Self-improvement (runtime spec part 4: the status, trigger and history routes, and PUT
 * /wallet/settings setting the schedule; parts 2 and 3: the schedule values after_each, daily,
 * weekly, biweekly). The spec fixes the routes but no body nor the settings field's name: the checks
 * send and read Sigil's (docs/self-improvement.md), and the schedule check is not applicable to a
 * settings document without Sigil's `selfImprovement.schedule`.
 */

const SPEC_ROUTES =
  'runtime spec part 4 (GET /wallet/self-improvement/status, POST /wallet/self-improvement/trigger, GET /wallet/self-improvement/history, PUT /wallet/settings)';
const SCHEDULES = ['after_each', 'daily', 'weekly', 'biweekly'] as const;
const ROUTES = [
  ['GET', '/wallet/self-improvement/status'],
  ['POST', '/wallet/self-improvement/trigger'],
  ['GET', '/wallet/self-improvement/history'],
  ['PUT', '/wallet/settings'],
] as const;

const settingsSchema = z.looseObject({
  selfImprovement: z.looseObject({ schedule: z.string() }).optional(),
});
const triggeredSchema = z.looseObject({ run: z.looseObject({ id: z.string().min(1) }) });
const historySchema = z.looseObject({ runs: z.array(z.looseObject({ id: z.string() })) });
const statusSchema = z.looseObject({ schedule: z.string().optional() });

const improvement = {
  service: 'runtime',
  features: ['runtime-wallet-auth'],
  groups: ['self-improvement'],
} as const;

const call = (
  context: DeploymentContext,
  method: 'GET' | 'POST' | 'PUT',
  path: string,
  as?: SignedIn,
  json?: unknown,
): Promise<HttpResponse> =>
  context.http.request({
    service: 'runtime',
    method,
    path,
    ...(as ? { headers: bearer(as.token) } : {}),
    ...(json === undefined ? {} : { json }),
  });

const wallet = (context: DeploymentContext) => signIn(context, RUNTIME_AUTH);

async function schedule(context: DeploymentContext, as: SignedIn): Promise<string> {
  const settings = expectJson(
    await call(context, 'GET', '/wallet/settings', as),
    200,
    settingsSchema,
    'GET /wallet/settings',
  );
  if (settings.selfImprovement === undefined)
    notApplicableBecause(
      `GET /wallet/settings has no selfImprovement.schedule (Sigil's field; the spec does not name it): ${JSON.stringify(settings).slice(0, 200)}`,
    );
  return settings.selfImprovement.schedule;
}

async function trigger(context: DeploymentContext, as: SignedIn): Promise<string> {
  const response = await call(context, 'POST', '/wallet/self-improvement/trigger', as, {});
  ensure(
    response.status === 202 || response.status === 200,
    `POST /wallet/self-improvement/trigger: expected HTTP 202 (a new run) or 200 (the run under way), got ${response.status}: ${quote(response)}`,
  );
  return expectJson(response, response.status, triggeredSchema, 'POST /wallet/self-improvement/trigger').run
    .id;
}

async function historyIds(context: DeploymentContext, as: SignedIn): Promise<string[]> {
  const history = expectJson(
    await call(context, 'GET', '/wallet/self-improvement/history?limit=200', as),
    200,
    historySchema,
    'GET /wallet/self-improvement/history',
  );
  return history.runs.map((run) => run.id);
}

async function routesExist(context: DeploymentContext) {
  for (const [method, path] of ROUTES) {
    const response = await call(context, method, path, undefined, method === 'GET' ? undefined : {});
    ensure(
      response.status === 401,
      `${method} ${path} without a session: expected HTTP 401 (the route exists and wants the owner), got ${response.status}: ${quote(response)}`,
    );
  }
  const owner = await wallet(context);
  for (const path of ['/wallet/self-improvement/status', '/wallet/self-improvement/history'])
    expectJson(await call(context, 'GET', path, owner), 200, z.looseObject({}), `GET ${path}`);
  context.evidence.note(
    'each route answers 401 unsigned; status and history answer 200 to a signed-in wallet',
  );
  return pass();
}

async function scheduleValues(context: DeploymentContext) {
  const owner = await wallet(context);
  await schedule(context, owner);
  for (const value of SCHEDULES) {
    const put = await call(context, 'PUT', '/wallet/settings', owner, {
      selfImprovement: { schedule: value },
    });
    ensure(
      put.status === 200,
      `PUT /wallet/settings with schedule ${value}: expected HTTP 200, got ${put.status}: ${quote(put)}`,
    );
    const stored = await schedule(context, owner);
    ensure(
      stored === value,
      `after PUT /wallet/settings with schedule ${value}, GET /wallet/settings says ${stored}`,
    );
    const status = expectJson(
      await call(context, 'GET', '/wallet/self-improvement/status', owner),
      200,
      statusSchema,
      'GET /wallet/self-improvement/status',
    );
    ensure(
      status.schedule === undefined || status.schedule === value,
      `after PUT /wallet/settings with schedule ${value}, GET /wallet/self-improvement/status says ${status.schedule}`,
    );
  }
  const refused = await call(context, 'PUT', '/wallet/settings', owner, {
    selfImprovement: { schedule: 'hourly' },
  });
  ensure(
    refused.status === 400,
    `PUT /wallet/settings with schedule hourly: expected HTTP 400, got ${refused.status}: ${quote(refused)}`,
  );
  const after = await schedule(context, owner);
  const last = SCHEDULES[SCHEDULES.length - 1];
  ensure(after === last, `the refused PUT changed the schedule from ${last} to ${after}`);
  context.evidence.note(
    `${SCHEDULES.join(', ')} accepted and reported; hourly refused with 400, nothing changed`,
  );
  return pass();
}

async function ownerOnly(context: DeploymentContext) {
  const owner = await wallet(context);
  const other = await wallet(context);
  const before = await call(context, 'GET', '/wallet/settings', other);
  const runId = await trigger(context, owner);
  await call(context, 'PUT', '/wallet/settings', owner, { selfImprovement: { schedule: 'weekly' } });
  ensure(
    !(await historyIds(context, other)).includes(runId),
    "another wallet's history lists the owner's run",
  );
  const status = await call(context, 'GET', '/wallet/self-improvement/status', other);
  ensure(
    status.status === 200,
    `another wallet's GET /wallet/self-improvement/status: expected HTTP 200, got ${status.status}`,
  );
  ensure(
    !status.text.includes(runId),
    `another wallet's status shows the owner's run ${runId}: ${quote(status)}`,
  );
  const after = await call(context, 'GET', '/wallet/settings', other);
  ensure(
    after.text === before.text,
    `the owner's PUT /wallet/settings changed another wallet's settings: ${quote(before)} became ${quote(after)}`,
  );
  context.evidence.note("another wallet sees neither the owner's run nor its settings");
  return pass();
}

async function triggerMakesHistory(context: DeploymentContext) {
  const owner = await wallet(context);
  const runId = await trigger(context, owner);
  const ids = await historyIds(context, owner);
  ensure(
    ids.includes(runId),
    `GET /wallet/self-improvement/history does not list the triggered run ${runId} (it lists ${ids.length} runs)`,
  );
  const again = await trigger(context, owner);
  const twice = await historyIds(context, owner);
  ensure(twice.includes(again), `the second trigger's run ${again} is not in the history`);
  context.evidence.note(`run ${runId} listed in the history right after its trigger`);
  return pass();
}

export const selfImprovementRequirements: readonly Requirement[] = [
  {
    id: 'RT-4.self-improvement-routes',
    level: 'MUST',
    title:
      'GET /wallet/self-improvement/status, POST …/trigger, GET …/history and PUT /wallet/settings exist: each answers 401 without a session (not 404); status and history answer 200 to a signed-in wallet',
    spec: SPEC_ROUTES,
    ...improvement,
    check: routesExist,
  },
  {
    id: 'RT-4.self-improvement-schedule-values',
    level: 'MUST',
    title:
      'PUT /wallet/settings takes each schedule value (after_each, daily, weekly, biweekly), which the settings then report; another value (hourly) is refused with 400 and changes nothing',
    spec: `${SPEC_ROUTES}; parts 2 and 3 (schedule values after_each, daily, weekly, biweekly)`,
    ...improvement,
    check: scheduleValues,
  },
  {
    id: 'RT-5.self-improvement-owner-only',
    level: 'MUST',
    title:
      "another wallet's status and history do not show a wallet's run, and a wallet's settings change no other's",
    spec: `runtime spec part 5, rule 2 (endpoints check that the caller owns what they touch); ${SPEC_ROUTES}`,
    ...improvement,
    check: ownerOnly,
  },
  {
    id: 'RT-4.self-improvement-trigger-history',
    level: 'MUST',
    title:
      'POST /wallet/self-improvement/trigger answers a run (202 new, or 200 the one under way), which GET /wallet/self-improvement/history then lists',
    spec: `${SPEC_ROUTES}; part 2 (a self-improvement run is scheduled or manually triggered)`,
    ...improvement,
    check: triggerMakesHistory,
  },
];

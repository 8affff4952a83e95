import { z } from 'zod';
import { expectShape, pass } from '@sigil/plugin-api/kit';
import type { ServiceName } from '../http.ts';
import type { DeploymentContext, Requirement } from './context.ts';
import { expectJson } from './expect.ts';

/** `/health` of both services (gateway spec part 4, runtime spec part 4). */

const jsonObject = z.record(z.string(), z.unknown());

async function readHealth(
  context: DeploymentContext,
  service: ServiceName,
): Promise<Record<string, unknown>> {
  const response = await context.http.request({ service, path: '/health' });
  return expectJson(response, 200, jsonObject, `GET /health on the ${service}`);
}

export const healthRequirements: readonly Requirement[] = [
  {
    id: 'GW-4.health',
    level: 'MUST',
    title: 'The gateway answers GET /health with 200 and a JSON object',
    spec: 'gateway spec part 4, REST endpoints: GET /health, gateway health',
    service: 'gateway',
    check: async (context) => {
      await readHealth(context, 'gateway');
      return pass();
    },
  },
  {
    id: 'RT-4.health',
    level: 'MUST',
    title: 'The runtime answers GET /health with 200 and a JSON object',
    spec: 'runtime spec part 4, endpoints: GET /health',
    service: 'runtime',
    check: async (context) => {
      await readHealth(context, 'runtime');
      return pass();
    },
  },
  {
    id: 'RT-4.health-security-posture',
    level: 'MUST',
    title: 'Runtime health carries a securityPosture object',
    spec: 'runtime spec part 4, endpoints: GET /health, "the response has a field securityPosture"',
    service: 'runtime',
    check: async (context) => {
      const health = await readHealth(context, 'runtime');
      expectShape(z.object({ securityPosture: jsonObject }), health, 'runtime /health');
      return pass();
    },
  },
];

import type * as PromClient from 'prom-client';
import { importedOnce } from '../imported-once.ts';

/** prom-client, imported when a service first counts a request or serves /metrics, not before it listens. */
export const promClient: () => Promise<typeof PromClient> = importedOnce(() => import('prom-client'));

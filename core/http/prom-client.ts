import type * as PromClient from 'prom-client';

let loading: Promise<typeof PromClient> | undefined;

/**
 * prom-client, imported when a service first counts a request or serves /metrics, not before it
 * listens (issue 30, start-up). Later calls take the loaded module.
 */
export function promClient(): Promise<typeof PromClient> {
  loading ??= import('prom-client').catch((err: unknown) => {
    loading = undefined;
    throw err;
  });
  return loading;
}

import type * as Jose from 'jose';

let loading: Promise<typeof Jose> | undefined;

/**
 * jose (46 modules), imported when a token is first signed or verified or a key's thumbprint taken:
 * a credentialed request or a key's first use, not the start-up of a service whose first callers may
 * all be anonymous (issue 30, start-up). Later calls take the loaded module.
 */
export function jose(): Promise<typeof Jose> {
  loading ??= import('jose').catch((err: unknown) => {
    loading = undefined;
    throw err;
  });
  return loading;
}

import type * as Jose from 'jose';
import { importedOnce } from '../imported-once.ts';

/**
 * jose (46 modules), imported when a token is first signed or verified or a key's thumbprint taken:
 * a credentialed request or a key's first use, not the start-up of a service whose first callers may
 * all be anonymous (issue 30, start-up). Later calls take the loaded module.
 */
export const jose: () => Promise<typeof Jose> = importedOnce(() => import('jose'));

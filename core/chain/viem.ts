import type * as ViemSiwe from 'viem/siwe';
import type * as ViemUtils from 'viem/utils';

/** The module `load` imports, once; a failed import is tried again at the next call. */
function importedOnce<T>(load: () => Promise<T>): () => Promise<T> {
  let loading: Promise<T> | undefined;
  return () => {
    loading ??= load().catch((err: unknown) => {
      loading = undefined;
      throw err;
    });
    return loading;
  };
}

/**
 * viem's utilities (some 600 modules, the largest import of a gateway's start), imported when an
 * address is first checksummed or a signature checked: a credentialed request (SIWE, a session or
 * delegated JWT, an ERC-8128 signature, a wallet token) or a payment, not the start-up of a service
 * whose first callers may all be anonymous (issue 30, start-up).
 */
export const viemUtils: () => Promise<typeof ViemUtils> = importedOnce(() => import('viem/utils'));

/** viem's EIP-4361 messages, imported at the first sign-in challenge or a public URL's check. */
export const viemSiwe: () => Promise<typeof ViemSiwe> = importedOnce(() => import('viem/siwe'));

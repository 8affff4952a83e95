import type * as Viem from 'viem';
import type * as ViemAccounts from 'viem/accounts';
import type * as ViemSiwe from 'viem/siwe';
import type * as ViemUtils from 'viem/utils';
import { importedOnce } from '../imported-once.ts';

/**
 * viem's utilities (some 250 modules with ox, abitype and noble: the largest import of a gateway's
 * start), imported when an address is first checksummed or a signature checked: a credentialed request
 * (SIWE, a session or delegated JWT, an ERC-8128 signature, a wallet token) or a payment, not the
 * start-up of a service whose first callers may all be anonymous (issue 30, start-up).
 */
export const viemUtils: () => Promise<typeof ViemUtils> = importedOnce(() => import('viem/utils'));

/** viem's EIP-4361 messages, imported at the first sign-in challenge or a public URL's check. */
export const viemSiwe: () => Promise<typeof ViemSiwe> = importedOnce(() => import('viem/siwe'));

/** viem's local accounts (with noble's curves and the BIP-39 word lists), imported when a key is first used. */
export const viemAccounts: () => Promise<typeof ViemAccounts> = importedOnce(() => import('viem/accounts'));

/** viem's index, for what its subpaths do not export (signature parsing), imported at first use. */
export const viem: () => Promise<typeof Viem> = importedOnce(() => import('viem'));

import { isSigilError, SigilError, type ErrorCode } from '@sigil/plugin-api';
import type { Logger } from '../../../core/log.ts';

export type ProviderKeyProblem = 'provider_key_missing' | 'vault_locked';

/**
 * Where a session's vault is unlocked when the replica a request reached does not hold it (decrypted
 * keys live only in the memory of the replica that unlocked them): on another live replica, or on none
 * (never unlocked, locked, its session over, or its replica restarted or dead).
 */
export type UnlockedOn = 'another_replica' | 'no_replica';

const MESSAGE_ROUTE = 'GET /wallet/provider-vault/message';
const UNLOCK_ROUTE = 'POST /wallet/provider-vault/unlock';

/** How to unlock, in words a client can show. */
export const UNLOCK_HINT = `Sign the message of ${MESSAGE_ROUTE} with your wallet (personal_sign) and send ${UNLOCK_ROUTE} { "signature": "0x…" }`;

/** What to do about a vault locked here, by where it is unlocked; `then` says what the unlock gives. */
export const lockedHint = (unlockedOn: UnlockedOn, then: string): string =>
  unlockedOn === 'another_replica'
    ? `Your vault is unlocked on another runtime replica, and decrypted keys stay in the memory of the replica that unlocked them: unlock on this one too (${UNLOCK_HINT}; ${then}), or have the load balancer send a wallet's requests to one replica (affinity on the wallet or session)`
    : `${UNLOCK_HINT}; ${then}`;

/**
 * No usable provider key for a slot in this session (HTTP 409 `conflict`): none is stored
 * (`provider_key_missing`), or one is stored but this replica holds no unlock of the session
 * (`vault_locked`, with `details.unlockedOn` telling another replica's unlock from none). The hint says
 * how to fix it and names the slot; `details.slot` too.
 */
export class ProviderKeyUnavailable extends SigilError {
  readonly slot: string;
  readonly reason: ProviderKeyProblem;

  constructor(reason: 'provider_key_missing', slot: string);
  constructor(reason: 'vault_locked', slot: string, unlockedOn: UnlockedOn);
  constructor(reason: ProviderKeyProblem, slot: string, unlockedOn?: UnlockedOn) {
    super(
      'conflict',
      reason === 'provider_key_missing'
        ? `No provider key is stored for ${slot}`
        : unlockedOn === 'another_replica'
          ? `Your provider key for ${slot} is stored, and your vault is unlocked on another runtime replica but not on this one`
          : `Your provider key for ${slot} is stored but your vault is locked in this session`,
      {
        hint:
          reason === 'provider_key_missing'
            ? `Store your key in the ${slot} slot: ${UNLOCK_HINT}, then PUT /wallet/provider-vault/keys/${slot} { "apiKey": "…" } (or send the signature along: { "apiKey": "…", "signature": "0x…" })`
            : lockedHint(
                unlockedOn ?? 'no_replica',
                `it unlocks ${slot} and your other keys until this session ends`,
              ),
        details: { reason, slot, ...(unlockedOn === undefined ? {} : { unlockedOn }) },
      },
    );
    this.name = 'ProviderKeyUnavailable';
    this.slot = slot;
    this.reason = reason;
  }
}

/** A refusal of the vault with a stable `details.reason`. */
export const vaultError = (
  code: ErrorCode,
  reason: string,
  message: string,
  hint?: string,
  details: Record<string, unknown> = {},
): SigilError =>
  new SigilError(code, message, {
    details: { reason, ...details },
    ...(hint === undefined ? {} : { hint }),
  });

/** The vault's storage cannot be used (HTTP 503); never falls back to memory once serving. */
export const vaultUnavailable = (): SigilError =>
  vaultError(
    'unavailable',
    'vault_unavailable',
    'The provider vault is unavailable: its storage cannot be read or written',
    'Try again later; the operator finds the cause in the logs (the database)',
  );

/**
 * Runs a read or write of the vault's tables: a failure of the database is logged for the operator
 * and answered 503; a refusal (a SigilError thrown by a change) passes as it is.
 */
export async function vaultStorage<T>(logger: Logger, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (err) {
    if (isSigilError(err)) throw err;
    logger.error({ err }, 'provider vault storage failed');
    throw vaultUnavailable();
  }
}

import { SigilError, type ErrorCode } from '@sigil/plugin-api';

export type ProviderKeyProblem = 'provider_key_missing' | 'provider_vault_locked';

const MESSAGE_ROUTE = 'GET /wallet/provider-vault/message';
const UNLOCK_ROUTE = 'POST /wallet/provider-vault/unlock';

/** How to unlock, in words a client can show. */
export const UNLOCK_HINT = `Sign the message of ${MESSAGE_ROUTE} with your wallet (personal_sign) and send ${UNLOCK_ROUTE} { "signature": "0x…" }`;

/**
 * No usable provider key for a slot in this session (HTTP 409 `conflict`): none is stored
 * (`provider_key_missing`), or one is stored but the session has not unlocked the vault
 * (`provider_vault_locked`). The hint says how to fix it and names the slot; `details.slot` too.
 */
export class ProviderKeyUnavailable extends SigilError {
  readonly slot: string;
  readonly reason: ProviderKeyProblem;

  constructor(reason: ProviderKeyProblem, slot: string) {
    super(
      'conflict',
      reason === 'provider_key_missing'
        ? `No provider key is stored for ${slot}`
        : `Your provider key for ${slot} is stored but your vault is locked in this session`,
      {
        hint:
          reason === 'provider_key_missing'
            ? `Store your key in the ${slot} slot: ${UNLOCK_HINT}, then PUT /wallet/provider-vault/keys/${slot} { "apiKey": "…" } (or send the signature along: { "apiKey": "…", "signature": "0x…" })`
            : `${UNLOCK_HINT}; it unlocks ${slot} and your other keys until this session ends`,
        details: { reason, slot },
      },
    );
    this.name = 'ProviderKeyUnavailable';
    this.slot = slot;
    this.reason = reason;
  }
}

/** A refusal of the vault with a stable `details.reason`. */
export const vaultError = (code: ErrorCode, reason: string, message: string, hint?: string): SigilError =>
  new SigilError(code, message, { details: { reason }, ...(hint === undefined ? {} : { hint }) });

/** The vault's storage cannot be used (HTTP 503); never falls back to memory once serving. */
export const vaultUnavailable = (): SigilError =>
  vaultError(
    'unavailable',
    'vault_unavailable',
    'The provider vault is unavailable: its storage cannot be read or written',
    'Try again later; the operator finds the cause in the logs (VAULT_PERSISTENCE_DIR)',
  );

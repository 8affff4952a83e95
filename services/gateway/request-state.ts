import { SigilError } from '@sigil/plugin-api';
import type { Clock } from '../../core/clock.ts';
import { openAesGcm, sealAesGcm } from '../../core/crypto.ts';

/**
 * How long a client has to answer a relayed `input_required` (a person may be asked): after this, its
 * retry is refused and it calls the tool afresh.
 */
export const REQUEST_STATE_TTL_MS = 15 * 60_000;

/** The `details.reason` of a retry whose `requestState` the gateway did not issue for this call. */
export const REQUEST_STATE_INVALID = 'request_state_invalid';

const AAD = 'sigil/mcp-request-state/v1';

/** Whose call a relayed `input_required` belongs to: its retry must be the same call by the same caller. */
export interface StateOwner {
  serverId: string;
  tool: string;
  /** The caller's wallet, or undefined when anonymous. */
  wallet: string | undefined;
}

interface Payload {
  s: string;
  t: string;
  w: string | null;
  /** Expiry, ms since the epoch. */
  e: number;
  /** The server's own state, as it sent it; null when it sent none. */
  i: string | null;
}

/**
 * The `requestState` the gateway gives a 2026-07-28 client with a server's `input_required`: the
 * server's own state (byte for byte, or none) with whose call it is and until when, sealed with
 * AES-256-GCM under a key of the TEE backend. The client can neither read the server's state (which
 * may say anything of the server's environment) nor change a byte of it, nor use it for another
 * server, tool or wallet, nor after it expires: each is refused as invalid params (-32602).
 */
export class RequestStates {
  constructor(
    private readonly deps: {
      /** 32 bytes, the same on every replica (the TEE backend's key for this purpose). */
      key: () => Promise<Uint8Array>;
      clock: Clock;
    },
  ) {}

  async seal(owner: StateOwner, inner: string | undefined): Promise<string> {
    const payload: Payload = {
      s: owner.serverId,
      t: owner.tool,
      w: owner.wallet?.toLowerCase() ?? null,
      e: this.deps.clock.now().getTime() + REQUEST_STATE_TTL_MS,
      i: inner ?? null,
    };
    const box = sealAesGcm(await this.deps.key(), JSON.stringify(payload), AAD);
    return [box.iv, box.ciphertext, box.tag].map(base64url).join('.');
  }

  /** The server's own state (undefined when it sent none) of a state sealed for `owner`; else -32602. */
  async open(owner: StateOwner, state: string): Promise<string | undefined> {
    const payload = await this.payloadOf(state);
    if (
      payload === undefined ||
      payload.s !== owner.serverId ||
      payload.t !== owner.tool ||
      payload.w !== (owner.wallet?.toLowerCase() ?? null)
    ) {
      throw invalid('it was not issued by this gateway for this tool and caller, or it was changed');
    }
    if (payload.e < this.deps.clock.now().getTime())
      throw invalid('it has expired: call the tool again without it');
    return payload.i ?? undefined;
  }

  private async payloadOf(state: string): Promise<Payload | undefined> {
    const parts = state.split('.');
    if (parts.length !== 3) return undefined;
    const [iv, ciphertext, tag] = parts.map((part) => Buffer.from(part, 'base64url').toString('base64'));
    try {
      const parsed = JSON.parse(
        openAesGcm(
          await this.deps.key(),
          { iv: iv ?? '', ciphertext: ciphertext ?? '', tag: tag ?? '' },
          AAD,
        ),
      ) as Payload;
      return typeof parsed === 'object' && parsed !== null ? parsed : undefined;
    } catch {
      return undefined;
    }
  }
}

const base64url = (base64: string): string => Buffer.from(base64, 'base64').toString('base64url');

const invalid = (why: string) =>
  new SigilError('invalid_request', `Invalid requestState: ${why}`, {
    details: { reason: REQUEST_STATE_INVALID },
  });

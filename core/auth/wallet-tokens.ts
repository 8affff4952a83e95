import { randomBytes, randomUUID } from 'node:crypto';
import type { Address } from 'viem';
import { TtlCache } from '@sigil/plugin-api/cache';
import { viemUtils } from '../chain/viem.ts';
import type { Clock } from '../clock.ts';
import { sha256Hex } from '../crypto.ts';
import type { Database } from '../db/database.ts';
import { SigilError } from '@sigil/plugin-api';
import { unauthorized } from './principal.ts';

/** Every wallet token starts with this, so secret scanners and the auth middleware recognise one. */
export const WALLET_TOKEN_PREFIX = 'sigil_wt_';
const WALLET_TOKEN_PATTERN = /^sigil_wt_[A-Za-z0-9_-]{43}$/;
/** `last_used_at` is advisory; writing it at most once a minute keeps hot MCP clients from a write per call. */
const LAST_USED_RESOLUTION_MS = 60_000;
/**
 * How long a process trusts a token it has looked up. A revocation through this process takes effect
 * at once; on another replica sharing the database, within this bound.
 */
export const WALLET_TOKEN_CACHE_TTL_MS = 2000;

/** A token found live in the database: its owner, and when its use was last recorded. */
interface LiveToken {
  wallet: Address;
  lastUsedAt: number | null;
}

export interface WalletTokenInfo {
  id: string;
  label: string | null;
  createdAt: string;
  lastUsedAt: string | null;
  revokedAt: string | null;
}

interface WalletTokenRow {
  id: string;
  token_hash: string;
  wallet: string;
  label: string | null;
  created_at: number | string;
  last_used_at: number | string | null;
  revoked_at: number | string | null;
}

export const isWalletToken = (bearer: string): boolean => bearer.startsWith(WALLET_TOKEN_PREFIX);

/** Only the SHA-256 of a token is stored: a database leak yields nothing usable. */
const hashToken = (token: string): string => sha256Hex(token);

const isoOrNull = (ms: number | string | null): string | null =>
  ms === null ? null : new Date(Number(ms)).toISOString();

/** Long-lived gateway credentials for MCP clients, owned by a wallet and revocable by it. */
export class WalletTokens {
  private readonly live: TtlCache<string, LiveToken>;

  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    options: { cacheTtlMs?: number } = {},
  ) {
    this.live = new TtlCache({ ttlMs: options.cacheTtlMs ?? WALLET_TOKEN_CACHE_TTL_MS, maxEntries: 10_000 });
  }

  async create(
    wallet: Address,
    label: string | undefined,
  ): Promise<{ token: string; info: WalletTokenInfo }> {
    const token = `${WALLET_TOKEN_PREFIX}${randomBytes(32).toString('base64url')}`;
    const row: WalletTokenRow = {
      id: randomUUID(),
      token_hash: hashToken(token),
      wallet,
      label: label ?? null,
      created_at: this.clock.now().getTime(),
      last_used_at: null,
      revoked_at: null,
    };
    await this.db<WalletTokenRow>('wallet_tokens').insert(row);
    return { token, info: toInfo(row) };
  }

  async list(wallet: Address): Promise<WalletTokenInfo[]> {
    const rows = await this.db<WalletTokenRow>('wallet_tokens')
      .where({ wallet })
      .orderBy([{ column: 'created_at', order: 'desc' }, 'id']);
    return rows.map(toInfo);
  }

  /** Idempotent for the owner; another wallet's token is indistinguishable from a missing one. */
  async revoke(wallet: Address, id: string): Promise<void> {
    const row = await this.db<WalletTokenRow>('wallet_tokens').where({ id, wallet }).first();
    if (!row) throw new SigilError('not_found', `No wallet token ${id}`);
    if (row.revoked_at !== null) return;
    await this.db<WalletTokenRow>('wallet_tokens')
      .where({ id, wallet })
      .whereNull('revoked_at')
      .update({ revoked_at: this.clock.now().getTime() });
    // Looked-up tokens are keyed by hash, not id: revocations are rare, so forget them all.
    this.live.clear();
  }

  /** The wallet a live token belongs to. */
  async authenticate(token: string): Promise<Address> {
    if (!WALLET_TOKEN_PATTERN.test(token)) throw unauthorized('Malformed wallet token');
    const tokenHash = hashToken(token);
    const live = await this.live.get(tokenHash, async () => {
      const row = await this.db<WalletTokenRow>('wallet_tokens').where({ token_hash: tokenHash }).first();
      if (!row) throw unauthorized('Unknown wallet token');
      if (row.revoked_at !== null) throw unauthorized('Wallet token has been revoked');
      const { getAddress } = await viemUtils();
      return {
        wallet: getAddress(row.wallet),
        lastUsedAt: row.last_used_at === null ? null : Number(row.last_used_at),
      };
    });
    const now = this.clock.now().getTime();
    if (live.lastUsedAt === null || now - live.lastUsedAt >= LAST_USED_RESOLUTION_MS) {
      live.lastUsedAt = now;
      await this.db<WalletTokenRow>('wallet_tokens')
        .where({ token_hash: tokenHash })
        .update({ last_used_at: now });
    }
    return live.wallet;
  }
}

function toInfo(row: WalletTokenRow): WalletTokenInfo {
  return {
    id: row.id,
    label: row.label,
    createdAt: new Date(Number(row.created_at)).toISOString(),
    lastUsedAt: isoOrNull(row.last_used_at),
    revokedAt: isoOrNull(row.revoked_at),
  };
}

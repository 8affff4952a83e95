import { z } from 'zod';
import { asInt, asString, type EnvOverrides } from '../../../core/config/env.ts';
import { address, privateKey } from '../../../core/config/values.ts';

/** An amount of the ledger's token in integer base units (6 decimals: 1 USD = 1000000), as digits or a safe integer. */
const baseUnits = z
  .union([
    z.string().regex(/^(0|[1-9][0-9]{0,17})$/, 'must be an integer amount in base units, as digits'),
    z.number().int().min(0).max(Number.MAX_SAFE_INTEGER),
  ])
  .transform((value) => String(value));

/** The dev chain's deposit mnemonic: public, for `sigil up` on a local chain only; refused in production. */
export const DEV_DEPOSIT_MNEMONIC =
  'person spice basic pause innocent elbow tip fortune install elder grit fix';

/**
 * The `ledger` section, the runtime's wallet ledger: deposit addresses, the chain it watches, spend and withdrawal limits.
 * Without `rpcUrl` (and its companions) the ledger keeps spend and budgets but reads no chain.
 */
export const ledgerSchema = z
  .object({
    depositMnemonic: z
      .string()
      .optional()
      .describe(
        "BIP-39 mnemonic deposit addresses are derived from (m/44'/60'/0'/0/<index>); keep it dedicated and backed up",
      ),
    rpcUrl: z
      .url()
      .regex(/^https?:\/\//, 'must be an http(s):// JSON-RPC URL')
      .optional()
      .describe('JSON-RPC URL of the chain holding the token (it may carry an API key)'),
    publicRpcUrl: z
      .url()
      .regex(/^https?:\/\//, 'must be an http(s):// JSON-RPC URL')
      .optional()
      .describe(
        "JSON-RPC URL of the token's chain given to wallets with their deposit address, for a chain their wallet software does not know (sigil up: its dev chain's); never one with a key",
      ),
    chainId: z.number().int().positive().default(8453).describe('Chain id of the chain holding the token'),
    tokenAddress: address
      .optional()
      .describe('The 6-decimal EIP-3009 dollar token (Base USDC in production)'),
    treasury: address.optional().describe('Where the settlement sweep moves spent funds'),
    operatorKey: privateKey
      .optional()
      .describe('Private key of the account that submits sweeps and withdrawals and pays their gas'),
    confirmations: z
      .number()
      .int()
      .min(1)
      .max(1000)
      .optional()
      .describe(
        'Blocks (the including block counts as one) before a transfer counts; 12 by default, 1 on the dev chain of sigil up',
      ),
    pollIntervalMs: z
      .number()
      .int()
      .min(50)
      .max(600_000)
      .default(2000)
      .describe('How often the watcher reads new blocks, and the transfer worker runs'),
    balanceRefreshSeconds: z
      .number()
      .int()
      .min(1)
      .max(86_400)
      .default(300)
      .describe('How often every deposit address is read with balanceOf, besides Transfer events'),
    minimumBalance: baseUnits
      .default('10000')
      .describe(
        "Available balance a wallet needs to start paid work: a chat message, a canvas node's model turn or tool call, a self-improvement run's model turn (base units; 0.01 USD by default)",
      ),
    holdTtlSeconds: z
      .number()
      .int()
      .min(10)
      .max(86_400)
      .default(600)
      .describe(
        'A hold (what a running chat reserved) not settled or extended within this time is released by a sweep: its holder crashed or hung',
      ),
    sweep: z
      .object({
        intervalSeconds: z
          .number()
          .int()
          .min(1)
          .max(604_800)
          .default(3600)
          .describe('How often unsettled spend is swept to the treasury'),
        minimumAmount: baseUnits
          .default('1000000')
          .describe('Unsettled spend below this stays at the deposit address until it grows (1 USD)'),
      })
      .strict()
      .prefault({}),
    withdrawals: z
      .object({
        minAmount: baseUnits.default('10000').describe('Smallest withdrawal (0.01 USD)'),
        maxAmount: baseUnits.default('1000000000').describe('Largest single withdrawal (1000 USD)'),
        dailyTotal: baseUnits
          .default('2000000000')
          .describe('Most a wallet may withdraw per calendar UTC day (2000 USD)'),
        maxPerHour: z
          .number()
          .int()
          .min(1)
          .max(1000)
          .default(5)
          .describe('Withdrawal requests a wallet may make in any rolling hour'),
        authorizationTtlSeconds: z
          .number()
          .int()
          .min(60)
          .max(604_800)
          .default(3600)
          .describe(
            'Validity of the signed transfer: unmined by then, the withdrawal fails and its funds return',
          ),
      })
      .strict()
      .prefault({}),
  })
  .strict()
  .superRefine((ledger, ctx) => {
    const chainKeys = ['rpcUrl', 'tokenAddress', 'treasury', 'operatorKey', 'depositMnemonic'] as const;
    if (ledger.rpcUrl === undefined) return;
    for (const key of chainKeys) {
      if (ledger[key] === undefined)
        ctx.addIssue({ code: 'custom', path: [key], message: `required when ledger.rpcUrl is set` });
    }
  })
  .prefault({})
  .describe("The runtime's wallet ledger (docs/ledger.md)");

/** The environment variables of the ledger's settings, and the config path each sets. */
export const LEDGER_ENV: EnvOverrides = {
  LEDGER_DEPOSIT_MNEMONIC: { path: 'ledger.depositMnemonic', coerce: asString },
  LEDGER_RPC_URL: { path: 'ledger.rpcUrl', coerce: asString },
  LEDGER_PUBLIC_RPC_URL: { path: 'ledger.publicRpcUrl', coerce: asString },
  LEDGER_TOKEN_ADDRESS: { path: 'ledger.tokenAddress', coerce: asString },
  LEDGER_TREASURY: { path: 'ledger.treasury', coerce: asString },
  LEDGER_OPERATOR_KEY: { path: 'ledger.operatorKey', coerce: asString },
  LEDGER_CONFIRMATIONS: { path: 'ledger.confirmations', coerce: asInt },
};

/** The ledger's config paths whose values are secrets (the RPC URL may carry an API key). */
export const LEDGER_SECRET_PATHS = ['ledger.depositMnemonic', 'ledger.operatorKey', 'ledger.rpcUrl'] as const;

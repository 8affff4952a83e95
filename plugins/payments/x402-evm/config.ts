import { z } from 'zod';

const address = z.string().regex(/^0x[0-9a-fA-F]{40}$/, 'an 0x-prefixed 20-byte address');
const key = z.string().regex(/^0x[0-9a-fA-F]{64}$/, 'a 0x-prefixed 32-byte hex key');

/** The built-in facilitator's settling accounts' keys: `privateKeys`, or the one `privateKey`. */
export const facilitatorKeys = (builtin: { privateKey?: string; privateKeys?: string[] }): string[] =>
  builtin.privateKeys ?? (builtin.privateKey === undefined ? [] : [builtin.privateKey]);

export const configSchema = z
  .object({
    network: z
      .string()
      .regex(/^eip155:\d+$/, 'a CAIP-2 EVM network, e.g. eip155:8453')
      .default('eip155:8453')
      .describe('CAIP-2 network the payments are made on'),
    rpcUrl: z
      .url({ protocol: /^(https?|wss?)$/ })
      .describe(
        'JSON-RPC endpoint of that network; ws(s):// costs a quarter of the CPU of http(s):// per request',
      ),
    asset: z
      .object({
        address,
        name: z.string().min(1).describe('EIP-712 domain name of the token (Base USDC: "USD Coin")'),
        version: z.string().min(1).describe('EIP-712 domain version of the token (Base USDC: "2")'),
        decimals: z.number().int().min(0).max(36).default(6),
      })
      .strict()
      .describe('The EIP-3009 dollar token'),
    payTo: address.describe('Address the payments go to'),
    pricePerCall: z
      .union([z.number().int().positive(), z.string().regex(/^[1-9]\d*$/)])
      .default(500)
      .transform((value) => BigInt(value))
      .describe('Base units per paid call (500 = 0.0005 USD at 6 decimals)'),
    maxTimeoutSeconds: z
      .number()
      .int()
      .min(15)
      .max(3600)
      .default(120)
      .describe('How long an authorization must stay valid: must cover the tool call and settlement'),
    pollingIntervalMs: z
      .number()
      .int()
      .min(10)
      .max(10_000)
      .default(100)
      .describe('How often a settlement transaction is checked for its receipt'),
    settlementGasLimit: z
      .number()
      .int()
      .min(50_000)
      .max(10_000_000)
      .default(200_000)
      .describe(
        'Gas limit of a settlement transaction, sent without an estimate (transferWithAuthorization follows one path: about 90k gas at worst for Base USDC); unused gas is not paid',
      ),
    answerAfter: z
      .enum(['receipt', 'broadcast'])
      .default('receipt')
      .describe(
        'When a paid call is answered: once the settlement’s receipt shows the transfer ("receipt"), or once the node accepted the settlement transaction ("broadcast": x402’s settlement_pending with its hash, the receipt awaited after the answer; built-in facilitator only). Broadcast saves a block’s wait per paid call; a payer who cancels its authorization while its call runs then gets that result unpaid, and its later calls on this replica are answered after the receipt',
      ),
    logBlockRange: z
      .union([z.number().int().min(1).max(1_000_000), z.string().regex(/^[1-9]\d*$/)])
      .default(2000)
      .transform((value) => BigInt(value))
      .describe('Largest block range one eth_getLogs asks for (hosted RPC endpoints cap it)'),
    startBlock: z
      .union([z.number().int().nonnegative(), z.string().regex(/^\d+$/)])
      .default(0)
      .transform((value) => BigInt(value))
      .describe(
        'First block the reconciler and settlement lookups read: on a public chain, the block at which this gateway began taking payments',
      ),
    facilitator: z
      .discriminatedUnion('kind', [
        z
          .object({
            kind: z.literal('builtin'),
            privateKey: key
              .optional()
              .describe('Key of the account that submits settlements and pays their gas (secret)'),
            privateKeys: z
              .array(key)
              .min(1)
              .max(1000)
              .optional()
              .describe(
                'Keys of several such accounts (secret), instead of privateKey: each gateway replica settles from one it leases; give at least one per replica',
              ),
            accountLeaseSeconds: z
              .number()
              .int()
              .min(3)
              .max(3600)
              .default(15)
              .describe(
                'How long a replica’s lease on its settling account lasts unrenewed (renewed every third): how soon another replica settles from the account of one that froze',
              ),
          })
          .strict()
          .refine((builtin) => (builtin.privateKey === undefined) !== (builtin.privateKeys === undefined), {
            message: 'give either privateKey or privateKeys',
          })
          .refine(
            (builtin) =>
              new Set(facilitatorKeys(builtin).map((k) => k.toLowerCase())).size ===
              facilitatorKeys(builtin).length,
            {
              path: ['privateKeys'],
              message: 'each account once',
            },
          ),
        z
          .object({
            kind: z.literal('remote'),
            // Never the x402 library's public default: an empty or missing URL is refused here.
            url: z.url({ protocol: /^https?$/ }).describe('Base URL of an x402 facilitator'),
            timeoutMs: z.number().int().positive().default(30_000),
          })
          .strict(),
      ])
      .describe(
        'Who verifies and settles: this process with its own accounts ({ kind: "builtin", privateKey or privateKeys, accountLeaseSeconds }), or a remote facilitator ({ kind: "remote", url, timeoutMs })',
      ),
  })
  .strict()
  .refine((config) => config.answerAfter === 'receipt' || config.facilitator.kind === 'builtin', {
    path: ['answerAfter'],
    message: 'a remote facilitator answers only once it settled: "broadcast" needs the built-in one',
  });

export type X402EvmConfig = z.infer<typeof configSchema>;

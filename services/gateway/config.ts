import { z } from 'zod';
import { UTC_TIME_OF_DAY } from '@sigil/plugin-api/schedule';
import { asBool, asList, asString, type EnvOverrides } from '../../core/config/env.ts';
import { serviceEnv, serviceSchema } from '../../core/config/service.ts';
import { address } from '../../core/config/values.ts';
import { callLimitsSchema } from './call-limits-config.ts';

/** The `gateway` section: where the tool gateway listens, its MCP servers, their limits, its payments. */
export const gatewaySchema = serviceSchema(8402)
  .extend({
    operatorWallets: z.array(address).default([]).describe('Wallets treated as operators'),
    erc8128EnforceOperatorMcp: z
      .boolean()
      .default(false)
      .describe('Reject bearer-only requests from operator wallets'),
    secretKey: z
      .string()
      .min(32)
      .optional()
      .describe(
        'Master key for per-wallet secrets: the same on every replica; without it secrets are memory-only, and the gateway refuses to start where they live in the database',
      ),
    secretsStore: z
      .enum(['auto', 'database'])
      .default('auto')
      .describe(
        'Where per-wallet secrets live. auto: in the database when replicas share it (database.shared), else as files under VAULT_PERSISTENCE_DIR with GATEWAY_SECRET_KEY, else in memory. database: in the database always. Both need GATEWAY_SECRET_KEY in the database (docs/secrets.md)',
      ),
    catalogFile: z
      .string()
      .optional()
      .describe(
        'JSON file of MCP servers ({ "servers": [...] }); its entries replace defaults with the same id',
      ),
    includeDefaultCatalog: z
      .boolean()
      .default(true)
      .describe('Offer the shipped catalog of MCP servers from npm'),
    denyList: z
      .array(z.string().min(1))
      .default([])
      .describe('Server ids or package names the security filter blocks'),
    warmupAtStart: z
      .boolean()
      .default(true)
      .describe(
        'Install and verify catalog servers at start-up (in the background, with progress logs); a verdict any replica recorded since the last refresh time for the same catalog entry is taken, and its pin installed here',
      ),
    refresh: z
      .object({
        enabled: z.boolean().default(true).describe('Re-verify every catalog server once a day'),
        at: z
          .string()
          .regex(UTC_TIME_OF_DAY, 'a UTC time of day, HH:MM')
          .default('03:00')
          .describe(
            'UTC time of day of the daily refresh (on one replica a day): every server is resolved anew, installed, verified and its tools checked against their pins',
          ),
        pollSeconds: z
          .number()
          .int()
          .positive()
          .default(60)
          .describe('How often the clock is checked against the next refresh'),
      })
      .strict()
      .default({ enabled: true, at: '03:00', pollSeconds: 60 })
      .describe('The daily package refresh, run by the gateway for every registry kind'),
    idleTimeoutSeconds: z
      .number()
      .int()
      .min(1)
      .max(86_400)
      .default(300)
      .describe('A warm MCP server process with no call for this long is stopped'),
    maxRunningServers: z
      .number()
      .int()
      .min(1)
      .max(1000)
      .default(32)
      .describe(
        'MCP server processes running at once; the least recently used idle one is stopped to start another',
      ),
    toolCallTimeoutSeconds: z
      .number()
      .int()
      .min(1)
      .max(3600)
      .default(60)
      .describe("A tool call's time limit, for servers whose catalog entry sets none"),
    maxToolCallTimeoutSeconds: z
      .number()
      .int()
      .min(1)
      .max(3600)
      .default(600)
      .describe('The longest time limit a catalog entry may set for its calls (its toolCallTimeoutSeconds)'),
    callLimits: callLimitsSchema,
    mcp: z
      .object({
        listTtlSeconds: z
          .number()
          .int()
          .min(0)
          .max(86_400)
          .default(60)
          .describe(
            'How long MCP 2026-07-28 clients may reuse server/discover and a per-server endpoint’s tools/list (ttlMs, public); never past the next daily refresh. POST /mcp tools/list is never cached (the enabled set changes)',
          ),
        probeTimeoutSeconds: z
          .number()
          .int()
          .min(1)
          .max(60)
          .default(5)
          .describe(
            'How long a verification waits for an MCP server’s answer to server/discover (its start included), then takes it for a 2025-11-25 server and starts it again; too short takes a slow 2026-07-28 server for one',
          ),
      })
      .strict()
      .prefault({})
      .describe('The MCP endpoints (docs/mcp-revisions.md)'),
    paymentHint: z
      .string()
      .min(1)
      .max(500)
      .optional()
      .describe(
        'A sentence added to the hint of every 402 answer on how to pay here (sigil up on the dev chain names the examples that pay there and how to make calls free)',
      ),
    paidResultRetentionHours: z
      .number()
      .int()
      .min(0)
      .max(720)
      .default(24)
      .describe(
        'How long a paid call’s result is kept for its payer to fetch again (GET /api/payments/:paymentId/result) should the answer be lost; 0 keeps none',
      ),
    paidResultMaxBytes: z
      .number()
      .int()
      .min(0)
      .max(4_000_000)
      .default(262_144)
      .describe('The largest paid result kept (serialized bytes); a larger one is served, not kept'),
    paidResultMaxBytesPerPayer: z
      .number()
      .int()
      .min(0)
      .max(1_073_741_824)
      .default(16_777_216)
      .describe(
        'The bytes of unexpired paid results kept per payer; past it a result is served, not kept (its receipt says so)',
      ),
    delegation: z
      .object({
        enabled: z
          .boolean()
          .default(true)
          .describe("Accept the runtime's delegated ES256 JWTs as wallet auth"),
        runtimeUrl: z
          .url()
          .optional()
          .describe(
            "Where the gateway reads the runtime's /.well-known/jwks.json and /api/attestation/report; the runtime's public URL when unset",
          ),
        cacheSeconds: z
          .number()
          .int()
          .min(1)
          .max(86_400)
          .default(300)
          .describe("How long the runtime's JWKS and its trust state are reused before being read again"),
        requireTrusted: z
          .boolean()
          .default(false)
          .describe(
            'Refuse delegated JWTs unless the runtime is trusted: its attestation verifies with a TEE backend this gateway loads, and binds the JWKS it serves',
          ),
      })
      .strict()
      .prefault({})
      .describe("The runtime's delegated path (docs/auth.md)"),
  })
  .prefault({});

/** The gateway's session setting in the shared `auth` section. */
export const GATEWAY_SESSION = {
  gatewayJwtTtlSeconds: z
    .number()
    .int()
    .min(60)
    .max(86_400)
    .default(86_400)
    .describe('Lifetime of a gateway session JWT (24 h, as the gateway spec says)'),
};

/** The environment variables of the gateway's settings, and the config path each sets. */
export const GATEWAY_ENV: EnvOverrides = {
  ...serviceEnv('GATEWAY', 'gateway'),
  GATEWAY_SECRET_KEY: { path: 'gateway.secretKey', coerce: asString },
  GATEWAY_SECRETS_STORE: { path: 'gateway.secretsStore', coerce: asString },
  OPERATOR_WALLETS: { path: 'gateway.operatorWallets', coerce: asList },
  ERC8128_ENFORCE_OPERATOR_MCP: { path: 'gateway.erc8128EnforceOperatorMcp', coerce: asBool },
  GATEWAY_WARMUP: { path: 'gateway.warmupAtStart', coerce: asBool },
  GATEWAY_CATALOG: { path: 'gateway.catalogFile', coerce: asString },
  GATEWAY_DELEGATION: { path: 'gateway.delegation.enabled', coerce: asBool },
  GATEWAY_RUNTIME_URL: { path: 'gateway.delegation.runtimeUrl', coerce: asString },
};

/** The gateway's config paths whose values are secrets. */
export const GATEWAY_SECRET_PATHS = ['gateway.secretKey'] as const;

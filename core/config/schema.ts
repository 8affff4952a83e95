import { isIP } from 'node:net';
import { z } from 'zod';
import { SERVER_LIMITS } from '../http/server.ts';

const port = z.number().int().min(0).max(65535);
const address = z.string().regex(/^0x[0-9a-fA-F]{40}$/, 'must be a 0x-prefixed 20-byte hex address');

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
 * The runtime's wallet ledger: deposit addresses, the chain it watches, spend and withdrawal limits.
 * Without `rpcUrl` (and its companions) the ledger keeps spend and budgets but reads no chain.
 */
const ledgerSchema = z
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
    chainId: z.number().int().positive().default(8453).describe('Chain id of the chain holding the token'),
    tokenAddress: address
      .optional()
      .describe('The 6-decimal EIP-3009 dollar token (Base USDC in production)'),
    treasury: address.optional().describe('Where the settlement sweep moves spent funds'),
    operatorKey: z
      .string()
      .regex(/^0x[0-9a-fA-F]{64}$/, 'must be a 0x-prefixed 32-byte hex private key')
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
      .describe('Available balance a wallet needs to start a chat (base units; 0.01 USD by default)'),
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
  });

/** One plugin to load: Medusa's `{ resolve, id, options }` shape. */
export const pluginEntrySchema = z
  .object({
    resolve: z
      .string()
      .min(1)
      .describe('A built-in plugin name (e.g. "tee-none"), an npm package name, or a path to a module'),
    id: z
      .string()
      .regex(/^[a-z0-9][a-z0-9-]*$/)
      .optional()
      .describe(
        'Instance name; defaults to the manifest name. Two instances of one plugin need distinct ids',
      ),
    enabled: z.boolean().default(true),
    options: z
      .record(z.string(), z.unknown())
      .default({})
      .describe("The plugin's own config, checked by its schema"),
  })
  .strict();

/** What a service accepts at its HTTP edge, before any route: names, origins, time and connections. */
const httpEdgeSchema = z
  .object({
    allowedHosts: z
      .array(z.string().min(1))
      .default([])
      .describe(
        'Host header values accepted besides the public URL\'s host and, when bound to loopback or all interfaces, localhost, 127.0.0.1 and [::1] with the port (e.g. "gw.internal:8402"); "*" accepts any, only behind a proxy that checks Host itself',
      ),
    allowedOrigins: z
      .array(z.string().regex(/^https?:\/\/[^/]+$/, 'must be an origin: scheme://host[:port], no path'))
      .default([])
      .describe(
        "Browser origins that may call the service cross-origin (CORS), e.g. https://app.example.com; the service's own origins are always allowed, any other Origin is refused",
      ),
    headersTimeoutMs: z
      .number()
      .int()
      .min(100)
      .max(300_000)
      .default(SERVER_LIMITS.headersTimeoutMs)
      .describe(
        'A request whose headers have not all arrived by then is answered 408 and its connection closed',
      ),
    requestTimeoutMs: z
      .number()
      .int()
      .min(100)
      .max(3_600_000)
      .default(SERVER_LIMITS.requestTimeoutMs)
      .describe(
        'The whole request, headers and body, must arrive within this (the body read timeout); answering it may take longer',
      ),
    keepAliveTimeoutMs: z
      .number()
      .int()
      .min(100)
      .max(600_000)
      .default(SERVER_LIMITS.keepAliveTimeoutMs)
      .describe('An idle keep-alive connection is closed after this'),
    maxConnections: z
      .number()
      .int()
      .min(1)
      .max(1_000_000)
      .default(SERVER_LIMITS.maxConnections)
      .describe('Open connections beyond this are closed as they arrive'),
    maxConnectionsPerClient: z
      .number()
      .int()
      .min(0)
      .max(1_000_000)
      .default(SERVER_LIMITS.maxConnectionsPerClient)
      .describe(
        'Open connections from one client address (an IPv6 /64) beyond this are closed as they arrive; 0 turns it off. Behind a proxy or load balancer, the proxy is one client: raise it or let the proxy cap clients',
      ),
  })
  .strict()
  .refine((http) => http.headersTimeoutMs <= http.requestTimeoutMs, {
    path: ['headersTimeoutMs'],
    message: 'must not exceed requestTimeoutMs',
  });

const serviceSchema = (defaultPort: number) =>
  z
    .object({
      host: z.string().default('127.0.0.1').describe('Address the service listens on'),
      port: port.default(defaultPort).describe('Port the service listens on'),
      publicUrl: z
        .url()
        .optional()
        .describe('URL clients use to reach the service; SIWE domain and URI are checked against it'),
      bodyLimitBytes: z
        .number()
        .int()
        .positive()
        .default(1_048_576)
        .describe('Largest request body; a larger one is answered 413'),
      http: httpEdgeSchema
        .prefault({})
        .describe('The HTTP edge: allowed Host and Origin values, timeouts, connections'),
    })
    .strict();

/** An IPv4 or IPv6 address, or a CIDR block of them. */
const addressOrBlock = z.string().refine((value) => {
  const [ip = '', bits, ...rest] = value.split('/');
  const family = isIP(ip);
  if (family === 0 || rest.length > 0) return false;
  if (bits === undefined) return true;
  return /^\d{1,3}$/.test(bits) && Number(bits) <= (family === 4 ? 32 : 128);
}, 'an IP address or a CIDR block (10.0.0.0/8, fd00::/8)');

/**
 * What one caller may hold of the gateway's MCP server processes, and how long a call waits for one:
 * a slow or hanging call holds a process until its time limit, so without these a few callers held
 * them all (docs/security.md).
 */
const callLimitsSchema = z
  .object({
    perWallet: z
      .number()
      .int()
      .min(1)
      .max(100_000)
      .default(8)
      .describe('Tool calls one wallet may have in flight (queued included); more are refused 429'),
    perAnonymousClient: z
      .number()
      .int()
      .min(1)
      .max(100_000)
      .default(4)
      .describe(
        'Tool calls one anonymous client (a remote address; an IPv6 /64) may have in flight; more are refused 429',
      ),
    queueLength: z
      .number()
      .int()
      .min(0)
      .max(100_000)
      .default(64)
      .describe(
        'Calls that may wait for a process while all maxRunningServers are busy; more are refused 503',
      ),
    queueWaitSeconds: z
      .number()
      .int()
      .min(0)
      .max(300)
      .default(10)
      .describe('How long a call waits for a process before a 503'),
    trustedProxies: z
      .array(addressOrBlock)
      .default([])
      .describe(
        "Proxies whose X-Forwarded-For names the anonymous client; otherwise the client is the connection's remote address (behind a proxy: the proxy)",
      ),
  })
  .strict()
  .prefault({});

/** What `sigil up` runs with no config: no TEE, MCP servers from npm, the util-linux sandbox. */
export const DEFAULT_PLUGINS = ['tee-none', 'registry-npm', 'sandbox-linux-namespaces'] as const;

export const configSchema = z
  .object({
    $schema: z.string().optional(),
    mode: z
      .enum(['development', 'production'])
      .default('development')
      .describe('production fails closed where development falls back (e.g. memory-only vaults)'),
    log: z
      .object({
        level: z
          .enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'])
          .default('info')
          .describe(
            'Each request has an access line at debug; at info, a count of requests by route and status',
          ),
        format: z
          .enum(['auto', 'json', 'pretty'])
          .default('auto')
          .describe(
            'json: one JSON object a line; pretty: readable lines; auto: pretty when stderr is a terminal outside production mode',
          ),
        requestSummarySeconds: z
          .number()
          .int()
          .min(1)
          .max(86_400)
          .default(60)
          .describe('How often the count of requests by route and status is logged at info'),
      })
      .strict()
      .prefault({}),
    database: z
      .object({
        url: z
          .string()
          .default('data/sigil.db')
          .describe('postgres://… for PostgreSQL, otherwise a SQLite file path'),
        dataKey: z
          .string()
          .min(32, 'must be at least 32 characters (e.g. openssl rand -base64 32)')
          .optional()
          .describe(
            'Key that encrypts secrets the database keeps (the session signing key) at rest, AES-256-GCM; plain text without it',
          ),
      })
      .strict()
      .prefault({}),
    auth: z
      .object({
        chainId: z.number().int().positive().default(8453).describe('Chain id SIWE messages must name'),
        challengeTtlSeconds: z
          .number()
          .int()
          .min(30)
          .max(3600)
          .default(300)
          .describe('Lifetime of a SIWE sign-in challenge'),
        runtimeJwtTtlSeconds: z
          .number()
          .int()
          .min(60)
          .max(86_400)
          .default(3600)
          .describe('Lifetime of a runtime session JWT (1 h)'),
        gatewayJwtTtlSeconds: z
          .number()
          .int()
          .min(60)
          .max(86_400)
          .default(86_400)
          .describe('Lifetime of a gateway session JWT (24 h, as the gateway spec says)'),
        requestSignatureMaxAgeSeconds: z
          .number()
          .int()
          .min(5)
          .max(3600)
          .default(300)
          .describe('Longest validity window accepted for an ERC-8128 signature'),
        clockSkewSeconds: z
          .number()
          .int()
          .min(0)
          .max(300)
          .default(30)
          .describe('Clock skew tolerated when checking JWTs and signatures'),
        jwtSigningKey: z
          .string()
          .optional()
          .describe(
            'ES256 private key (PKCS#8 PEM) that signs session JWTs; generated and kept in the database when unset',
          ),
      })
      .strict()
      .prefault({}),
    runtime: serviceSchema(8080)
      .extend({
        mcpSigningKey: z
          .string()
          .optional()
          .describe(
            'ES256 private key (PKCS#8 PEM or JWK JSON) that signs delegated gateway JWTs; ephemeral in development when unset, required in production',
          ),
        mcpSigningKeyPrevious: z
          .string()
          .optional()
          .describe(
            'The ES256 key MCP_SIGNING_KEY replaced (PEM or JWK, private or public): still published in the JWKS during a rotation, never used to sign',
          ),
        delegatedJwtTtlSeconds: z
          .number()
          .int()
          .min(30)
          .max(900)
          .default(300)
          .describe('Lifetime of a delegated gateway JWT'),
        operatorKey: z
          .string()
          .regex(/^0x[0-9a-fA-F]{64}$/, 'must be a 0x-prefixed 32-byte hex private key')
          .optional()
          .describe(
            "Private key of the runtime's operator wallet, which signs its gateway requests with ERC-8128",
          ),
        providerApiKey: z
          .string()
          .optional()
          .describe(
            "The operator's internal provider key, used for a chat when the wallet stored none and chat.internalKey allows it",
          ),
        chat: z
          .object({
            internalKey: z
              .boolean()
              .default(false)
              .describe(
                'Let wallets without a key of their own chat on runtime.providerApiKey (priced 1.15 × baseLlmCost instead of 0.10 ×)',
              ),
            gatewayPath: z
              .enum(['delegated', 'operator'])
              .default('delegated')
              .describe(
                "How the tool loop reaches the gateway: the wallet's delegated ES256 JWT, or the operator wallet's ERC-8128 signatures",
              ),
            gatewayUrl: z
              .url()
              .optional()
              .describe(
                'Where the tool loop reaches the gateway, when not at gateway.publicUrl (sigil up sets it to its own gateway)',
              ),
            maxSessionsPerAgent: z
              .number()
              .int()
              .min(1)
              .max(1000)
              .default(20)
              .describe('Open chat sessions one agent may have'),
            maxMessagesPerSession: z
              .number()
              .int()
              .min(1)
              .max(10_000)
              .default(100)
              .describe('User messages answered in one session'),
            maxInputChars: z
              .number()
              .int()
              .min(1)
              .max(1_000_000)
              .default(32_000)
              .describe("Characters of one message (and of a session's system prompt)"),
            maxSteps: z
              .number()
              .int()
              .min(1)
              .max(50)
              .default(8)
              .describe('Model turns per message; then the message ends with finishReason "max-steps"'),
            maxToolCallsPerTurn: z
              .number()
              .int()
              .min(0)
              .max(100)
              .default(16)
              .describe('Tool calls the loop runs from one model turn; more end the message with an error'),
            maxServersPerSession: z
              .number()
              .int()
              .min(0)
              .max(50)
              .default(8)
              .describe('Gateway servers one session may enable'),
            maxOutputTokens: z
              .number()
              .int()
              .min(1)
              .max(1_000_000)
              .default(4096)
              .describe('Output tokens of one model turn (and of the cost estimate held before it)'),
            sessionIdleSeconds: z
              .number()
              .int()
              .min(60)
              .max(7 * 86_400)
              .default(3600)
              .describe('A session idle this long ends'),
            toolClientIdleSeconds: z
              .number()
              .int()
              .min(10)
              .max(7 * 86_400)
              .default(600)
              .describe(
                "A chat session's MCP client of the gateway is closed after this long unused; its next message connects again",
              ),
            maxToolClients: z
              .number()
              .int()
              .min(1)
              .max(100_000)
              .default(1000)
              .describe(
                'MCP clients of the gateway kept open across chat sessions (one a session); beyond it the least recently used is closed',
              ),
          })
          .strict()
          .prefault({})
          .describe('Chat sessions and their limits (docs/runtime-chat.md)'),
      })
      .prefault({}),
    gateway: serviceSchema(8402)
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
          .describe('Master key for per-wallet secrets; secrets are memory-only without it'),
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
          .describe('Install and verify catalog servers at start-up (in the background, with progress logs)'),
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
          .describe(
            'The longest time limit a catalog entry may set for its calls (its toolCallTimeoutSeconds)',
          ),
        callLimits: callLimitsSchema,
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
                'Refuse delegated JWTs unless the runtime is trusted (its attestation binds its JWKS)',
              ),
          })
          .strict()
          .prefault({})
          .describe("The runtime's delegated path (docs/auth.md)"),
      })
      .prefault({}),
    vault: z
      .object({
        persistenceDir: z.string().optional().describe('Where vault ciphertext persists'),
      })
      .strict()
      .prefault({}),
    devChain: z
      .object({
        enabled: z
          .boolean()
          .default(true)
          .describe(
            'sigil up starts a local anvil chain with the dev dollar token and adds a payment rail on it, unless plugins lists a payment-rail',
          ),
        port: port.optional().describe('RPC port of the dev chain on 127.0.0.1; picked by the OS when unset'),
        stateFile: z
          .string()
          .min(1)
          .default('data/devchain/state.json')
          .describe(
            "Where the dev chain's state (blocks, balances, contracts) is kept between runs; delete it for a new chain",
          ),
      })
      .strict()
      .prefault({})
      .describe('The local dev chain of sigil up (never sigil gateway or sigil runtime alone)'),
    ledger: ledgerSchema.prefault({}).describe("The runtime's wallet ledger (docs/ledger.md)"),
    plugins: z
      .array(pluginEntrySchema)
      .default(DEFAULT_PLUGINS.map((resolve) => ({ resolve, enabled: true, options: {} })))
      .describe(
        'Plugins to load; listing them replaces the default list (tee-none, registry-npm, sandbox-linux-namespaces)',
      ),
  })
  .strict()
  .superRefine((config, ctx) => {
    // A chat refreshes its hold before each tool call: the TTL must outlast the longest one.
    if (config.ledger.holdTtlSeconds <= config.gateway.toolCallTimeoutSeconds) {
      ctx.addIssue({
        code: 'custom',
        path: ['ledger', 'holdTtlSeconds'],
        message: `must be longer than gateway.toolCallTimeoutSeconds (${config.gateway.toolCallTimeoutSeconds}): a running chat's hold would expire during one tool call`,
      });
    }
    if (config.mode === 'production' && config.ledger.depositMnemonic?.trim() === DEV_DEPOSIT_MNEMONIC) {
      ctx.addIssue({
        code: 'custom',
        path: ['ledger', 'depositMnemonic'],
        message: 'is the public dev mnemonic, refused in production: generate a mnemonic of your own',
      });
    }
  });

export type SigilConfig = z.infer<typeof configSchema>;
export type PluginEntry = z.infer<typeof pluginEntrySchema>;

/** Config paths whose values are secrets: redacted in every printout. */
export const SECRET_CONFIG_PATHS = [
  'database.dataKey',
  'auth.jwtSigningKey',
  'runtime.mcpSigningKey',
  'runtime.mcpSigningKeyPrevious',
  'runtime.operatorKey',
  'runtime.providerApiKey',
  'gateway.secretKey',
  'ledger.depositMnemonic',
  'ledger.operatorKey',
  'ledger.rpcUrl',
] as const;

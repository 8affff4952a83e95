import { z } from 'zod';

const port = z.number().int().min(0).max(65535);
const address = z.string().regex(/^0x[0-9a-fA-F]{40}$/, 'must be a 0x-prefixed 20-byte hex address');

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

const serviceSchema = (defaultPort: number) =>
  z
    .object({
      host: z.string().default('127.0.0.1'),
      port: port.default(defaultPort),
      publicUrl: z
        .url()
        .optional()
        .describe('URL clients use to reach the service; SIWE domain and URI are checked against it'),
      bodyLimitBytes: z.number().int().positive().default(1_048_576),
    })
    .strict();

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
        level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
      })
      .strict()
      .prefault({}),
    database: z
      .object({
        url: z
          .string()
          .default('data/sigil.db')
          .describe('postgres://… for PostgreSQL, otherwise a SQLite file path (env DATABASE_URL)'),
      })
      .strict()
      .prefault({}),
    auth: z
      .object({
        chainId: z.number().int().positive().default(8453),
        challengeTtlSeconds: z.number().int().min(30).max(3600).default(300),
        runtimeJwtTtlSeconds: z.number().int().min(60).max(86_400).default(3600),
        gatewayJwtTtlSeconds: z.number().int().min(60).max(86_400).default(86_400),
        requestSignatureMaxAgeSeconds: z
          .number()
          .int()
          .min(5)
          .max(3600)
          .default(300)
          .describe('Longest validity window accepted for an ERC-8128 signature'),
        clockSkewSeconds: z.number().int().min(0).max(300).default(30),
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
          .describe('ES256 private key for delegated gateway JWTs (env MCP_SIGNING_KEY)'),
        providerApiKey: z.string().optional().describe('Operator provider key slot (env PROVIDER_API_KEY)'),
      })
      .prefault({}),
    gateway: serviceSchema(8402)
      .extend({
        operatorWallets: z
          .array(address)
          .default([])
          .describe('Wallets treated as operators (env OPERATOR_WALLETS)'),
        erc8128EnforceOperatorMcp: z
          .boolean()
          .default(false)
          .describe('Reject bearer-only requests from operator wallets (env ERC8128_ENFORCE_OPERATOR_MCP)'),
        secretKey: z
          .string()
          .min(32)
          .optional()
          .describe(
            'Master key for per-wallet secrets (env GATEWAY_SECRET_KEY); secrets are memory-only without it',
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
          .describe('Install and verify catalog servers at start-up (in the background, with progress logs)'),
        idleTimeoutSeconds: z
          .number()
          .int()
          .min(1)
          .max(86_400)
          .default(300)
          .describe('A warm MCP server process with no call for this long is stopped'),
        maxRunningServers: z.number().int().min(1).max(1000).default(32),
        toolCallTimeoutSeconds: z.number().int().min(1).max(3600).default(60),
      })
      .prefault({}),
    vault: z
      .object({
        persistenceDir: z
          .string()
          .optional()
          .describe('Where vault ciphertext persists (env VAULT_PERSISTENCE_DIR)'),
      })
      .strict()
      .prefault({}),
    devChain: z
      .object({
        enabled: z
          .boolean()
          .default(true)
          .describe(
            'sigil up starts a local anvil chain with the dev dollar token and adds a payment rail on it, unless plugins lists a payment-rail (env DEV_CHAIN)',
          ),
        port: port
          .optional()
          .describe(
            'RPC port of the dev chain on 127.0.0.1; picked by the OS when unset (env DEV_CHAIN_PORT)',
          ),
      })
      .strict()
      .prefault({})
      .describe('The local dev chain of sigil up (never sigil gateway or sigil runtime alone)'),
    plugins: z
      .array(pluginEntrySchema)
      .default(DEFAULT_PLUGINS.map((resolve) => ({ resolve, enabled: true, options: {} })))
      .describe(
        'Plugins to load; listing them replaces the default list (tee-none, registry-npm, sandbox-linux-namespaces)',
      ),
  })
  .strict();

export type SigilConfig = z.infer<typeof configSchema>;
export type PluginEntry = z.infer<typeof pluginEntrySchema>;

/** Config paths whose values are secrets: redacted in every printout. */
export const SECRET_CONFIG_PATHS = [
  'auth.jwtSigningKey',
  'runtime.mcpSigningKey',
  'runtime.providerApiKey',
  'gateway.secretKey',
] as const;

import { z } from 'zod';
import { asString, type EnvOverrides } from './env.ts';

/**
 * What every deployment's config has besides its services' sections: its mode, log and database
 * (with `auth`, the shared settings of wallet sign-in, and `plugins`, below).
 */
export const CORE_SETTINGS = {
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
          "Key that encrypts secrets the database keeps (the session signing key, the provider vault's server key) at rest, AES-256-GCM; plain text without it",
        ),
      shared: z
        .boolean()
        .optional()
        .describe(
          'Whether several processes of a service (replicas) share this database; by default yes on PostgreSQL, no on SQLite. Shared, each replica needs the public URLs and keys its peers use (docs/operations.md); not shared, a process starting takes up at once all that its predecessor had claimed, however recently it died',
        ),
      heartbeatSeconds: z
        .number()
        .int()
        .min(1)
        .max(300)
        .default(10)
        .describe('How often each process writes its heartbeat to the replicas table'),
      replicaDeadAfterSeconds: z
        .number()
        .int()
        .min(2)
        .max(3600)
        .default(30)
        .describe(
          'A replica whose last heartbeat is older than this is dead: a replica starting takes up its claims at once (at least twice heartbeatSeconds)',
        ),
      leaseSeconds: z
        .number()
        .int()
        .min(3)
        .max(3600)
        .default(30)
        .describe(
          "How long a lease lasts unrenewed: that of a job one replica runs per interval (the payments reconciliation, the ledger's sweeps and balance refresh), of the deposit watch one replica keeps, and a chat message's claim on its session; how soon another replica takes over what a dead holder had",
        ),
    })
    .strict()
    .refine((database) => database.replicaDeadAfterSeconds >= 2 * database.heartbeatSeconds, {
      path: ['replicaDeadAfterSeconds'],
      message:
        'must be at least twice heartbeatSeconds: one late heartbeat must not make a live replica dead',
    })
    .prefault({}),
};

/** How a wallet signs in, whichever service it signs in to. */
const SIGN_IN = {
  chainId: z.number().int().positive().default(8453).describe('Chain id SIWE messages must name'),
  challengeTtlSeconds: z
    .number()
    .int()
    .min(30)
    .max(3600)
    .default(300)
    .describe('Lifetime of a SIWE sign-in challenge'),
};

/** How signed requests and session JWTs are checked, and the key that signs the JWTs. */
const REQUEST_CHECKS = {
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
};

/**
 * The `auth` section: wallet sign-in shared by the services, with `sessions`, the session settings of
 * each service that signs wallets in (their JWTs' lifetimes), which those services define.
 */
export function authSchema<Sessions extends z.ZodRawShape>(sessions: Sessions) {
  return z.object({ ...SIGN_IN, ...sessions, ...REQUEST_CHECKS }).strict();
}

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

/** The `plugins` section: the plugins to load, `defaults` (built-in names) when it is not set. */
export function pluginsSchema(defaults: readonly string[]) {
  return z
    .array(pluginEntrySchema)
    .default(defaults.map((resolve) => ({ resolve, enabled: true, options: {} })))
    .describe(`Plugins to load; listing them replaces the default list (${defaults.join(', ')})`);
}

export type PluginEntry = z.infer<typeof pluginEntrySchema>;

/** What core reads of a deployment's config, whichever services it composes. */
export type CoreConfig = z.output<z.ZodObject<typeof CORE_SETTINGS>> & {
  auth: z.output<z.ZodObject<typeof SIGN_IN & typeof REQUEST_CHECKS>>;
  plugins: PluginEntry[];
};

/** The environment variables of the core settings, and the config path each sets. */
export const CORE_ENV: EnvOverrides = {
  SIGIL_MODE: { path: 'mode', coerce: asString },
  LOG_LEVEL: { path: 'log.level', coerce: asString },
  LOG_FORMAT: { path: 'log.format', coerce: asString },
  DATABASE_URL: { path: 'database.url', coerce: asString },
  SIGIL_DATA_KEY: { path: 'database.dataKey', coerce: asString },
  SIGIL_JWT_SIGNING_KEY: { path: 'auth.jwtSigningKey', coerce: asString },
};

/** Core config paths whose values are secrets: redacted in every printout. */
export const CORE_SECRET_PATHS = ['database.dataKey', 'auth.jwtSigningKey'] as const;

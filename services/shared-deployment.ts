import { SigilError } from '@sigil/plugin-api';
import { configuredKeyId } from '../core/auth/signing-key.ts';
import { viemAccounts } from '../core/chain/viem.ts';
import { holderOf } from '../core/config/redact.ts';
import { canonicalJson, sha256Hex } from '../core/crypto.ts';
import { redactConfig } from './config.ts';
import type { GatewayApp } from './gateway/app.ts';
import type { Kernel } from './kernel.ts';
import type { RuntimeApp } from './runtime/app.ts';
import { sealedSigningKey } from './runtime/delegation/keys.ts';
import type { ServiceName } from './serve.ts';
import { provenanceKeyId } from './shared/provenance.ts';

/**
 * Replicas behind a load balancer must agree on everything a client sees: a proof, a token, a
 * signature or a link made by one replica must hold at another. Where replicas share the database
 * (`database.shared`), a replica refuses to start with what it would otherwise make up for itself
 * (keys drawn per process, its own address as its public URL), and records a fingerprint of the
 * settings that must be the same, which every replica compares with the others'.
 */

/** A setting replicas sharing the database must be given, and why. */
interface Needed {
  setting: string;
  env?: string;
  why: string;
  /** How to make a value for it (a key). */
  make?: string;
}

const PUBLIC_URL_WHY = {
  runtime:
    'the URL clients reach the runtime at, through the load balancer: SIWE messages, session and delegated JWTs, canvas links and the OpenAPI servers name it (otherwise each replica names its own address)',
  gateway:
    'the URL clients reach the gateway at, through the load balancer: SIWE messages, paid resources, proof verification and the OpenAPI servers name it (otherwise each replica names its own address)',
};

/**
 * Refuses to serve `services` on a shared database without the settings every replica needs alike
 * (`config_invalid`, `details.settings` naming each, the hint how to make the keys). Nothing is
 * required on a database one process uses (SQLite by default).
 */
export async function requireReplicaSettings(
  kernel: Kernel,
  services: readonly ServiceName[],
): Promise<void> {
  if (!kernel.replica.shared) return;
  const needed = await missingSettings(kernel, services);
  if (needed.length === 0) return;
  throw new SigilError(
    'config_invalid',
    [
      'Replicas share the database (database.shared, the default on PostgreSQL): each needs these settings, the same on every replica:',
      ...needed.map(({ setting, env, why }) => `  ${setting}${env ? ` (${env})` : ''}: ${why}`),
    ].join('\n'),
    {
      hint: [
        ...needed.flatMap(({ setting, make }) => (make ? [`${setting}: ${make}`] : [])),
        'one process per service on this database may set database.shared to false instead',
      ].join('; '),
      details: { reason: 'shared_database_settings', settings: needed.map(({ setting }) => setting) },
    },
  );
}

async function missingSettings(kernel: Kernel, services: readonly ServiceName[]): Promise<Needed[]> {
  const { config } = kernel;
  const runtime = services.includes('runtime');
  const gateway = services.includes('gateway');
  const needed: Needed[] = [];
  if (config.runtime.publicUrl === undefined && (runtime || config.gateway.delegation.enabled))
    needed.push({
      setting: 'runtime.publicUrl',
      env: 'RUNTIME_PUBLIC_URL',
      why: runtime
        ? PUBLIC_URL_WHY.runtime
        : 'the issuer of the delegated JWTs the gateway accepts (or set gateway.delegation.enabled to false)',
    });
  if (config.gateway.publicUrl === undefined)
    needed.push({
      setting: 'gateway.publicUrl',
      env: 'GATEWAY_PUBLIC_URL',
      why: gateway
        ? PUBLIC_URL_WHY.gateway
        : 'the audience the runtime names in its delegated JWTs and signed requests to the gateway',
    });
  const tee = kernel.plugins.one('tee-backend');
  if ((await tee.status()).keySource === 'ephemeral')
    needed.push({
      setting: `plugins[${teeBackendName(kernel)}].options.keyMaterial`,
      why: 'the TEE backend makes its keys per process: an execution proof, a relayed input request or a provenance signature made by one replica would not verify at another',
      make: 'openssl rand -base64 48 (or keys sealed by tee-vtpm, sigil tee seal)',
    });
  if (runtime && config.runtime.mcpSigningKey === undefined && (await sealedSigningKey(tee)) === undefined)
    needed.push({
      setting: 'runtime.mcpSigningKey',
      env: 'MCP_SIGNING_KEY',
      why: 'signs delegated gateway JWTs: a key made per process would publish another JWKS at each replica',
      make: 'openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 (the PEM)',
    });
  return needed;
}

const teeBackendName = (kernel: Kernel): string =>
  kernel.plugins.list().find((plugin) => plugin.kind === 'tee-backend')?.name ?? 'tee-backend';

/**
 * What each replica may set for itself: where it listens and its HTTP edge, its local paths, the
 * addresses it reaches other parts at (the catalog file is compared by its content).
 */
const PER_REPLICA = [
  'database.url',
  'runtime.host',
  'runtime.port',
  'runtime.http',
  'runtime.chat.gatewayUrl',
  'runtime.canvas.dataDir',
  'gateway.host',
  'gateway.port',
  'gateway.http',
  'gateway.catalogFile',
  'gateway.delegation.runtimeUrl',
];

/**
 * The fingerprint of each served service's settings (the first 16 hex digits of a SHA-256 over their
 * RFC 8785 form): the effective config with every secret reduced to whether it is set, without what
 * each replica may set for itself (PER_REPLICA, and the log, vault and dev chain sections), with the
 * public parts of keys instead: the session key's id, the TEE backend's provenance key id (for every
 * key the backend derives), the runtime's delegation JWKS, operator addresses and history key ids,
 * and the gateway's catalog.
 */
export async function settingsFingerprints(
  kernel: Kernel,
  apps: { runtime?: RuntimeApp | undefined; gateway?: GatewayApp | undefined },
): Promise<Record<string, string>> {
  const { config } = kernel;
  const redacted = redactConfig(config);
  forget(redacted, PER_REPLICA);
  const common = {
    mode: config.mode,
    database: { ...(redacted.database as object), shared: kernel.replica.shared },
    auth: {
      ...(redacted.auth as object),
      jwtSigningKey:
        config.auth.jwtSigningKey === undefined
          ? 'database'
          : await configuredKeyId(config.auth.jwtSigningKey),
    },
    plugins: redacted.plugins,
    teeKeyId: await provenanceKeyId(kernel.plugins.one('tee-backend')),
  };
  const fingerprints: Record<string, string> = {};
  if (apps.runtime)
    fingerprints.runtime = fingerprintOf({
      ...common,
      runtime: redacted.runtime,
      ledger: { ...(redacted.ledger as object), operatorKey: await addressOf(config.ledger.operatorKey) },
      gatewayPublicUrl: config.gateway.publicUrl ?? null,
      delegationKeyIds: (await apps.runtime.delegation.jwks()).keys.map((key) => key.kid),
      operatorAddress: await addressOf(config.runtime.operatorKey),
      historyKeyIds: config.runtime.history.dataKeys.map((key) => key.id),
    });
  if (apps.gateway)
    fingerprints.gateway = fingerprintOf({
      ...common,
      gateway: redacted.gateway,
      runtimePublicUrl: config.runtime.publicUrl ?? null,
      catalog: apps.gateway.catalog.all(),
    });
  return fingerprints;
}

const fingerprintOf = (settings: Record<string, unknown>): string =>
  sha256Hex(canonicalJson(settings)).slice(0, 16);

/** viem's accounts (with their BIP-39 word lists) are imported by a runtime's fingerprint alone. */
const addressOf = async (key: string | undefined): Promise<string | null> =>
  key === undefined ? null : (await viemAccounts()).privateKeyToAddress(key as `0x${string}`);

/** Leaves the dotted `paths` out of `settings` (the redacted copy of the config): undefined has no JSON. */
function forget(settings: Record<string, unknown>, paths: readonly string[]): void {
  for (const path of paths) {
    const found = holderOf(settings, path);
    if (found !== undefined) found[0][found[1]] = undefined;
  }
}

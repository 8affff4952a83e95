import { calculateJwkThumbprint } from 'jose';
import { isSigilError, SigilError } from '@sigil/plugin-api';
import { p256PrivateKey } from '@sigil/plugin-api/p256';
import vtpm from '../../attestation/vtpm/index.ts';
import {
  keyFromHex,
  newP256Scalar,
  p256Scalar,
  randomKey,
  SEALED_PURPOSES,
  type SealedPurpose,
} from '../../attestation/vtpm/keys.ts';
import { attestationKeyPublic } from '../../attestation/vtpm/quote.ts';
import { sealKeys, unsealKeys } from '../../attestation/vtpm/seal.ts';
import { Tpm } from '../../attestation/vtpm/tpm.ts';
import { describeAk } from '../../attestation/vtpm/verify.ts';
import { ConfigError } from '../../core/config/load.ts';
import type { LoadedConfig } from '../../services/config.ts';
import { EXECUTION_PROOF_ENV, KEY_DERIVATION_ENV } from '../tee.ts';

/**
 * `sigil tee seal`: seals the keys of the `tee-vtpm` plugin the config loads, with its options (the
 * TPM, the PCRs, the folder), so that `sigil up`, `sigil runtime` and `sigil gateway` unseal them at
 * start-up. Each key comes from the environment (or the config, for MCP_SIGNING_KEY) when given
 * there; on a reseal (`--force`) from the keys sealed until now where the TPM still unseals them;
 * otherwise it is made anew.
 */

/** The options of the config's enabled `tee-vtpm` entry, parsed by its schema. */
function vtpmOptions(loaded: LoadedConfig) {
  const at = loaded.config.plugins.findIndex((entry) => entry.resolve === vtpm.name && entry.enabled);
  const entry = loaded.config.plugins[at];
  if (entry === undefined)
    throw new SigilError('config_invalid', `the config loads no ${vtpm.name} plugin, whose keys this seals`, {
      hint: `add { "resolve": "${vtpm.name}", "options": { "tcti": "…", "sealedDir": "…" } } to plugins (see attestation/vtpm/README.md)`,
    });
  const parsed = vtpm.config.safeParse(entry.options);
  if (!parsed.success)
    throw new ConfigError(
      parsed.error.issues.map((issue) => ({
        path: ['plugins', at, 'options', ...issue.path].join('.'),
        message: issue.message,
        source: loaded.file ?? 'config',
      })),
    );
  return parsed.data;
}

/**
 * Each key to seal, and where it came from, in words: the environment or the config when they give
 * it, else the key sealed now (`kept`, on a reseal the TPM still unseals), else a new one.
 */
function keysToSeal(
  loaded: LoadedConfig,
  env: NodeJS.ProcessEnv,
  kept: { keys: ReadonlyMap<SealedPurpose, Uint8Array> } | { why: string } | undefined,
) {
  const fromEnv = (name: string) => (env[name] ? keyFromHex(env[name], name) : undefined);
  const configured = loaded.config.runtime.mcpSigningKey;
  const given: Record<SealedPurpose, { key: Uint8Array; from: string } | undefined> = {
    'execution-proof': withOrigin(fromEnv(EXECUTION_PROOF_ENV), `from ${EXECUTION_PROOF_ENV}`),
    'mcp-signing-key': withOrigin(
      configured === undefined
        ? undefined
        : p256Scalar(configured, 'runtime.mcpSigningKey (MCP_SIGNING_KEY)'),
      'from MCP_SIGNING_KEY',
    ),
    'key-derivation': withOrigin(fromEnv(KEY_DERIVATION_ENV), `from ${KEY_DERIVATION_ENV}`),
  };
  const fresh: Record<SealedPurpose, () => Uint8Array> = {
    'execution-proof': randomKey,
    'mcp-signing-key': newP256Scalar,
    'key-derivation': randomKey,
  };
  const keys = new Map<SealedPurpose, Uint8Array>();
  const origin = {} as Record<SealedPurpose, string>;
  for (const purpose of SEALED_PURPOSES) {
    const held = kept !== undefined && 'keys' in kept ? kept.keys.get(purpose) : undefined;
    const chosen = given[purpose] ??
      withOrigin(held, 'kept: the key sealed until now') ?? {
        key: fresh[purpose](),
        from: kept !== undefined && 'why' in kept ? `new: ${kept.why}` : 'new',
      };
    keys.set(purpose, chosen.key);
    origin[purpose] = chosen.from;
  }
  return { keys, origin };
}

const withOrigin = (key: Uint8Array | undefined, from: string) =>
  key === undefined ? undefined : { key, from };

/** On a reseal, the keys sealed now, where this TPM still unseals them (so a reseal rotates nothing it was not given); else why not. */
async function sealedUntilNow(
  tpm: Tpm,
  sealedDir: string,
): Promise<{ keys: ReadonlyMap<SealedPurpose, Uint8Array> } | { why: string }> {
  try {
    return { keys: await unsealKeys(tpm, sealedDir) };
  } catch (error) {
    if (!isSigilError(error)) throw error;
    return { why: `the keys sealed until now cannot be unsealed (${error.message})` };
  }
}

/**
 * What `sigil tee seal` does: seals the keys (from `env` and the config, or new) with the options of
 * the config's tee-vtpm entry, and says what it sealed, in words.
 */
export async function sealConfiguredKeys(
  loaded: LoadedConfig,
  options: { force: boolean; env: NodeJS.ProcessEnv },
): Promise<string> {
  const vtpmConfig = vtpmOptions(loaded);
  const tpm = new Tpm(vtpmConfig.tcti);
  const kept = options.force ? await sealedUntilNow(tpm, vtpmConfig.sealedDir) : undefined;
  const { keys, origin } = keysToSeal(loaded, options.env, kept);
  const sealed = await sealKeys(tpm, {
    sealedDir: vtpmConfig.sealedDir,
    pcrs: vtpmConfig.sealPcrs,
    keys,
    force: options.force,
    now: new Date(),
  });
  const ak = describeAk(await attestationKeyPublic(tpm));
  const signingJwk = p256PrivateKey(keys.get('mcp-signing-key') as Uint8Array).export({ format: 'jwk' });
  const kid = await calculateJwkThumbprint({ kty: 'EC', crv: 'P-256', x: signingJwk.x, y: signingJwk.y });
  origin['mcp-signing-key'] += `, kid ${kid}`;
  const width = Math.max(...[...sealed.files.values()].map((file) => file.length));
  return [
    `sealed to sha256 PCR ${vtpmConfig.sealPcrs.join(',')} of the TPM at ${vtpmConfig.tcti}:`,
    ...[...sealed.files].map(([purpose, file]) => `  ${file.padEnd(width)}  ${purpose} (${origin[purpose]})`),
    'PCR values sealed to:',
    ...[...sealed.pcrs].map(([pcr, value]) => `  ${String(pcr).padStart(2)}  ${value.toString('hex')}`),
    `attestation key: sha256 fingerprint ${ak.fingerprint} (pin it where quotes are verified: trustedAkFingerprints)`,
    ak.pem.trimEnd(),
    '',
  ].join('\n');
}

import { calculateJwkThumbprint } from 'jose';
import { SigilError } from '@sigil/plugin-api';
import { p256PrivateKey } from '@sigil/plugin-api/p256';
import vtpm from '../../attestation/vtpm/index.ts';
import {
  keyFromHex,
  newP256Scalar,
  p256Scalar,
  randomKey,
  type SealedPurpose,
} from '../../attestation/vtpm/keys.ts';
import { attestationKeyPublic } from '../../attestation/vtpm/quote.ts';
import { sealKeys } from '../../attestation/vtpm/seal.ts';
import { Tpm } from '../../attestation/vtpm/tpm.ts';
import { describeAk } from '../../attestation/vtpm/verify.ts';
import { ConfigError } from '../../core/config/load.ts';
import type { LoadedConfig } from '../../services/config.ts';
import { EXECUTION_PROOF_ENV, KEY_DERIVATION_ENV } from '../tee.ts';

/**
 * `sigil tee seal`: seals the keys of the `tee-vtpm` plugin the config loads, with its options (the
 * TPM, the PCRs, the folder), so that `sigil up`, `sigil runtime` and `sigil gateway` unseal them at
 * start-up. Each key comes from the environment when given there, or is made anew.
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

/** Each sealed key, and where it came from, in words. */
function keysToSeal(loaded: LoadedConfig, env: NodeJS.ProcessEnv) {
  const fromEnv = (name: string) => (env[name] ? keyFromHex(env[name], name) : undefined);
  const proof = fromEnv(EXECUTION_PROOF_ENV);
  const root = fromEnv(KEY_DERIVATION_ENV);
  const configured = loaded.config.runtime.mcpSigningKey;
  const keys = new Map<SealedPurpose, Uint8Array>([
    ['execution-proof', proof ?? randomKey()],
    [
      'mcp-signing-key',
      configured === undefined
        ? newP256Scalar()
        : p256Scalar(configured, 'runtime.mcpSigningKey (MCP_SIGNING_KEY)'),
    ],
    ['key-derivation', root ?? randomKey()],
  ]);
  const origin: Record<SealedPurpose, string> = {
    'execution-proof': proof ? `from ${EXECUTION_PROOF_ENV}` : 'new',
    'mcp-signing-key': configured === undefined ? 'new' : 'from MCP_SIGNING_KEY',
    'key-derivation': root ? `from ${KEY_DERIVATION_ENV}` : 'new',
  };
  return { keys, origin };
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
  const { keys, origin } = keysToSeal(loaded, options.env);
  const tpm = new Tpm(vtpmConfig.tcti);
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

import type { KeyObject } from 'node:crypto';
import { SigilError, type TeeBackendV2 } from '@sigil/plugin-api';
import { p256PrivateKey } from '@sigil/plugin-api/p256';
import { DelegationKeys } from '../../../core/auth/delegation/keys.ts';
import { publicBase } from '../../../core/auth/settings.ts';
import type { Kernel } from '../../kernel.ts';

/**
 * The runtime's delegated-path keys: the key the TEE backend seals (`sigil tee seal` with tee-vtpm),
 * else `MCP_SIGNING_KEY` from config (and `MCP_SIGNING_KEY_PREVIOUS` during a rotation). With neither,
 * development generates a key for this process and says so (delegated JWTs and the JWKS change at
 * every restart, and replicas disagree); production refuses to start.
 *
 * A configured key other than the sealed one overrides it, and start-up warns: the attestation
 * reports still bind the sealed key's JWKS, so a gateway judges the runtime `degraded_hash_mismatch`
 * until the keys are sealed again.
 */
export async function delegationKeysFrom(kernel: Kernel): Promise<DelegationKeys> {
  const { config } = kernel;
  kernel.secrets.add(config.runtime.mcpSigningKey);
  kernel.secrets.add(config.runtime.mcpSigningKeyPrevious);
  const sealed = await sealedSigningKey(kernel.plugins.one('tee-backend'));
  if (config.runtime.mcpSigningKey === undefined && sealed === undefined && config.mode === 'production') {
    throw new SigilError(
      'config_invalid',
      'runtime.mcpSigningKey (MCP_SIGNING_KEY) is required in production unless the TEE backend seals one: it signs delegated gateway JWTs',
      {
        hint: 'openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256, then MCP_SIGNING_KEY=<the PEM>; or seal it with tee-vtpm (sigil tee seal)',
      },
    );
  }
  const keys = new DelegationKeys({
    current: config.runtime.mcpSigningKey,
    previous: config.runtime.mcpSigningKeyPrevious,
    ...(sealed === undefined ? {} : { sealed }),
    clock: kernel.clock,
    issuer: publicBase(config.runtime),
    ttlSeconds: config.runtime.delegatedJwtTtlSeconds,
  });
  const logger = kernel.logger.child({ component: 'delegation' });
  if (keys.source === 'ephemeral') {
    logger.warn(
      'MCP_SIGNING_KEY is not set: delegated gateway JWTs are signed with a key generated for this process (its JWKS changes at restart; set MCP_SIGNING_KEY to keep one)',
    );
  }
  if (keys.overridesSealed) {
    logger.warn(
      { kid: await keys.currentKid(), sealedKid: (await keys.attestedJwks()).keys[0]?.kid },
      'MCP_SIGNING_KEY is not the sealed signing key: delegated gateway JWTs and the JWKS use the configured key, but the attestation reports bind the JWKS of the sealed one, so a gateway judges this runtime degraded_hash_mismatch until `sigil tee seal --force` seals this MCP_SIGNING_KEY (keeping the other sealed keys)',
    );
  }
  return keys;
}

/**
 * The P-256 key of the TEE's `mcp-signing-key` scalar when the backend seals it. A key it derives
 * from config or generates is not taken: hardware vouches for no such key, and it would replace the
 * configured one unasked.
 */
export async function sealedSigningKey(tee: TeeBackendV2): Promise<KeyObject | undefined> {
  const { key, source } = await tee.signingKey('mcp-signing-key');
  return source === 'sealed' ? p256PrivateKey(key) : undefined;
}

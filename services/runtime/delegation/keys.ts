import { DelegationKeys } from '../../../core/auth/delegation/keys.ts';
import { publicBase } from '../../../core/auth/settings.ts';
import { SigilError } from '@sigil/plugin-api';
import type { Kernel } from '../../kernel.ts';

/**
 * The runtime's delegated-path keys from config: `MCP_SIGNING_KEY` (and `MCP_SIGNING_KEY_PREVIOUS`
 * during a rotation). Unset, development generates a key for this process and says so (delegated JWTs
 * and the JWKS change at every restart, and replicas disagree); production refuses to start.
 */
export function delegationKeysFrom(kernel: Kernel): DelegationKeys {
  const { config } = kernel;
  kernel.secrets.add(config.runtime.mcpSigningKey);
  kernel.secrets.add(config.runtime.mcpSigningKeyPrevious);
  if (config.runtime.mcpSigningKey === undefined && config.mode === 'production') {
    throw new SigilError(
      'config_invalid',
      'runtime.mcpSigningKey (MCP_SIGNING_KEY) is required in production: it signs delegated gateway JWTs',
      {
        hint: 'openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256, then MCP_SIGNING_KEY=<the PEM>',
      },
    );
  }
  const keys = new DelegationKeys({
    current: config.runtime.mcpSigningKey,
    previous: config.runtime.mcpSigningKeyPrevious,
    clock: kernel.clock,
    issuer: publicBase(config.runtime),
    ttlSeconds: config.runtime.delegatedJwtTtlSeconds,
  });
  if (keys.source === 'ephemeral') {
    kernel.logger.warn(
      { component: 'delegation' },
      'MCP_SIGNING_KEY is not set: delegated gateway JWTs are signed with a key generated for this process (its JWKS changes at restart; set MCP_SIGNING_KEY to keep one)',
    );
  }
  return keys;
}

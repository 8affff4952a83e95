import type { TeeBackendV2 } from '@sigil/plugin-api';
import type { DelegationKeys } from '../../../core/auth/delegation/keys.ts';
import { jwksSha256 } from '../../../core/auth/delegation/report-data.ts';
import type { AttestedService } from '../../shared/attestation.ts';
import { buildInfo } from '../../shared/build-info.ts';
import { provenanceOf } from '../../shared/provenance.ts';

/**
 * The runtime as an attested service: its reports bind the SHA-256 of the JWKS of the keys its TEE
 * vouches for at REPORT_DATA[32:48], so the gateway can tell that the key signing delegated JWTs lives
 * in the attested runtime. That is the served JWKS, except while `MCP_SIGNING_KEY` overrides a sealed
 * key: the reports keep binding the sealed key's JWKS, and the gateway sees the mismatch. With
 * `tee-none` the evidence is null: there is no TEE to attest, and the gateway judges
 * `degraded_no_attestation`.
 */
export function attestedRuntime(
  tee: TeeBackendV2,
  keys: DelegationKeys,
  security: () => Promise<Record<string, unknown>>,
): AttestedService {
  const binding = async () => ({
    name: 'jwksSha256',
    of: 'SHA-256 of the RFC 8785 JSON of the JWKS of the keys the TEE vouches for (/.well-known/jwks.json unless MCP_SIGNING_KEY overrides a sealed key)',
    sha256: jwksSha256(await keys.attestedJwks()),
  });
  return {
    name: 'runtime',
    tee,
    binding,
    bundledIdentity: async () => ({ jwks: await keys.jwks() }),
    provenance: provenanceOf(tee, buildInfo),
    security,
    summary: async () => ({
      delegation: {
        jwksSha256: jwksSha256(await keys.jwks()).toString('hex'),
        signingKey: keys.source,
      },
    }),
  };
}

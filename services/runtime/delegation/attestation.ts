import type { TeeBackendV2 } from '@sigil/plugin-api';
import type { DelegationKeys } from '../../../core/auth/delegation/keys.ts';
import { jwksSha256 } from '../../../core/auth/delegation/report-data.ts';
import type { AttestedService } from '../../shared/attestation.ts';
import { buildInfo } from '../../shared/build-info.ts';
import { provenanceOf } from '../../shared/provenance.ts';

/**
 * The runtime as an attested service: its reports bind the SHA-256 of the delegated path's JWKS at
 * REPORT_DATA[32:48], so the gateway can tell that the key signing delegated JWTs lives in the
 * attested runtime. With `tee-none` the evidence is null: there is no TEE to attest, and the gateway
 * judges `degraded_no_attestation`.
 */
export function attestedRuntime(
  tee: TeeBackendV2,
  keys: DelegationKeys,
  security: () => Promise<Record<string, unknown>>,
): AttestedService {
  const binding = async () => ({
    name: 'jwksSha256',
    of: 'SHA-256 of the RFC 8785 JSON of /.well-known/jwks.json',
    sha256: jwksSha256(await keys.jwks()),
  });
  return {
    name: 'runtime',
    tee,
    binding,
    bundledIdentity: async () => ({ jwks: await keys.jwks() }),
    provenance: provenanceOf(tee, buildInfo),
    security,
    summary: async () => ({
      delegation: { jwksSha256: (await binding()).sha256.toString('hex'), signingKey: keys.source },
    }),
  };
}

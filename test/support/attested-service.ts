import { createHash } from 'node:crypto';
import type { TeeBackendV2 } from '@sigil/plugin-api';
import type { AttestedService } from '../../services/shared/attestation.ts';
import { buildInfo } from '../../services/shared/build-info.ts';
import { provenanceOf } from '../../services/shared/provenance.ts';

/**
 * A runtime over `tee` as services/runtime mounts it, without the rest of the runtime: what its reports
 * bind (an empty JWKS's hash) and its bundles carry, signed provenance included.
 */
export function attestedRuntimeOver(tee: TeeBackendV2): AttestedService {
  const jwks = { keys: [] };
  const jwksHash = createHash('sha256').update(JSON.stringify(jwks)).digest();
  return {
    name: 'runtime',
    tee,
    binding: () => Promise.resolve({ name: 'jwksSha256', of: 'the JWKS', sha256: jwksHash }),
    bundledIdentity: () => Promise.resolve({ jwks }),
    provenance: provenanceOf(tee, buildInfo),
    security: () => Promise.resolve({}),
  };
}

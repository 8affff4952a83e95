import { isSigilError } from '@sigil/plugin-api';
import type { RuntimeTrust } from '../../core/auth/index.ts';
import { hmacSha256 } from '../../core/crypto.ts';
import type { Kernel } from '../kernel.ts';
import type { AttestedService } from '../shared/attestation.ts';
import { buildInfo } from '../shared/build-info.ts';
import { provenanceOf } from '../shared/provenance.ts';

/** What the proof key fingerprint is an HMAC of, under the execution-proof key. */
const FINGERPRINT_LABEL = 'sigil:proof-key-fingerprint';

/**
 * The gateway as an attested service: its reports bind the fingerprint of the key that signs and
 * verifies execution proofs at REPORT_DATA[32:48] (an HMAC under that key, which names the key without
 * revealing it), so a proof the gateway verifies is tied to the attested machine. `/security` lists
 * what every loaded sandbox enforces now (its `status()`), the key sources and the ERC-8128 mode. With
 * the delegated path enabled, the summary shows how far the gateway trusts the runtime (`runtimeTrust`).
 */
export function attestedGateway(kernel: Kernel, runtimeTrust?: () => Promise<RuntimeTrust>): AttestedService {
  const tee = kernel.plugins.one('tee-backend');
  const proofKey = () => tee.signingKey('execution-proof');
  const binding = async () => ({
    name: 'proofKeyFingerprint',
    of: `HMAC-SHA256 of "${FINGERPRINT_LABEL}" under the execution-proof key`,
    sha256: hmacSha256((await proofKey()).key, FINGERPRINT_LABEL),
  });
  return {
    name: 'gateway',
    tee,
    binding,
    bundledIdentity: async () => ({ proofKeyFingerprint: (await binding()).sha256.toString('hex') }),
    provenance: provenanceOf(tee, buildInfo),
    security: async () => ({
      mode: kernel.config.mode,
      keySources: { executionProof: (await proofKey()).source },
      sandboxes: await Promise.all(kernel.plugins.all('sandbox-runtime').map((sandbox) => sandbox.status())),
      erc8128: { enforceOperatorMcp: kernel.config.gateway.erc8128EnforceOperatorMcp },
    }),
    ...(runtimeTrust ? { summary: async () => ({ runtimeTrust: await trustOrWhyNot(runtimeTrust) }) } : {}),
  };
}

/** The runtime's trust, or why it cannot be judged (the runtime unreachable: delegated JWTs are refused then). */
async function trustOrWhyNot(
  runtimeTrust: () => Promise<RuntimeTrust>,
): Promise<RuntimeTrust | { error: { code: string; message: string } }> {
  try {
    return await runtimeTrust();
  } catch (err) {
    if (!isSigilError(err)) throw err;
    return { error: { code: err.code, message: err.message } };
  }
}

import { z } from 'zod';
import { ensure, expectShape, pass } from '@sigil/plugin-api/kit';
import type { Requirement } from '../context.ts';
import { jwksHashPrefixes, readJwks } from '../jwks.ts';
import { readSummary, SUMMARY_PATH } from './endpoints.ts';
import { verifiedProvenance } from './provenance.ts';
import { boundIdentity, verifiedReportData } from './report.ts';
import type { ServiceName } from '../../http.ts';

/**
 * What each service binds at REPORT_DATA[32:48] of its reports, read from a report the runner verified
 * itself (its platform's verifier, the runner's fresh nonce at [0:32]): the runtime its JWKS hash, as
 * the runtime spec says, and Sigil's gateway the fingerprint of its execution-proof key, which its
 * summary states. Without a TEE nothing binds anything, and both fail.
 */

const fingerprintSchema = z.looseObject({
  proofKeyFingerprint: z.string().regex(/^[0-9a-fA-F]{64}$/, 'a SHA-256-sized fingerprint in hex'),
});

export const bindingRequirements: readonly Requirement[] = [
  {
    id: 'RT-2.jwks-hash-report-data',
    level: 'MUST',
    title:
      "The runtime's attestation report, verified by the runner, binds its fresh nonce at REPORT_DATA[0:32] and the SHA-256 of its JWKS at [32:48]",
    spec: 'runtime spec part 2 (signing key (public): "its hash is bound into the attestation report at REPORT_DATA[32:48]")',
    service: 'runtime',
    groups: ['tee'],
    check: async (context) => {
      const { platform, reportData } = await verifiedReportData(context, 'runtime');
      const bound = boundIdentity(reportData);
      const expected = jwksHashPrefixes(await readJwks(context));
      ensure(
        expected.includes(bound),
        `REPORT_DATA[32:48] of the verified ${platform} report is ${bound}, not the first 16 bytes of SHA-256 of the JWKS served (${expected.join(' or ')})`,
      );
      return pass();
    },
  },
  {
    id: 'GW-2.proof-key-report-data',
    // Sigil's design: the spec seals the proof key but does not say the report binds it.
    level: 'SHOULD',
    title: `The gateway's attestation report, verified by the runner, binds its fresh nonce at REPORT_DATA[0:32] and, at [32:48], the proof key fingerprint ${SUMMARY_PATH} states`,
    spec: 'gateway spec part 2 (execution proof: "HMAC-SHA256 signature (key sealed to a vTPM)") and part 4 (GET /api/attestation/report, "raw attestation report and certificates"): the report binds the proof key as the runtime\'s binds its JWKS',
    service: 'gateway',
    groups: ['tee'],
    check: async (context) => {
      const { proofKeyFingerprint } = expectShape(
        fingerprintSchema,
        await readSummary(context, 'gateway'),
        `GET ${SUMMARY_PATH} on the gateway`,
      );
      const { platform, reportData } = await verifiedReportData(context, 'gateway');
      const bound = boundIdentity(reportData);
      const stated = proofKeyFingerprint.slice(0, bound.length).toLowerCase();
      ensure(
        bound === stated,
        `REPORT_DATA[32:48] of the verified ${platform} report is ${bound}, not the first 16 bytes of the proofKeyFingerprint the summary states (${stated})`,
      );
      return pass();
    },
  },
  ...(['runtime', 'gateway'] as const).map(provenanceKeyBinding),
];

/** REPORT_DATA[48:64]: the key signing the provenance, so hardware vouches for the key, and the key for the code. */
function provenanceKeyBinding(service: ServiceName): Requirement {
  return {
    id: service === 'runtime' ? 'RT-4.provenance-key-report-data' : 'GW-4.provenance-key-report-data',
    // Sigil's design: the specs ask for signed provenance, not for its key to be attested.
    level: 'SHOULD',
    title: `The ${service}'s attestation report, verified by the runner, binds at REPORT_DATA[48:64] the SHA-256 of the Ed25519 key whose signature over its provenance verifies`,
    spec:
      service === 'runtime'
        ? 'runtime spec part 4 (/api/attestation/provenance, "signed build provenance"), bound to the attested machine'
        : 'gateway spec part 4 (GET /api/attestation/provenance, "signed build provenance metadata"), bound to the attested machine',
    service,
    groups: ['tee'],
    check: async (context) => {
      const { keySha256 } = await verifiedProvenance(context, service);
      const { platform, reportData } = await verifiedReportData(context, service);
      const bound = reportData.subarray(48, 64);
      ensure(
        bound.equals(keySha256.subarray(0, 16)),
        `REPORT_DATA[48:64] of the verified ${platform} report is ${bound.toString('hex')}, not the first 16 bytes of SHA-256 of the provenance key (${keySha256.subarray(0, 16).toString('hex')})`,
      );
      return pass();
    },
  };
}

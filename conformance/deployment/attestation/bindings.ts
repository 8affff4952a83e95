import { z } from 'zod';
import { ensure, expectShape, pass } from '@sigil/plugin-api/kit';
import type { Requirement } from '../context.ts';
import { jwksHashPrefixes, readJwks } from '../jwks.ts';
import { readSummary, SUMMARY_PATH } from './endpoints.ts';
import { boundIdentity, verifiedReportData } from './report.ts';

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
    level: 'MUST',
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
];

import Router from '@koa/router';
import { z } from 'zod';
import type { DelegationKeys } from '../../../core/auth/delegation/keys.ts';
import {
  delegationReportData,
  JWKS_HASH_BYTES,
  JWKS_HASH_OFFSET,
  jwksSha256,
  NONCE_BYTES,
} from '../../../core/auth/delegation/report-data.ts';
import { parseInput } from '../../../core/http/validate.ts';
import type { AttestationEvidence, TeeBackendV2 } from '@sigil/plugin-api';

export const reportQuery = z.object({
  nonce: z
    .string()
    .regex(/^[0-9a-fA-F]{64}$/, 'must be 32 bytes in hex (64 characters)')
    .optional(),
});

/** How REPORT_DATA is laid out, shown with every report so a verifier needs no other document. */
const LAYOUT = {
  nonce: { offset: 0, bytes: NONCE_BYTES },
  jwksSha256: {
    offset: JWKS_HASH_OFFSET,
    bytes: JWKS_HASH_BYTES,
    of: 'SHA-256 of the RFC 8785 JSON of /.well-known/jwks.json',
  },
  reserved: { offset: JWKS_HASH_OFFSET + JWKS_HASH_BYTES, bytes: 64 - JWKS_HASH_OFFSET - JWKS_HASH_BYTES },
};

/** A fresh report binding `nonce` and the JWKS hash, with how REPORT_DATA is laid out. */
export async function attestationReport(
  tee: TeeBackendV2,
  keys: DelegationKeys,
  nonce: Uint8Array,
): Promise<{
  teeEnabled: boolean;
  platform: string;
  nonce: string;
  jwksSha256: string;
  reportData: string;
  reportDataLayout: typeof LAYOUT;
  evidence: AttestationEvidence | null;
}> {
  const jwksHash = jwksSha256(await keys.jwks());
  const reportData = delegationReportData(nonce, jwksHash);
  const [status, evidence] = await Promise.all([tee.status(), tee.attest(reportData)]);
  return {
    teeEnabled: status.teeEnabled,
    platform: status.platform,
    nonce: Buffer.from(nonce).toString('hex'),
    jwksSha256: jwksHash.toString('hex'),
    reportData: reportData.toString('hex'),
    reportDataLayout: LAYOUT,
    evidence: evidence ?? null,
  };
}

/**
 * The runtime's attestation (runtime spec part 4): `GET /api/attestation`, a summary, and
 * `GET /api/attestation/report?nonce=<64 hex>`, a fresh report from the TEE backend binding the nonce
 * at REPORT_DATA[0:32] and the hash of the delegated path's JWKS at REPORT_DATA[32:48]. With `tee-none`
 * the evidence is null: there is no TEE to attest, and the gateway judges `degraded_no_attestation`.
 */
export function attestationRouter(tee: TeeBackendV2, keys: DelegationKeys): Router {
  const router = new Router({ prefix: '/api/attestation' });
  router.get('/', async (ctx) => {
    const status = await tee.status();
    const jwksHash = jwksSha256(await keys.jwks());
    ctx.body = {
      teeEnabled: status.teeEnabled,
      platform: status.platform,
      keySource: status.keySource,
      delegation: {
        jwksSha256: jwksHash.toString('hex'),
        signingKey: keys.source,
        reportDataLayout: LAYOUT,
      },
    };
  });
  router.get('/report', async (ctx) => {
    const { nonce } = parseInput(reportQuery, ctx.query, 'query');
    const nonceBytes = nonce === undefined ? Buffer.alloc(NONCE_BYTES) : Buffer.from(nonce, 'hex');
    ctx.set('Cache-Control', 'no-store');
    ctx.body = await attestationReport(tee, keys, nonceBytes);
  });
  return router;
}

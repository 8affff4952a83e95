import Router from '@koa/router';
import type { Middleware } from 'koa';
import ratelimit from 'koa-ratelimit';
import { z } from 'zod';
import { type AttestationEvidenceV2, type Clock, SigilError, type TeeBackendV2 } from '@sigil/plugin-api';
import {
  delegationReportData,
  JWKS_HASH_BYTES as BOUND_HASH_BYTES,
  JWKS_HASH_OFFSET as BOUND_HASH_OFFSET,
  NONCE_BYTES,
  PROVENANCE_KEY_HASH_BYTES,
  PROVENANCE_KEY_HASH_OFFSET,
} from '../../core/auth/delegation/report-data.ts';
import { parseInput } from '../../core/http/validate.ts';
import { buildInfo } from './build-info.ts';
import { offlineVerification } from './offline-verification/script.ts';
import { type AttestationBundle, BUNDLE_FORMAT } from './offline-verification/verify-bundle.ts';
import { error, json, parametersOf } from './openapi.ts';
import type { BuildProvenance } from './provenance.ts';

/**
 * The attestation endpoints both services serve (runtime spec part 4, gateway spec part 4), free and
 * unauthenticated, rate-limited per client address: `GET /api/attestation` (a summary),
 * `/report?nonce=<64 hex>` (fresh evidence binding the caller's nonce at REPORT_DATA[0:32], the
 * service's own identity at [32:48] and its provenance key at [48:64]), `/security` (what is enforced
 * now), `/build-info`, `/provenance` (the build, signed) and `/bundle?nonce=<64 hex>` (all of it with
 * a script that verifies it offline). docs/attestation.md describes them.
 */

const nonceHex = z.string().regex(/^[0-9a-fA-F]{64}$/, 'must be 32 bytes in hex (64 characters)');
export const reportQuery = z.object({ nonce: nonceHex.optional() });
/** A bundle is for a relying party to keep and check later: it binds a nonce of theirs, always. */
export const bundleQuery = z.object({
  nonce: z
    .string({ error: "required: 32 bytes in hex (64 characters), the nonce the bundle's report must bind" })
    .pipe(nonceHex),
});

/** What a service binds into its reports, and what else it says of itself. */
export interface AttestedService {
  /** Which service this is, as its bundle names it. */
  name: 'runtime' | 'gateway';
  tee: TeeBackendV2;
  /**
   * The identity bound at REPORT_DATA[32:48] (the first 16 bytes of `sha256`): the runtime's JWKS,
   * the gateway's proof key fingerprint. `name` is the field it is shown as.
   */
  binding(): Promise<{ name: string; of: string; sha256: Buffer }>;
  /**
   * What a bundle carries for a verifier to check [32:48] itself: the runtime's JWKS (the hash is
   * recomputed from it), the gateway's fingerprint (an HMAC under a key that stays secret: stated).
   */
  bundledIdentity(): Promise<{ jwks: unknown } | { proofKeyFingerprint: string }>;
  /** The build provenance, signed by the key whose hash is bound at REPORT_DATA[48:64] (provenanceOf). */
  provenance(): Promise<BuildProvenance>;
  /** What the service enforces now, beside the TEE's status (sandboxes, key sources, modes). */
  security(): Promise<Record<string, unknown>>;
  /** More of the summary (the delegation keys, the trust of a peer). */
  summary?(): Promise<Record<string, unknown>>;
}

/** Requests per client address per minute: a report may cost a hardware round trip, the rest little. */
const REQUESTS_PER_MINUTE = 60;

export interface AttestationReport {
  teeEnabled: boolean;
  platform: string;
  nonce: string;
  reportData: string;
  /** Hex SHA-256 of the provenance key; its first 16 bytes are REPORT_DATA[48:64]. */
  provenanceKeySha256: string;
  reportDataLayout: ReturnType<typeof layoutOf>;
  evidence: AttestationEvidenceV2 | null;
  [binding: string]: unknown;
}

/** How REPORT_DATA is laid out, shown with every report so a verifier needs no other document. */
function layoutOf(binding: { name: string; of: string }) {
  return {
    nonce: { offset: 0, bytes: NONCE_BYTES },
    [binding.name]: { offset: BOUND_HASH_OFFSET, bytes: BOUND_HASH_BYTES, of: binding.of },
    provenanceKeySha256: {
      offset: PROVENANCE_KEY_HASH_OFFSET,
      bytes: PROVENANCE_KEY_HASH_BYTES,
      of: 'SHA-256 of the raw 32 bytes of the Ed25519 key signing /api/attestation/provenance',
    },
  };
}

/** A fresh report binding `nonce`, the service's identity and its provenance key, with how REPORT_DATA is laid out. */
export async function attestationReport(
  service: AttestedService,
  nonce: Uint8Array,
): Promise<AttestationReport> {
  const [binding, provenance] = await Promise.all([service.binding(), service.provenance()]);
  const reportData = delegationReportData(nonce, binding.sha256, Buffer.from(provenance.keyid, 'hex'));
  const [status, evidence] = await Promise.all([service.tee.status(), service.tee.attest(reportData)]);
  return {
    teeEnabled: status.teeEnabled,
    platform: status.platform,
    nonce: Buffer.from(nonce).toString('hex'),
    [binding.name]: binding.sha256.toString('hex'),
    provenanceKeySha256: provenance.keyid,
    reportData: reportData.toString('hex'),
    reportDataLayout: layoutOf(binding),
    evidence: evidence ?? null,
  };
}

/**
 * Everything a relying party needs to verify the service offline: a fresh report for its nonce, what
 * the report must bind and the material to recompute it, the build, its provenance, and the script.
 */
export async function attestationBundle(
  service: AttestedService,
  nonce: Uint8Array,
  clock: Clock,
): Promise<AttestationBundle> {
  const [report, identity, provenance, verification] = await Promise.all([
    attestationReport(service, nonce),
    service.bundledIdentity(),
    service.provenance(),
    offlineVerification(service.tee),
  ]);
  return {
    format: BUNDLE_FORMAT,
    service: service.name,
    createdAt: clock.now().toISOString(),
    report,
    expected: { reportData: report.reportData },
    ...identity,
    buildInfo: buildInfo(),
    provenance,
    offlineVerification: verification,
  };
}

/** 429 `rate_limited` past REQUESTS_PER_MINUTE from one address, with Retry-After. */
function perAddressLimit(): Middleware {
  const limiter = ratelimit({ driver: 'memory', db: new Map(), duration: 60_000, max: REQUESTS_PER_MINUTE });
  return async (ctx, next) => {
    let passed = false;
    await limiter(ctx, async () => {
      passed = true;
      await next();
    });
    if (passed) return;
    const { after } = ctx.state.rateLimit as { after: number };
    throw new SigilError(
      'rate_limited',
      `At most ${REQUESTS_PER_MINUTE} attestation requests a minute from one address`,
      {
        headers: { 'Retry-After': String(Math.max(1, after)) },
        details: { limit: REQUESTS_PER_MINUTE, retryAfterSeconds: Math.max(1, after) },
      },
    );
  };
}

export function attestationRouter(service: AttestedService, clock: Clock): Router {
  const router = new Router({ prefix: '/api/attestation' });
  router.use(perAddressLimit());
  router.get('/', async (ctx) => {
    const [status, binding, more] = await Promise.all([
      service.tee.status(),
      service.binding(),
      service.summary?.() ?? {},
    ]);
    const { codeHash, gitCommit } = buildInfo();
    ctx.body = {
      teeEnabled: status.teeEnabled,
      platform: status.platform,
      keySource: status.keySource,
      codeHash,
      gitCommit,
      [binding.name]: binding.sha256.toString('hex'),
      ...more,
    };
  });
  router.get('/report', async (ctx) => {
    const { nonce } = parseInput(reportQuery, ctx.query, 'query');
    const nonceBytes = nonce === undefined ? Buffer.alloc(NONCE_BYTES) : Buffer.from(nonce, 'hex');
    ctx.set('Cache-Control', 'no-store');
    ctx.body = await attestationReport(service, nonceBytes);
  });
  router.get('/security', async (ctx) => {
    const [tee, security] = await Promise.all([service.tee.status(), service.security()]);
    // The TEE's own status last: a service's security() may describe its TEE another way (the runtime's /health posture).
    ctx.body = { ...security, tee };
  });
  router.get('/build-info', (ctx) => {
    ctx.body = buildInfo();
  });
  router.get('/provenance', async (ctx) => {
    ctx.body = await service.provenance();
  });
  router.get('/bundle', async (ctx) => {
    const { nonce } = parseInput(bundleQuery, ctx.query, 'query');
    ctx.set('Cache-Control', 'no-store');
    ctx.body = await attestationBundle(service, Buffer.from(nonce, 'hex'), clock);
  });
  return router;
}

/**
 * The OpenAPI paths of the attestation endpoints; `binding` names the identity this service binds,
 * `bundled` the field its bundle carries it in.
 */
export function attestationPaths(binding: string, bundled: string): Record<string, unknown> {
  const limited = { '429': error };
  return {
    '/api/attestation': {
      get: {
        summary: `TEE status, code hash and the ${binding} its reports bind`,
        responses: {
          '200': json(`{ teeEnabled, platform, keySource, codeHash, gitCommit, ${binding}, … }`),
          ...limited,
        },
      },
    },
    '/api/attestation/report': {
      get: {
        summary: `A fresh attestation report binding the nonce at REPORT_DATA[0:32], the ${binding} at [32:48] and the provenance key at [48:64] (evidence null without a TEE)`,
        parameters: parametersOf(reportQuery, 'query'),
        responses: { '200': json('Attestation report'), '400': error, ...limited },
      },
    },
    '/api/attestation/security': {
      get: {
        summary: 'What the service enforces now: the TEE, key sources, sandboxes, modes',
        responses: { '200': json('{ tee, … }'), ...limited },
      },
    },
    '/api/attestation/build-info': {
      get: {
        summary: 'The build: git commit, code hash, lockfile hash, Node version, build time',
        responses: {
          '200': json(
            '{ codeHash, compiled, gitCommit, sourceRepository, files, lockfileSha256, nodeVersion, builtAt }',
          ),
          ...limited,
        },
      },
    },
    '/api/attestation/provenance': {
      get: {
        summary:
          'The build provenance: an in-toto statement (SLSA provenance v1, subject the code hash) in a DSSE envelope, signed by the Ed25519 key bound at REPORT_DATA[48:64]',
        responses: {
          '200': json(
            '{ envelope: { payloadType, payload, signatures }, publicKey: { algorithm, pem, hex }, keyid, keySource }',
          ),
          ...limited,
        },
      },
    },
    '/api/attestation/bundle': {
      get: {
        summary: `Everything to verify the service offline, for the nonce: the report, what it must bind, ${bundled}, the build, its provenance, and a script (node verify-bundle.cjs bundle.json)`,
        parameters: parametersOf(bundleQuery, 'query'),
        responses: {
          '200': json(
            `{ format: "${BUNDLE_FORMAT}", service, createdAt, report, expected, ${bundled}, buildInfo, provenance, offlineVerification: { script, scriptSha256, usage } }`,
          ),
          '400': error,
          ...limited,
        },
      },
    },
  };
}

import Router from '@koa/router';
import type { Middleware } from 'koa';
import ratelimit from 'koa-ratelimit';
import { z } from 'zod';
import { type AttestationEvidenceV2, SigilError, type TeeBackendV2 } from '@sigil/plugin-api';
import {
  delegationReportData,
  JWKS_HASH_BYTES as BOUND_HASH_BYTES,
  JWKS_HASH_OFFSET as BOUND_HASH_OFFSET,
  NONCE_BYTES,
} from '../../core/auth/delegation/report-data.ts';
import { parseInput } from '../../core/http/validate.ts';
import { buildInfo } from './build-info.ts';
import { error, json, parametersOf } from './openapi.ts';

/**
 * The attestation endpoints both services serve (runtime spec part 4, gateway spec part 4), free and
 * unauthenticated, rate-limited per client address: `GET /api/attestation` (a summary),
 * `/report?nonce=<64 hex>` (fresh evidence binding the caller's nonce at REPORT_DATA[0:32] and the
 * service's own identity at [32:48]), `/security` (what is enforced now) and `/build-info`.
 */

export const reportQuery = z.object({
  nonce: z
    .string()
    .regex(/^[0-9a-fA-F]{64}$/, 'must be 32 bytes in hex (64 characters)')
    .optional(),
});

/** What a service binds into its reports, and what else it says of itself. */
export interface AttestedService {
  tee: TeeBackendV2;
  /**
   * The identity bound at REPORT_DATA[32:48] (the first 16 bytes of `sha256`): the runtime's JWKS,
   * the gateway's proof key fingerprint. `name` is the field it is shown as.
   */
  binding(): Promise<{ name: string; of: string; sha256: Buffer }>;
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
  reportDataLayout: ReturnType<typeof layoutOf>;
  evidence: AttestationEvidenceV2 | null;
  [binding: string]: unknown;
}

/** How REPORT_DATA is laid out, shown with every report so a verifier needs no other document. */
function layoutOf(binding: { name: string; of: string }) {
  return {
    nonce: { offset: 0, bytes: NONCE_BYTES },
    [binding.name]: { offset: BOUND_HASH_OFFSET, bytes: BOUND_HASH_BYTES, of: binding.of },
    reserved: {
      offset: BOUND_HASH_OFFSET + BOUND_HASH_BYTES,
      bytes: 64 - BOUND_HASH_OFFSET - BOUND_HASH_BYTES,
    },
  };
}

/** A fresh report binding `nonce` and the service's identity, with how REPORT_DATA is laid out. */
export async function attestationReport(
  service: AttestedService,
  nonce: Uint8Array,
): Promise<AttestationReport> {
  const binding = await service.binding();
  const reportData = delegationReportData(nonce, binding.sha256);
  const [status, evidence] = await Promise.all([service.tee.status(), service.tee.attest(reportData)]);
  return {
    teeEnabled: status.teeEnabled,
    platform: status.platform,
    nonce: Buffer.from(nonce).toString('hex'),
    [binding.name]: binding.sha256.toString('hex'),
    reportData: reportData.toString('hex'),
    reportDataLayout: layoutOf(binding),
    evidence: evidence ?? null,
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

export function attestationRouter(service: AttestedService): Router {
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
    ctx.body = { tee, ...security };
  });
  router.get('/build-info', (ctx) => {
    ctx.body = buildInfo();
  });
  return router;
}

/** The OpenAPI paths of the attestation endpoints; `binding` names the identity this service binds. */
export function attestationPaths(binding: string): Record<string, unknown> {
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
        summary: `A fresh attestation report binding the nonce at REPORT_DATA[0:32] and the ${binding} at [32:48] (evidence null without a TEE)`,
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
          '200': json('{ codeHash, gitCommit, files, lockfileSha256, nodeVersion, builtAt }'),
          ...limited,
        },
      },
    },
  };
}

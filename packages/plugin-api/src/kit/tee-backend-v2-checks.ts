import { randomBytes } from 'node:crypto';
import { isAbsolute } from 'node:path';
import { pathToFileURL } from 'node:url';
import { z } from 'zod';
import { isSigilError } from '../errors.ts';
import type {
  AttestationEvidenceV2,
  EvidenceVerification,
  ExpectedEvidence,
  TeeBackendV2,
} from '../index.ts';
import { ensure, expectShape, failWith, notApplicableBecause, pass } from './check.ts';
import type { InstanceCheck, KitContext } from './kit.ts';
import { attestFresh, onlyWithTee, statusOf } from './tee-backend-behaviour.ts';

/**
 * The checks of `tee-backend` v2's own sentences, `verify` and `offlineVerifier`: the evidence a
 * backend produces verifies with the report data it was given and with no other, one flipped bit fails
 * it, garbage is a failed verification, not an exception, and the offline verifier module judges all
 * of these as `verify` does. A backend without a TEE is checked on garbage only; a platform's own
 * tests check its verifier on recorded real evidence.
 */

const CONTRACT = 'packages/plugin-api/src/contracts/tee-backend-v2.ts';

type Context = KitContext & { instance: TeeBackendV2 };

const verificationSchema = z.object({
  platform: z.string().min(1),
  verified: z.boolean(),
  checks: z.array(z.object({ id: z.string().min(1), ok: z.boolean(), detail: z.string().min(1) })),
  claims: z
    .object({
      reportData: z.string().regex(/^[0-9a-f]*$/, 'lowercase hex'),
      measurements: z.record(z.string(), z.string().regex(/^[0-9a-f]*$/, 'lowercase hex')),
      details: z.record(z.string(), z.unknown()).optional(),
    })
    .optional(),
});

async function verified(
  { instance, evidence }: Context,
  what: string,
  given: AttestationEvidenceV2,
  reportData?: Uint8Array,
): Promise<EvidenceVerification> {
  const result = expectShape(
    verificationSchema,
    await instance.verify(given, reportData === undefined ? {} : { reportData }),
    `verify(${what})`,
  );
  evidence.note(`verify(${what})`, result);
  ensure(
    result.verified === result.checks.every((check) => check.ok),
    `verify(${what}) says verified: ${result.verified}, but its checks say otherwise`,
  );
  return result;
}

/** Fresh evidence over random report data; fails the check when a backend with a TEE gives none. */
async function freshEvidence(
  context: Context,
): Promise<{ evidence: AttestationEvidenceV2; reportData: Uint8Array }> {
  await onlyWithTee(context);
  const reportData = new Uint8Array(randomBytes(64));
  const evidence = await attestFresh(context, reportData);
  if (evidence === undefined) failWith('attest() returned undefined although a TEE is enabled');
  return { evidence: evidence as AttestationEvidenceV2, reportData };
}

const garbageOf = (platform: string): AttestationEvidenceV2 => ({
  platform,
  report: randomBytes(97).toString('base64'),
  certificates: [],
});

type OfflineVerify = (
  evidence: AttestationEvidenceV2,
  expected: ExpectedEvidence,
) => EvidenceVerification | Promise<EvidenceVerification>;

/** The `verify` export of the backend's offlineVerifier module; not applicable without one. */
async function offlineVerifierOf({ instance }: Context): Promise<OfflineVerify> {
  const path = instance.offlineVerifier;
  if (path === undefined) notApplicableBecause('the backend has no offlineVerifier');
  ensure(isAbsolute(path), `offlineVerifier "${path}" is not an absolute path`);
  let loaded: { verify?: unknown };
  try {
    loaded = (await import(pathToFileURL(path).href)) as { verify?: unknown };
  } catch (error) {
    failWith(`offlineVerifier ${path} does not load: ${(error as Error).message}`);
  }
  ensure(typeof loaded.verify === 'function', `offlineVerifier ${path} exports no verify function`);
  return loaded.verify as OfflineVerify;
}

/** `verified`, then each check as `id:ok`: what an offline verifier must say as `verify` does. */
const outcomeOf = (result: EvidenceVerification): string =>
  `verified ${result.verified} [${result.checks.map((check) => `${check.id}:${check.ok ? 'ok' : 'failed'}`).join(', ')}]`;

const flipOneBit = (report: string): string => {
  const bytes = Buffer.from(report, 'base64');
  const at = Math.floor(bytes.length / 2);
  bytes[at] = (bytes[at] as number) ^ 0x01;
  return bytes.toString('base64');
};

export const teeBackendV2Checks: readonly InstanceCheck<TeeBackendV2>[] = [
  {
    id: 'tee-backend.verify-own-evidence',
    level: 'MUST',
    title:
      'With a TEE, verify() accepts the evidence attest() gave, with its report data, and reads that data back',
    spec: `${CONTRACT}: verify, "verified is true only when every check passed"; claims`,
    check: async (context) => {
      const { evidence, reportData } = await freshEvidence(context);
      const result = await verified(context, 'fresh evidence, its report data', evidence, reportData);
      const failed = result.checks.filter((check) => !check.ok);
      ensure(
        result.verified,
        `fresh evidence failed ${failed.map((c) => `${c.id} (${c.detail})`).join('; ')}`,
      );
      ensure(
        result.claims?.reportData === Buffer.from(reportData).toString('hex'),
        `claims.reportData is ${result.claims?.reportData}, not the report data attested`,
      );
      return pass();
    },
  },
  {
    id: 'tee-backend.verify-report-data',
    level: 'MUST',
    title: 'With a TEE, verify() refuses the evidence against other report data, in a failed check',
    spec: `${CONTRACT}: verify, "checks … each of expected it is given (REPORT_DATA …)"`,
    check: async (context) => {
      const { evidence } = await freshEvidence(context);
      const result = await verified(
        context,
        'fresh evidence, other report data',
        evidence,
        new Uint8Array(64),
      );
      ensure(!result.verified, 'evidence verified against report data it does not hold');
      return pass();
    },
  },
  {
    id: 'tee-backend.verify-flipped-bit',
    level: 'MUST',
    title: 'With a TEE, verify() refuses a report with one bit flipped',
    spec: `${CONTRACT}: verify, "checks at least the signature over the report"`,
    check: async (context) => {
      const { evidence, reportData } = await freshEvidence(context);
      const tampered = { ...evidence, report: flipOneBit(evidence.report) };
      const result = await verified(context, 'a report with one bit flipped', tampered, reportData);
      ensure(!result.verified, 'a report with one bit flipped verified');
      return pass();
    },
  },
  {
    id: 'tee-backend.verify-garbage',
    level: 'MUST',
    title: 'verify() answers a report of random bytes with a failed verification, not an exception',
    spec: `${CONTRACT}: verify, "never throws on bad evidence"`,
    check: async (context) => {
      const result = await verified(context, 'random bytes', garbageOf(context.instance.platform));
      ensure(!result.verified, 'random bytes verified');
      return pass();
    },
  },
  {
    id: 'tee-backend.verify-other-platform',
    level: 'MUST',
    title: 'verify() refuses evidence of another platform as invalid_request',
    spec: `${CONTRACT}: verify, "it throws (invalid_request) only for evidence of another platform"`,
    check: async ({ instance, evidence }) => {
      const other = { platform: `not-${instance.platform}`, report: 'AAAA', certificates: [] };
      const outcome = await instance.verify(other).then(
        (result) => ({ result }),
        (error: unknown) => ({ error }),
      );
      evidence.note('verify(evidence of another platform)', outcome);
      ensure('error' in outcome, 'verify() accepted to judge evidence of another platform');
      ensure(
        isSigilError(outcome.error) && outcome.error.code === 'invalid_request',
        `verify() threw ${String(outcome.error)}, not a SigilError invalid_request`,
      );
      return pass();
    },
  },
  {
    id: 'tee-backend.offline-verifier',
    level: 'MUST',
    title:
      'An offlineVerifier module loads and judges as verify() does: random bytes, and with a TEE fresh evidence and a report with one bit flipped',
    spec: `${CONTRACT}: offlineVerifier, "returns (or resolves to) what verify does … the same verified, and the same checks by id and outcome"`,
    check: async (context) => {
      const offline = await offlineVerifierOf(context);
      const cases: [what: string, evidence: AttestationEvidenceV2, reportData?: Uint8Array][] = [
        ['random bytes', garbageOf(context.instance.platform)],
      ];
      if ((await statusOf(context)).teeEnabled) {
        const { evidence, reportData } = await freshEvidence(context);
        cases.push(
          ['fresh evidence, its report data', evidence, reportData],
          ['a report with one bit flipped', { ...evidence, report: flipOneBit(evidence.report) }, reportData],
        );
      }
      for (const [what, evidence, reportData] of cases) {
        const expected = reportData === undefined ? {} : { reportData };
        const online = await verified(context, what, evidence, reportData);
        const result = expectShape(
          verificationSchema,
          await offline(evidence, expected),
          `the offline verify(${what})`,
        );
        context.evidence.note(`the offline verify(${what})`, result);
        ensure(
          outcomeOf(result) === outcomeOf(online),
          `for ${what}, verify() says ${outcomeOf(online)}, the offline verifier ${outcomeOf(result)}`,
        );
      }
      return pass();
    },
  },
];

import { createHash } from 'node:crypto';
import * as z from 'zod/mini';
import type {
  AttestationEvidenceV2,
  EvidenceCheck,
  EvidenceVerification,
  ExpectedEvidence,
} from '@sigil/plugin-api';
import {
  JWKS_HASH_BYTES,
  JWKS_HASH_OFFSET,
  jwksSha256,
  NONCE_BYTES,
  PROVENANCE_KEY_HASH_BYTES,
  PROVENANCE_KEY_HASH_OFFSET,
} from '../../../core/auth/delegation/report-data.ts';
import type { AttestationReport } from '../attestation.ts';
import type { BuildInfo } from '../build-info.ts';
import { ed25519FromRaw, envelopeVerifies } from '../dsse.ts';
import {
  CODE_SUBJECT,
  IN_TOTO_PAYLOAD_TYPE,
  IN_TOTO_STATEMENT,
  LOCKFILE_DEPENDENCY as LOCKFILE,
  SLSA_PROVENANCE,
} from '../in-toto.ts';
import type { BuildProvenance } from '../provenance.ts';

/**
 * The checks of an attestation bundle (`GET /api/attestation/bundle`), offline: what the bundle's
 * script runs under plain `node`, and what `sigil attestation verify` can run in-process. Everything
 * it imports must bundle into one CommonJS file (node: built-ins and small pure modules): no file,
 * network or environment is read here.
 *
 * The chain it checks: the platform's verifier says the hardware report binds the bundle's expected
 * REPORT_DATA; REPORT_DATA[0:32] is the nonce, [32:48] the service's identity (the runtime's JWKS
 * hash, recomputed; the gateway's proof key fingerprint, as stated), [48:64] the provenance key's
 * hash; that key signed the provenance, whose subject is the code hash the bundle's build info names.
 */

export const BUNDLE_FORMAT = 'sigil-attestation-bundle/v1';

/** One bundle: everything a relying party needs to verify a service offline. */
export interface AttestationBundle {
  format: typeof BUNDLE_FORMAT;
  service: 'runtime' | 'gateway';
  createdAt: string;
  /** Exactly what `/api/attestation/report` gives for the bundle's nonce. */
  report: AttestationReport;
  /** What the hardware report must bind (hex), and measurements when the operator configured them. */
  expected: { reportData: string; measurements?: Record<string, string> };
  /** The runtime's JWKS, whose RFC 8785 SHA-256 the report binds at [32:48]. */
  jwks?: unknown;
  /** The gateway's proof key fingerprint (an HMAC under a secret key, so stated, not recomputable). */
  proofKeyFingerprint?: string;
  buildInfo: BuildInfo;
  provenance: BuildProvenance;
  offlineVerification: { script: string; scriptSha256: string; usage: string };
}

/** A platform's offline verifier: its backend's `verify`, as `offlineVerifier` modules export it. */
export type OfflineEvidenceVerifier = (
  evidence: AttestationEvidenceV2,
  expected: ExpectedEvidence,
) => EvidenceVerification | Promise<EvidenceVerification>;

export interface BundleVerification {
  /** Every check passed. */
  verified: boolean;
  /** In order; a platform's own checks are `evidence.<its id>`. */
  checks: EvidenceCheck[];
}

export interface VerifyBundleOptions {
  /** The verifier of each platform's evidence, by platform name (`sev-snp`, `tdx`, `vtpm`). */
  verifiers: Readonly<Record<string, OfflineEvidenceVerifier>>;
  /** When to judge certificates and collateral valid: now by default. */
  at?: Date;
}

const hexOf = (bytes: number) => z.string().check(z.regex(new RegExp(`^[0-9a-fA-F]{${bytes * 2}}$`)));

/** What the checks read of a bundle; the rest is for people. */
const bundleSchema = z.object({
  format: z.literal(BUNDLE_FORMAT),
  service: z.enum(['runtime', 'gateway']),
  createdAt: z.string(),
  report: z.object({
    platform: z.string(),
    nonce: hexOf(NONCE_BYTES),
    evidence: z.nullable(
      z.looseObject({
        platform: z.string(),
        report: z.string(),
        certificates: z.array(z.string()),
        collateral: z.optional(z.record(z.string(), z.string())),
      }),
    ),
  }),
  expected: z.object({
    reportData: hexOf(64),
    measurements: z.optional(z.record(z.string(), z.string())),
  }),
  jwks: z.optional(z.unknown()),
  proofKeyFingerprint: z.optional(hexOf(32)),
  buildInfo: z.object({ codeHash: hexOf(32), lockfileSha256: z.nullable(hexOf(32)) }),
  provenance: z.object({
    envelope: z.object({
      payloadType: z.string(),
      payload: z.string(),
      signatures: z.array(z.object({ keyid: z.string(), sig: z.string() })),
    }),
    publicKey: z.object({ hex: hexOf(32) }),
  }),
});
type ReadBundle = z.infer<typeof bundleSchema>;

const sha256 = (data: Uint8Array): Buffer => createHash('sha256').update(data).digest();
const passed = (id: string, detail: string): EvidenceCheck => ({ id, ok: true, detail });
const failed = (id: string, detail: string): EvidenceCheck => ({ id, ok: false, detail });
/** A check that REPORT_DATA[offset:offset+bytes] is `want`, which is `what`. */
function partCheck(
  id: string,
  reportData: Buffer,
  offset: number,
  want: Buffer,
  what: string,
): EvidenceCheck {
  const range = `REPORT_DATA[${offset}:${offset + want.length}]`;
  const part = reportData.subarray(offset, offset + want.length);
  return part.equals(want)
    ? passed(id, `${range} is ${what}: ${want.toString('hex')}`)
    : failed(id, `${range} is ${part.toString('hex')}, not ${what}: ${want.toString('hex')}`);
}

export async function verifyBundle(
  bundle: unknown,
  options: VerifyBundleOptions,
): Promise<BundleVerification> {
  const read = bundleSchema.safeParse(bundle);
  if (!read.success) {
    const problems = read.error.issues
      .slice(0, 5)
      .map((issue) => `${issue.path.join('.') || '(the document)'}: ${issue.message}`);
    return { verified: false, checks: [failed('bundle', `not a ${BUNDLE_FORMAT}: ${problems.join('; ')}`)] };
  }
  const checks = [
    passed('bundle', `a ${BUNDLE_FORMAT} of the ${read.data.service}, created ${read.data.createdAt}`),
    ...(await evidenceChecks(read.data, options)),
    ...reportDataChecks(read.data),
    ...provenanceChecks(read.data),
  ];
  return { verified: checks.every((check) => check.ok), checks };
}

/** The platform verifier's checks of the hardware report, against the REPORT_DATA the bundle expects. */
async function evidenceChecks(bundle: ReadBundle, options: VerifyBundleOptions): Promise<EvidenceCheck[]> {
  const { evidence, platform } = bundle.report;
  if (evidence === null)
    return [
      failed(
        'evidence',
        `the bundle carries no evidence: the ${bundle.service} runs without a TEE (platform ${platform}), or the evidence was removed; there is no hardware report, so nothing vouches for the REPORT_DATA below`,
      ),
    ];
  const verifier = options.verifiers[evidence.platform];
  if (verifier === undefined)
    return [failed('evidence', `no verifier of ${evidence.platform} evidence here`)];
  const expected: ExpectedEvidence = {
    reportData: Buffer.from(bundle.expected.reportData, 'hex'),
    ...(bundle.expected.measurements === undefined ? {} : { measurements: bundle.expected.measurements }),
    ...(options.at === undefined ? {} : { at: options.at }),
  };
  let result: EvidenceVerification;
  try {
    result = await verifier(evidence as AttestationEvidenceV2, expected);
  } catch (error) {
    return [failed('evidence', `the ${evidence.platform} verifier failed: ${(error as Error).message}`)];
  }
  const checks = result.checks.map((check) => ({ ...check, id: `evidence.${check.id}` }));
  // Everything below reads REPORT_DATA as the hardware's: a verifier that did not check it vouches for nothing.
  if (!result.checks.some((check) => check.id === 'report-data'))
    checks.push(failed('evidence', `the ${evidence.platform} verifier did not check REPORT_DATA`));
  if (!result.verified && checks.every((check) => check.ok))
    checks.push(failed('evidence', `the ${evidence.platform} verifier says the evidence does not verify`));
  return checks;
}

/** What each part of the expected REPORT_DATA must be, recomputed from the bundle. */
function reportDataChecks(bundle: ReadBundle): EvidenceCheck[] {
  const reportData = Buffer.from(bundle.expected.reportData, 'hex');
  const providedKey = Buffer.from(bundle.provenance.publicKey.hex, 'hex');
  return [
    partCheck(
      'nonce',
      reportData,
      0,
      Buffer.from(bundle.report.nonce, 'hex'),
      'the nonce the bundle was asked with (compare it with yours)',
    ),
    bundle.service === 'runtime' ? jwksCheck(bundle.jwks, reportData) : fingerprintCheck(bundle, reportData),
    partCheck(
      'provenance-key',
      reportData,
      PROVENANCE_KEY_HASH_OFFSET,
      sha256(providedKey).subarray(0, PROVENANCE_KEY_HASH_BYTES),
      "the first 16 bytes of SHA-256 of the provenance key's raw 32 bytes",
    ),
  ];
}

function jwksCheck(jwks: unknown, reportData: Buffer): EvidenceCheck {
  if (jwks === undefined) return failed('jwks-hash', "the runtime's bundle carries no jwks");
  let hash: Buffer;
  try {
    hash = jwksSha256(jwks);
  } catch (error) {
    return failed('jwks-hash', `the jwks has no RFC 8785 form: ${(error as Error).message}`);
  }
  return partCheck(
    'jwks-hash',
    reportData,
    JWKS_HASH_OFFSET,
    hash.subarray(0, JWKS_HASH_BYTES),
    "the first 16 bytes of SHA-256 of the jwks' RFC 8785 JSON, recomputed",
  );
}

function fingerprintCheck(bundle: ReadBundle, reportData: Buffer): EvidenceCheck {
  if (bundle.proofKeyFingerprint === undefined)
    return failed('proof-key-fingerprint', "the gateway's bundle carries no proofKeyFingerprint");
  return partCheck(
    'proof-key-fingerprint',
    reportData,
    JWKS_HASH_OFFSET,
    Buffer.from(bundle.proofKeyFingerprint, 'hex').subarray(0, JWKS_HASH_BYTES),
    'the first 16 bytes of the proof key fingerprint (an HMAC under a key that stays secret: as stated, not recomputed)',
  );
}

/** The signature of the provenance, and that it names the code and the lockfile the build info does. */
function provenanceChecks(bundle: ReadBundle): EvidenceCheck[] {
  const { envelope, publicKey } = bundle.provenance;
  const signature = (): EvidenceCheck => {
    if (envelope.payloadType !== IN_TOTO_PAYLOAD_TYPE)
      return failed(
        'provenance-signature',
        `payloadType is ${envelope.payloadType}, not ${IN_TOTO_PAYLOAD_TYPE}`,
      );
    try {
      return envelopeVerifies(envelope, ed25519FromRaw(Buffer.from(publicKey.hex, 'hex')))
        ? passed(
            'provenance-signature',
            'the DSSE envelope is signed by the provenance key (Ed25519 over its PAE)',
          )
        : failed(
            'provenance-signature',
            'no signature of the DSSE envelope verifies with the provenance key',
          );
    } catch (error) {
      return failed('provenance-signature', `the provenance key cannot verify: ${(error as Error).message}`);
    }
  };
  const statement = readStatement(envelope.payload);
  if (typeof statement === 'string')
    return [signature(), failed('code-hash', statement), failed('lockfile', statement)];
  const { codeHash, lockfileSha256 } = bundle.buildInfo;
  const subject = statement.subject.find((entry) => entry.name === CODE_SUBJECT)?.digest.sha256;
  const lockfile = statement.predicate.buildDefinition.resolvedDependencies.find(
    (entry) => entry.name === LOCKFILE,
  )?.digest?.sha256;
  return [
    signature(),
    subject === codeHash
      ? passed('code-hash', `the provenance's subject ${CODE_SUBJECT} is the build's code hash ${codeHash}`)
      : failed(
          'code-hash',
          `the provenance's subject ${CODE_SUBJECT} is ${subject ?? 'absent'}, the build's code hash ${codeHash}`,
        ),
    lockfile === (lockfileSha256 ?? undefined)
      ? passed('lockfile', `the provenance resolves ${LOCKFILE} to the build's ${lockfileSha256 ?? 'none'}`)
      : failed(
          'lockfile',
          `the provenance resolves ${LOCKFILE} to ${lockfile ?? 'nothing'}, the build has ${lockfileSha256 ?? 'none'}`,
        ),
  ];
}

const resourceSchema = z.object({
  name: z.optional(z.string()),
  digest: z.optional(z.record(z.string(), z.string())),
});
const statementSchema = z.object({
  _type: z.literal(IN_TOTO_STATEMENT),
  subject: z.array(z.object({ name: z.string(), digest: z.record(z.string(), z.string()) })),
  predicateType: z.literal(SLSA_PROVENANCE),
  predicate: z.object({
    buildDefinition: z.object({ resolvedDependencies: z.array(resourceSchema) }),
  }),
});

/** The in-toto statement in the payload, or why it is not one. */
function readStatement(payload: string): z.infer<typeof statementSchema> | string {
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(payload, 'base64').toString('utf8'));
  } catch {
    return 'the provenance payload is not JSON';
  }
  const read = statementSchema.safeParse(parsed);
  return read.success
    ? read.data
    : `the provenance payload is not an in-toto ${IN_TOTO_STATEMENT} with a ${SLSA_PROVENANCE} predicate`;
}

import { randomBytes } from 'node:crypto';
import { expect } from 'chai';
import type { EvidenceCheck, ExpectedEvidence, TeeBackendV2 } from '@sigil/plugin-api';
import teeNone from '../../../../attestation/none/index.ts';
import { delegationReportData, jwksSha256 } from '../../../../core/auth/delegation/report-data.ts';
import { SecretRegistry } from '../../../../core/log.ts';
import { buildInfo } from '../../../../services/shared/build-info.ts';
import {
  BUNDLE_FORMAT,
  verifyBundle,
  type OfflineEvidenceVerifier,
} from '../../../../services/shared/offline-verification/verify-bundle.ts';
import { signedProvenance } from '../../../../services/shared/provenance.ts';
import { quietLogger } from '../../../support/kernel.ts';

/**
 * verifyBundle in-process, as `sigil attestation verify` calls it, with platform verifiers of the
 * test's own: what it asks of them, and how it refuses one that does not vouch for REPORT_DATA.
 */

const PLATFORM = 'test-platform';
const jwks = { keys: [{ kty: 'EC', crv: 'P-256', kid: 'k', x: 'AA', y: 'AA' }] };

async function runtimeBundle() {
  const tee = (await teeNone.create({
    config: {},
    deps: { secrets: new SecretRegistry() },
    logger: quietLogger(),
  })) as TeeBackendV2;
  const provenance = await signedProvenance(tee, buildInfo());
  const nonce = randomBytes(32);
  const keyHash = Buffer.from(provenance.keyid, 'hex');
  const reportData = delegationReportData(nonce, jwksSha256(jwks), keyHash).toString('hex');
  return {
    format: BUNDLE_FORMAT,
    service: 'runtime',
    createdAt: new Date().toISOString(),
    report: {
      platform: PLATFORM,
      nonce: nonce.toString('hex'),
      evidence: { platform: PLATFORM, report: 'AAAA', certificates: [] },
    },
    expected: { reportData, measurements: { m: 'ab' } },
    jwks,
    buildInfo: buildInfo(),
    provenance,
  };
}

const verifierSaying =
  (verified: boolean, checks: EvidenceCheck[]): OfflineEvidenceVerifier =>
  () => ({ platform: PLATFORM, verified, checks });
const failedIds = (checks: readonly EvidenceCheck[]) => checks.filter((c) => !c.ok).map((c) => c.id);

describe('verifyBundle, in-process', () => {
  it("gives the platform's verifier the expected REPORT_DATA, measurements and time, and passes when it does", async () => {
    const bundle = await runtimeBundle();
    const at = new Date('2030-01-02T03:04:05Z');
    let asked: ExpectedEvidence | undefined;
    const verifier: OfflineEvidenceVerifier = (_evidence, expected) => {
      asked = expected;
      return {
        platform: PLATFORM,
        verified: true,
        checks: [{ id: 'report-data', ok: true, detail: 'bound' }],
      };
    };
    const result = await verifyBundle(bundle, { verifiers: { [PLATFORM]: verifier }, at });
    expect(failedIds(result.checks)).to.deep.equal([]);
    expect(result.verified).to.equal(true);
    expect(Buffer.from(asked?.reportData ?? []).toString('hex')).to.equal(bundle.expected.reportData);
    expect(asked).to.deep.include({ measurements: { m: 'ab' }, at });
    expect(result.checks.map((check) => check.id)).to.deep.equal([
      'bundle',
      'evidence.report-data',
      'nonce',
      'jwks-hash',
      'provenance-key',
      'provenance-signature',
      'code-hash',
      'lockfile',
    ]);
  });

  it('refuses a verifier that did not check REPORT_DATA, or says unverified with every check passed', async () => {
    const bundle = await runtimeBundle();
    const unbound = await verifyBundle(bundle, {
      verifiers: { [PLATFORM]: verifierSaying(true, [{ id: 'signature', ok: true, detail: 'signed' }]) },
    });
    expect(failedIds(unbound.checks)).to.deep.equal(['evidence']);
    expect(unbound.checks.find((check) => check.id === 'evidence')?.detail).to.equal(
      `the ${PLATFORM} verifier did not check REPORT_DATA`,
    );
    const inconsistent = await verifyBundle(bundle, {
      verifiers: { [PLATFORM]: verifierSaying(false, [{ id: 'report-data', ok: true, detail: 'bound' }]) },
    });
    expect(failedIds(inconsistent.checks)).to.deep.equal(['evidence']);
    expect(inconsistent.verified).to.equal(false);
  });

  it('fails evidence when there is no verifier for the platform, or the verifier throws', async () => {
    const bundle = await runtimeBundle();
    const none = await verifyBundle(bundle, { verifiers: {} });
    expect(failedIds(none.checks)).to.deep.equal(['evidence']);
    expect(none.checks[1]?.detail).to.equal(`no verifier of ${PLATFORM} evidence here`);
    const throwing = await verifyBundle(bundle, {
      verifiers: {
        [PLATFORM]: () => {
          throw new Error('broken');
        },
      },
    });
    expect(throwing.checks[1]).to.deep.equal({
      id: 'evidence',
      ok: false,
      detail: `the ${PLATFORM} verifier failed: broken`,
    });
  });
});

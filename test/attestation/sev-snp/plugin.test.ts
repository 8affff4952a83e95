import { hkdfSync, X509Certificate } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { isSigilError, type SigilError } from '@sigil/plugin-api';
import { describeTeeBackendKitV2, manifestChecks, registerChecks } from '@sigil/plugin-api/kit';
import teeSevSnp, * as teeSevSnpModule from '../../../attestation/sev-snp/index.ts';
import { parseCertificateTable } from '../../../attestation/sev-snp/cert-table.ts';
import { cachedLeaf, DEFAULT_TSM_REPORT_DIR, tableCertificates } from '../../../attestation/sev-snp/guest.ts';
import { DEFAULT_PLUGINS } from '../../../services/config.ts';
import { builtinPlugins } from '../../../services/builtin-plugins.ts';
import { SecretRegistry } from '../../../core/log.ts';
import { quietLogger } from '../../support/kernel.ts';
import {
  ARK_GUID,
  ASK_GUID,
  AT,
  certificateTable,
  fixture,
  guidBytes,
  MILAN_CHAIN,
  REAL_EVIDENCE,
  VCEK,
  VCEK_GUID,
} from './material.ts';

const create = (options: Record<string, unknown> = {}, secrets = new SecretRegistry()) =>
  teeSevSnp.create({
    config: teeSevSnp.config.parse(options),
    deps: { secrets, clock: { now: () => AT } },
    logger: quietLogger(),
  });

/** Checks of the tee-backend kit that apply only to a backend whose status() reports a TEE, or to `none`. */
const NOT_APPLICABLE_WITHOUT_TEE = [
  'tee-backend.none-reports-no-tee',
  'tee-backend.none-keys-not-sealed',
  'tee-backend.none-attest-undefined',
  'tee-backend.attest-evidence',
  'tee-backend.attest-fresh',
  'tee-backend.verify-own-evidence',
  'tee-backend.verify-report-data',
  'tee-backend.verify-flipped-bit',
];

async function failureOf(promise: Promise<unknown>): Promise<SigilError> {
  const error = await promise.then(
    () => undefined,
    (thrown: unknown) => thrown,
  );
  if (!isSigilError(error)) throw new Error(`expected a SigilError, got ${String(error)}`);
  return error;
}

const der = (pem: string) => new X509Certificate(pem).raw;
const [MILAN_ASK, MILAN_ARK] = MILAN_CHAIN.match(
  /-----BEGIN CERTIFICATE-----[^-]+-----END CERTIFICATE-----/g,
) as [string, string];

describe('tee-sev-snp plugin', () => {
  it('is a built-in plugin, not one of the defaults', async () => {
    const loaded = (await builtinPlugins['tee-sev-snp']?.()) as { default: typeof teeSevSnp } | undefined;
    expect(loaded?.default.name).to.equal('tee-sev-snp');
    expect(DEFAULT_PLUGINS).to.not.include('tee-sev-snp');
  });

  it('fails to start on a machine without SEV-SNP, naming what it looked for', async function () {
    if (existsSync(DEFAULT_TSM_REPORT_DIR)) this.skip(); // a configfs-tsm machine: not the case this checks
    const instance = await create();
    const error = await failureOf(Promise.resolve(instance.start?.()));
    expect(error.code).to.equal('unavailable');
    expect(error.details).to.deep.equal({
      reason: 'tee_unavailable',
      lookedFor: [DEFAULT_TSM_REPORT_DIR, '/dev/sev-guest'],
    });
    expect(error.message).to.include(`${DEFAULT_TSM_REPORT_DIR} does not exist (configfs-tsm)`);
    expect(error.message).to.include('/dev/sev-guest');
    expect((await instance.status()).teeEnabled).to.equal(false);
  });

  it('fails to start on a directory that is not configfs-tsm, and leaves nothing in it', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'sigil-tsm-'));
    try {
      const error = await failureOf(Promise.resolve((await create({ tsmReportDir: dir })).start?.()));
      expect(error.details).to.deep.include({ reason: 'tee_unavailable' });
      expect(error.message).to.equal(
        `tee-sev-snp: ${dir} is no configfs-tsm report directory: an entry made there has no provider attribute`,
      );
      expect(await readdir(dir)).to.deep.equal([]);
    } finally {
      await rm(dir, { recursive: true });
    }
  });

  it('refuses report data that is not 64 bytes before touching the hardware', async () => {
    const error = await failureOf((await create()).attest(new Uint8Array(32)));
    expect(error.code).to.equal('invalid_request');
  });

  it('derives keys from keyMaterial with HKDF, says they come from config (never sealed), and redacts the material', async () => {
    const material = 'canary-tee-sev-snp-key-material-0123456789';
    const secrets = new SecretRegistry();
    const instance = await create({ keyMaterial: material }, secrets);
    // Pinned: a different derivation would change every key (and every proof) across an upgrade.
    const hkdf = hkdfSync('sha256', material, 'sigil:tee-sev-snp', 'sigil:execution-proof', 32);
    expect(await instance.signingKey('execution-proof')).to.deep.equal({
      key: new Uint8Array(hkdf),
      source: 'config',
    });
    expect(await instance.status()).to.deep.equal({
      teeEnabled: false,
      platform: 'sev-snp',
      keySource: 'config',
    });
    expect(secrets.scrub(`leaked ${material}`)).to.equal('leaked [REDACTED]');
    const unkeyed = await create();
    expect((await unkeyed.status()).keySource).to.equal('ephemeral');
    expect((await unkeyed.signingKey('execution-proof')).source).to.equal('ephemeral');
  });

  it('verifies SNP evidence without hardware, with its configured policy, and refuses other platforms', async () => {
    const instance = await create({ minimumTcb: { snp: 6 } });
    const result = await instance.verify(REAL_EVIDENCE, { at: AT });
    expect(result.checks.filter((check) => !check.ok).map((check) => check.id)).to.deep.equal([
      'tcb-minimum',
      'debug',
    ]);
    const error = await failureOf(instance.verify({ ...REAL_EVIDENCE, platform: 'tdx' }));
    expect(error.code).to.equal('invalid_request');
  });

  it('refuses options it does not know and TCB components out of range', () => {
    expect(teeSevSnp.config.safeParse({ debug: true }).success).to.equal(false);
    expect(teeSevSnp.config.safeParse({ minimumTcb: { snp: 256 } }).success).to.equal(false);
    expect(teeSevSnp.config.safeParse({ keyMaterial: 'short' }).success).to.equal(false);
  });

  describe('manifest kit', () => {
    registerChecks(manifestChecks({ exports: teeSevSnpModule, options: {} }));
  });

  describe('tee-backend v2 kit on an instance not started (no SEV-SNP here)', () => {
    describeTeeBackendKitV2(async () => create(), { expectNotApplicable: NOT_APPLICABLE_WITHOUT_TEE });
  });
});

describe('tee-sev-snp certificates beside a report', () => {
  it('reads the VCEK, ASK and ARK from an extended report’s certificate table, skipping GUIDs it does not know', () => {
    const table = certificateTable([
      ['00000000-0000-0000-0000-000000000001', Buffer.from('other')],
      [ARK_GUID, der(MILAN_ARK)],
      [VCEK_GUID, der(VCEK)],
      [ASK_GUID, der(MILAN_ASK)],
    ]);
    expect(tableCertificates(table)).to.deep.equal({
      leaf: VCEK,
      ask: MILAN_ASK + '\n',
      ark: MILAN_ARK + '\n',
    });
  });

  it('reads an empty table as no certificates and refuses a malformed one', () => {
    expect(parseCertificateTable(new Uint8Array(0))).to.deep.equal({});
    const table = certificateTable([[VCEK_GUID, der(VCEK)]]);
    table.writeUInt32LE(table.length, 16);
    expect(() => parseCertificateTable(table)).to.throw(/points past the table/);
    const unterminated = Buffer.alloc(24);
    guidBytes(VCEK_GUID).copy(unterminated);
    expect(() => parseCertificateTable(unterminated)).to.throw(/no terminating entry/);
  });

  it('reads a cached VCEK (DER or PEM) from the certificates directory', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'sigil-vcek-'));
    try {
      expect(await cachedLeaf(dir)).to.equal(undefined);
      await writeFile(join(dir, 'vcek.der'), fixture('vcek.testcer'));
      expect(await cachedLeaf(dir)).to.equal(VCEK);
    } finally {
      await rm(dir, { recursive: true });
    }
  });
});

import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import type { AttestationEvidenceV2 } from '@sigil/plugin-api';
import { randomKey, SEALED_PURPOSES } from '../../../attestation/vtpm/keys.ts';
import { sealKeys, unsealKeys } from '../../../attestation/vtpm/seal.ts';
import { Tpm } from '../../../attestation/vtpm/tpm.ts';
import { SecretRegistry } from '../../../core/log.ts';
import { rejectionOf } from '../../support/rejection.ts';
import { startSwtpm } from '../../support/swtpm.ts';
import { sealedOnSwtpm, type SealedVtpm } from './on-swtpm.ts';

const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString('hex');

describe('tee-vtpm sealed keys on swtpm', function () {
  this.timeout(180_000);
  let vtpm: SealedVtpm;

  beforeEach(async () => {
    vtpm = await sealedOnSwtpm();
  });
  afterEach(() => vtpm?.remove());

  it('unseals the sealed keys after a reboot of the TPM, and hands them out as sealed', async () => {
    await vtpm.reboot();
    const backend = await vtpm.create();
    for (const purpose of ['execution-proof', 'mcp-signing-key'] as const) {
      const { key, source } = await backend.signingKey(purpose);
      expect(hex(key), purpose).to.equal(hex(vtpm.keys.get(purpose) as Uint8Array));
      expect(source).to.equal('sealed');
    }
    expect(await backend.status()).to.deep.equal({ teeEnabled: true, platform: 'vtpm', keySource: 'sealed' });
  });

  it('derives every other purpose from the sealed key-derivation root: the same after a reboot, distinct per purpose', async () => {
    const before = await (await vtpm.create()).signingKey('provider-vault');
    await vtpm.reboot();
    const backend = await vtpm.create();
    const after = await backend.signingKey('provider-vault');
    expect(hex(after.key)).to.equal(hex(before.key));
    expect(after.source).to.equal('sealed');
    const other = await backend.signingKey('another-purpose');
    expect(hex(other.key)).not.to.equal(hex(after.key));
    for (const sealed of vtpm.keys.values()) expect(hex(after.key)).not.to.equal(hex(sealed));
  });

  it('refuses to start when a PCR it is sealed to changed, naming the PCR, its values and the cause', async () => {
    vtpm.swtpm.extendPcr(7);
    const error = await rejectionOf(vtpm.create());
    expect(error.code).to.equal('unavailable');
    expect(error.details).to.deep.include({ reason: 'pcr_mismatch', bank: 'sha256', pcrs: [7] });
    const now = vtpm.swtpm
      .tool('tpm2_pcrread', ['sha256:7'])
      .match(/0x([0-9A-F]{64})/)?.[1]
      ?.toLowerCase();
    expect(error.message).to.match(/refuses to unseal: PCR 7 \(now [0-9a-f]{64}, sealed to 0{64}\) changed/);
    expect(error.message).to.include(now);
    expect(error.hint).to.match(/boot chain/);
  });

  it('still unseals after a PCR it is not sealed to changed (PCR 1, the firmware configuration)', async () => {
    vtpm.swtpm.extendPcr(1);
    const backend = await vtpm.create();
    expect(hex((await backend.signingKey('execution-proof')).key)).to.equal(
      hex(vtpm.keys.get('execution-proof') as Uint8Array),
    );
  });

  it('refuses keys sealed on another TPM, saying so', async () => {
    const other = await startSwtpm();
    try {
      const error = await rejectionOf(vtpm.create({ tcti: other.tcti }));
      expect(error.code).to.equal('unavailable');
      expect(error.details).to.deep.include({ reason: 'sealed_elsewhere' });
      expect(error.message).to.match(/sealed on another TPM/);
    } finally {
      await other.remove();
    }
  });

  it('refuses to start with nothing sealed, pointing at sigil tee seal', async () => {
    const empty = mkdtempSync(join(tmpdir(), 'sigil-vtpm-empty-'));
    try {
      const error = await rejectionOf(vtpm.create({ sealedDir: empty }));
      expect(error.details).to.deep.include({ reason: 'not_sealed', purpose: 'execution-proof' });
      expect(error.hint).to.match(/sigil tee seal/);
    } finally {
      rmSync(empty, { recursive: true, force: true });
    }
  });

  it('refuses a sealed file whose content is not a sealed key', async () => {
    writeFileSync(join(vtpm.sealedDir, 'key-derivation.sealed.json'), '{"format":"something else"}');
    const error = await rejectionOf(vtpm.create());
    expect(error.details).to.deep.include({ reason: 'sealed_file_invalid', purpose: 'key-derivation' });
  });

  it('says the TPM is unreachable, naming the TCTI', async () => {
    const error = await rejectionOf(vtpm.create({ tcti: 'swtpm:host=127.0.0.1,port=1' }));
    expect(error.code).to.equal('unavailable');
    expect(error.details).to.deep.include({ reason: 'tpm_unreachable' });
    expect(error.message).to.include('swtpm:host=127.0.0.1,port=1');
  });

  it('refuses to seal over sealed keys unless forced, then seals new ones', async () => {
    const tpm = new Tpm(vtpm.swtpm.tcti);
    const keys = new Map(SEALED_PURPOSES.map((purpose) => [purpose, randomKey()]));
    const options = { sealedDir: vtpm.sealedDir, pcrs: [0, 7], keys, now: new Date() };
    const error = await rejectionOf(sealKeys(tpm, { ...options, force: false }));
    expect(error.code).to.equal('conflict');
    expect(error.details).to.deep.include({ reason: 'already_sealed' });
    await sealKeys(tpm, { ...options, force: true });
    const unsealed = await unsealKeys(tpm, vtpm.sealedDir);
    for (const purpose of SEALED_PURPOSES)
      expect(hex(unsealed.get(purpose) as Uint8Array)).to.equal(hex(keys.get(purpose) as Uint8Array));
    const file = JSON.parse(readFileSync(join(vtpm.sealedDir, 'execution-proof.sealed.json'), 'utf8')) as {
      pcrs: { values: Record<string, string> };
    };
    expect(Object.keys(file.pcrs.values)).to.deep.equal(['0', '7']);
  });

  it('registers the unsealed keys as secrets, so logs never show them', async () => {
    const secrets = new SecretRegistry();
    await vtpm.create({}, secrets);
    const key = vtpm.keys.get('execution-proof') as Uint8Array;
    for (const encoding of ['hex', 'base64'] as const) {
      const text = Buffer.from(key).toString(encoding);
      expect(secrets.scrub(`key ${text}`)).to.equal('key [REDACTED]');
    }
  });

  it('unseal and quote side by side, as the runtime and the gateway do as two processes on one swtpm', async () => {
    const [runtime, gateway] = [await vtpm.create(), await vtpm.create()];
    const reportData = new Uint8Array(64).fill(7);
    // Each instance queues its own TPM operations, as a process does: these interleave at the TPM.
    const rounds = await Promise.all(
      Array.from({ length: 3 }, () =>
        Promise.all([runtime.attest(reportData), gateway.attest(reportData), vtpm.create()]),
      ),
    );
    for (const [fromRuntime, fromGateway, started] of rounds) {
      for (const evidence of [fromRuntime, fromGateway])
        expect((await runtime.verify(evidence as AttestationEvidenceV2, { reportData })).verified).to.equal(
          true,
        );
      expect(hex((await started.signingKey('execution-proof')).key)).to.equal(
        hex(vtpm.keys.get('execution-proof') as Uint8Array),
      );
    }
  });
});

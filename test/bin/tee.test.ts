import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { calculateJwkThumbprint } from 'jose';
import { p256Scalar } from '../../attestation/vtpm/keys.ts';
import { unsealKeys } from '../../attestation/vtpm/seal.ts';
import { Tpm } from '../../attestation/vtpm/tpm.ts';
import { runSigil } from '../support/cli.ts';
import { startSwtpm, type Swtpm } from '../support/swtpm.ts';

describe('sigil tee seal', function () {
  this.timeout(180_000);
  let swtpm: Swtpm;
  let dir: string;
  const env = () => ({ DATABASE_URL: join(dir, 'sigil.db'), SIGIL_CONFIG: '', GATEWAY_WARMUP: 'false' });
  const writeConfig = (options: Record<string, unknown>, resolve = 'tee-vtpm') =>
    writeFileSync(
      join(dir, 'sigil.config.json'),
      JSON.stringify({
        plugins: [{ resolve, options: { tcti: swtpm.tcti, sealedDir: 'sealed', ...options } }],
      }),
    );

  beforeEach(async () => {
    swtpm = await startSwtpm();
    dir = mkdtempSync(join(tmpdir(), 'sigil-tee-seal-'));
  });
  afterEach(async () => {
    await swtpm?.remove();
    rmSync(dir, { recursive: true, force: true });
  });

  it('seals the keys from the environment to the configured PCRs, prints the AK to pin, and start-up unseals them', async () => {
    writeConfig({ sealPcrs: [7, 0] });
    const signingKey = generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey;
    const proofKey = randomBytes(32).toString('hex');
    const sealed = await runSigil(['tee', 'seal'], {
      cwd: dir,
      env: {
        ...env(),
        MCP_SIGNING_KEY: signingKey.export({ type: 'pkcs8', format: 'pem' }) as string,
        SIGIL_EXECUTION_PROOF_KEY: proofKey,
      },
    });
    expect(sealed.code, sealed.stderr).to.equal(0);
    expect(sealed.stdout).to.match(
      /^sealed to sha256 PCR 0,7 of the TPM at swtpm:host=127\.0\.0\.1,port=\d+:$/m,
    );
    expect(sealed.stdout).to.include(
      'sealed/execution-proof.sealed.json  execution-proof (from SIGIL_EXECUTION_PROOF_KEY)',
    );
    const kid = await calculateJwkThumbprint(signingKey.export({ format: 'jwk' }));
    expect(sealed.stdout).to.include(`mcp-signing-key (from MCP_SIGNING_KEY, kid ${kid})`);
    expect(sealed.stdout).to.match(/key-derivation \(new\)/);
    expect(sealed.stdout).to.match(/^ {3}7 {2}0{64}$/m);
    expect(sealed.stdout).to.match(/attestation key: sha256 fingerprint [0-9a-f]{64} \(pin it/);
    expect(sealed.stdout).to.include('-----BEGIN PUBLIC KEY-----');
    expect(sealed.stdout + sealed.stderr).not.to.include(proofKey);

    const keys = await unsealKeys(new Tpm(swtpm.tcti), join(dir, 'sealed'));
    expect(Buffer.from(keys.get('execution-proof') as Uint8Array).toString('hex')).to.equal(proofKey);
    const scalar = p256Scalar(signingKey.export({ type: 'pkcs8', format: 'pem' }) as string, 'test');
    expect(Buffer.from(keys.get('mcp-signing-key') as Uint8Array).equals(Buffer.from(scalar))).to.equal(true);

    const started = await runSigil(['plugins', '--json'], { cwd: dir, env: env() });
    expect(started.code, started.stderr).to.equal(0);
    expect(JSON.parse(started.stdout)).to.deep.include.members([
      {
        kind: 'tee-backend',
        name: 'tee-vtpm',
        specVersion: 'v2',
        state: 'started',
        source: 'builtin:tee-vtpm',
      },
    ]);
  });

  it('refuses to seal over sealed keys unless --force, which keeps each key it is not given (issue 25 trial: a reseal rotated them all)', async () => {
    writeConfig({});
    expect((await runSigil(['tee', 'seal'], { cwd: dir, env: env() })).code).to.equal(0);
    const again = await runSigil(['tee', 'seal'], { cwd: dir, env: env() });
    expect(again.code).to.equal(1);
    expect(again.stderr).to.match(
      /sealed already holds sealed keys \(execution-proof, mcp-signing-key, key-derivation\)/,
    );
    expect(again.stderr).to.match(/hint: .*--force/);
    const hexOf = (keys: Map<string, Uint8Array>, purpose: string) =>
      Buffer.from(keys.get(purpose) as Uint8Array).toString('hex');
    const before = await unsealKeys(new Tpm(swtpm.tcti), join(dir, 'sealed'));
    const signingKey = generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey;
    const forced = await runSigil(['tee', 'seal', '--force'], {
      cwd: dir,
      env: { ...env(), MCP_SIGNING_KEY: signingKey.export({ type: 'pkcs8', format: 'pem' }) as string },
    });
    expect(forced.code, forced.stderr).to.equal(0);
    expect(forced.stdout).to.include('execution-proof (kept: the key sealed until now)');
    expect(forced.stdout).to.include('key-derivation (kept: the key sealed until now)');
    expect(forced.stdout).to.match(/mcp-signing-key \(from MCP_SIGNING_KEY, kid /);
    const after = await unsealKeys(new Tpm(swtpm.tcti), join(dir, 'sealed'));
    expect(hexOf(after, 'execution-proof')).to.equal(hexOf(before, 'execution-proof'));
    expect(hexOf(after, 'key-derivation')).to.equal(hexOf(before, 'key-derivation'));
    expect(hexOf(after, 'mcp-signing-key')).not.to.equal(hexOf(before, 'mcp-signing-key'));
  });

  it('reseals with new keys where the sealed ones no longer unseal (a changed PCR), saying why', async () => {
    writeConfig({});
    expect((await runSigil(['tee', 'seal'], { cwd: dir, env: env() })).code).to.equal(0);
    swtpm.extendPcr(7);
    const forced = await runSigil(['tee', 'seal', '--force'], { cwd: dir, env: env() });
    expect(forced.code, forced.stderr).to.equal(0);
    expect(forced.stdout).to.match(
      /execution-proof \(new: the keys sealed until now cannot be unsealed \(.*PCR 7 .*changed/,
    );
    expect((await unsealKeys(new Tpm(swtpm.tcti), join(dir, 'sealed'))).size).to.equal(3);
  });

  it('after a changed PCR, the services refuse to start, naming the PCR (exit 2, no fallback key)', async () => {
    writeConfig({});
    expect((await runSigil(['tee', 'seal'], { cwd: dir, env: env() })).code).to.equal(0);
    swtpm.extendPcr(4);
    const started = await runSigil(['plugins'], { cwd: dir, env: env() });
    expect(started.code).to.equal(2);
    expect(started.stderr).to.match(/tee-vtpm/);
    expect(started.stderr).to.match(
      /the sealed execution-proof key refuses to unseal: PCR 4 \(now [0-9a-f]{64}, sealed to 0{64}\) changed/,
    );
  });

  it('says in --help where each key comes from', async () => {
    const help = await runSigil(['tee', 'seal', '--help'], { cwd: dir, env: env() });
    expect(help.code).to.equal(0);
    expect(help.stdout).to.match(/Usage: sigil tee seal/);
    expect(help.stdout).to.match(
      /SIGIL_EXECUTION_PROOF_KEY, MCP_SIGNING_KEY and\s+SIGIL_KEY_DERIVATION_ROOT/,
    );
  });

  it('names what is wrong with the config: no tee-vtpm plugin, or its options', async () => {
    writeConfig({}, 'tee-none');
    const none = await runSigil(['tee', 'seal'], { cwd: dir, env: env() });
    expect(none.code).to.equal(2);
    expect(none.stderr).to.match(/the config loads no tee-vtpm plugin/);
    writeConfig({ sealPcrs: [7, 24] });
    const wrong = await runSigil(['tee', 'seal'], { cwd: dir, env: env() });
    expect(wrong.code).to.equal(2);
    expect(wrong.stderr).to.match(/plugins\.0\.options\.sealPcrs\.1/);
    writeConfig({});
    const badKey = await runSigil(['tee', 'seal'], {
      cwd: dir,
      env: { ...env(), SIGIL_EXECUTION_PROOF_KEY: 'not-hex' },
    });
    expect(badKey.code).to.equal(2);
    expect(badKey.stderr).to.match(/SIGIL_EXECUTION_PROOF_KEY must be 32 bytes in hex/);
  });
});

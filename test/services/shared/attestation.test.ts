import { createHash, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { expect } from 'chai';
import { repoPath } from '../../support/paths.ts';
import { TEST_DATABASES } from '../../support/kernel.ts';
import { errorOf } from '../../core/auth/support.ts';
import { Stack } from '../runtime/support.ts';

/**
 * The attestation endpoints both services serve without authentication (tee-none here: an honest
 * "no TEE", evidence null): the summary, a report binding the caller's nonce and the service's own
 * identity, what is enforced now, the build, and the per-address rate limit.
 */
describe('attestation endpoints of the runtime and the gateway', function () {
  this.timeout(60_000);
  let stack: Stack;
  before(async () => {
    stack = await Stack.start({ database: TEST_DATABASES[0]! });
  });
  after(() => stack?.close());

  const json = async (service: 'runtime' | 'gateway', path: string) => {
    const res = await stack.get(service, path);
    expect(res.status, `${service} ${path}`).to.equal(200);
    return (await res.json()) as Record<string, unknown>;
  };

  for (const [service, binding] of [
    ['runtime', 'jwksSha256'],
    ['gateway', 'proofKeyFingerprint'],
  ] as const) {
    describe(`on the ${service}`, () => {
      it('summarises: no TEE, said honestly, with the code hash and the identity its reports bind', async () => {
        const summary = await json(service, '/api/attestation');
        expect(summary).to.include({ teeEnabled: false, platform: 'none' });
        expect(summary.codeHash).to.match(/^[0-9a-f]{64}$/);
        expect(summary[binding]).to.match(/^[0-9a-f]{64}$/);
      });

      it("binds the caller's nonce at REPORT_DATA[0:32], its identity at [32:48] and its provenance key at [48:64]; no evidence without a TEE", async () => {
        const nonce = randomBytes(32).toString('hex');
        const report = await json(service, `/api/attestation/report?nonce=${nonce}`);
        const reportData = String(report.reportData);
        expect(reportData.slice(0, 64)).to.equal(nonce);
        expect(reportData.slice(64, 96)).to.equal(String(report[binding]).slice(0, 32));
        const { keyid } = (await json(service, '/api/attestation/provenance')) as { keyid: string };
        expect(reportData.slice(96)).to.equal(keyid.slice(0, 32));
        expect(report.provenanceKeySha256).to.equal(keyid);
        expect(report.evidence).to.equal(null);
        expect((report.reportDataLayout as Record<string, unknown>)[binding]).to.include({
          offset: 32,
          bytes: 16,
        });
      });

      it('refuses a nonce that is not 32 bytes of hex with 400 invalid_request', async () => {
        const error = await errorOf(await stack.get(service, '/api/attestation/report?nonce=abc'));
        expect(error).to.include({ status: 400, code: 'invalid_request' });
      });

      it('says what the build is: commit, code hash, lockfile hash, Node version', async () => {
        const build = await json(service, '/api/attestation/build-info');
        const lockfile = createHash('sha256')
          .update(readFileSync(repoPath('package-lock.json')))
          .digest('hex');
        expect(build).to.include({ nodeVersion: process.version, lockfileSha256: lockfile, builtAt: null });
        expect(build.codeHash).to.equal((await json(service, '/api/attestation')).codeHash);
      });
    });
  }

  it("the gateway's /security lists each sandbox's status, the proof key's source and the ERC-8128 mode", async () => {
    const security = await json('gateway', '/api/attestation/security');
    expect(security.tee).to.include({ teeEnabled: false, platform: 'none' });
    expect(security.keySources).to.have.property('executionProof').that.is.oneOf(['config', 'ephemeral']);
    const [sandbox] = security.sandboxes as { runtime: string; syscallFilter: { enforced: boolean } }[];
    expect(sandbox?.runtime).to.equal('linux-namespaces');
    expect(sandbox?.syscallFilter).to.have.property('enforced');
    expect(security.erc8128).to.deep.equal({ enforceOperatorMcp: false });
  });

  it("the runtime's /security says its mode, vault persistence and delegated key source", async () => {
    const security = await json('runtime', '/api/attestation/security');
    expect(security).to.include.keys('mode', 'vaultPersistence');
    // The same TEE status as the gateway's, not the posture /health shows (it once said `enabled`).
    expect(security.tee).to.include({ teeEnabled: false, platform: 'none' });
    expect(security.keySources).to.deep.equal({ mcpSigningKey: 'ephemeral' });
  });
});

describe('attestation endpoints: the rate limit', function () {
  this.timeout(60_000);
  let stack: Stack;
  before(async () => {
    stack = await Stack.start({ database: TEST_DATABASES[0]! });
  });
  after(() => stack?.close());

  it('limits one address to 60 requests a minute: then 429 rate_limited with Retry-After', async () => {
    const statuses: number[] = [];
    let limited: Response | undefined;
    for (let attempt = 0; attempt < 70 && limited === undefined; attempt += 1) {
      const res = await stack.get('gateway', '/api/attestation/build-info');
      statuses.push(res.status);
      if (res.status === 429) limited = res;
      else await res.arrayBuffer();
    }
    expect(limited, 'a 429 within 70 requests').to.not.equal(undefined);
    expect(statuses.filter((status) => status === 200)).to.have.length(60);
    expect(Number(limited?.headers.get('retry-after'))).to.be.within(1, 60);
    const error = await errorOf(limited as Response);
    expect(error).to.include({ status: 429, code: 'rate_limited' });
  });
});

import { createHash } from 'node:crypto';
import { expect } from 'chai';
import { offlineVerification } from '../../../../services/shared/offline-verification/script.ts';

describe('the offline script build', function () {
  this.timeout(60_000);

  it('builds once per platform and verifier: concurrent first requests share one build', async () => {
    const backend = { platform: 'none' };
    const [first, second] = [offlineVerification(backend), offlineVerification(backend)];
    expect(first).to.equal(second);
    const { script, scriptSha256, usage } = await first;
    expect(script.startsWith('#!/usr/bin/env node\n')).to.equal(true);
    expect(scriptSha256).to.equal(createHash('sha256').update(script).digest('hex'));
    expect(usage).to.contain('node verify-bundle.cjs bundle.json');
    expect(offlineVerification(backend)).to.equal(first);
  });

  it('does not keep a failed build: a verifier that is not there fails, and the next request builds again', async () => {
    const broken = { platform: 'broken', offlineVerifier: '/nonexistent/sigil-test/offline-verifier.ts' };
    const failed = offlineVerification(broken);
    const error = await failed.then(
      () => undefined,
      (thrown: unknown) => thrown,
    );
    expect(String(error)).to.contain('/nonexistent/sigil-test/offline-verifier.ts');
    const again = offlineVerification(broken);
    expect(again).to.not.equal(failed);
    await again.catch(() => undefined);
  });
});

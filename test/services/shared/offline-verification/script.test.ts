import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
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

  it('answers --help with its usage (exit 0), and a bundle it cannot read or a stray option with a line and exit 2', async () => {
    const { script } = await offlineVerification({ platform: 'none' });
    const folder = mkdtempSync(join(tmpdir(), 'sigil-script-cli-'));
    try {
      writeFileSync(join(folder, 'verify-bundle.cjs'), script);
      const node = (...args: string[]) =>
        promisify(execFile)(process.execPath, ['verify-bundle.cjs', ...args], { cwd: folder }).then(
          ({ stdout }) => ({ code: 0, stdout }),
          (err: { code: number; stdout: string }) => ({ code: err.code, stdout: err.stdout }),
        );
      const help = await node('--help');
      expect(help).to.deep.equal({
        code: 0,
        stdout: 'usage: node verify-bundle.cjs <bundle.json> [--at <ISO time>]\n',
      });
      const missing = await node('missing.json');
      expect(missing.code).to.equal(2);
      expect(missing.stdout).to.match(/^missing\.json cannot be read \(ENOENT\)\nusage: /);
      const stray = await node('bundle.json', '--pin', 'x');
      expect(stray.code).to.equal(2);
      expect(stray.stdout.split('\n')).to.have.length(3);
    } finally {
      rmSync(folder, { recursive: true, force: true });
    }
  });
});

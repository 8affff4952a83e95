import type { IncomingMessage, ServerResponse } from 'node:http';
import { expect } from 'chai';
import { decodeJwt } from 'jose';
import type { CheckResult } from '@sigil/plugin-api/kit';
import { delegationRequirements } from '../../conformance/deployment/delegation.ts';
import { runDeployment } from '../../conformance/deployment/run.ts';
import { newWallet } from '../core/auth/support.ts';
import { describeEachDatabase } from '../support/kernel.ts';
import { sendJson, startTinyServer, type TinyServer } from './support.ts';
import { sealedVtpm, type SealedVtpmEntry } from '../support/sealed-vtpm.ts';
import { GATEWAY_PUBLIC, pluginsWithTee, Stack } from '../services/runtime/support.ts';

const IDS = delegationRequirements.map((requirement) => requirement.id);

async function certify(runtimeUrl: string, gatewayUrl: string): Promise<Record<string, CheckResult>> {
  const report = await runDeployment({ runtimeUrl, gatewayUrl }, { requirements: delegationRequirements });
  return Object.fromEntries(report.results.map((result) => [result.id, result]));
}

/**
 * A gateway that takes any bearer JWT at its word (no signature, no alg check) and calls every
 * runtime trusted: what the delegated requirements exist to catch.
 */
function credulousGateway(request: IncomingMessage, response: ServerResponse): void {
  const url = new URL(request.url ?? '/', 'http://gateway');
  if (url.pathname === '/api/auth/challenge') {
    sendJson(response, 200, { uri: GATEWAY_PUBLIC });
    return;
  }
  if (url.pathname === '/api/auth/session') {
    const token = /^Bearer (.+)$/.exec(request.headers.authorization ?? '')?.[1];
    if (token === undefined) {
      sendJson(response, 401, { code: 'unauthorized' });
      return;
    }
    try {
      sendJson(response, 200, { address: decodeJwt(token).sub, method: 'jwt', trust: 'trusted' });
    } catch {
      sendJson(response, 401, { code: 'unauthorized' });
    }
    return;
  }
  sendJson(response, 404, { code: 'not_found' });
}

describeEachDatabase('conformance: the delegated path', (database) => {
  it('every delegated-path requirement passes against Sigil with tee-none', async () => {
    const stack = await Stack.start({ database });
    try {
      const results = await certify(stack.url('runtime'), stack.url('gateway'));
      const notPassed = Object.values(results).filter((result) => result.status !== 'pass');
      expect(notPassed.map((result) => `${result.id}: ${result.reason}`)).to.deep.equal([]);
      expect(Object.keys(results)).to.have.members(IDS);
    } finally {
      await stack.close();
    }
  });

  describe('with an attested runtime the gateway trusts (tee-vtpm on swtpm, its keys sealed)', function () {
    this.timeout(180_000);
    let tpm: SealedVtpmEntry;
    let stack: Stack;
    before(async () => {
      tpm = await sealedVtpm();
      stack = await Stack.start({ database, config: { plugins: pluginsWithTee(tpm.entry) } });
    });
    after(async () => {
      await stack?.close();
      await tpm?.remove();
    });

    it('every delegated-path requirement passes, and the gateway judges the runtime trusted', async () => {
      const results = await certify(stack.url('runtime'), stack.url('gateway'));
      expect(Object.values(results).filter((result) => result.status !== 'pass')).to.deep.equal([]);
      const token = await stack.gatewayToken(await stack.signIn(newWallet()));
      const session = (await (await stack.get('gateway', '/api/auth/session', token)).json()) as {
        trust: string;
      };
      expect(session.trust).to.equal('trusted');
    });
  });

  describe('against a gateway that believes any token', () => {
    let stack: Stack;
    let gateway: TinyServer;
    before(async () => {
      stack = await Stack.start({ database });
      gateway = await startTinyServer(credulousGateway);
    });
    after(async () => {
      await gateway?.close();
      await stack?.close();
    });

    it('fails GW-5.delegated-jwt-refused and RT-3.trust-state-reported, naming the fault', async () => {
      const results = await certify(stack.url('runtime'), gateway.url);
      expect(results['GW-5.delegated-jwt-accepted']).to.include({ status: 'pass' });
      expect(results['GW-5.delegated-jwt-refused']).to.include({ status: 'fail' });
      expect(results['GW-5.delegated-jwt-refused']?.reason).to.match(
        /accepted a token signed by another key/,
      );
      expect(results['RT-3.trust-state-reported']).to.include({ status: 'fail' });
      expect(results['RT-3.trust-state-reported']?.reason).to.match(
        /no attestation evidence, yet .* "trusted"/,
      );
    });
  });
});

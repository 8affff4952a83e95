import { expect } from 'chai';
import type { Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { runtimeClient, signIn } from '../services/runtime/chat-support.ts';
import { ensureChromium } from '../support/chromium.ts';
import { sigilUpSuite } from '../support/sigil-up-suite.ts';
import { runExample } from './support.ts';

/**
 * Issue 26's done-when, as the README gives it: under `sigil up`, one command runs the example
 * workflow over SSE (a model drafts a page, the owner approves it from a second request, it is
 * written, pushed to a `git daemon`, and checked in chromium), and its model turn is charged on the
 * ledger as its cost event says.
 */
describe('examples/first-canvas.mjs after sigil up', function () {
  this.timeout(300_000);
  before(() => ensureChromium());
  const sigil = sigilUpSuite(/^ready {4}.*\n/m, { warmupAtStart: true, timeoutMs: 170_000 });

  it('runs draft → approval → write → push → browser check, and the ledger holds its charge', async () => {
    const stdout = await runExample(['examples/first-canvas.mjs', sigil.runtimeUrl], {});
    const order = [...stdout.matchAll(/^ {2}(\w+) +running$/gm)].map((m) => m[1]);
    expect(order).to.deep.equal(['draft', 'approve', 'page', 'write', 'push', 'verify']);
    // verify reads nothing of push: its input after alone makes it wait for the push to succeed.
    const pushed = stdout.search(/^ {2}push +succeeded$/m);
    expect(pushed).to.be.greaterThan(-1);
    expect(stdout.search(/^ {2}verify +running$/m)).to.be.greaterThan(pushed);
    expect(stdout).to.match(/^ {2}approve +waiting_approval$/m);
    expect(stdout).to.match(/^approve {3}POST \/canvas\/runs\/[0-9a-f-]{36}\/nodes\/approve\/decision$/m);
    expect(stdout).to.match(/^ {2}verify +log {2}every assertion held$/m);
    expect(stdout).to.match(
      /^pushed {4}main:index.html in git:\/\/127.0.0.1\/site.git holds "Hello from Sigil"$/m,
    );
    const [charged] = /^run {7}succeeded, charged (\d+) base units$/m.exec(stdout)!.slice(1);
    expect(Number(charged)).to.be.greaterThan(0);

    // Read apart from the example: the run, its screenshot, and the ledger's charge.
    const wallet = privateKeyToAccount(sigil.banner.key as Hex);
    const client = runtimeClient(sigil.runtimeUrl, await signIn(sigil.runtimeUrl, wallet));
    const [run] = (await client.json('GET', '/canvas/runs?limit=1')).body.runs;
    expect(run.status).to.equal('succeeded');
    const detail = (await client.json('GET', `/canvas/runs/${run.id}`)).body;
    const [screenshot] = detail.artifacts;
    const png = Buffer.from(
      await (await client.send('GET', `/canvas/runs/${run.id}/artifacts/${screenshot.id}`)).arrayBuffer(),
    );
    expect(png.subarray(0, 8).toString('hex')).to.equal('89504e470d0a1a0a');
    const { transactions } = (await client.json('GET', '/wallet/transactions?kind=charge')).body;
    expect(transactions[0].amount).to.equal(charged);
  });
});

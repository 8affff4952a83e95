import { once } from 'node:events';
import { createServer } from 'node:net';
import { expect } from 'chai';
import type { Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { runtimeClient, signIn } from '../services/runtime/chat-support.ts';
import { ensureChromium } from '../support/chromium.ts';
import { sigilUpSuite } from '../support/sigil-up-suite.ts';
import { printedExample, runExample } from './support.ts';

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
    // As the banner prints it.
    const printed = printedExample(sigil.up.output(), 'canvas', 'first-canvas.mjs');
    expect(printed).to.deep.equal(['examples/first-canvas.mjs', sigil.runtimeUrl]);
    const stdout = await runExample(printed, {});
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

/**
 * The trial of issue 26 with port 9418 already served (another `git daemon`): the example's own
 * daemon cannot bind it and exits, and the example says so before it asks anything of the runtime.
 * (It took a connection that opened for its daemon's readiness, reached the other listener, went on,
 * and pushed into the other daemon's repository.)
 */
describe('examples/first-canvas.mjs with port 9418 taken', function () {
  this.timeout(60_000);

  it('stops at once, saying its git daemon could not listen, and never reaches the runtime', async () => {
    const other = createServer((socket) => socket.end());
    other.listen(9418, '127.0.0.1');
    const listening = await Promise.race([
      once(other, 'listening').then(() => true),
      // Taken already (by another daemon): that is the case too.
      once(other, 'error').then(() => false),
    ]);
    try {
      // Nothing listens on port 9 of loopback: a run that got past its daemon would fail on sign-in.
      const failure = await runExample(['examples/first-canvas.mjs', 'http://127.0.0.1:9'], {}).then(
        () => undefined,
        (err: unknown) => err as { code: number; stdout: string; stderr: string },
      );
      expect(failure?.code).to.equal(1);
      expect(failure?.stderr).to.match(
        /^first-canvas failed: git daemon exited \(128\): is port 9418 taken\? \(.*Address already in use/m,
      );
      expect(failure?.stdout).to.not.match(/^git {7}/m);
      expect(failure?.stderr).to.not.include('/auth/challenge');
    } finally {
      if (listening) await new Promise((resolve) => other.close(resolve));
    }
  });
});

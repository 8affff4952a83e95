import { expect } from 'chai';
import type { Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { runtimeClient, signIn } from '../services/runtime/chat-support.ts';
import { sigilUpSuite } from '../support/sigil-up-suite.ts';
import { printedExample, runExample } from './support.ts';

const DEPOSIT = 1_000_000n;

/** Every match of `pattern` (global, one capture) in `text`, in order. */
const all = (pattern: RegExp, text: string): string[] => [...text.matchAll(pattern)].map((m) => m[1]!);

/**
 * Issue 22's first hour: the README's first chat is one command, and that command does each step the
 * README lists against `sigil up`: SIWE, the vault, a deposit the ledger counts, a hello, a paid tool
 * call that is billed, and a charge per message that is the ledger's. As in the payment examples, the
 * chat's tool is the probe server's `echo` (SIGIL_SERVER), not the shipped catalog's.
 */
describe('examples/first-chat.mjs after sigil up', function () {
  this.timeout(240_000);
  const sigil = sigilUpSuite(/^ready {4}.*\n/m, { warmupAtStart: true, timeoutMs: 170_000 });

  it('signs in, funds the ledger from the dev wallet, chats, and each charge is what its cost event said', async () => {
    const payerBefore = await sigil.balanceOf(sigil.banner.payer);
    // As the banner prints it.
    const printed = printedExample(sigil.up.output(), 'chat', 'first-chat.mjs');
    expect(printed).to.deep.equal(['examples/first-chat.mjs', sigil.runtimeUrl]);
    const stdout = await runExample(printed, { SIGIL_SERVER: 'probe' });

    expect(stdout).to.match(new RegExp(`^signed in ${sigil.banner.payer} with SIWE`, 'm'));
    expect(stdout).to.match(/^vault {5}PROVIDER_API_KEY stored and unlocked/m);
    // The deposit went from the printed dev wallet to the chain the banner printed, and was counted.
    expect(stdout).to.include(`on eip155:${sigil.banner.chainId} (${sigil.banner.rpcUrl})`);
    expect(await sigil.balanceOf(sigil.banner.payer)).to.equal(payerBefore - DEPOSIT);
    const [counted, was] = /^counted {3}available (\d+) base units \(was (\d+)\)$/m.exec(stdout)!.slice(1);
    expect(BigInt(counted!) - BigInt(was!)).to.equal(DEPOSIT);

    const [hello, tool] = stdout.split(/^> .*$/m).slice(1);
    expect(hello).to.match(/^ {2}answer {4}hello$/m);
    expect(tool).to.match(/^ {2}tool-call probe__echo \{"message":"hi"\}$/m);
    expect(tool).to.match(/^ {2}result {4}probe__echo: .*hi.* \(billed, paid 500 on eip155:8453\)$/m);
    expect(stdout).to.match(/^billed {4}probe__echo ran on the gateway and was billed 500 base units$/m);

    // BYOK: a tenth of the model's base cost, rounded up once, plus 500 for the tool call that ran.
    const charged = [hello!, tool!].map((part, i) => {
      const base = all(/^ {2}usage .*base LLM cost (\d+)$/gm, part).reduce((sum, c) => sum + BigInt(c), 0n);
      const [cost] = all(/^ {2}cost {6}charged (\d+) base units/gm, part);
      expect(BigInt(cost!)).to.equal((10n * base + 99n) / 100n + (i === 1 ? 500n : 0n));
      return cost!;
    });
    expect(
      all(/^ledger {4}\w+ message: charge \S+ of (\d+) base units, as its cost event said$/gm, stdout),
    ).to.deep.equal(charged);
    // The ledger, read apart from the example: its two newest charges are those.
    const wallet = privateKeyToAccount(sigil.banner.key as Hex);
    const client = runtimeClient(sigil.runtimeUrl, await signIn(sigil.runtimeUrl, wallet));
    const { transactions } = (await client.json('GET', '/wallet/transactions?kind=charge')).body;
    expect((transactions as { amount: string }[]).slice(0, 2).map((t) => t.amount)).to.deep.equal(
      [...charged].reverse(),
    );
  });
});

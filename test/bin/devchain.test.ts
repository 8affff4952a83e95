import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { createPublicClient, http, parseAbi } from 'viem';
import { startDevChain, type DevChain } from '../support/chain.ts';
import { BANNER_END, freePort, parseBanner, runSigil, startSigil } from '../support/cli.ts';

/** The chain id a JSON-RPC URL answers with, or undefined when nothing answers there. */
async function chainIdAt(rpcUrl: string): Promise<string | undefined> {
  try {
    const response = await fetch(rpcUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'eth_chainId', params: [] }),
      signal: AbortSignal.timeout(1_000),
    });
    return ((await response.json()) as { result?: string }).result;
  } catch {
    return undefined;
  }
}

/** Waits until nothing answers at the URL any more (anvil gone), or fails after `ms`. */
async function expectGone(rpcUrl: string, ms = 5_000): Promise<void> {
  const deadline = Date.now() + ms;
  while ((await chainIdAt(rpcUrl)) !== undefined) {
    if (Date.now() > deadline) throw new Error(`something still answers at ${rpcUrl}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe('sigil up and the dev chain', function () {
  this.timeout(90_000);
  let dir: string;
  const env = async (extra: Record<string, string> = {}) => ({
    DATABASE_URL: join(dir, 'sigil.db'),
    SIGIL_CONFIG: '',
    GATEWAY_WARMUP: 'false',
    RUNTIME_PORT: String(await freePort()),
    GATEWAY_PORT: String(await freePort()),
    LOG_LEVEL: 'info',
    DEV_CHAIN: '',
    DEV_CHAIN_PORT: '',
    ...extra,
  });

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'sigil-devchain-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('starts anvil with the dev token, prints the dev wallet, loads the rail, and stops anvil on SIGINT', async () => {
    const upEnv = await env();
    const up = await startSigil(['up'], BANNER_END, { cwd: dir, env: upEnv });
    let banner: ReturnType<typeof parseBanner>;
    try {
      // stdout and the log (stderr) together.
      const output = up.output();
      banner = parseBanner(output);
      expect(banner.chainId).to.equal(8453);
      expect(output).to.match(
        /^payments payments-x402-evm: a tool call costs .* on the local dev chain below$/m,
      );
      expect(output).to.match(/public test key .*for this local chain only/);
      // Anvil's well-known accounts 1 (payer) and 2 (treasury): the printed key is the payer's.
      expect(banner.payer).to.equal('0x70997970C51812dc3A010C7d01b50e0d17dc79C8');
      expect(banner.treasury).to.equal('0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC');
      expect(banner.key).to.equal('0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d');

      expect(await chainIdAt(banner.rpcUrl)).to.equal('0x2105');
      const client = createPublicClient({ transport: http(banner.rpcUrl) });
      const balanceOf = parseAbi(['function balanceOf(address) view returns (uint256)']);
      const balance = await client.readContract({
        address: banner.token,
        abi: balanceOf,
        functionName: 'balanceOf',
        args: [banner.payer],
      });
      expect(balance).to.equal(1_000_000_000n);
      // The gateway charges on that chain, in that token, to the treasury.
      const terms = await fetch(`http://127.0.0.1:${upEnv.GATEWAY_PORT}/api/payments/config`);
      const charged = (await terms.json()) as Record<string, unknown>;
      expect(charged).to.deep.include({
        enabled: true,
        network: 'eip155:8453',
        chainId: 8453,
        pricePerCall: '500',
        payTo: banner.treasury,
      });
      expect(charged.token).to.include({ address: banner.token, decimals: 6 });
    } finally {
      up.child.kill('SIGINT');
    }
    expect(await up.exited).to.equal(0);
    // Progress lines in the log while it started (log lines are batched: read once it has exited).
    for (const step of ['starting anvil', 'anvil listening', 'Multicall3', 'SigilDollar deployed', 'ready'])
      expect(up.output()).to.include(`"msg":"dev chain: ${step}`);
    // The payer's key appears once, in the printed block, never in a log line; the operator's never.
    expect(up.output().split(banner.key).length - 1).to.equal(1);
    expect(up.output()).to.not.include('ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80');
    expect(up.output()).to.match(/dev chain: stopped/);
    await expectGone(banner.rpcUrl, 1_000);
  });

  it('on SIGKILL, anvil goes with it', async () => {
    const up = await startSigil(['up'], BANNER_END, { cwd: dir, env: await env() });
    const { rpcUrl } = parseBanner(up.output());
    expect(await chainIdAt(rpcUrl)).to.equal('0x2105');
    up.child.kill('SIGKILL');
    await up.exited;
    await expectGone(rpcUrl);
  });

  it('DEV_CHAIN=false starts no chain and no rail; the banner names the public URL; devChain.port from the config is used', async () => {
    // Behind a balancer the banner's commands name the gateway's public URL, not the replica's own.
    const offEnv = await env({ DEV_CHAIN: 'false', GATEWAY_PUBLIC_URL: 'https://tools.example.test/' });
    const off = await startSigil(['up'], /gateway\s+http/, { cwd: dir, env: offEnv });
    try {
      const terms = await fetch(`http://127.0.0.1:${offEnv.GATEWAY_PORT}/api/payments/config`);
      expect(await terms.json()).to.include({ enabled: false });
    } finally {
      off.child.kill('SIGTERM');
    }
    expect(await off.exited, off.output()).to.equal(0);
    expect(off.output()).to.not.match(/^dev chain /m);
    expect(off.output()).to.match(/^payments none: tool calls are free \(no payment rail\)$/m);
    expect(off.output()).to.include(
      `--cli https://tools.example.test/mcp/server/everything --transport http --method tools/call --tool-name echo`,
    );
    expect(off.output()).to.include('"reason":"devChain.enabled is false","msg":"dev chain: not started"');
    expect(off.output()).to.not.match(/anvil/);

    const port = await freePort();
    const file = join(dir, 'sigil.config.json');
    writeFileSync(file, JSON.stringify({ devChain: { port } }));
    const up = await startSigil(['--config', file, 'up'], BANNER_END, { cwd: dir, env: await env() });
    try {
      expect(parseBanner(up.output()).rpcUrl).to.equal(`http://127.0.0.1:${port}`);
    } finally {
      up.child.kill('SIGTERM');
    }
    expect(await up.exited).to.equal(0);

    writeFileSync(file, JSON.stringify({ devChain: { enabled: false } }));
    const check = await runSigil(['--config', file, 'config', 'check'], { cwd: dir, env: await env() });
    expect(JSON.parse(check.stdout)).to.have.deep.property('devChain', {
      enabled: false,
      stateFile: 'data/devchain/state.json',
    });
  });

  it('sigil gateway alone starts no chain', async () => {
    const gateway = await startSigil(['gateway'], /gateway\s+http/, { cwd: dir, env: await env() });
    gateway.child.kill('SIGTERM');
    expect(await gateway.exited).to.equal(0);
    expect(gateway.output()).to.not.match(/dev chain|anvil|^payments payments-/m);
  });

  describe('with a payment rail in the config', () => {
    let chain: DevChain;
    before(async () => {
      chain = await startDevChain();
    });
    after(() => chain?.stop());

    it('starts no chain of its own and loads the configured rail', async () => {
      const file = join(dir, 'sigil.config.json');
      const rail = {
        resolve: 'payments-x402-evm',
        options: {
          rpcUrl: chain.rpcUrl,
          asset: { ...chain.token },
          payTo: chain.accounts.treasury.address,
          facilitator: { kind: 'builtin', privateKey: chain.accounts.operator.privateKey },
        },
      };
      const defaults = ['tee-none', 'registry-npm', 'sandbox-linux-namespaces'].map((resolve) => ({
        resolve,
      }));
      writeFileSync(file, JSON.stringify({ plugins: [...defaults, rail] }));
      const up = await startSigil(['--config', file, 'up'], /gateway\s+http/, { cwd: dir, env: await env() });
      up.child.kill('SIGTERM');
      expect(await up.exited).to.equal(0);
      // Paid on the configured chain: no dev-chain one-liners.
      expect(up.output()).to.match(
        /^payments payments-x402-evm: a tool call costs 0\.0005 Sigil Dollar \(500 base units\), paid with x402 on eip155:8453$/m,
      );
      expect(up.output()).to.not.include('examples/pay-over');
      expect(up.output()).to.not.match(/^dev chain /m);
      expect(up.output()).to.include(
        '"reason":"plugins.3 (payments-x402-evm) is a payment rail","msg":"dev chain: not started"',
      );
      expect(up.output()).to.not.match(/dev chain: starting anvil/);
    });
  });
});

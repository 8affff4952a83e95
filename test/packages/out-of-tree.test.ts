import { execFile } from 'node:child_process';
import { cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { expect } from 'chai';
import { newWallet } from '../auth/support.ts';
import { setOnChain } from '../ledger/support.ts';
import { describeEachDatabase } from '../support/kernel.ts';
import { readSse, runtimeClient, storeAndUnlock } from '../runtime/chat-support.ts';
import { pluginsWithLocalProvider, Stack } from '../runtime/support.ts';

const run = promisify(execFile);
const repoRoot = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const fixture = join(repoRoot, 'test', 'fixtures', 'out-of-tree', 'acme-llm');

/** `npm <args>` in `cwd`, offline where the cache has what it needs; its output. */
async function npm(cwd: string, ...args: string[]): Promise<string> {
  const { stdout, stderr } = await run('npm', [...args, '--prefer-offline', '--no-audit', '--no-fund'], {
    cwd,
    maxBuffer: 16 * 1024 * 1024,
  });
  return `${stdout}${stderr}`;
}

/** `npm pack` of the package in `dir` into `destination`; the tarball's path. */
async function pack(dir: string, destination: string): Promise<string> {
  const output = await npm(dir, 'pack', '--silent', '--pack-destination', destination);
  return join(destination, basename(output.trim().split('\n').at(-1) as string));
}

/**
 * Issue 23: a plugin built as a separate package, outside the source tree, against the published shape
 * of @sigil/plugin-api (its packed tarball, so its own copy of the package): its own suite passes the
 * kit, it is installed into a deployment's node_modules as a tarball, loaded by name from the config,
 * and serves a chat.
 */
describe('plugins outside the tree', function () {
  this.timeout(300_000);
  let work: string;
  let deployment: string;
  let kitOutput: string;

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'sigil-out-of-tree-'));
    const api = await pack(join(repoRoot, 'packages', 'plugin-api'), work);
    const plugin = join(work, 'acme-llm');
    cpSync(fixture, plugin, { recursive: true });
    // The plugin API from its tarball, as a published version would come (the peer dependency too).
    await npm(plugin, 'install', '--save-dev', api);
    kitOutput = await npm(plugin, 'test');
    const tarball = await pack(plugin, work);
    deployment = join(work, 'deployment');
    cpSync(join(fixture, '..', 'deployment.json'), join(deployment, 'package.json'));
    await npm(deployment, 'install', tarball, api);
  });
  after(() => rmSync(work, { recursive: true, force: true }));

  it("passes the kit in the plugin's own test suite, run by its own npm test", () => {
    expect(kitOutput).to.match(/\d+ passing/);
    expect(kitOutput).to.not.match(/failing/);
    expect(kitOutput).to.include('llm-provider.models-priced');
  });

  describeEachDatabase('installed by name into a deployment', (database) => {
    let dir: string;
    let stack: Stack;
    before(async () => {
      dir = mkdtempSync(join(tmpdir(), 'sigil-out-of-tree-vault-'));
      writeFileSync(join(deployment, 'sigil.config.json'), '{}\n');
      stack = await Stack.start({
        database,
        configDir: deployment,
        config: {
          vault: { persistenceDir: dir },
          ledger: { minimumBalance: '0' } as never,
          plugins: [...pluginsWithLocalProvider(), { resolve: 'acme-llm', enabled: true, options: {} }],
        },
      });
    });
    after(async () => {
      await stack?.close();
      rmSync(dir, { recursive: true, force: true });
    });

    it('is loaded from node_modules by its package name and serves a chat, charged to the wallet', async () => {
      expect(stack.kernel.plugins.list()).to.deep.include({
        name: 'acme-llm',
        kind: 'llm-provider',
        specVersion: 'v1',
        source: 'acme-llm',
        state: 'started',
      });
      const wallet = newWallet();
      const client = runtimeClient(stack.url('runtime'), await stack.signIn(wallet));
      await setOnChain(stack.runtime.ledger.ledger, wallet.address, 1_000_000n);
      await storeAndUnlock(client, wallet, 'ACME_API_KEY', 'acme-key-of-the-wallet');
      const agent = await client.json('POST', '/agents', { name: 'a', model: 'acme-echo' });
      expect(agent.status).to.equal(201);
      const session = (await client.json('POST', `/agents/${agent.body.id}/sessions`, {})).body.id as string;
      const events = await readSse(
        await client.send('POST', `/agents/${agent.body.id}/sessions/${session}/messages`, {
          content: 'hello from outside',
        }),
      );
      const text = events
        .filter((e) => e.event === 'text-delta')
        .map((e) => e.data.text)
        .join('');
      expect(text).to.equal('acme: hello from outside');
      expect(events.find((e) => e.event === 'done')).to.not.equal(undefined);
      const cost = events.find((e) => e.event === 'cost')?.data as { charged: string };
      expect(BigInt(cost.charged) > 0n).to.equal(true);
      expect((await stack.runtime.ledger.ledger.balance(wallet.address)).unsettledSpend).to.equal(
        BigInt(cost.charged),
      );
    });

    it('reports an upstream failure as an LlmProviderError the runtime recognises across copies', async () => {
      const wallet = newWallet();
      const client = runtimeClient(stack.url('runtime'), await stack.signIn(wallet));
      await setOnChain(stack.runtime.ledger.ledger, wallet.address, 1_000_000n);
      await storeAndUnlock(client, wallet, 'ACME_API_KEY', 'not-an-acme-key');
      const agent = (await client.json('POST', '/agents', { name: 'a', model: 'acme-echo' })).body;
      const session = (await client.json('POST', `/agents/${agent.id}/sessions`, {})).body.id as string;
      const events = await readSse(
        await client.send('POST', `/agents/${agent.id}/sessions/${session}/messages`, { content: 'hi' }),
      );
      const error = events.find((e) => e.event === 'error')?.data as {
        code: string;
        kind: string;
        message: string;
      };
      // Not `internal`: the error of the plugin's own copy of the package is recognised for what it is.
      expect(error).to.include({ code: 'provider_error', kind: 'auth' });
      expect(error.message).to.not.include('not-an-acme-key');
    });
  });
});

import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { packPluginApi } from '../../templates/scaffold.ts';
import { newWallet } from '../core/auth/support.ts';
import { mcpClient, probeEntry, probePackage, textOf, walletToken } from '../services/gateway/support.ts';
import { setOnChain } from '../services/runtime/ledger/support.ts';
import { describeEachDatabase } from '../support/kernel.ts';
import { buildPlugin, deploymentWith, packBundled, type Packed } from '../support/out-of-tree.ts';
import { readSse, runtimeClient, storeAndUnlock } from '../services/runtime/chat-support.ts';
import { pluginsWithLocalProvider, Stack } from '../services/runtime/support.ts';

/**
 * Issue 23: plugins built as separate packages, outside the source tree, against the published shape
 * of @sigil/plugin-api (its packed tarball, so their own copy of the package): an LLM provider and a
 * package registry. Each one's own suite passes its kit; both are installed into a deployment's
 * node_modules as tarballs, loaded by name from the config, and serve a chat and a tool call.
 */
describe('plugins outside the tree', function () {
  this.timeout(300_000);
  let work: string;
  let deployment: string;
  let llmTests: string;
  let registryTests: string;
  /** The probe MCP server, its dependencies bundled: what the acme-dir registry serves. */
  let probe: Packed;

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'sigil-out-of-tree-'));
    const api = join(work, packPluginApi(work));
    const llm = await buildPlugin('acme-llm', api, work);
    const registry = await buildPlugin('acme-registry', api, work);
    [llmTests, registryTests] = [llm.testOutput, registry.testOutput];
    deployment = await deploymentWith(join(work, 'deployment'), [llm.tarball, registry.tarball, api]);
    probe = await packBundled(probePackage, work);
  });
  after(() => rmSync(work, { recursive: true, force: true }));

  it("passes the kits in each plugin's own test suite, run by its own npm test", () => {
    for (const output of [llmTests, registryTests]) {
      expect(output).to.match(/\d+ passing/);
      expect(output).to.not.match(/failing/);
    }
    expect(llmTests).to.include('llm-provider.models-priced');
    expect(registryTests).to.include('package-registry.integrity-mismatch-refused');
    expect(registryTests).to.include('package-registry.install-scripts-not-run');
  });

  describeEachDatabase('installed by name into a deployment', (database) => {
    let dir: string;
    /** The registry's cache, the sandboxes' state, the catalog: not under /tmp (a sandbox has its own). */
    let gatewayDir: string;
    let stack: Stack;
    before(async () => {
      dir = mkdtempSync(join(tmpdir(), 'sigil-out-of-tree-vault-'));
      gatewayDir = mkdtempSync(join('/var/tmp', 'sigil-out-of-tree-'));
      chmodSync(gatewayDir, 0o755);
      const catalogFile = join(gatewayDir, 'catalog.json');
      writeFileSync(
        catalogFile,
        JSON.stringify({ servers: [{ id: 'probe', ...probeEntry, registry: 'acme-dir' }] }),
      );
      writeFileSync(join(deployment, 'sigil.config.json'), '{}\n');
      const acmeRegistry = {
        resolve: 'acme-registry',
        enabled: true,
        options: {
          cacheDir: join(gatewayDir, 'packages'),
          packages: [{ name: '@sigil-test/probe-server', version: '1.0.0', ...probe }],
        },
      };
      const sandboxes = { stateDir: join(gatewayDir, 'sandboxes') };
      stack = await Stack.start({
        database,
        configDir: deployment,
        config: {
          vault: { persistenceDir: dir },
          ledger: { minimumBalance: '0' } as never,
          gateway: { includeDefaultCatalog: false, catalogFile },
          plugins: [
            ...pluginsWithLocalProvider().map((plugin) =>
              plugin.resolve === 'sandbox-linux-namespaces' ? { ...plugin, options: sandboxes } : plugin,
            ),
            { resolve: 'acme-llm', enabled: true, options: {} },
            acmeRegistry,
          ],
        },
      });
    });
    after(async () => {
      await stack?.close();
      rmSync(dir, { recursive: true, force: true });
      rmSync(gatewayDir, { recursive: true, force: true });
    });

    /** Loaded from the deployment's node_modules by its package name, and started. */
    const expectStartedByName = (name: string, kind: string) =>
      expect(stack.kernel.plugins.list()).to.deep.include({
        name,
        kind,
        specVersion: 'v1',
        source: name,
        state: 'started',
      });

    it('is loaded from node_modules by its package name and serves a chat, charged to the wallet', async () => {
      expectStartedByName('acme-llm', 'llm-provider');
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

    it('is loaded by its package name and serves a tool call of an MCP server from its acme-dir registry', async () => {
      expectStartedByName('acme-registry', 'package-registry');
      const catalog = (await (await stack.fetch('gateway', '/api/servers')).json()) as {
        servers: { id: string; registry: string; runnable: unknown }[];
      };
      // Runnable: a loaded package-registry plugin is of the kind the entry names.
      expect(catalog.servers.map(({ id, registry, runnable }) => ({ id, registry, runnable }))).to.deep.equal(
        [{ id: 'probe', registry: 'acme-dir', runnable: { ok: true, reason: null } }],
      );
      const { token } = await walletToken(stack.url('gateway'));
      const client = await mcpClient(stack.url('gateway', '/mcp'), token, 'out-of-tree');
      const enabled = await client.callTool({
        name: 'gateway_enable_server',
        arguments: { serverId: 'probe' },
      });
      expect(enabled.isError, textOf(enabled)).to.not.equal(true);
      const echoed = await client.callTool({ name: 'probe__echo', arguments: { message: 'from a tarball' } });
      expect(textOf(echoed)).to.equal('from a tarball');
      await client.close();
      const details = (await (await stack.fetch('gateway', '/api/servers/probe')).json()) as {
        registry: string;
        version: string;
        digest: string;
      };
      // Installed by the plugin, pinned to the tarball's sha512 as its config lists it.
      expect(details).to.include({ registry: 'acme-dir', version: '1.0.0', digest: probe.integrity });
    });
  });
});

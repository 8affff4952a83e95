import { join } from 'node:path';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { expect } from 'chai';
import { PROOF_META_KEY, type ExecutionProof } from '../../../services/gateway/proofs.ts';
import type { SigilConfig } from '../../../services/config.ts';
import type { Serving } from '../../../services/serve.ts';
import { tempDir } from '../../registries/npm/support.ts';
import {
  IMAGE_PATHS,
  startRegistry,
  testEngine,
  type TestEngine,
  type TestRegistry,
} from '../../support/docker.ts';
import { fixturePath } from '../../support/paths.ts';
import type { PythonIndex } from '../../support/python-index.ts';
import { nodeEchoRepository, startEchoIndex } from '../../support/echo-servers.ts';
import { mcpClient, ProbeWorld, textOf, walletToken } from './support.ts';

/**
 * Issue 24's "done when", end to end: one MCP server of each registry kind (npm from verdaccio, PyPI
 * from a PEP 691 index, Git from a repository, an OCI image from Debian's docker-registry) in one
 * gateway's catalog, each enabled through the discovery meta-tools by the official MCP client,
 * called, and its proof accepted by POST /api/verify; first with the namespaces sandbox for host
 * programs beside the Docker one for images, then with every server in the Docker engine.
 */

const proofOf = (result: unknown) => (result as CallToolResult)._meta?.[PROOF_META_KEY] as ExecutionProof;

interface Kind {
  serverId: string;
  registry: string;
  /** The text the server's `echo` answers `message` with contains the message. */
  message: string;
}

/** The test engine's python image (holding the Python echo server), pushed to the registry under this name. */
const IMAGE_REPOSITORY = 'sigil-test/python-echo';

const KINDS: Kind[] = [
  { serverId: 'probe', registry: 'npm', message: 'hello npm' },
  { serverId: 'py-echo', registry: 'pypi', message: 'hello pypi' },
  { serverId: 'git-echo', registry: 'git', message: 'hello git' },
  { serverId: 'image-echo', registry: 'oci', message: 'hello oci' },
];

describe('gateway: a server of every registry kind, enabled, called and proved (namespaces and Docker)', function () {
  this.timeout(300_000);
  const repos = tempDir('every-kind-git');
  let engine: TestEngine;
  let images: TestRegistry;
  let index: PythonIndex;
  let world: ProbeWorld;
  let image: string;

  before(async () => {
    engine = await testEngine();
    images = await startRegistry();
    image = await images.pushAndForget(engine.docker, engine.images.python, IMAGE_REPOSITORY);
    index = await startEchoIndex();
    const repo = nodeEchoRepository(repos.path);
    world = await ProbeWorld.start({
      packages: [fixturePath('mcp', 'echo-format-package')],
      servers: [
        {
          id: 'py-echo',
          title: 'Python echo',
          registry: 'pypi',
          package: 'sigil-echo-server',
          version: '>=1,<2',
          entry: { bin: 'sigil-echo-server' },
        },
        {
          id: 'git-echo',
          title: 'Node echo from Git',
          registry: 'git',
          package: repo.fileUrl(),
          version: 'v1.0.0',
          entry: { bin: 'sigil-node-echo' },
        },
        {
          id: 'image-echo',
          title: 'Python echo as an image',
          registry: 'oci',
          package: `${images.host}/${IMAGE_REPOSITORY}`,
          // The tag pushAndForget pushed: resolved once to the digest, then pinned.
          version: 'pushed',
          entry: { bin: 'python3', args: [IMAGE_PATHS.pythonServer] },
        },
      ],
    });
  });
  after(async () => {
    await world?.stop();
    await index?.stop();
    await images?.stop();
    repos.cleanup();
  });

  /** The registry plugins of every kind, each with its own cache in the world's directory. */
  const registries = (): SigilConfig['plugins'] => [
    {
      resolve: 'registry-pypi',
      enabled: true,
      options: { index: index.url, cacheDir: join(world.dir, 'pypi') },
    },
    {
      resolve: 'registry-git',
      enabled: true,
      options: { cacheDir: join(world.dir, 'git'), npmRegistry: world.registry.url },
    },
    {
      resolve: 'registry-oci',
      enabled: true,
      options: { registry: `http://${images.host}`, cacheDir: join(world.dir, 'oci') },
    },
  ];
  const docker = (stateDir: string): SigilConfig['plugins'][number] => ({
    resolve: 'sandbox-docker',
    enabled: true,
    options: { engine: { socketPath: engine.socketPath }, images: engine.images, stateDir },
  });

  /** The labels of the live containers of a server, on the test engine. */
  const containersOf = async (serverId: string) =>
    engine.docker.listContainers({ filters: { label: [`io.sigil.label.sigil.server=${serverId}`] } });

  /**
   * Enables every kind's server through gateway_enable_server, calls its echo through the gateway's
   * namespaced tool, and checks the proof: POST /api/verify accepts it with the request and response,
   * and it carries the digest the server's details pinned (the image's manifest digest for OCI).
   */
  async function enableCallAndVerify(gateway: Serving & { url: string }, client: Client): Promise<void> {
    for (const { serverId, registry, message } of KINDS) {
      const enabled = await client.callTool({ name: 'gateway_enable_server', arguments: { serverId } });
      expect(enabled.isError, `${serverId}: ${textOf(enabled)}`).to.not.equal(true);
      const names = (await client.listTools()).tools.map((tool) => tool.name);
      expect(names, serverId).to.include(`${serverId}__echo`);
      const result = await client.callTool({ name: `${serverId}__echo`, arguments: { message } });
      expect(result.isError, `${serverId}: ${textOf(result)}`).to.not.equal(true);
      expect(textOf(result), serverId).to.include(message);

      const details = (await (await fetch(`${gateway.url}/api/servers/${serverId}`)).json()) as {
        registry: string;
        digest: string;
        tier: string;
      };
      expect(details.registry, serverId).to.equal(registry);
      const proof = proofOf(result);
      expect(proof.server, serverId).to.include({ id: serverId, digest: details.digest });
      if (registry === 'oci') expect(`${images.host}/${IMAGE_REPOSITORY}@${details.digest}`).to.equal(image);
      const { _meta: _proofCarrier, ...response } = result as CallToolResult;
      const verified = await fetch(`${gateway.url}/api/verify`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          proof,
          request: { serverId, tool: 'echo', arguments: { message } },
          response,
        }),
      });
      const body = (await verified.json()) as { valid?: boolean };
      expect(verified.status, `${serverId}: ${JSON.stringify(body)}`).to.equal(200);
      expect(body.valid, serverId).to.equal(true);
    }
  }

  it('runs host programs in the namespaces sandbox and the image in the Docker one, when both are loaded', async () => {
    const gateway = await world.gateway(
      undefined,
      { warmupAtStart: false },
      { plugins: [...registries(), docker('/tmp/sigil-every-kind-a')] },
    );
    const { token } = await walletToken(gateway.url);
    const client = await mcpClient(`${gateway.url}/mcp`, token, 'every-kind');
    try {
      await enableCallAndVerify(gateway, client);
      // The image's server is warm in a container; the host programs are in no container.
      expect(await containersOf('image-echo')).to.have.length(1);
      for (const serverId of ['probe', 'py-echo', 'git-echo'])
        expect(await containersOf(serverId), serverId).to.have.length(0);
    } finally {
      await client.close();
      await gateway.stop();
    }
    expect(await containersOf('image-echo'), 'containers left after the gateway stopped').to.have.length(0);
  });

  it('runs every server in the Docker engine when sandbox-docker replaces the namespaces sandbox', async () => {
    const gateway = await world.gateway(
      undefined,
      { warmupAtStart: false },
      { plugins: registries(), sandbox: docker('/tmp/sigil-every-kind-b') },
    );
    const { token } = await walletToken(gateway.url);
    const client = await mcpClient(`${gateway.url}/mcp`, token, 'every-kind');
    try {
      await enableCallAndVerify(gateway, client);
      for (const { serverId } of KINDS) expect(await containersOf(serverId), serverId).to.have.length(1);
    } finally {
      await client.close();
      await gateway.stop();
    }
    for (const { serverId } of KINDS) expect(await containersOf(serverId), serverId).to.have.length(0);
  });

  it('refuses the image, naming the server and the cause, when no loaded sandbox runs images', async () => {
    const gateway = await world.gateway(undefined, { warmupAtStart: false }, { plugins: registries() });
    const { token } = await walletToken(gateway.url);
    const client = await mcpClient(`${gateway.url}/mcp`, token, 'every-kind');
    try {
      const enabled = await client.callTool({
        name: 'gateway_enable_server',
        arguments: { serverId: 'image-echo' },
      });
      expect(enabled.isError).to.equal(true);
      expect(textOf(enabled)).to.match(
        /^MCP server "image-echo" failed verification: .*not images.*sandbox-docker/,
      );
      const details = (await (await fetch(`${gateway.url}/api/servers/image-echo`)).json()) as {
        tier: string | null;
        lastError: string;
      };
      expect(details.tier).to.equal(null);
      expect(details.lastError).to.match(/sandbox-linux-namespaces runs host programs only .* not images/);
    } finally {
      await client.close();
      await gateway.stop();
    }
  });
});

import { execFile } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { expect } from 'chai';
import type { Serving } from '../../../services/serve.ts';
import { TEST_DATABASES } from '../../support/kernel.ts';
import { node22 } from '../../support/node22.ts';
import { ProbeWorld, walletToken } from './support.ts';

const require = createRequire(import.meta.url);
const execFileAsync = promisify(execFile);
const inspector = join(
  dirname(require.resolve('@modelcontextprotocol/inspector/package.json')),
  'clients',
  'launcher',
  'build',
  'index.js',
);
/** Node 22.19 or later, which the inspector requires. */
let nodeForInspector: Promise<string>;

// The inspector keeps a catalog of servers it has seen: in a temporary file, not the user's home.
const catalogPath = join(mkdtempSync(join(tmpdir(), 'sigil-inspector-')), 'mcp.json');

/** Runs `mcp-inspector --cli <url> …` and returns its JSON output. */
async function inspect(
  url: string,
  args: string[],
  headers: string[] = [],
): Promise<Record<string, unknown>> {
  const { stdout } = await execFileAsync(
    await nodeForInspector,
    [inspector, '--cli', url, '--transport', 'http', ...headers.flatMap((h) => ['--header', h]), ...args],
    {
      timeout: 60_000,
      env: { ...process.env, MCP_CATALOG_PATH: catalogPath },
    },
  );
  return JSON.parse(stdout) as Record<string, unknown>;
}

const toolNames = (listed: Record<string, unknown>): string[] =>
  (listed.tools as { name: string }[]).map((tool) => tool.name);

/** An independent MCP client, the official inspector's CLI, against the gateway. */
describe('gateway with @modelcontextprotocol/inspector --cli', function () {
  this.timeout(240_000);
  let world: ProbeWorld;
  let serving: Serving & { url: string };
  before(async () => {
    nodeForInspector = node22();
    await nodeForInspector;
    world = await ProbeWorld.start();
    serving = await world.gateway(TEST_DATABASES[0]!, {});
  });
  after(async () => {
    await serving?.stop();
    await world?.stop();
  });

  it('sees only meta-tools, enables a server in its X-MCP-Session, lists and calls its tools', async () => {
    const mcp = `${serving.url}/mcp`;
    const { token } = await walletToken(serving.url);
    const auth = [`Authorization: Bearer ${token}`, 'X-MCP-Session: inspector'];
    const before = toolNames(await inspect(mcp, ['--method', 'tools/list'], auth));
    expect(before).to.include('gateway_enable_server');
    expect(before.every((name) => name.startsWith('gateway_'))).to.equal(true);

    const enabled = await inspect(
      mcp,
      ['--method', 'tools/call', '--tool-name', 'gateway_enable_server', '--tool-arg', 'serverId=probe'],
      auth,
    );
    expect(enabled.isError).to.not.equal(true);
    expect(toolNames(await inspect(mcp, ['--method', 'tools/list'], auth))).to.include('probe__echo');

    const echoed = await inspect(
      mcp,
      ['--method', 'tools/call', '--tool-name', 'probe__echo', '--tool-arg', 'message=from the inspector'],
      auth,
    );
    expect((echoed.content as { text: string }[])[0]!.text).to.equal('from the inspector');
  });

  it('calls a tool on the per-server endpoint anonymously', async () => {
    const endpoint = `${serving.url}/mcp/server/probe`;
    expect(toolNames(await inspect(endpoint, ['--method', 'tools/list']))).to.include('echo');
    const echoed = await inspect(endpoint, [
      '--method',
      'tools/call',
      '--tool-name',
      'echo',
      '--tool-arg',
      'message=anonymous',
    ]);
    expect((echoed.content as { text: string }[])[0]!.text).to.equal('anonymous');
  });
});

import { join } from 'node:path';
import { expect } from 'chai';
import type { CheckResult } from '@sigil/plugin-api/kit';
import { SIGIL_PROOF_KEY } from '../../conformance/deployment/proofs.ts';
import { REQUIREMENTS } from '../../conformance/requirements.ts';
import type { Serving } from '../../services/serve.ts';
import { tempDir } from '../registries/npm/support.ts';
import { ProbeWorld } from '../services/gateway/support.ts';
import { eventually } from '../support/eventually.ts';
import { nodeEchoRepository, startEchoIndex } from '../support/echo-servers.ts';
import { startTamperingProxy, type TamperingProxy } from '../support/oci-registry.ts';
import { fixturePath } from '../support/paths.ts';
import type { PythonIndex } from '../support/python-index.ts';
import { runRequirements } from './support.ts';

/**
 * The registry requirements against a real gateway serving MCP servers of three kinds: the probe
 * server from npm (verdaccio), the Python echo server from a PEP 691 index, and the Node echo server
 * from a Git repository; each installed by its registry plugin and run in the namespaces sandbox.
 * Straight, the requirements of those kinds pass and the others do not apply. Behind a proxy that
 * rewrites what the gateway answers (the servers' details, the proofs of tool calls, the warm-up
 * status), each lie fails the requirement about it.
 */

type Json = Record<string, unknown>;

const KINDS = ['npm', 'pypi', 'oci', 'git', 'other'];
const PIN_IDS = KINDS.map((kind) => `GW-2.registry-pin-${kind}`);
const PROOF_IDS = KINDS.map((kind) => `GW-2.proof-pin-${kind}`);
const WARMUP_ID = 'GW-4.warmup-cache-per-kind';
const ALL_IDS = [...PIN_IDS, ...PROOF_IDS, WARMUP_ID];

const smokeTest = { tool: 'echo', arguments: { message: 'warm' } };

/** Edits the JSON a path answers; undefined leaves the answer as it is. */
type Edit = (path: string, json: Json) => Json | undefined;

/** The proof a tool result carries, edited, over MCP (`/mcp/server/:id`) and REST (`…/tools/:name`). */
const editProofs =
  (serverId: string, edit: (proof: Json) => void): Edit =>
  (path, json) => {
    const overMcp = path === `/mcp/server/${serverId}`;
    if (!overMcp && !path.startsWith(`/api/servers/${serverId}/tools/`)) return undefined;
    const result = overMcp ? (json.result as Json | undefined) : json;
    const proof = (result?._meta as Json | undefined)?.[SIGIL_PROOF_KEY] as Json | undefined;
    if (proof === undefined) return undefined;
    edit(proof);
    return json;
  };

/** The server's details (`/api/servers/:id`) edited. */
const editDetails =
  (serverId: string, edit: (details: Json) => void): Edit =>
  (path, json) => {
    if (path !== `/api/servers/${serverId}`) return undefined;
    edit(json);
    return json;
  };

const serverOf = (proof: Json) => proof.server as Json;

/** One character of a hex digest changed: the same form, another pin. */
const otherHex = (digest: string): string => digest.slice(0, -1) + (digest.endsWith('0') ? '1' : '0');

describe('registry requirements against a real gateway serving npm, PyPI and Git servers', function () {
  this.timeout(240_000);
  const repos = tempDir('conformance-git');
  let index: PythonIndex;
  let world: ProbeWorld;
  let gateway: Serving & { url: string };
  let proxy: TamperingProxy;

  before(async () => {
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
          smokeTest,
        },
        {
          id: 'git-echo',
          title: 'Node echo from Git',
          registry: 'git',
          package: repo.fileUrl(),
          version: 'v1.0.0',
          entry: { bin: 'sigil-node-echo' },
          smokeTest,
        },
      ],
    });
    gateway = await world.gateway(
      undefined,
      { warmupAtStart: true },
      {
        plugins: [
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
        ],
      },
    );
    const summary = await eventually(
      'the start-up warm-up',
      async () => {
        const status = (await (await fetch(`${gateway.url}/api/warmup/status`)).json()) as {
          summary: { running: unknown; lastRun: string | null; smokePassed: number };
        };
        return status.summary.running === null && status.summary.lastRun !== null && status.summary;
      },
      120_000,
    );
    // probe, probe-locked, py-echo and git-echo: every server of every kind is verified.
    expect(summary.smokePassed, 'servers whose smoke tool passed at warm-up').to.equal(4);
    proxy = await startTamperingProxy(gateway.url);
  });
  afterEach(() => {
    proxy.rewrite = undefined;
  });
  after(async () => {
    await proxy?.stop();
    await gateway?.stop();
    await world?.stop();
    await index?.stop();
    repos.cleanup();
  });

  /** The requirements `ids` through the proxy, each of `edits` applied to what the gateway answers. */
  function check(ids: readonly string[], ...edits: Edit[]): Promise<Record<string, CheckResult>> {
    proxy.rewrite = (path, body) => {
      let json: Json;
      try {
        json = JSON.parse(body.toString('utf8')) as Json;
      } catch {
        return undefined;
      }
      const edited = edits.reduce<Json | undefined>((out, edit) => edit(path, out ?? json) ?? out, undefined);
      return edited === undefined ? undefined : { body: Buffer.from(JSON.stringify(edited)) };
    };
    return runRequirements({ runtimeUrl: proxy.url, gatewayUrl: proxy.url }, ids);
  }
  const expectFailure = (result: CheckResult | undefined, reason: RegExp) => {
    expect(result?.status, result?.reason).to.equal('fail');
    expect(result?.reason).to.match(reason);
  };
  const expectPass = (result: CheckResult | undefined) =>
    expect(result?.status, `${result?.id}: ${result?.reason}`).to.equal('pass');

  it('passes every requirement of the kinds served and finds the others not applicable, saying why', async () => {
    for (const id of ALL_IDS) expect(REQUIREMENTS.map((requirement) => requirement.id)).to.include(id);
    const results = await check(ALL_IDS);
    for (const kind of ['npm', 'pypi', 'git']) {
      expectPass(results[`GW-2.registry-pin-${kind}`]);
      expectPass(results[`GW-2.proof-pin-${kind}`]);
    }
    expectPass(results[WARMUP_ID]);
    for (const kind of ['oci', 'other']) {
      for (const id of [`GW-2.registry-pin-${kind}`, `GW-2.proof-pin-${kind}`]) {
        expect(results[id]?.status, id).to.equal('not-applicable');
        expect(results[id]?.reason, id).to.match(
          /^GET \/api\/servers lists no server of .* \(it lists kinds npm, pypi, git\)$/,
        );
      }
    }
    expect(results['GW-2.registry-pin-oci']?.reason).to.include('the container image registry (oci)');
  });

  it('fails GW-2.registry-pin-pypi for a digest without its sha256: prefix, naming the server', async () => {
    const results = await check(
      ['GW-2.registry-pin-pypi'],
      editDetails('py-echo', (details) => {
        details.digest = String(details.digest).slice('sha256:'.length);
      }),
    );
    expectFailure(
      results['GW-2.registry-pin-pypi'],
      /^py-echo \(pypi, tier tool_smoke_passed\) at GET \/api\/servers\/py-echo: digest "[0-9a-f]{64}" is not sha256:<64 hex>/,
    );
  });

  it('fails GW-2.registry-pin-npm for a range shown as the version, and for no digest', async () => {
    const results = await check(
      ['GW-2.registry-pin-npm'],
      editDetails('probe', (details) => {
        details.version = '^1.0.0';
      }),
      editDetails('probe-locked', (details) => {
        details.digest = null;
      }),
    );
    expectFailure(
      results['GW-2.registry-pin-npm'],
      /probe .*: version "\^1\.0\.0" is not an exact semver version.*; probe-locked .* shows no digest$/,
    );
  });

  it('fails GW-2.registry-pin-git for a digest without the tree', async () => {
    const results = await check(
      ['GW-2.registry-pin-git'],
      editDetails('git-echo', (details) => {
        details.digest = String(details.digest).split(';')[0];
      }),
    );
    expectFailure(
      results['GW-2.registry-pin-git'],
      /git-echo .*: digest "git:[0-9a-f]{40}" is not git:<commit id>;tree:<tree id>/,
    );
  });

  it('fails GW-2.proof-pin-git when the proofs name another tree, while the pin shown is sound', async () => {
    const results = await check(
      ['GW-2.registry-pin-git', 'GW-2.proof-pin-git'],
      editProofs('git-echo', (proof) => {
        serverOf(proof).digest = otherHex(String(serverOf(proof).digest));
      }),
    );
    expectPass(results['GW-2.registry-pin-git']);
    const reason = results['GW-2.proof-pin-git']?.reason ?? '';
    expectFailure(
      results['GW-2.proof-pin-git'],
      /^the proof of tools\/call echo at POST \/mcp\/server\/git-echo names digest "git:[0-9a-f]{40};tree:[0-9a-f]{40}" \(server\.digest\), but GET \/api\/servers\/git-echo shows "git:/,
    );
    expect(reason).to.include('the proof of POST /api/servers/git-echo/tools/echo names digest');
  });

  it('fails GW-2.proof-pin-pypi when the details show another well-formed digest than the proofs', async () => {
    const results = await check(
      ['GW-2.registry-pin-pypi', 'GW-2.proof-pin-pypi'],
      editDetails('py-echo', (details) => {
        details.digest = otherHex(String(details.digest));
      }),
    );
    expectPass(results['GW-2.registry-pin-pypi']);
    expectFailure(
      results['GW-2.proof-pin-pypi'],
      /names digest "sha256:[0-9a-f]{64}" \(server\.digest\), but/,
    );
  });

  it('fails GW-2.proof-pin-npm when the proofs name another version and registry, or none', async () => {
    const results = await check(
      ['GW-2.proof-pin-npm'],
      editProofs('probe', (proof) => {
        serverOf(proof).version = '1.0.1';
        serverOf(proof).registry = 'pypi';
      }),
    );
    expectFailure(
      results['GW-2.proof-pin-npm'],
      /names version "1\.0\.1" \(server\.version\), but GET \/api\/servers\/probe shows "1\.0\.0"; .* names registry "pypi" \(server\.registry\), but GET \/api\/servers\/probe shows "npm"/,
    );
    const without = await check(
      ['GW-2.proof-pin-npm'],
      editProofs('probe', (proof) => {
        delete serverOf(proof).version;
      }),
    );
    expectFailure(
      without['GW-2.proof-pin-npm'],
      /^the proof of tools\/call echo at POST \/mcp\/server\/probe names no version beside the server package/,
    );
  });

  it('fails only the SHOULD GW-4.warmup-cache-per-kind when a kind has no cache, or its cache lacks a pin', async () => {
    const caches =
      (edit: (caches: Json[]) => Json[]): Edit =>
      (path, json) => {
        if (path !== '/api/warmup/status') return undefined;
        json.caches = edit(json.caches as Json[]);
        return json;
      };
    const noGit = await check(
      [WARMUP_ID],
      caches((list) => list.filter((cache) => cache.registry !== 'git')),
    );
    expectFailure(noGit[WARMUP_ID], /no cache of registry kind git \(caches of npm, pypi\)$/);
    expect(noGit[WARMUP_ID]?.level).to.equal('SHOULD');
    const emptied = await check(
      [WARMUP_ID],
      caches((list) => list.map((cache) => (cache.registry === 'pypi' ? { ...cache, entries: [] } : cache))),
    );
    expectFailure(emptied[WARMUP_ID], /the pypi cache holds no entry with py-echo's pinned digest sha256:/);
  });

  it('judges kinds it serves none of when the deployment names them: an image registry and a kind of its own', async () => {
    // What the gateway would show serving py-echo from an image registry and git-echo from a
    // registry kind of a third-party plugin: details, list and proofs alike.
    const relabel = (serverId: string, kind: string): Edit[] => [
      editDetails(serverId, (details) => {
        details.registry = kind;
      }),
      (path, json) => {
        if (path !== '/api/servers') return undefined;
        for (const server of json.servers as Json[]) if (server.id === serverId) server.registry = kind;
        return json;
      },
      editProofs(serverId, (proof) => {
        serverOf(proof).registry = kind;
      }),
    ];
    const ids = [...PIN_IDS, ...PROOF_IDS];
    const results = await check(ids, ...relabel('py-echo', 'oci'), ...relabel('git-echo', 'acme-source'));
    for (const kind of ['npm', 'oci', 'other']) {
      expectPass(results[`GW-2.registry-pin-${kind}`]);
      expectPass(results[`GW-2.proof-pin-${kind}`]);
    }
    for (const kind of ['pypi', 'git'])
      expect(results[`GW-2.registry-pin-${kind}`]?.status).to.equal('not-applicable');
    const emptyDigest = await check(
      ['GW-2.registry-pin-other'],
      ...relabel('git-echo', 'acme-source'),
      editDetails('git-echo', (details) => {
        details.digest = '';
      }),
    );
    expectFailure(emptyDigest['GW-2.registry-pin-other'], /^git-echo \(acme-source, .* shows no digest$/);
  });
});

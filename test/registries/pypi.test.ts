import { existsSync, mkdirSync, readdirSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { expect } from 'chai';
import type { EntryPoint, HostLaunch } from '@sigil/plugin-api';
import manifest, { type PypiRegistry } from '../../registries/pypi/index.ts';
import { FIXTURES, openRegistry } from './pypi/support.ts';
import { builtinPlugins } from '../../services/builtin-plugins.ts';
import { DEFAULT_PLUGINS } from '../../services/config.ts';
import { rejectionOf } from '../support/rejection.ts';
import { type PythonIndex, served, startPythonIndex } from '../support/python-index.ts';
import { type BuiltWheel, buildWheel, renameMember, wheelFromProject } from '../support/python-wheels.ts';
import { tempDir } from './npm/support.ts';
import { recordingLogger } from '../support/logs.ts';

const SERVER = 'sigil-echo-server';
const FORMAT = 'sigil-echo-format';
const NO_ENTRY: EntryPoint = { args: [] };

/**
 * Starts an installed server as a sandbox would (`python3` with the launch's arguments and
 * environment, in its root, nothing of the host's environment but PATH) and talks MCP to it with the
 * official SDK client: lists its tools and calls `echo` and `add`.
 */
async function talkTo(
  launch: HostLaunch,
): Promise<{ tools: string[]; echo: string; sum: string; version?: string }> {
  expect(launch.kind).to.equal('host');
  expect(launch.runtime).to.equal('python');
  const transport = new StdioClientTransport({
    command: 'python3',
    args: [...launch.args],
    cwd: launch.cwd ?? launch.root,
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', ...launch.env },
    stderr: 'pipe',
  });
  const client = new Client({ name: 'sigil-pypi-test', version: '0.0.0' });
  await client.connect(transport);
  try {
    const { tools } = await client.listTools();
    const text = async (name: string, args: Record<string, unknown>) => {
      const result = await client.callTool({ name, arguments: args });
      return (result.content as { text?: string }[]).map((part) => part.text ?? '').join('');
    };
    return {
      tools: tools.map((tool) => tool.name),
      echo: await text('echo', { message: 'hello from sigil' }),
      sum: await text('add', { a: 2, b: 40 }),
      ...(client.getServerVersion()?.version ? { version: client.getServerVersion()?.version } : {}),
    };
  } finally {
    await client.close();
  }
}

/** Everything under the cache's entries/ and staging/. */
const cacheContents = (cacheDir: string) =>
  ['entries', 'staging'].flatMap((dir) =>
    existsSync(join(cacheDir, dir)) ? readdirSync(join(cacheDir, dir)).map((name) => `${dir}/${name}`) : [],
  );

describe('registry-pypi against a local package index', function () {
  this.timeout(60_000);
  const work = tempDir('registry-pypi');
  const cacheDir = (name: string) => join(work.path, 'caches', name);
  let index: PythonIndex;
  let htmlIndex: PythonIndex;
  let shared: PypiRegistry;
  let wheels: Record<'server' | 'format' | 'old' | 'yanked' | 'rc', BuiltWheel>;

  before(async () => {
    const server = join(FIXTURES, SERVER);
    const version = (v: string) => wheelFromProject(server, { version: v });
    wheels = {
      server: await wheelFromProject(server),
      format: await wheelFromProject(join(FIXTURES, FORMAT)),
      old: await version('0.9.0'),
      yanked: await version('1.0.1'),
      rc: await version('1.1.0rc1'),
    };
    const projects = {
      [SERVER]: [
        served(wheels.old),
        served(wheels.server),
        served(wheels.yanked, { yanked: 'broken echo' }),
        served(wheels.rc),
        // Newer, but for a Python no host has: never chosen.
        served(await version('3.0.0'), { requiresPython: '>=4' }),
      ],
      [FORMAT]: [
        served(wheels.format),
        served(await wheelFromProject(join(FIXTURES, FORMAT), { version: '2.0.0' })),
      ],
      'sigil-needs-sdist': [
        served(
          await buildWheel({
            name: 'sigil-needs-sdist',
            version: '1.0.0',
            files: { 'needs.py': '' },
            requires: ['sigil-sdist-only>=1'],
          }),
        ),
      ],
      'sigil-sdist-only': [
        { filename: 'sigil_sdist_only-1.0.0.tar.gz', bytes: Buffer.from('a source distribution') },
      ],
      'sigil-no-hash': [
        served(await buildWheel({ name: 'sigil-no-hash', version: '1.0.0', files: { 'x.py': '' } }), {
          sha256: null,
        }),
      ],
    };
    [index, htmlIndex] = await Promise.all([
      startPythonIndex({ projects }),
      startPythonIndex({ projects, formats: ['html'] }),
    ]);
    shared = await openRegistry({ index: index.url, cacheDir: cacheDir('shared') });
  });

  after(async () => {
    await Promise.all([index?.stop(), htmlIndex?.stop()]);
    work.cleanup();
  });

  it('resolves PEP 440 ranges to the newest matching release and the sha256 of its wheel', async () => {
    const pin = (wheel: BuiltWheel, version: string) => ({
      name: SERVER,
      version,
      digest: `sha256:${wheel.sha256}`,
    });
    const cases: [string, ReturnType<typeof pin>][] = [
      ['latest', pin(wheels.server, '1.0.0')], // 1.0.1 is yanked, 1.1.0rc1 a pre-release, 3.0.0 for Python 4
      ['*', pin(wheels.server, '1.0.0')],
      ['>=0.9,<2', pin(wheels.server, '1.0.0')],
      ['==1.0.*', pin(wheels.server, '1.0.0')],
      ['~=1.0', pin(wheels.server, '1.0.0')],
      ['~=0.9', pin(wheels.old, '0.9.0')], // >=0.9, ==0.*
      ['0.9.0', pin(wheels.old, '0.9.0')],
      ['<1', pin(wheels.old, '0.9.0')],
      ['==1.1.0rc1', pin(wheels.rc, '1.1.0rc1')],
      ['>=1.1.0rc1', pin(wheels.rc, '1.1.0rc1')],
    ];
    for (const [range, expected] of cases) {
      expect(await shared.resolve({ name: SERVER, range }), range).to.deep.equal(expected);
    }
    // PEP 503 names: any spelling is the same project.
    expect(await shared.resolve({ name: 'Sigil_Echo.Server', range: 'latest' })).to.deep.equal(
      pin(wheels.server, '1.0.0'),
    );
  });

  it('reads the PEP 503 HTML page of an index that does not speak PEP 691 JSON, with the same answers', async () => {
    const html = await openRegistry({ index: htmlIndex.url, cacheDir: cacheDir('html') });
    for (const range of ['latest', '<1', '>=1.1.0rc1']) {
      expect(await html.resolve({ name: SERVER, range }), range).to.deep.equal(
        await shared.resolve({ name: SERVER, range }),
      );
    }
    expect(
      (await rejectionOf(html.resolve({ name: 'sigil-sdist-only', range: 'latest' }))).details,
    ).to.include({
      reason: 'build_required',
    });
  });

  it('says not_found for an unknown project or version, and refuses what is not a name or a PEP 440 range', async () => {
    const unknown = await rejectionOf(shared.resolve({ name: 'sigil-no-such-project', range: 'latest' }));
    expect(unknown.code).to.equal('not_found');
    expect(unknown.details).to.include({ reason: 'not_found', package: 'sigil-no-such-project' });
    const noVersion = await rejectionOf(shared.resolve({ name: SERVER, range: '>=5' }));
    expect(noVersion.details).to.include({ reason: 'not_found' });
    expect(noVersion.hint).to.match(/Newest versions: 3\.0\.0, 1\.1\.0rc1, 1\.0\.1, 1\.0\.0/);
    expect((await rejectionOf(shared.resolve({ name: SERVER, range: 'not a range' }))).code).to.equal(
      'invalid_request',
    );
    expect((await rejectionOf(shared.resolve({ name: '../etc', range: 'latest' }))).code).to.equal(
      'invalid_request',
    );
  });

  it('refuses a project published only as a source distribution: builds are off (build_required)', async () => {
    const err = await rejectionOf(shared.resolve({ name: 'sigil-sdist-only', range: 'latest' }));
    expect(err.details).to.include({ reason: 'build_required', package: 'sigil-sdist-only==1.0.0' });
    expect(err.message).to.match(/only as a source distribution.*building from source is off/);
    expect(err.hint).to.match(/publish a wheel/);
  });

  it('refuses to install a wheel whose dependency has only a source distribution, naming both', async () => {
    const resolved = await shared.resolve({ name: 'sigil-needs-sdist', range: 'latest' });
    const err = await rejectionOf(shared.install(resolved, { module: 'needs', args: [] }));
    expect(err.details).to.include({
      reason: 'build_required',
      package: 'sigil-sdist-only==1.0.0',
      requiredBy: 'sigil-needs-sdist==1.0.0',
    });
    expect(err.message).to.match(
      /^sigil-needs-sdist==1\.0\.0: a dependency failed: sigil-sdist-only 1\.0\.0 is published only/,
    );
    expect((await shared.cacheStatus()).entries.map((entry) => entry.name)).to.not.include(
      'sigil-needs-sdist',
    );
  });

  it('refuses a wheel the index gives no sha256 for (invalid_metadata)', async () => {
    const err = await rejectionOf(shared.resolve({ name: 'sigil-no-hash', range: 'latest' }));
    expect(err.details).to.include({ reason: 'invalid_metadata' });
    expect(err.message).to.match(/no sha256/);
  });

  it('installs the server and its dependency from the index, and the server runs: MCP echo over stdio', async () => {
    const resolved = await shared.resolve({ name: SERVER, range: 'latest' });
    const installed = await shared.install(resolved, { bin: SERVER, args: [] });
    expect(installed).to.include({ ...resolved, hasInstallScripts: false });
    expect(installed.sizeBytes).to.be.greaterThan(wheels.server.bytes.length);
    const { launch } = installed;
    if (launch.kind !== 'host') throw new Error('expected a host launch');
    expect(launch.root.startsWith(join(cacheDir('shared'), 'entries'))).to.equal(true);
    expect(launch.args).to.deep.equal([join(launch.root, 'bin', SERVER)]);
    expect(launch.env).to.deep.equal({
      PYTHONPATH: join(launch.root, 'site'),
      PYTHONDONTWRITEBYTECODE: '1',
      PYTHONNOUSERSITE: '1',
    });
    // The dependency came from the index, in the newest version the requirement (>=1.0,<2) allows;
    // the requirement whose marker is false on this Python, and the extra nobody asked for, did not.
    const site = readdirSync(join(launch.root, 'site'));
    expect(site).to.include.members([
      'sigil_echo_server',
      'sigil_echo_format',
      'sigil_echo_format-1.2.0.dist-info',
    ]);
    expect(site.filter((name) => name.includes('never'))).to.deep.equal([]);
    // Byte-compiled at install, since the sandbox's root is read-only.
    expect(
      readdirSync(join(launch.root, 'site', 'sigil_echo_server', '__pycache__')).length,
    ).to.be.greaterThan(0);

    expect(await talkTo(launch)).to.deep.equal({
      tools: ['echo', 'add'],
      echo: 'echo: hello from sigil',
      sum: '42',
      version: '1.0.0',
    });
  });

  it('starts the only console script when no entry point is named, a module with -m, and adds the catalog args', async () => {
    const resolved = await shared.resolve({ name: SERVER, range: 'latest' });
    const byDefault = await shared.install(resolved, NO_ENTRY);
    const asModule = await shared.install(resolved, { module: 'sigil_echo_server', args: ['--verbose'] });
    if (byDefault.launch.kind !== 'host' || asModule.launch.kind !== 'host')
      throw new Error('expected host launches');
    expect(byDefault.launch.args).to.deep.equal([join(byDefault.launch.root, 'bin', SERVER)]);
    expect(asModule.launch.args).to.deep.equal(['-m', 'sigil_echo_server', '--verbose']);
    expect((await talkTo(asModule.launch)).echo).to.equal('echo: hello from sigil');
    // The same entry, installed once.
    expect(asModule.installedAt).to.equal(byDefault.installedAt);
  });

  it('says not_found for an entry point the package does not have, listing its console scripts', async () => {
    const resolved = await shared.resolve({ name: SERVER, range: 'latest' });
    for (const entryPoint of [
      { bin: 'no-such-script' },
      { module: 'no_such_module' },
      { path: '../../etc/passwd' },
    ]) {
      const err = await rejectionOf(shared.install(resolved, { ...entryPoint, args: [] }));
      expect(err.details, JSON.stringify(entryPoint)).to.include({ reason: 'not_found' });
      expect(err.hint).to.equal(`Its console scripts: ${SERVER}`);
    }
    expect(
      (await rejectionOf(shared.install(resolved, { bin: SERVER, module: 'x', args: [] }))).code,
    ).to.equal('invalid_request');
  });

  it('installs concurrent requests for one package once, and lists it in cacheStatus', async () => {
    const registry = await openRegistry({ index: index.url, cacheDir: cacheDir('status') });
    const resolved = await registry.resolve({ name: SERVER, range: '<1' });
    const before = index.requests.filter((path) => path.startsWith('/files/')).length;
    const [a, b] = await Promise.all([
      registry.install(resolved, NO_ENTRY),
      registry.install(resolved, NO_ENTRY),
    ]);
    expect(a.installedAt).to.equal(b.installedAt);
    // The server's wheel and its dependency's, each downloaded once.
    expect(index.requests.filter((path) => path.startsWith('/files/')).length - before).to.equal(2);
    const status = await registry.cacheStatus();
    expect(status.entries).to.deep.equal([
      { ...resolved, installedAt: a.installedAt, sizeBytes: a.sizeBytes, hasInstallScripts: false },
    ]);
    expect(status.bytes).to.equal(a.sizeBytes);
  });
});

describe('registry-pypi refuses what does not verify, leaving nothing behind', function () {
  this.timeout(60_000);
  const work = tempDir('registry-pypi-integrity');
  let index: PythonIndex;

  before(async () => {
    const server = join(FIXTURES, SERVER);
    const format = await wheelFromProject(join(FIXTURES, FORMAT));
    const forged = await wheelFromProject(join(FIXTURES, FORMAT), { version: '1.2.0' });
    const evil = await buildWheel({
      name: 'sigil-evil',
      version: '1.0.0',
      files: { 'xx/evil.py': 'print("escaped")\n' },
    });
    index = await startPythonIndex({
      projects: {
        // Bytes that are not those the index's hash names: a tampered file.
        'sigil-tampered': [
          served(
            await buildWheel({ name: 'sigil-tampered', version: '1.0.0', files: { 'tampered.py': '' } }),
            {
              sha256: format.sha256,
            },
          ),
        ],
        // A sound package whose dependency is tampered with.
        [SERVER]: [served(await wheelFromProject(server))],
        [FORMAT]: [{ ...served(forged), bytes: Buffer.concat([forged.bytes, Buffer.from('\n')]) }],
        'sigil-evil': [served(renameMember(evil, 'xx/evil.py', '../evil.py'))],
        'sigil-lying-record': [
          served(
            await buildWheel({
              name: 'sigil-lying-record',
              version: '1.0.0',
              files: { 'lying.py': 'print("not what RECORD says")\n' },
              recordOverrides: { 'lying.py': 'x'.repeat(43) },
            }),
          ),
        ],
      },
    });
  });

  after(async () => {
    await index?.stop();
    work.cleanup();
  });

  const attempt = async (name: string, cache: string) => {
    const registry = await openRegistry({ index: index.url, cacheDir: join(work.path, cache) });
    const resolved = await registry.resolve({ name, range: 'latest' });
    return { registry, err: await rejectionOf(registry.install(resolved, NO_ENTRY)) };
  };

  it('a file whose bytes do not match the index hash: integrity_mismatch, nothing in the cache', async () => {
    const { registry, err } = await attempt('sigil-tampered', 'tampered');
    expect(err.code).to.equal('conflict');
    expect(err.details).to.include({ reason: 'integrity_mismatch', package: 'sigil-tampered==1.0.0' });
    expect(cacheContents(join(work.path, 'tampered'))).to.deep.equal([]);
    expect((await registry.cacheStatus()).entries).to.deep.equal([]);
  });

  it('a tampered dependency fails the whole install: integrity_mismatch, nothing in the cache', async () => {
    const { err } = await attempt(SERVER, 'dependency');
    expect(err.details).to.include({
      reason: 'integrity_mismatch',
      package: `${FORMAT}==1.2.0`,
      requiredBy: `${SERVER}==1.0.0`,
    });
    expect(err.message).to.match(/^sigil-echo-server==1\.0\.0: a dependency failed: integrity mismatch/);
    expect(cacheContents(join(work.path, 'dependency'))).to.deep.equal([]);
  });

  it('a wheel with a member outside its directory, or one its RECORD does not vouch for: invalid_metadata', async () => {
    for (const name of ['sigil-evil', 'sigil-lying-record']) {
      const { err } = await attempt(name, name);
      expect(err.details, name).to.include({ reason: 'invalid_metadata' });
      expect(cacheContents(join(work.path, name)), name).to.deep.equal([]);
    }
    expect(existsSync(join(work.path, 'sigil-evil', 'evil.py'))).to.equal(false);
    expect(existsSync(join(work.path, 'evil.py'))).to.equal(false);
  });

  it('a pinned digest the index no longer lists for that version: integrity_mismatch', async () => {
    const registry = await openRegistry({ index: index.url, cacheDir: join(work.path, 'moved') });
    const resolved = await registry.resolve({ name: SERVER, range: 'latest' });
    const err = await rejectionOf(
      registry.install({ ...resolved, digest: `sha256:${'0'.repeat(64)}` }, NO_ENTRY),
    );
    expect(err.details).to.include({ reason: 'integrity_mismatch' });
    expect(
      (await rejectionOf(registry.install({ ...resolved, digest: 'sha512-abc' }, NO_ENTRY))).code,
    ).to.equal('invalid_request');
  });
});

describe('registry-pypi with its index down', function () {
  this.timeout(60_000);
  const work = tempDir('registry-pypi-offline');
  after(() => work.cleanup());

  it('installs and resolves a package it holds offline; anything else is unavailable', async () => {
    const index = await startPythonIndex({
      projects: {
        [SERVER]: [served(await wheelFromProject(join(FIXTURES, SERVER)))],
        [FORMAT]: [served(await wheelFromProject(join(FIXTURES, FORMAT)))],
        'sigil-never-installed': [
          served(await buildWheel({ name: 'sigil-never-installed', version: '1.0.0', files: {} })),
        ],
      },
    });
    const cacheDir = join(work.path, 'cache');
    const online = await openRegistry({ index: index.url, cacheDir });
    const resolved = await online.resolve({ name: SERVER, range: 'latest' });
    const first = await online.install(resolved, NO_ENTRY);
    await index.stop();

    // A restarted gateway: a new instance on the same cache, the index gone.
    const { logger, lines } = recordingLogger();
    const offline = await openRegistry({ index: index.url, cacheDir, logger });
    expect(await offline.resolve({ name: SERVER, range: 'latest' })).to.deep.equal(resolved);
    expect(lines.map((line) => line.msg)).to.include(
      'package index unreachable; resolved from the project page kept at the last contact',
    );
    const again = await offline.install(resolved, NO_ENTRY);
    expect(again).to.deep.equal(first);
    if (again.launch.kind !== 'host') throw new Error('expected a host launch');
    expect((await talkTo(again.launch)).echo).to.equal('echo: hello from sigil');

    const never = await rejectionOf(offline.resolve({ name: 'sigil-never-installed', range: 'latest' }));
    expect(never.code).to.equal('unavailable');
    expect(never.details).to.include({ reason: 'unavailable', package: 'sigil-never-installed' });
  });

  it('removes a staged install that a dead process left behind when it starts', async () => {
    const cacheDir = join(work.path, 'crashed');
    const leftover = join(
      cacheDir,
      'staging',
      `sigil-echo-server-1.0.0-${'a'.repeat(32)}#${hostname()}#999999999#abcd`,
    );
    mkdirSync(join(leftover, 'site'), { recursive: true });
    const { logger, lines } = recordingLogger();
    await openRegistry({ index: 'http://127.0.0.1:9/simple/', cacheDir, logger });
    expect(existsSync(leftover)).to.equal(false);
    expect(
      lines.find((line) => line.msg === 'removed incomplete installs left by an earlier run'),
    ).to.not.equal(undefined);
  });
});

describe('registry-pypi as a plugin', () => {
  it('is a built-in package-registry v2 that provides the pypi registry kind, not loaded by default', async () => {
    const loaded = ((await builtinPlugins['registry-pypi']?.()) as { default: typeof manifest } | undefined)
      ?.default;
    expect(loaded).to.include({ kind: 'package-registry', name: 'registry-pypi', specVersion: 'v2' });
    expect(loaded?.provides?.map((extension) => [extension.point.id, extension.key])).to.deep.equal([
      ['sigil.registry-kinds', 'pypi'],
    ]);
    expect(DEFAULT_PLUGINS).to.not.include('registry-pypi');
  });

  it('refuses options it does not know, naming them', () => {
    const result = manifest.config.safeParse({ index: 'https://pypi.org/simple/', allowBuilds: true });
    expect(result.success).to.equal(false);
    expect(JSON.stringify(result.error?.issues)).to.include('allowBuilds');
  });
});

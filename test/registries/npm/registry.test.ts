import { spawn } from 'node:child_process';
import { copyFileSync, existsSync, readdirSync, readFileSync } from 'node:fs';
import { connect, createServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'chai';
import type { ResolvedPackage } from '@sigil/plugin-api';
import { PackageIntegrityError, type NpmRegistry } from '../../../registries/npm/index.ts';
import { rejectionOf } from '../../support/rejection.ts';
import { packPackage, startVerdaccio, type Verdaccio } from '../../support/verdaccio.ts';
import { EVERYTHING, listAndCall, MEMORY, openRegistry, specOf, tempDir, writePackage } from './support.ts';

describe('registry-npm against a local registry (verdaccio)', function () {
  // The first install of each MCP server pulls its tree through verdaccio's uplink: seconds, not ms.
  this.timeout(90_000);

  const work = tempDir('registry-npm');
  const markers = join(work.path, 'markers');
  let registry: Verdaccio;
  /** One cache for the MCP servers, shared by the tests that use them so each is installed once. */
  let shared: NpmRegistry;
  const cacheDir = (name: string) => join(work.path, 'caches', name);

  before(async () => {
    const fixture = (name: string, manifest: Record<string, unknown>, files?: Record<string, string>) => ({
      dir: writePackage(join(work.path, 'fixtures', name), { version: '1.0.0', ...manifest }, files),
    });
    // Each lifecycle script would leave a file named after itself: none may ever appear.
    const scriptWrites = (phase: string) =>
      `node -e "require('fs').writeFileSync(require('path').join(${JSON.stringify(markers)}, '${phase}'), 'ran')"`;
    registry = await startVerdaccio({
      packages: [
        specOf(MEMORY),
        specOf(EVERYTHING),
        fixture('plain', { name: 'sigil-test-plain' }),
        fixture('scripted', {
          name: 'sigil-test-scripted',
          scripts: Object.fromEntries(
            ['preinstall', 'install', 'postinstall'].map((phase) => [phase, scriptWrites(phase)]),
          ),
        }),
        fixture('scripted-parent', {
          name: 'sigil-test-scripted-parent',
          dependencies: { 'sigil-test-scripted': '1.0.0' },
        }),
      ],
    });
    shared = await openRegistry({ registry: registry.url, cacheDir: cacheDir('shared') });
  });

  after(async () => {
    await registry?.stop();
    work.cleanup();
  });

  /** The registry's own packument entry for a version, read over HTTP as any npm client would. */
  async function registryIntegrity(name: string, version: string): Promise<string> {
    const packument = (await (await fetch(`${registry.url}${name.replace('/', '%2f')}`)).json()) as {
      versions: Record<string, { dist: { integrity: string } }>;
    };
    const integrity = packument.versions[version]?.dist.integrity;
    if (!integrity) throw new Error(`${name}@${version} is not in the registry`);
    return integrity;
  }

  it('resolves ranges and tags to one exact version with the registry digest', async () => {
    const expected = await registryIntegrity(MEMORY.name, MEMORY.version);
    for (const range of ['latest', '^2026.8.0', MEMORY.version, '>=2025 <2027']) {
      expect(await shared.resolve({ name: MEMORY.name, range: range })).to.deep.equal({
        ...MEMORY,
        digest: expected,
      });
    }
    // The same value npm computed when packing the tarball that was published.
    expect(registry.published.find((p) => p.name === MEMORY.name)?.integrity).to.equal(expected);
  });

  it('tries a request again when the registry resets its connection (a keep-alive socket it closed as it was reused)', async () => {
    // A TCP relay to verdaccio that cuts its first connection as soon as it is opened.
    const upstream = new URL(registry.url);
    let connections = 0;
    const relay = createServer((socket) => {
      if (++connections === 1) return socket.resetAndDestroy();
      const toRegistry = connect(Number(upstream.port), upstream.hostname);
      socket.pipe(toRegistry).pipe(socket);
      const close = () => (socket.destroy(), toRegistry.destroy());
      socket.on('error', close).on('close', close);
      toRegistry.on('error', close).on('close', close);
    });
    await new Promise<void>((resolve) => relay.listen(0, '127.0.0.1', resolve));
    try {
      const { port } = relay.address() as AddressInfo;
      // A fresh cache: no metadata to fall back on, so only a second try can answer.
      const client = await openRegistry({
        registry: `http://127.0.0.1:${port}/`,
        cacheDir: cacheDir('reset'),
      });
      const resolved = await client.resolve({ name: 'sigil-test-plain', range: '1.0.0' });
      expect(resolved).to.deep.include({ name: 'sigil-test-plain', version: '1.0.0' });
      expect(resolved.digest).to.equal(await registryIntegrity('sigil-test-plain', '1.0.0'));
      expect(connections, 'the cut connection and the one that answered').to.be.at.least(2);
    } finally {
      relay.close();
    }
  });

  it('says not_found for an unknown package or version, and refuses specs that leave the registry', async () => {
    expect(
      (await rejectionOf(shared.resolve({ name: 'sigil-test-no-such-package', range: 'latest' }))).details,
    ).to.include({
      reason: 'not_found',
    });
    expect((await rejectionOf(shared.resolve({ name: MEMORY.name, range: '^99.0.0' }))).details).to.include({
      reason: 'not_found',
    });
    for (const range of [
      'file:/etc',
      'github:owner/repo',
      'https://example.com/x.tgz',
      'git+ssh://h/r.git',
    ]) {
      expect((await rejectionOf(shared.resolve({ name: MEMORY.name, range: range }))).code).to.equal(
        'invalid_request',
      );
    }
    expect((await rejectionOf(shared.resolve({ name: '../etc', range: 'latest' }))).code).to.equal(
      'invalid_request',
    );
  });

  it('installs an MCP server and its whole tree from the registry, verified and recorded', async () => {
    const resolved = await shared.resolve({ name: MEMORY.name, range: 'latest' });
    const installed = await shared.installPackage(resolved);
    expect(installed).to.include({ ...resolved, hasInstallScripts: false });
    expect(installed.path).to.equal(join(installed.root, 'node_modules', MEMORY.name));
    expect(installed.root.startsWith(join(cacheDir('shared'), 'entries'))).to.equal(true);
    expect(installed.sizeBytes).to.be.greaterThan(100_000);
    expect(Object.keys(installed.bin)).to.deep.equal(['mcp-server-memory']);

    // The lockfile of the entry: every package came from this registry with an integrity, the
    // root with exactly the digest that was resolved.
    const lock = JSON.parse(readFileSync(join(installed.root, 'package-lock.json'), 'utf8')) as {
      packages: Record<string, { resolved?: string; integrity?: string }>;
    };
    const packages = Object.entries(lock.packages).filter(([location]) => location !== '');
    expect(packages.length).to.be.greaterThan(20);
    for (const [location, entry] of packages) {
      expect(entry.resolved, location).to.match(new RegExp(`^${registry.url}`));
      expect(entry.integrity, location).to.match(/^sha512-/);
    }
    expect(lock.packages[`node_modules/${MEMORY.name}`]?.integrity).to.equal(resolved.digest);

    const status = await shared.cacheStatus();
    expect(status.entries).to.deep.include({
      name: MEMORY.name,
      version: MEMORY.version,
      digest: resolved.digest,
      installedAt: installed.installedAt,
      sizeBytes: installed.sizeBytes,
      hasInstallScripts: false,
    });
    expect(status.entries.length).to.equal(status.entries.length);
    expect(status.bytes).to.equal(status.entries.reduce((sum, e) => sum + e.sizeBytes, 0));
  });

  it('runs the installed servers: the official MCP client lists their tools and calls one', async () => {
    const memory = await shared.installPackage(await shared.resolve({ name: MEMORY.name, range: 'latest' }));
    const everything = await shared.installPackage(
      await shared.resolve({ name: EVERYTHING.name, range: 'latest' }),
    );
    // server-memory keeps its graph in a file: point it outside the (read-only in production) cache.
    const memoryRun = await listAndCall(
      memory.bin['mcp-server-memory']!,
      'create_entities',
      { entities: [{ name: 'sigil', entityType: 'project', observations: ['installed from verdaccio'] }] },
      { MEMORY_FILE_PATH: join(work.path, 'memory.jsonl') },
    );
    expect(memoryRun.tools).to.include.members(['create_entities', 'read_graph']);
    expect(memoryRun.text).to.contain('installed from verdaccio');
    const everythingRun = await listAndCall(everything.bin['mcp-server-everything']!, 'echo', {
      message: 'hello from the cache',
    });
    expect(everythingRun.tools).to.include('echo');
    expect(everythingRun.text).to.contain('hello from the cache');
  });

  it('is idempotent: a second install returns the same entry, parallel installs make one', async () => {
    const resolved = await shared.resolve({ name: MEMORY.name, range: 'latest' });
    const first = await shared.installPackage(resolved);
    const before = await shared.cacheStatus();
    const again = await Promise.all([shared.installPackage(resolved), shared.installPackage(resolved)]);
    expect(again).to.deep.equal([first, first]);
    expect((await shared.cacheStatus()).entries).to.deep.equal(before.entries);

    const fresh = await openRegistry({ registry: registry.url, cacheDir: cacheDir('parallel') });
    const plain = await fresh.resolve({ name: 'sigil-test-plain', range: 'latest' });
    const installs = await Promise.all([
      fresh.installPackage(plain),
      fresh.installPackage(plain),
      fresh.installPackage(plain),
    ]);
    expect(new Set(installs.map((i) => i.installedAt)).size).to.equal(1);
    expect((await fresh.cacheStatus()).entries.length).to.equal(1);
    expect(readdirSync(join(cacheDir('parallel'), 'staging'))).to.deep.equal([]);
  });

  it('never runs install scripts, of the package or of a dependency, and reports them', async () => {
    const plugin = await openRegistry({ registry: registry.url, cacheDir: cacheDir('scripts') });
    for (const name of ['sigil-test-scripted', 'sigil-test-scripted-parent', 'sigil-test-plain']) {
      const installed = await plugin.installPackage(await plugin.resolve({ name: name, range: '1.0.0' }));
      expect(installed.hasInstallScripts, name).to.equal(name !== 'sigil-test-plain');
      expect(existsSync(join(installed.path, 'package.json'))).to.equal(true);
    }
    expect(existsSync(markers), 'a lifecycle script ran').to.equal(false);
  });

  it('refuses a tampered tarball with a typed error and leaves no cache entry', async () => {
    const good = await registry.publish({
      dir: writePackage(join(work.path, 'fixtures', 'tamper'), {
        name: 'sigil-test-tamper',
        version: '1.0.0',
      }),
    });
    // A forgery of the same name and version, swapped in for the published tarball in verdaccio's storage.
    const forged = await packPackage({
      dir: writePackage(
        join(work.path, 'fixtures', 'tamper-forged'),
        { name: 'sigil-test-tamper', version: '1.0.0' },
        { 'index.js': 'require("child_process").execSync("touch /tmp/pwned");\n' },
      ),
    });
    expect(forged.integrity).to.not.equal(good.integrity);
    copyFileSync(forged.tarball, registry.tarballPath('sigil-test-tamper', '1.0.0'));

    const plugin = await openRegistry({ registry: registry.url, cacheDir: cacheDir('tamper') });
    const resolved = await plugin.resolve({ name: 'sigil-test-tamper', range: '1.0.0' });
    expect(resolved.digest).to.equal(good.integrity);
    const err = await rejectionOf(plugin.installPackage(resolved));
    expect(err).to.be.instanceOf(PackageIntegrityError);
    expect(err.details).to.include({ reason: 'integrity_mismatch', expected: good.integrity });
    expect(err.message).to.contain('integrity mismatch for sigil-test-tamper@1.0.0');
    expect((await plugin.cacheStatus()).entries).to.deep.equal([]);
    expect(readdirSync(join(cacheDir('tamper'), 'entries'))).to.deep.equal([]);
    expect(readdirSync(join(cacheDir('tamper'), 'staging'))).to.deep.equal([]);
  });

  it('refuses content that differs from the digest it was resolved with', async () => {
    const plugin = await openRegistry({ registry: registry.url, cacheDir: cacheDir('stale-digest') });
    const plain = await plugin.resolve({ name: 'sigil-test-plain', range: '1.0.0' });
    const other = await plugin.resolve({ name: 'sigil-test-scripted', range: '1.0.0' });
    // What a registry that changed its metadata between resolve and install looks like.
    const mismatched: ResolvedPackage = { ...plain, digest: other.digest };
    const err = await rejectionOf(plugin.installPackage(mismatched));
    expect(err.details).to.include({ reason: 'integrity_mismatch' });
    expect((await plugin.cacheStatus()).entries.length).to.equal(0);
    expect(readdirSync(join(cacheDir('stale-digest'), 'staging'))).to.deep.equal([]);
  });

  it('leaves nothing that looks installed when the process dies mid-install', async () => {
    const dir = cacheDir('crash');
    const entry = fileURLToPath(new URL('../../../registries/npm/index.ts', import.meta.url));
    const script = `
      import manifest from ${JSON.stringify(entry)};
      const plugin = await manifest.create({
        config: manifest.config.parse({ registry: ${JSON.stringify(registry.url)}, cacheDir: ${JSON.stringify(dir)} }),
        deps: { clock: { now: () => new Date() } },
        logger: (await import('pino')).pino({ level: 'silent' }),
      });
      await plugin.installPackage(await plugin.resolve({ name: ${JSON.stringify(EVERYTHING.name)}, range: 'latest' }));`;
    const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      cwd: fileURLToPath(new URL('../../..', import.meta.url)),
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const exited = new Promise((resolve) => child.once('exit', resolve));
    // Kill it once Arborist has started writing the tree into the staging directory.
    const staging = join(dir, 'staging');
    const deadline = Date.now() + 60_000;
    const writing = () =>
      existsSync(staging) &&
      readdirSync(staging).some((d) => existsSync(join(staging, d, 'node_modules', '@modelcontextprotocol')));
    while (!writing() && child.exitCode === null && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    child.kill('SIGKILL');
    await exited;
    expect(child.signalCode, `the install ended before it could be killed: ${stderr}`).to.equal('SIGKILL');
    expect(readdirSync(staging)).to.have.length(1);
    expect(readdirSync(join(dir, 'entries'))).to.deep.equal([]);

    const restarted = await openRegistry({ registry: registry.url, cacheDir: dir });
    expect((await restarted.cacheStatus()).entries.length).to.equal(0);
    expect(readdirSync(staging), 'leftovers are cleared at start').to.deep.equal([]);
  });

  it('works offline once installed: with the registry stopped, install, resolve and the server still work', async () => {
    const resolved = await shared.resolve({ name: MEMORY.name, range: 'latest' });
    const installed = await shared.installPackage(resolved);
    await registry.stop();
    expect(await shared.installPackage(resolved)).to.deep.equal(installed);

    // A restarted gateway: a new instance on the same cache, the registry still down.
    const restarted = await openRegistry({ registry: registry.url, cacheDir: cacheDir('shared') });
    expect(await restarted.resolve({ name: MEMORY.name, range: 'latest' })).to.deep.equal(resolved);
    expect(await restarted.installPackage(resolved)).to.deep.equal(installed);
    const { tools } = await listAndCall(
      installed.bin['mcp-server-memory']!,
      'read_graph',
      {},
      {
        MEMORY_FILE_PATH: join(work.path, 'offline-memory.jsonl'),
      },
    );
    expect(tools).to.include('read_graph');
    // Something it never saw cannot be made up.
    expect(
      (await rejectionOf(restarted.resolve({ name: 'sigil-test-never-seen', range: 'latest' }))).details,
    ).to.include({
      reason: 'unavailable',
    });
  });
});

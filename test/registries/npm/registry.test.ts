import { spawn } from 'node:child_process';
import { copyFileSync, existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'chai';
import { ManualClock } from '../../../core/clock.ts';
import type { ResolvedPackage } from '@sigil/plugin-api';
import { PackageIntegrityError, type NpmRegistry } from '../../../registries/npm/index.ts';
import { rejectionOf } from '../../support/rejection.ts';
import { packPackage, startVerdaccio, type Verdaccio } from '../../support/verdaccio.ts';
import {
  EVERYTHING,
  listAndCall,
  MEMORY,
  openRegistry,
  recordingLogger,
  specOf,
  tempDir,
  writePackage,
} from './support.ts';

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
    await shared?.stop();
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
      expect(await shared.resolve(MEMORY.name, range)).to.deep.equal({ ...MEMORY, digest: expected });
    }
    // The same value npm computed when packing the tarball that was published.
    expect(registry.published.find((p) => p.name === MEMORY.name)?.integrity).to.equal(expected);
  });

  it('says not_found for an unknown package or version, and refuses specs that leave the registry', async () => {
    expect((await rejectionOf(shared.resolve('sigil-test-no-such-package', 'latest'))).details).to.include({
      reason: 'not_found',
    });
    expect((await rejectionOf(shared.resolve(MEMORY.name, '^99.0.0'))).details).to.include({
      reason: 'not_found',
    });
    for (const range of [
      'file:/etc',
      'github:owner/repo',
      'https://example.com/x.tgz',
      'git+ssh://h/r.git',
    ]) {
      expect((await rejectionOf(shared.resolve(MEMORY.name, range))).code).to.equal('invalid_request');
    }
    expect((await rejectionOf(shared.resolve('../etc', 'latest'))).code).to.equal('invalid_request');
  });

  it('installs an MCP server and its whole tree from the registry, verified and recorded', async () => {
    const resolved = await shared.resolve(MEMORY.name, 'latest');
    const installed = await shared.install(resolved);
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
    expect(status.summary.packages).to.equal(status.entries.length);
    expect(status.summary.bytes).to.equal(status.entries.reduce((sum, e) => sum + e.sizeBytes, 0));
  });

  it('runs the installed servers: the official MCP client lists their tools and calls one', async () => {
    const memory = await shared.install(await shared.resolve(MEMORY.name, 'latest'));
    const everything = await shared.install(await shared.resolve(EVERYTHING.name, 'latest'));
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
    const resolved = await shared.resolve(MEMORY.name, 'latest');
    const first = await shared.install(resolved);
    const before = await shared.cacheStatus();
    const again = await Promise.all([shared.install(resolved), shared.install(resolved)]);
    expect(again).to.deep.equal([first, first]);
    expect((await shared.cacheStatus()).entries).to.deep.equal(before.entries);

    const fresh = await openRegistry({ registry: registry.url, cacheDir: cacheDir('parallel') });
    try {
      const plain = await fresh.resolve('sigil-test-plain', 'latest');
      const installs = await Promise.all([fresh.install(plain), fresh.install(plain), fresh.install(plain)]);
      expect(new Set(installs.map((i) => i.installedAt)).size).to.equal(1);
      expect((await fresh.cacheStatus()).summary.packages).to.equal(1);
      expect(readdirSync(join(cacheDir('parallel'), 'staging'))).to.deep.equal([]);
    } finally {
      await fresh.stop();
    }
  });

  it('never runs install scripts, of the package or of a dependency, and reports them', async () => {
    const plugin = await openRegistry({ registry: registry.url, cacheDir: cacheDir('scripts') });
    try {
      for (const name of ['sigil-test-scripted', 'sigil-test-scripted-parent', 'sigil-test-plain']) {
        const installed = await plugin.install(await plugin.resolve(name, '1.0.0'));
        expect(installed.hasInstallScripts, name).to.equal(name !== 'sigil-test-plain');
        expect(existsSync(join(installed.path, 'package.json'))).to.equal(true);
      }
      expect(existsSync(markers), 'a lifecycle script ran').to.equal(false);
    } finally {
      await plugin.stop();
    }
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
    try {
      const resolved = await plugin.resolve('sigil-test-tamper', '1.0.0');
      expect(resolved.digest).to.equal(good.integrity);
      const err = await rejectionOf(plugin.install(resolved));
      expect(err).to.be.instanceOf(PackageIntegrityError);
      expect(err.details).to.include({ reason: 'integrity_mismatch', expected: good.integrity });
      expect(err.message).to.contain('integrity mismatch for sigil-test-tamper@1.0.0');
      expect((await plugin.cacheStatus()).entries).to.deep.equal([]);
      expect(readdirSync(join(cacheDir('tamper'), 'entries'))).to.deep.equal([]);
      expect(readdirSync(join(cacheDir('tamper'), 'staging'))).to.deep.equal([]);
    } finally {
      await plugin.stop();
    }
  });

  it('refuses content that differs from the digest it was resolved with', async () => {
    const plugin = await openRegistry({ registry: registry.url, cacheDir: cacheDir('stale-digest') });
    try {
      const plain = await plugin.resolve('sigil-test-plain', '1.0.0');
      const other = await plugin.resolve('sigil-test-scripted', '1.0.0');
      // What a registry that changed its metadata between resolve and install looks like.
      const mismatched: ResolvedPackage = { ...plain, digest: other.digest };
      const err = await rejectionOf(plugin.install(mismatched));
      expect(err.details).to.include({ reason: 'integrity_mismatch' });
      expect((await plugin.cacheStatus()).summary.packages).to.equal(0);
      expect(readdirSync(join(cacheDir('stale-digest'), 'staging'))).to.deep.equal([]);
    } finally {
      await plugin.stop();
    }
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
      await plugin.install(await plugin.resolve(${JSON.stringify(EVERYTHING.name)}, 'latest'));`;
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
    try {
      expect((await restarted.cacheStatus()).summary.packages).to.equal(0);
      expect(readdirSync(staging), 'leftovers are cleared at start').to.deep.equal([]);
    } finally {
      await restarted.stop();
    }
  });

  it('refreshes the warm set on demand, with progress in the log and in the status', async () => {
    const { logger, lines } = recordingLogger();
    const plugin = await openRegistry({
      registry: registry.url,
      cacheDir: cacheDir('refresh'),
      logger,
      warm: [{ name: 'sigil-test-plain', range: 'latest' }],
    });
    try {
      plugin.keepWarm([
        { name: 'sigil-test-scripted-parent', range: '^1.0.0' },
        { name: 'sigil-test-no-such-package', range: 'latest' },
        { name: 'sigil-test-plain', range: 'latest' },
      ]);
      const running = plugin.refresh();
      expect(plugin.refresh(), 'a second call joins the running refresh').to.equal(running);
      expect((await plugin.cacheStatus()).summary.refreshing).to.deep.include({ total: 3 });
      const report = await running;
      expect(report.trigger).to.equal('demand');
      expect(report.results.map((r) => [r.name, r.status])).to.deep.equal([
        ['sigil-test-plain', 'installed'],
        ['sigil-test-scripted-parent', 'installed'],
        ['sigil-test-no-such-package', 'failed'],
      ]);
      expect(lines.map((l) => l.progress).filter(Boolean)).to.deep.equal(['1/3', '2/3', '3/3']);
      expect(lines.map((l) => l.msg)).to.include.members([
        'package cache refresh started',
        'package cache refresh finished',
      ]);

      const again = await plugin.refresh();
      expect(again.results.map((r) => r.status)).to.deep.equal(['cached', 'cached', 'failed']);
      const { summary } = await plugin.cacheStatus();
      expect(summary).to.include({ packages: 2, lastRefresh: again.finishedAt, failed: 1, refreshing: null });
    } finally {
      await plugin.stop();
    }
  });

  it('refreshes daily at 03:00 UTC by the injected clock, picking up new versions', async () => {
    const clock = new ManualClock(new Date('2026-03-01T02:58:30Z'));
    const daily = (version: string) =>
      registry.publish({
        dir: writePackage(join(work.path, 'fixtures', `daily-${version}`), {
          name: 'sigil-test-daily',
          version,
        }),
      });
    await daily('1.0.0');
    const plugin = await openRegistry({
      registry: registry.url,
      cacheDir: cacheDir('daily'),
      clock,
      warm: [{ name: 'sigil-test-daily', range: '^1.0.0' }],
    });
    try {
      expect((await plugin.cacheStatus()).summary).to.include({
        nextRefresh: '2026-03-01T03:00:00.000Z',
        lastRefresh: null,
        packages: 0,
      });
      expect(await plugin.schedule!.runDue(), 'not yet 03:00').to.equal(false);
      clock.advance(90_000);
      expect(await plugin.schedule!.runDue()).to.equal(true);
      let status = await plugin.cacheStatus();
      expect(status.entries.map((e) => e.version)).to.deep.equal(['1.0.0']);
      expect(status.summary).to.include({
        lastRefresh: '2026-03-01T03:00:00.000Z',
        nextRefresh: '2026-03-02T03:00:00.000Z',
      });
      expect(await plugin.schedule!.runDue(), 'once a day').to.equal(false);

      await daily('1.0.1');
      clock.set(new Date('2026-03-01T23:59:59Z'));
      expect(await plugin.schedule!.runDue()).to.equal(false);
      clock.set(new Date('2026-03-02T03:00:00Z'));
      expect(await plugin.schedule!.runDue()).to.equal(true);
      status = await plugin.cacheStatus();
      expect(status.entries.map((e) => e.version)).to.deep.equal(['1.0.0', '1.0.1']);
      expect(status.summary.nextRefresh).to.equal('2026-03-03T03:00:00.000Z');
    } finally {
      await plugin.stop();
    }
  });

  // Last: it stops the registry for good.
  it('works offline once installed: with the registry stopped, install, resolve and the server still work', async () => {
    const resolved = await shared.resolve(MEMORY.name, 'latest');
    const installed = await shared.install(resolved);
    await registry.stop();
    expect(await shared.install(resolved)).to.deep.equal(installed);

    // A restarted gateway: a new instance on the same cache, the registry still down.
    const restarted = await openRegistry({ registry: registry.url, cacheDir: cacheDir('shared') });
    try {
      expect(await restarted.resolve(MEMORY.name, 'latest')).to.deep.equal(resolved);
      expect(await restarted.install(resolved)).to.deep.equal(installed);
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
      expect((await rejectionOf(restarted.resolve('sigil-test-never-seen', 'latest'))).details).to.include({
        reason: 'unavailable',
      });
    } finally {
      await restarted.stop();
    }
  });
});

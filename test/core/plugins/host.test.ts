import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { expect } from 'chai';
import { extensionPoints, type CanvasNodeV2 } from '@sigil/plugin-api';
import { canvasTestContext } from '@sigil/plugin-api/kit';
import { systemClock } from '../../../core/clock.ts';
import { pluginEntrySchema, type PluginEntry } from '../../../core/config/schema.ts';
import { openDatabase, type Database } from '../../../core/db/database.ts';
import { PluginHost, PluginLoadError, type PluginProblem } from '../../../core/plugins/host.ts';
import { builtinPlugins } from '../../../services/builtin-plugins.ts';
import { quietLogger, testCoreServices } from '../../support/kernel.ts';

const fixtures = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'fixtures', 'host');
const repoRoot = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
// Imported by file URL, as the host imports the fixtures: tsx gives a static import its own module instance.
const { lifecycleEvents } = (await import(pathToFileURL(join(fixtures, 'recorder.ts')).href)) as {
  lifecycleEvents: string[];
};
const entry = (resolve: string, extra: Partial<PluginEntry> = {}): PluginEntry =>
  pluginEntrySchema.parse({ resolve, ...extra });

describe('plugin host', () => {
  let db: Database;
  const newHost = (baseDir = fixtures) =>
    new PluginHost({
      builtins: builtinPlugins,
      core: testCoreServices(db),
      logger: quietLogger(),
      baseDir,
    });

  /** The problems the host reports for these entries (it must refuse them). */
  async function loadProblems(entries: PluginEntry[]): Promise<readonly PluginProblem[]> {
    try {
      await newHost().load(entries);
    } catch (err) {
      expect(err).to.be.instanceOf(PluginLoadError);
      return (err as PluginLoadError).problems;
    }
    throw new Error('expected the host to refuse these plugins');
  }
  /** The one problem the host reports for these entries. */
  async function loadError(entries: PluginEntry[]): Promise<PluginProblem> {
    const problems = await loadProblems(entries);
    expect(problems).to.have.length(1);
    return problems[0] as PluginProblem;
  }

  before(async () => {
    db = await openDatabase({ url: ':memory:' });
  });
  after(() => db.destroy());
  beforeEach(() => {
    lifecycleEvents.length = 0;
  });

  it('loads a built-in plugin by name and lists kind, name, specVersion and state', async () => {
    const host = newHost();
    await host.load([entry('tee-none')]);
    expect(host.list()).to.deep.equal([
      {
        name: 'tee-none',
        kind: 'tee-backend',
        specVersion: 'v2',
        source: 'builtin:tee-none',
        state: 'loaded',
      },
    ]);
    await host.start();
    expect(host.list()[0]?.state).to.equal('started');
    expect((await host.one('tee-backend').status()).teeEnabled).to.equal(false);
    await host.stop();
    expect(host.list()[0]?.state).to.equal('stopped');
  });

  it('starts plugins in dependency order and stops them in reverse', async () => {
    const host = newHost();
    await host.load([entry('./alpha.ts'), entry('./beta.ts')]);
    expect(host.list().map((p) => p.name)).to.deep.equal(['beta', 'alpha']);
    await host.start();
    await host.stop();
    expect(lifecycleEvents).to.deep.equal(['start:beta', 'start:alpha', 'stop:alpha', 'stop:beta']);
  });

  it('hands a plugin exactly the dependencies it declared, resolving a kind to its one instance', async () => {
    const host = newHost();
    await host.load([entry('./needs-kind.ts'), entry('tee-none')]);
    const instances = host.all('tee-backend') as unknown as {
      platform: string;
      seenDependencies?: string[];
    }[];
    const needsKind = instances.find((p) => p.platform === 'needs-kind');
    expect(needsKind?.seenDependencies).to.deep.equal(['tee']);
  });

  it('loads a plugin from an npm package name resolved from the config directory', async () => {
    const base = mkdtempSync(join(repoRoot, 'test', '.tmp-'));
    try {
      const pkg = join(base, 'node_modules', 'acme-sigil-tee');
      mkdirSync(pkg, { recursive: true });
      writeFileSync(
        join(pkg, 'package.json'),
        JSON.stringify({ name: 'acme-sigil-tee', type: 'module', main: 'index.js' }),
      );
      writeFileSync(
        join(pkg, 'index.js'),
        `import { z } from 'zod';
export default { kind: 'tee-backend', name: 'acme-tee', specVersion: 'v1', config: z.object({ region: z.string() }),
  create: ({ config }) => ({ specVersion: 'v1', platform: 'acme-' + config.region,
    status: async () => ({ teeEnabled: false, platform: 'acme', keySource: 'config' }), attest: async () => undefined }) };`,
      );
      const host = newHost(base);
      await host.load([entry('acme-sigil-tee', { options: { region: 'eu' } })]);
      expect(host.list()[0]).to.include({ name: 'acme-tee', source: 'acme-sigil-tee' });
      expect(host.one('tee-backend').platform).to.equal('acme-eu');
    } finally {
      rmSync(base, { recursive: true, force: true });
    }
  });

  it('refuses an unknown kind, naming the plugin and config path', async () => {
    const err = await loadError([entry('tee-none'), entry('./unknown-kind.ts')]);
    expect(err.plugin).to.equal('unknown-kind');
    expect(err.configPath).to.equal('plugins.1');
    expect(err.reason).to.match(/unknown kind "quantum-oracle"/);
  });

  it('refuses a specVersion the core does not support', async () => {
    const err = await loadError([entry('./future-version.ts')]);
    expect(err.reason).to.match(/specVersion "v9".*supported: v1/);
    // Ruled out, it is no plugin another can depend on.
    const problems = await loadProblems([entry('./needs-kind.ts'), entry('./future-version.ts')]);
    expect(problems.map((p) => [p.plugin, p.reason.split(' (')[0]])).to.deep.equal([
      ['future-version', 'specVersion "v9" of kind tee-backend is not supported by this core'],
      ['needs-kind', 'dependency "tee": no tee-backend plugin is loaded'],
    ]);
  });

  it('refuses a duplicate name and accepts the same plugin twice under distinct ids', async () => {
    const err = await loadError([entry('tee-none'), entry('tee-none')]);
    expect(err.configPath).to.equal('plugins.1.id');
    expect(err.reason).to.match(/duplicate name/);
    const host = newHost();
    await host.load([entry('tee-none'), entry('tee-none', { id: 'tee-second' })]);
    expect(host.list().map((p) => p.name)).to.deep.equal(['tee-none', 'tee-second']);
  });

  it('refuses a missing dependency', async () => {
    const err = await loadError([entry('./needs-missing.ts')]);
    expect(err.plugin).to.equal('needs-missing');
    expect(err.reason).to.equal('dependency "rail": no payment-rail plugin is loaded');
  });

  it('refuses a dependency cycle', async () => {
    const problems = await loadProblems([entry('./cycle-a.ts'), entry('./cycle-b.ts')]);
    expect(problems.map((p) => [p.plugin, p.reason])).to.deep.equal([
      ['cycle-a', 'dependency cycle among: cycle-a -> cycle-b'],
      ['cycle-b', 'dependency cycle among: cycle-a -> cycle-b'],
    ]);
  });

  it('refuses invalid plugin options, naming the option path', async () => {
    const err = await loadError([entry('./beta.ts', { options: { level: 'high' } })]);
    expect(err.configPath).to.equal('plugins.0.options.level');
    expect(err.reason).to.match(/invalid config/);
    const unknownKey = await loadError([entry('./beta.ts', { options: { colour: 'red' } })]);
    expect(unknownKey.reason).to.match(/colour/);
  });

  it('refuses a module that cannot be loaded, listing the built-in names', async () => {
    const err = await loadError([entry('no-such-sigil-plugin')]);
    expect(err.configPath).to.equal('plugins.0.resolve');
    expect(err.reason).to.match(/cannot load "no-such-sigil-plugin".*tee-none/);
  });

  it('reports a plugin whose start fails, having stopped the ones started before it', async () => {
    const host = newHost();
    await host.load([entry('./beta.ts'), entry('./failing-start.ts')]);
    const err = await host.start().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).to.be.instanceOf(PluginLoadError);
    expect((err as PluginLoadError).problems[0]?.reason).to.match(
      /start failed: device \/dev\/sev-guest not found/,
    );
    expect(lifecycleEvents).to.deep.equal(['start:beta', 'stop:beta']);
    await host.stop(); // a second stop stops nothing twice
    expect(lifecycleEvents).to.deep.equal(['start:beta', 'stop:beta']);
  });

  it('reports every problem of every plugin in one error, each with its plugin and config path', async () => {
    let refused: unknown;
    await newHost()
      .load([
        entry('./unknown-kind.ts'),
        entry('./beta.ts', { options: { level: 'high', colour: 'red' } }),
        entry('./needs-missing.ts'),
        entry('tee-none', { id: 'clock' }),
        entry('no-such-sigil-plugin'),
      ])
      .catch((err: unknown) => (refused = err));
    expect(refused).to.be.instanceOf(PluginLoadError);
    const { problems, message, code } = refused as PluginLoadError;
    expect(code).to.equal('plugin_invalid');
    expect(problems.map((p) => [p.plugin, p.configPath])).to.deep.equal([
      ['unknown-kind', 'plugins.0'],
      ['beta', 'plugins.1.options.level'],
      ['beta', 'plugins.1.options'],
      ['clock', 'plugins.3.id'],
      ['no-such-sigil-plugin', 'plugins.4.resolve'],
      ['needs-missing', 'plugins.2'],
    ]);
    expect(problems[3]?.reason).to.match(/name of a core service/);
    for (const problem of problems)
      expect(message).to.include(`plugin "${problem.plugin}" (${problem.configPath})`);
    expect(message.split('\n')[0]).to.equal('6 plugin problems:');
  });

  it('never lets a plugin take the place of a core service', async () => {
    // Named like a core service by its config id: refused, and the core's clock stays what plugins get.
    const problems = await loadProblems([entry('./alpha.ts'), entry('./beta.ts', { id: 'clock' })]);
    expect(problems.map((p) => p.reason)).to.include.members([
      '"clock" is the name of a core service (db, logger, clock, secrets, fetch, leases); give the plugin another "id"',
    ]);
    const host = newHost();
    await host.load([entry('./alpha.ts'), entry('./beta.ts')]);
    const alpha = host.all('tee-backend').find((p) => p.platform === 'alpha') as unknown as {
      seenDependencies: string[];
      received: Record<string, unknown>;
    };
    expect(alpha.seenDependencies).to.deep.equal(['beta', 'clock']);
    expect(alpha.received.clock).to.equal(systemClock);
    expect(alpha.received.beta).to.equal(host.all('tee-backend').find((p) => p.platform === 'beta'));
  });

  it('refuses a dependency on a named plugin of another kind, and an ambiguous one by kind', async () => {
    const wrongKind = await loadError([entry('./named-rail-dependency.ts'), entry('tee-none')]);
    expect(wrongKind.reason).to.equal(
      'dependency "rail": "tee-none" is a tee-backend plugin, not a payment-rail',
    );
    const ambiguous = await loadError([
      entry('./needs-kind.ts'),
      entry('tee-none'),
      entry('tee-none', { id: 'tee-second' }),
    ]);
    expect(ambiguous.reason).to.match(
      /^dependency "tee": 2 tee-backend plugins are loaded \(tee-none, tee-second\); name one in pluginOfKind/,
    );
  });

  it('refuses dependencies that are not references, explaining the shape it wants', async () => {
    const problems = await loadProblems([entry('./list-dependencies.ts'), entry('./bad-reference.ts')]);
    expect(problems.map((p) => [p.plugin, p.reason])).to.deep.equal([
      [
        'list-dependencies',
        'manifest.dependencies must be an object of references by name (coreServices.clock, pluginOfKind(...)), not a list',
      ],
      [
        'bad-reference',
        'manifest.dependencies.clock names no core service (db, logger, clock, secrets, fetch, leases)',
      ],
    ]);
  });

  it('skips disabled entries', async () => {
    const host = newHost();
    await host.load([entry('tee-none'), entry('./unknown-kind.ts', { enabled: false })]);
    expect(host.list()).to.have.length(1);
  });

  describe('extension points', () => {
    it('collects the plugins that provide registry kinds, by kind', async () => {
      const host = newHost();
      await host.load([entry('registry-npm'), entry('./registry-mirror.ts')]);
      const registries = host.extensions(extensionPoints.registryKinds);
      const [npm, mirror] = host.all('package-registry');
      expect([...registries]).to.deep.equal([
        ['npm', npm],
        ['oci', mirror],
        ['git', mirror],
      ]);
      expect(registries.get('pypi')).to.equal(undefined);
    });

    it('refuses two registries for npm, naming both', async () => {
      const err = await loadError([entry('registry-npm'), entry('registry-npm', { id: 'npm-mirror' })]);
      expect(err).to.deep.equal({
        plugin: 'npm-mirror',
        configPath: 'plugins.1',
        reason:
          'registry kind "npm" (extension point sigil.registry-kinds) is provided by both "registry-npm" (plugins.0) and "npm-mirror" (plugins.1); enable only one of them',
      });
    });

    it('collects canvas node kinds, and refuses a node kind provided twice', async () => {
      const host = newHost();
      await host.load([entry('./canvas-echo.ts')]);
      // A v1 node, adapted to v2: its whole result on the `output` port.
      const echo = host.extensions(extensionPoints.canvasNodeKinds).get('echo') as CanvasNodeV2;
      expect(echo.effect).to.equal('reads');
      const { context, dispose } = await canvasTestContext({ params: { said: 'hi' } });
      try {
        expect(await echo.run(context)).to.deep.equal({ output: { said: 'hi' } });
      } finally {
        await dispose();
      }
      const twice = await loadError([entry('./canvas-echo.ts'), entry('./canvas-echo.ts', { id: 'echo-2' })]);
      expect(twice.reason).to.match(
        /^node kind "echo" \(extension point sigil.canvas-node-kinds\) is provided by both "canvas-echo" \(plugins.0\) and "echo-2" \(plugins.1\)/,
      );
    });

    it('refuses a plugin that provides no key of its kind’s point, or a point of another kind', async () => {
      const problems = await loadProblems([
        entry('./canvas-unprovided.ts'),
        entry('./tee-claims-registry.ts'),
      ]);
      expect(problems.map((p) => [p.plugin, p.configPath, p.reason])).to.deep.equal([
        [
          'canvas-unprovided',
          'plugins.0.resolve',
          "a canvas-node plugin provides at least one node kind: add provides: [provide(extensionPoints.canvasNodeKinds, '<node kind>')] to its manifest",
        ],
        [
          'tee-claims-registry',
          'plugins.1.resolve',
          'manifest.provides.0: sigil.registry-kinds is provided by package-registry plugins, not tee-backend ones',
        ],
      ]);
    });
  });
});

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import type {
  PackageRegistryV2,
  ResolvedPackage,
  SandboxProcess,
  SandboxRuntimeV2,
  TeeBackendV2,
} from '@sigil/plugin-api';
import { rejectionOf } from '../../support/rejection.ts';
import { pluginEntrySchema } from '../../../core/config/schema.ts';
import { openDatabase, type Database } from '../../../core/db/database.ts';
import { PluginHost } from '../../../core/plugins/host.ts';
import { builtinPlugins } from '../../../services/builtin-plugins.ts';
import { quietLogger, testCoreServices } from '../../support/kernel.ts';
import { fixturePath } from '../../support/paths.ts';
import { packPackage } from '../../fixtures/out-of-tree/acme-registry/test/packages.ts';

/** A plugin host on an in-memory database, the fixtures' folder its base, with one plugin loaded and started. */
async function startedHost(entry: Record<string, unknown>): Promise<{ db: Database; host: PluginHost }> {
  const db = await openDatabase({ url: ':memory:' });
  const host = new PluginHost({
    builtins: builtinPlugins,
    core: testCoreServices(db),
    logger: quietLogger(),
    baseDir: fixturePath('host'),
  });
  await host.load([pluginEntrySchema.parse(entry)]);
  await host.start();
  return { db, host };
}

/** What a process printed on stdout, once it has ended. */
async function outputOf(child: SandboxProcess): Promise<string> {
  let out = '';
  child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
  await child.exited;
  return out;
}

describe('plugin host: a v1 sandbox-runtime adapted to v2', () => {
  let db: Database;
  let host: PluginHost;
  let sandbox: SandboxRuntimeV2;

  before(async () => {
    ({ db, host } = await startedHost({ resolve: './plain-sandbox-v1.ts' }));
    sandbox = host.one('sandbox-runtime');
  });
  after(async () => {
    await host?.stop();
    await db?.destroy();
  });

  it('is handed out as v2 while the host lists the plugin as v1', () => {
    expect(sandbox.specVersion).to.equal('v2');
    expect(host.list()[0]).to.include({ name: 'plain-sandbox-v1', specVersion: 'v1' });
  });

  it("runs a Node launch with the host's node, the launch's environment under the caller's", async () => {
    const child = await sandbox.spawn({
      launch: {
        kind: 'host',
        runtime: 'node',
        root: fixturePath('host'),
        args: ['-e', 'console.log(process.env.FROM_LAUNCH, process.env.SHARED, process.cwd())'],
        env: { FROM_LAUNCH: 'launch', SHARED: 'launch' },
      },
      env: { SHARED: 'caller' },
      networkAllowList: [],
    });
    expect(await outputOf(child)).to.equal(`launch caller ${fixturePath('host')}\n`);
  });

  it('runs a binary launch as its command, in its working directory', async () => {
    const child = await sandbox.spawn({
      launch: {
        kind: 'host',
        runtime: 'binary',
        root: '/usr',
        command: '/bin/pwd',
        args: [],
        cwd: '/usr/bin',
      },
      env: {},
      networkAllowList: [],
    });
    expect(await outputOf(child)).to.equal('/usr/bin\n');
  });

  it('refuses what v1 cannot run (an image, a Python program) with unavailable, starting nothing', async () => {
    const image = 'registry.example/mcp@sha256:' + 'a'.repeat(64);
    for (const launch of [
      { kind: 'image', image, args: [] } as const,
      { kind: 'host', runtime: 'python', root: '/usr', args: ['-c', 'print(1)'] } as const,
    ]) {
      const refusal = await sandbox.spawn({ launch, env: {}, networkAllowList: [] }).then(
        () => undefined,
        (err: { code: string; details: { reason: string } }) => err,
      );
      expect(refusal?.code).to.equal('unavailable');
      expect(refusal?.details.reason).to.equal('runtime_unsupported');
    }
  });

  it('reports that a v1 plugin says nothing of what it enforces', async () => {
    const status = await sandbox.status();
    expect(status.runs).to.deep.equal({ host: ['node', 'binary'], image: false });
    expect(status.syscallFilter).to.deep.include({ enforced: false });
  });
});

describe('plugin host: a v1 package-registry adapted to v2', () => {
  const work = mkdtempSync(join(tmpdir(), 'sigil-adapter-'));
  let db: Database;
  let host: PluginHost;
  let registry: PackageRegistryV2;
  let resolved: ResolvedPackage;

  before(async () => {
    const listed = packPackage(work, {
      name: 'acme-tools',
      version: '1.2.0',
      bin: { 'acme-a': 'index.js', 'acme-b': 'index.js' },
    });
    ({ db, host } = await startedHost({
      resolve: fixturePath('out-of-tree', 'acme-registry', 'src', 'index.ts'),
      options: { cacheDir: join(work, 'cache'), packages: [listed] },
    }));
    registry = host.one('package-registry');
    resolved = await registry.resolve({ name: 'acme-tools', range: '^1.0.0' });
  });
  after(async () => {
    await host?.stop();
    await db?.destroy();
    rmSync(work, { recursive: true, force: true });
  });

  it('resolves a spec and answers a Node launch of the named bin or file, with the catalog arguments', async () => {
    expect(registry.specVersion).to.equal('v2');
    expect(resolved).to.include({ name: 'acme-tools', version: '1.2.0' });
    const byBin = await registry.install(resolved, { bin: 'acme-b', args: ['--stdio'] });
    const launch = byBin.launch;
    if (launch.kind !== 'host') throw new Error(`a ${launch.kind} launch`);
    expect(launch.runtime).to.equal('node');
    const { root, args } = launch;
    expect(args[0]).to.match(/index\.js$/);
    expect(args[0]?.startsWith(root)).to.equal(true);
    expect(args.slice(1)).to.deep.equal(['--stdio']);
    const byPath = await registry.install(resolved, { path: 'index.js', args: [] });
    expect(byPath.launch.args).to.deep.equal([args[0]]);
    expect(byBin).to.deep.include({ digest: resolved.digest, hasInstallScripts: false });
  });

  it('refuses an entry point the package lacks with not_found, naming what it has', async () => {
    for (const entryPoint of [{ bin: 'acme-c', args: [] }, { args: [] }, { module: 'acme', args: [] }]) {
      const refusal = await registry.install(resolved, entryPoint).then(
        () => undefined,
        (err: { code: string; hint: string }) => err,
      );
      expect(refusal?.code, JSON.stringify(entryPoint)).to.equal('not_found');
      expect(refusal?.hint).to.equal('It provides: acme-a, acme-b');
    }
  });

  it('reports its cache as entries and bytes', async () => {
    const contents = await registry.cacheStatus();
    expect(contents.entries.map((entry) => entry.name)).to.deep.equal(['acme-tools']);
    expect(contents.bytes).to.be.greaterThan(0);
  });
});

describe('plugin host: a v1 tee-backend adapted to v2', () => {
  let db: Database;
  let host: PluginHost;
  let tee: TeeBackendV2;

  before(async () => {
    ({ db, host } = await startedHost({ resolve: './plain-tee-v1.ts' }));
    tee = host.one('tee-backend');
  });
  after(async () => {
    await host?.stop();
    await db?.destroy();
  });

  it('attests and hands out keys as before, as v2', async () => {
    expect(host.list()[0]).to.include({ name: 'plain-tee-v1', specVersion: 'v1' });
    expect(tee.specVersion).to.equal('v2');
    const evidence = await tee.attest(new Uint8Array(64).fill(1));
    expect(evidence).to.include({ platform: 'plain' });
    expect((await tee.signingKey('proof')).key).to.deep.equal(new Uint8Array(32).fill(9));
  });

  it('verifies nothing: its own evidence fails one check naming v1, another platform is invalid_request', async () => {
    const evidence = await tee.attest(new Uint8Array(64).fill(1));
    if (evidence === undefined) throw new Error('the fixture attests');
    const result = await tee.verify(evidence, { reportData: new Uint8Array(64).fill(1) });
    expect(result.verified).to.equal(false);
    expect(result.checks).to.have.length(1);
    expect(result.checks[0]?.detail).to.include('tee-backend v1, which verifies no evidence');
    const refusal = await rejectionOf(tee.verify({ ...evidence, platform: 'sev-snp' }));
    expect(refusal.code).to.equal('invalid_request');
  });
});

import { randomBytes } from 'node:crypto';
import { mkdirSync, copyFileSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { pathToFileURL } from 'node:url';
import { expect } from 'chai';
import { migrate, openDatabase } from '../../core/db/database.ts';
import { computeBuildInfo } from '../../services/shared/build-info.ts';
import { COMPILED_BUILD_TYPE } from '../../services/shared/provenance.ts';
import { serviceMigrations } from '../../services/migrations.ts';
import { buildInto, RECORD_LOADS, runBuild, type Build } from '../support/build.ts';
import { runSigil, SIGIL_BIN, startSigil } from '../support/cli.ts';
import { REPO_ROOT } from '../support/paths.ts';
import { BundleFolder } from '../services/shared/offline-verification/support.ts';

/**
 * `npm run build` and what runs it: bin/sigil.js with NODE_ENV=production runs the compiled code with
 * no tsx and no TypeScript file loaded (a resolve hook records every module the process loads), finds
 * what the code reads beside itself, keeps the migrations' names, and refuses a missing or stale build;
 * without NODE_ENV, or with SIGIL_SOURCE=1, the sources run through tsx.
 */
describe('npm run build', function () {
  this.timeout(120_000);
  let build: Build;
  const production = (extra: NodeJS.ProcessEnv = {}) => ({
    NODE_ENV: 'production',
    SIGIL_CONFIG: '',
    DATABASE_URL: join(build.dir, 'sigil.db'),
    GATEWAY_PORT: '0',
    GATEWAY_WARMUP: 'false',
    ...extra,
  });
  /** Runs `work` with the loads recorded, and gives the URLs loaded. */
  const recorded = async (
    name: string,
    work: (options: { nodeArgs: string[]; file: string }) => Promise<void>,
  ) => {
    const file = join(build.dir, `${name}.loaded`);
    await work({ nodeArgs: ['--import', pathToFileURL(RECORD_LOADS).href], file });
    return readFileSync(file, 'utf8').trim().split('\n');
  };
  const repository = pathToFileURL(REPO_ROOT).href;

  before(async () => {
    build = await buildInto('build');
  });
  after(() => rmSync(build.dir, { recursive: true, force: true }));

  it('emits the runtime only, mirroring the repository, with what it reads beside itself', () => {
    const inputs = build.manifest.inputs;
    expect(inputs).to.include.members([
      'bin/cli.ts',
      'core/layout.ts',
      'packages/plugin-api/src/index.ts',
      'services/gateway/default-catalog.json',
      'solidity/SigilDollar.json',
      'plugins/sandboxes/linux-namespaces/egress-forwarder.cjs',
      'packages/plugin-api/probes/sandbox-probe.cjs',
      'registries/git/python_build.py',
    ]);
    expect(
      inputs.filter((file) => /^(test|bench|docs)\/|^bin\/build\.ts$|\.test\.ts$/.test(file)),
    ).to.deep.equal([]);
    for (const file of inputs.filter((input) => input.endsWith('.ts')))
      expect(() => readFileSync(join(build.dist, file.replace(/\.ts$/, '.js'))), file).not.to.throw();
    expect(readFileSync(join(build.dist, 'bin', 'cli.js'), 'utf8')).not.to.match(/['"]@sigil\/plugin-api/);
  });

  it('the compiled gateway answers /health, tools/list and a bundle that verifies, with no tsx and no TypeScript loaded', async () => {
    const loaded = await recorded('gateway', async ({ nodeArgs, file }) => {
      const running = await startSigil(['gateway'], /gateway\s+http:\/\/\S+\n/, {
        bin: build.sigil,
        nodeArgs,
        cwd: build.dir,
        env: production({ SIGIL_LOADED_FILE: file }),
      });
      try {
        const url = /gateway\s+(http:\/\/\S+)\n/.exec(running.output())?.[1] as string;
        const health = await fetch(`${url}/health`);
        expect(health.status).to.equal(200);
        expect(await health.json()).to.include({ status: 'ok', service: 'gateway', database: 'ok' });
        const listed = await fetch(`${url}/mcp`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
          body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
        });
        const { result } = (await listed.json()) as { result: { tools: { name: string }[] } };
        expect(result.tools.map((tool) => tool.name)).to.include('gateway_search_servers');

        const info = (await (await fetch(`${url}/api/attestation/build-info`)).json()) as Record<
          string,
          unknown
        >;
        expect(info).to.include({ compiled: true, builtAt: build.manifest.builtAt });
        // The code files' hashes come from build.json: the same code hash as hashing the output now.
        const { codeFiles, ...manifest } = build.manifest;
        const fromDisk = computeBuildInfo({ code: build.dist, repository: REPO_ROOT, build: manifest });
        expect(codeFiles).to.have.length(fromDisk.files - 2); // package.json and package-lock.json besides
        expect(info).to.include({
          codeHash: fromDisk.codeHash,
          files: fromDisk.files,
          lockfileSha256: fromDisk.lockfileSha256,
        });
        // The offline script is bundled from the compiled main.js; the provenance names the compiled build.
        const bundle = await (
          await fetch(`${url}/api/attestation/bundle?nonce=${randomBytes(32).toString('hex')}`)
        ).text();
        const { provenance } = JSON.parse(bundle) as { provenance: { envelope: { payload: string } } };
        const statement = JSON.parse(Buffer.from(provenance.envelope.payload, 'base64').toString('utf8')) as {
          predicate: { buildDefinition: { buildType: string } };
        };
        expect(statement.predicate.buildDefinition.buildType).to.equal(COMPILED_BUILD_TYPE);
        const folder = new BundleFolder(bundle);
        try {
          const run = folder.run();
          expect(run.passed, run.output).to.include.members([
            'nonce',
            'provenance-signature',
            'code-hash',
            'lockfile',
          ]);
        } finally {
          folder.remove();
        }
      } finally {
        running.child.kill('SIGTERM');
        expect(await running.exited).to.equal(0);
      }
    });
    // The bundle runs, and none of the mirrored modules besides: its every module has its place in it.
    const bundled = pathToFileURL(join(build.dist, 'bin', 'bundle')).href;
    expect(loaded).to.include(`${bundled}/cli.js`);
    const dist = pathToFileURL(build.dist).href;
    expect(loaded.filter((url) => url.startsWith(dist) && !url.startsWith(bundled))).to.deep.equal([]);
    expect(loaded.filter((url) => url.includes('/node_modules/tsx/') || url.endsWith('.ts'))).to.deep.equal(
      [],
    );
    // Of the repository, only the build and node_modules: no source module is loaded.
    const compiled = pathToFileURL(build.dir).href;
    expect(
      loaded.filter(
        (url) => url.startsWith(repository) && !url.startsWith(compiled) && !url.includes('/node_modules/'),
      ),
    ).to.deep.equal([]);
  });

  it('without NODE_ENV=production, or with SIGIL_SOURCE=1, the sources run through tsx (what the recording sees)', async () => {
    for (const env of [{ NODE_ENV: '' }, { NODE_ENV: 'production', SIGIL_SOURCE: '1' }]) {
      const loaded = await recorded(`source-${env.NODE_ENV || 'development'}`, async ({ nodeArgs, file }) => {
        const result = await runSigil(['--version'], { nodeArgs, env: { ...env, SIGIL_LOADED_FILE: file } });
        expect(result.code, result.stderr).to.equal(0);
      });
      expect(
        loaded.some((url) => url.includes('/node_modules/tsx/')),
        JSON.stringify(env),
      ).to.equal(true);
      expect(loaded, JSON.stringify(env)).to.include(pathToFileURL(join(REPO_ROOT, 'bin', 'cli.ts')).href);
    }
  });

  it('a database migrated from the sources is up to date for the compiled build (same migration names)', async () => {
    const file = join(build.dir, 'migrated.db');
    const db = await openDatabase({ url: file });
    try {
      expect(await migrate(db, serviceMigrations)).to.have.length.greaterThan(10);
    } finally {
      await db.destroy();
    }
    const result = await runSigil(['db', 'migrate'], {
      bin: build.sigil,
      cwd: build.dir,
      env: production({ DATABASE_URL: file }),
    });
    expect(result.code, result.stderr).to.equal(0);
    expect(result.stdout).to.equal('database is up to date\n');
  });

  it('--out empties only a former build: a folder of other files, or one outside the repository, is refused and kept', async () => {
    const mine = join(build.dir, 'not-a-build');
    mkdirSync(mine);
    writeFileSync(join(mine, 'keep.txt'), 'mine');
    const refused = await runBuild(['--out', mine]);
    expect(refused.code).to.equal(1);
    expect(refused.stderr).to.include("holds files and is not a build's output");
    expect(readFileSync(join(mine, 'keep.txt'), 'utf8')).to.equal('mine');
    const outside = await runBuild(['--out', join(tmpdir(), 'sigil-build-outside')]);
    expect(outside.code).to.equal(1);
    expect(outside.stderr).to.include('the output must be a folder inside');
  });

  it('NODE_ENV=production refuses a missing or a stale build, saying how to go on', async () => {
    const bare = join(build.dir, 'no-build', 'bin');
    mkdirSync(bare, { recursive: true });
    copyFileSync(SIGIL_BIN, join(bare, 'sigil.js'));
    const missing = await runSigil(['--version'], { bin: join(bare, 'sigil.js'), env: production() });
    expect(missing.code).to.equal(2);
    expect(missing.stderr).to.match(/holds no build: run `npm run build`, or set SIGIL_SOURCE=1/);

    const manifestFile = join(build.dist, 'build.json');
    const manifest = readFileSync(manifestFile, 'utf8');
    writeFileSync(manifestFile, JSON.stringify({ ...build.manifest, builtAt: '2001-01-01T00:00:00.000Z' }));
    try {
      const stale = await runSigil(['--version'], { bin: build.sigil, env: production() });
      expect(stale.code).to.equal(2);
      expect(stale.stderr).to.match(
        /\S+ changed after the build \(2001-01-01T00:00:00\.000Z\): run `npm run build`/,
      );
      expect(stale.stdout).to.equal('');
    } finally {
      writeFileSync(manifestFile, manifest);
    }
    // A build from before the bundle (bin/build.ts) has everything else.
    const entry = join(build.dist, 'bin', 'bundle', 'cli.js');
    renameSync(entry, `${entry}.aside`);
    try {
      const unbundled = await runSigil(['--version'], { bin: build.sigil, env: production() });
      expect(unbundled.code).to.equal(2);
      expect(unbundled.stderr).to.match(/holds a build without its bundle: run `npm run build`/);
    } finally {
      renameSync(`${entry}.aside`, entry);
    }
    const fresh = await runSigil(['--version'], { bin: build.sigil, env: production() });
    expect(fresh.code, fresh.stderr).to.equal(0);
  });
});

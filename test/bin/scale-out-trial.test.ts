import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { configSchema } from '../../services/config.ts';
import { runExample } from '../examples/support.ts';
import { ProbeWorld } from '../services/gateway/support.ts';
import { freePort, runSigil, startSigil } from '../support/cli.ts';
import { describeScaleOut, freshPostgresDatabase } from '../support/replicas.ts';

/**
 * The README's "Scale out" trial on one machine: `sigil devchain --replicas-config` writes the config
 * replicas share, and replicas started with it alone (`sigil runtime`, `sigil gateway`) on a shared
 * PostgreSQL database pass the shared-database guardrails and take paid calls on that chain.
 * (test/scaleout/ runs the same flows through nginx with two replicas of each.)
 */
describeScaleOut('sigil devchain --replicas-config', (postgresUrl) => {
  let world: ProbeWorld;
  let database: Awaited<ReturnType<typeof freshPostgresDatabase>>;
  const running: Awaited<ReturnType<typeof startSigil>>[] = [];

  before(async function () {
    this.timeout(60_000);
    world = await ProbeWorld.start();
    database = await freshPostgresDatabase(postgresUrl);
  });
  after(async function () {
    this.timeout(30_000);
    for (const process of running) process.child.kill('SIGTERM');
    await Promise.all(running.map((process) => process.exited));
    await database?.drop();
    await world?.stop();
  });

  it('writes a config the replicas start with on a shared database, and they take paid calls on its chain', async function () {
    this.timeout(240_000);
    const dir = world.dir;
    // The operator's own config: this test's catalog and plugins (a local registry, not npm's).
    writeFileSync(
      join(dir, 'base.json'),
      JSON.stringify({
        gateway: { includeDefaultCatalog: false, catalogFile: world.catalogFile, warmupAtStart: true },
        plugins: world.plugins(join(dir, 'sandboxes')),
      }),
    );
    const [chainPort, runtimePort, gatewayPort] = [await freePort(), await freePort(), await freePort()];
    const replicasConfig = join(dir, 'replicas.json');
    const env = {
      SIGIL_CONFIG: '',
      DEV_CHAIN: '',
      DEV_CHAIN_PORT: String(chainPort),
      RUNTIME_PORT: '',
      GATEWAY_PORT: '',
    };
    const devchainArgs = [
      ...['-c', join(dir, 'base.json'), 'devchain', '--replicas-config', replicasConfig],
      ...[
        '--runtime-url',
        `http://127.0.0.1:${runtimePort}`,
        '--gateway-url',
        `http://127.0.0.1:${gatewayPort}`,
      ],
    ];
    const devchain = await startSigil(devchainArgs, /^ready {4}dev chain /m, { cwd: dir, env });
    running.push(devchain);
    expect(devchain.output()).to.include(`replicas ${replicasConfig}: the config every replica shares`);
    // It holds keys: only its owner reads it.
    expect(statSync(replicasConfig).mode & 0o777).to.equal(0o600);
    const written = configSchema.parse(JSON.parse(readFileSync(replicasConfig, 'utf8')));
    expect(written.runtime.publicUrl).to.equal(`http://127.0.0.1:${runtimePort}`);
    expect(written.ledger.rpcUrl).to.equal(`http://127.0.0.1:${chainPort}`);
    const rail = written.plugins.find((plugin) => plugin.resolve === 'payments-x402-evm');
    expect((rail?.options.facilitator as { privateKeys: string[] }).privateKeys).to.have.length.above(1);

    // The replicas: each service alone, on the shared database, with nothing but the written config.
    const replicaEnv = { ...env, DATABASE_URL: database.url };
    running.push(
      await startSigil(['-c', replicasConfig, 'runtime'], /^ready {4}/m, {
        cwd: dir,
        env: { ...replicaEnv, RUNTIME_PORT: String(runtimePort) },
        timeoutMs: 90_000,
      }),
      await startSigil(['-c', replicasConfig, 'gateway'], /^ready {4}/m, {
        cwd: dir,
        env: { ...replicaEnv, GATEWAY_PORT: String(gatewayPort) },
        timeoutMs: 120_000,
      }),
    );
    const stdout = await runExample(['examples/pay-over-rest.mjs', `http://127.0.0.1:${gatewayPort}`], {
      SIGIL_SERVER: 'probe',
      SIGIL_MESSAGE: 'paid through a replica',
    });
    expect(stdout).to.match(/^result {4}paid through a replica$/m);
    expect(stdout).to.match(/^paid {6}by 0x[0-9a-fA-F]{40} on eip155:8453, transaction 0x[0-9a-f]{64}$/m);

    // Started again, the dev chain writes the file again with the keys the replicas hold.
    devchain.child.kill('SIGINT');
    expect(await devchain.exited).to.equal(0);
    running.splice(running.indexOf(devchain), 1);
    running.push(await startSigil(devchainArgs, /^ready {4}dev chain /m, { cwd: dir, env }));
    const again = configSchema.parse(JSON.parse(readFileSync(replicasConfig, 'utf8')));
    expect(again.runtime.mcpSigningKey).to.equal(written.runtime.mcpSigningKey);
    expect(again.gateway.secretKey).to.equal(written.gateway.secretKey);
    const keyMaterial = (config: typeof written) =>
      config.plugins.find((plugin) => plugin.resolve === 'tee-none')?.options.keyMaterial;
    expect(keyMaterial(again)).to.be.a('string').and.equal(keyMaterial(written));
  });
});

describe('sigil nginx', () => {
  it("prints deploy/nginx's configuration with a server line per replica, or writes it as Debian lays nginx out", async () => {
    const printed = await runSigil([
      ...['nginx', '--runtime', '10.0.0.1:8080,10.0.0.2:8080', '--gateway', '10.0.0.1:8402'],
      ...['--runtime-listen', '80', '--gateway-listen', '127.0.0.1:8402'],
    ]);
    expect(printed.code).to.equal(0);
    expect(printed.stdout).to.not.include('{{');
    expect(printed.stdout.match(/^\s*server 10\.0\.0\.\d:8080 .*$/gm)).to.have.length(2);
    expect(printed.stdout).to.match(/^ {4}listen 80;$/m);

    const dir = mkdtempSync(join(tmpdir(), 'sigil-nginx-'));
    const written = await runSigil([
      'nginx',
      '--runtime',
      '127.0.0.1:8081',
      '--gateway',
      '127.0.0.1:8403',
      '--out',
      dir,
    ]);
    expect(written.code).to.equal(0);
    expect(readFileSync(join(dir, 'conf.d', 'sigil.conf'), 'utf8')).to.include('server 127.0.0.1:8403 ');
    expect(readFileSync(join(dir, 'snippets', 'sigil-proxy.conf'), 'utf8')).to.include('proxy_set_header');
    rmSync(dir, { recursive: true, force: true });
  });

  it('refuses an address that is not host:port, saying what it takes', async () => {
    const refused = await runSigil([
      'nginx',
      '--runtime',
      'http://10.0.0.1:8080',
      '--gateway',
      '10.0.0.1:8402',
    ]);
    expect(refused.code).to.equal(1);
    expect(refused.stderr).to.include("--runtime takes the replicas' addresses as host:port");
    expect(refused.stderr).to.include('not one: http://10.0.0.1:8080');
  });
});

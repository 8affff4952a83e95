import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { freePort, runSigil, startSigil } from '../support/cli.ts';

describe('sigil command', function () {
  this.timeout(60_000);
  let dir: string;
  const env = () => ({ DATABASE_URL: join(dir, 'sigil.db'), SIGIL_CONFIG: '', GATEWAY_WARMUP: 'false' });

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'sigil-cli-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('has --help on every command', async () => {
    for (const command of [
      [],
      ['up'],
      ['runtime'],
      ['gateway'],
      ['plugins'],
      ['config', 'check'],
      ['config', 'schema'],
      ['db', 'migrate'],
      ['db', 'rewrap-history'],
      ['attestation', 'verify'],
    ]) {
      const result = await runSigil([...command, '--help'], { cwd: dir });
      expect(result.code, command.join(' ')).to.equal(0);
      expect(result.stdout).to.match(/Usage: sigil/);
    }
  });

  it('config check prints the effective config with secrets redacted', async () => {
    const canary = 'canary-5d1c0e77-gateway-master-key-material';
    const result = await runSigil(['config', 'check'], {
      cwd: dir,
      env: { ...env(), GATEWAY_SECRET_KEY: canary, GATEWAY_PORT: '9999' },
    });
    expect(result.code).to.equal(0);
    const printed = JSON.parse(result.stdout) as { gateway: { port: number; secretKey: string } };
    expect(printed.gateway.port).to.equal(9999);
    expect(printed.gateway.secretKey).to.equal('[REDACTED]');
    expect(result.stdout + result.stderr).not.to.include(canary);
    expect(result.stderr).to.include('GATEWAY_SECRET_KEY');
  });

  it('config schema prints a JSON Schema', async () => {
    const result = await runSigil(['config', 'schema'], { cwd: dir });
    expect(result.code).to.equal(0);
    expect((JSON.parse(result.stdout) as { properties: object }).properties).to.have.property('gateway');
  });

  it('a config of the wrong type exits 2 and names the field', async () => {
    writeFileSync(join(dir, 'sigil.config.json'), JSON.stringify({ gateway: { port: 'http' } }));
    const result = await runSigil(['config', 'check'], { cwd: dir, env: env() });
    expect(result.code).to.equal(2);
    expect(result.stderr).to.match(/gateway\.port/);
    const up = await runSigil(['up'], { cwd: dir, env: env() });
    expect(up.code).to.equal(2);
    expect(up.stderr).to.match(/gateway\.port/);
  });

  it('an unknown plugin exits 2, naming the plugin and the config path', async () => {
    const file = join(dir, 'broken.json');
    writeFileSync(
      file,
      JSON.stringify({ plugins: [{ resolve: 'tee-none' }, { resolve: 'sigil-plugin-that-does-not-exist' }] }),
    );
    const result = await runSigil(['--config', file, 'plugins'], { cwd: dir, env: env() });
    expect(result.code).to.equal(2);
    expect(result.stderr).to.include('plugin: sigil-plugin-that-does-not-exist');
    expect(result.stderr).to.include('config: plugins.1.resolve');
  });

  it('a gateway whose replicas share the database exits 2 without their settings, naming each and how to make the key', async () => {
    writeFileSync(join(dir, 'sigil.config.json'), JSON.stringify({ database: { shared: true } }));
    const result = await runSigil(['gateway'], { cwd: dir, env: { ...env(), GATEWAY_PORT: '0' } });
    expect(result.code).to.equal(2);
    for (const named of [
      'runtime.publicUrl (RUNTIME_PUBLIC_URL)',
      'gateway.publicUrl (GATEWAY_PUBLIC_URL)',
      'plugins[tee-none].options.keyMaterial',
      'hint: plugins[tee-none].options.keyMaterial: openssl rand -base64 48',
      'database.shared to false',
    ])
      expect(result.stderr).to.include(named);
  });

  it('plugins lists the loaded plugins', async () => {
    const result = await runSigil(['plugins', '--json'], { cwd: dir, env: env() });
    expect(result.code).to.equal(0);
    const listed = JSON.parse(result.stdout) as { name: string; kind: string }[];
    expect(listed).to.deep.include({
      name: 'tee-none',
      kind: 'tee-backend',
      specVersion: 'v2',
      source: 'builtin:tee-none',
      state: 'started',
    });
    expect(listed.map((p) => [p.kind, p.name])).to.deep.equal([
      ['tee-backend', 'tee-none'],
      ['package-registry', 'registry-npm'],
      ['sandbox-runtime', 'sandbox-linux-namespaces'],
    ]);
  });

  it('db migrate applies migrations once', async () => {
    const first = await runSigil(['db', 'migrate'], { cwd: dir, env: env() });
    expect(first.code).to.equal(0);
    expect(first.stdout).to.match(
      /applied: 0001-auth, 0002-siwe-nonce-clients, 0003-siwe-stateless-challenges, 0004-chain-identities, 0005-replicas-and-leases, 0006-replica-fingerprints, 0100-gateway-sessions-and-servers/,
    );
    const second = await runSigil(['db', 'migrate'], { cwd: dir, env: env() });
    expect(second.stdout).to.match(/up to date/);
  });

  it('up serves /health on both services and stops cleanly on SIGTERM', async () => {
    const [runtimePort, gatewayPort] = [await freePort(), await freePort()];
    // The tee line follows the services' addresses.
    const up = await startSigil(['up'], /^tee {6}.*\n/m, {
      cwd: dir,
      env: { ...env(), RUNTIME_PORT: String(runtimePort), GATEWAY_PORT: String(gatewayPort) },
    });
    try {
      const runtime = await fetch(`http://127.0.0.1:${runtimePort}/health`);
      expect(runtime.status).to.equal(200);
      expect(await runtime.json()).to.have.property('securityPosture');
      expect((await fetch(`http://127.0.0.1:${gatewayPort}/health`)).status).to.equal(200);
      expect(up.output()).to.match(
        /^tee {6}none: no hardware attestation; keys made for this process \(proofs verify until a restart\)$/m,
      );
    } finally {
      up.child.kill('SIGTERM');
    }
    expect(await up.exited).to.equal(0);
    expect(up.output()).to.match(/SIGTERM: finishing in-flight requests/);
  });
});

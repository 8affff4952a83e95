import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { ConfigError, PARSED_ONCE } from '../../core/config/load.ts';
import { configJsonSchema, configSchema, loadConfig, redactConfig } from '../../services/config.ts';
import { repoPath } from '../support/paths.ts';

describe('config', () => {
  let dir: string;
  const write = (value: unknown) => {
    const file = join(dir, 'sigil.config.json');
    writeFileSync(file, typeof value === 'string' ? value : JSON.stringify(value));
    return file;
  };
  const issuesOf = (fn: () => unknown) => {
    try {
      fn();
    } catch (err) {
      expect(err).to.be.instanceOf(ConfigError);
      return (err as ConfigError).issues;
    }
    throw new Error('expected a ConfigError');
  };

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'sigil-config-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('runs on embedded defaults when there is no file', () => {
    const { config, file } = loadConfig({ cwd: dir, env: {} });
    expect(file).to.equal(undefined);
    expect(config.runtime.port).to.equal(8080);
    expect(config.gateway.port).to.equal(8402);
    expect(config.runtime.host).to.equal('127.0.0.1');
    expect(config.auth.chainId).to.equal(8453);
    expect(config.auth.gatewayJwtTtlSeconds).to.equal(86_400);
    expect(config.database.url).to.equal('data/sigil.db');
    expect(config.plugins.map((p) => p.resolve)).to.deep.equal([
      'tee-none',
      'registry-npm',
      'sandbox-linux-namespaces',
    ]);
  });

  it('reads ./sigil.config.json, and env overrides it with typed values', () => {
    write({ gateway: { port: 9000, operatorWallets: [] }, log: { level: 'debug' } });
    const { config, envOverrides } = loadConfig({
      cwd: dir,
      env: {
        GATEWAY_PORT: '9402',
        ERC8128_ENFORCE_OPERATOR_MCP: 'true',
        OPERATOR_WALLETS:
          '0x1111111111111111111111111111111111111111, 0x2222222222222222222222222222222222222222',
        DATABASE_URL: 'postgres://u:p@db:5432/sigil',
        VAULT_PERSISTENCE_DIR: '/var/lib/sigil/vault',
      },
    });
    expect(config.gateway.port).to.equal(9402);
    expect(config.log.level).to.equal('debug');
    expect(config.gateway.erc8128EnforceOperatorMcp).to.equal(true);
    expect(config.gateway.operatorWallets).to.have.length(2);
    expect(config.database.url).to.equal('postgres://u:p@db:5432/sigil');
    expect(config.vault.persistenceDir).to.equal('/var/lib/sigil/vault');
    expect(envOverrides).to.include.members(['GATEWAY_PORT', 'DATABASE_URL']);
  });

  it('gives each service an HTTP edge with safe defaults, its allowed names from env lists, and refuses inverted timeouts', () => {
    const { config } = loadConfig({
      cwd: dir,
      env: {
        GATEWAY_ALLOWED_HOSTS: 'tools.internal:8402, tools.example.com',
        GATEWAY_ALLOWED_ORIGINS: 'https://app.example.com',
        GATEWAY_TRUSTED_PROXIES: '10.0.0.0/8, fd00::1',
      },
    });
    expect(config.gateway.http).to.deep.equal({
      allowedHosts: ['tools.internal:8402', 'tools.example.com'],
      allowedOrigins: ['https://app.example.com'],
      headersTimeoutMs: 10_000,
      requestTimeoutMs: 30_000,
      keepAliveTimeoutMs: 5_000,
      maxConnections: 1024,
      maxConnectionsPerClient: 128,
      trustedProxies: ['10.0.0.0/8', 'fd00::1'],
    });
    expect(config.runtime.http.allowedHosts).to.deep.equal([]);
    expect(config.runtime.http.trustedProxies, 'no proxy is trusted unless listed').to.deep.equal([]);
    expect(config.log.requestSummarySeconds).to.equal(60);
    write({ runtime: { http: { headersTimeoutMs: 60_000, requestTimeoutMs: 30_000 } } });
    expect(issuesOf(() => loadConfig({ cwd: dir, env: {} })).map((i) => i.path)).to.deep.equal([
      'runtime.http.headersTimeoutMs',
    ]);
    const origin = issuesOf(() =>
      loadConfig({ cwd: dir, env: { RUNTIME_ALLOWED_ORIGINS: 'https://app.example.com/path' } }),
    );
    expect(origin.map((i) => i.path)).to.include('runtime.http.allowedOrigins.0');
  });

  it('takes the path from SIGIL_CONFIG, and fails when an explicit path is missing', () => {
    const file = join(dir, 'custom.json');
    writeFileSync(file, JSON.stringify({ runtime: { port: 9090 } }));
    expect(loadConfig({ cwd: '/', env: { SIGIL_CONFIG: file } }).config.runtime.port).to.equal(9090);
    const issues = issuesOf(() => loadConfig({ cwd: dir, env: {}, path: 'nope.json' }));
    expect(issues[0]?.message).to.match(/not found/);
  });

  it('names the path and source of each invalid value', () => {
    write({ gateway: { port: 'eighty' }, plugins: [{ resolve: '' }], runtime: { colour: 'blue' } });
    const issues = issuesOf(() => loadConfig({ cwd: dir, env: {} }));
    const paths = issues.map((i) => i.path);
    expect(paths).to.include.members(['gateway.port', 'plugins.0.resolve']);
    expect(issues.find((i) => i.path === 'runtime')?.message).to.match(/colour/);
    expect(issues[0]?.source).to.match(/sigil\.config\.json$/);
  });

  it('blames the env variable when an override is invalid', () => {
    const issues = issuesOf(() => loadConfig({ cwd: dir, env: { RUNTIME_PORT: 'http' } }));
    expect(issues).to.deep.include({
      path: 'runtime.port',
      message: issues[0]?.message,
      source: 'env RUNTIME_PORT',
    });
    const bool = issuesOf(() => loadConfig({ cwd: dir, env: { ERC8128_ENFORCE_OPERATOR_MCP: 'maybe' } }));
    expect(bool[0]?.source).to.equal('env ERC8128_ENFORCE_OPERATOR_MCP');
  });

  it('parses without zod’s eval fast path (PARSED_ONCE) to what the fast path gives, values and issues alike', () => {
    const example = JSON.parse(readFileSync(repoPath('examples', 'base-mainnet.config.json'), 'utf8'));
    const invalid = {
      gateway: { port: 'eighty', http: { maxConnectionsPerClient: -1 } },
      runtime: { colour: 1 },
    };
    for (const raw of [{}, example, invalid]) {
      // Fresh copies: a parse must not see what another did to its input.
      const withFastPath = configSchema.safeParse(structuredClone(raw));
      const once = configSchema.safeParse(structuredClone(raw), PARSED_ONCE);
      expect(once.success).to.equal(withFastPath.success);
      if (once.success && withFastPath.success) expect(once.data).to.deep.equal(withFastPath.data);
      else expect(once.error?.issues).to.deep.equal(withFastPath.error?.issues);
    }
    expect(configSchema.safeParse(invalid, PARSED_ONCE).error?.issues.length).to.be.greaterThan(1);
  });

  it('rejects a file that is not a JSON object', () => {
    write('{ "gateway": ');
    expect(issuesOf(() => loadConfig({ cwd: dir, env: {} }))[0]?.message).to.match(/not valid JSON/);
    write('[1,2]');
    expect(issuesOf(() => loadConfig({ cwd: dir, env: {} }))[0]?.message).to.match(/JSON object/);
  });

  it('redacts every secret in the printed config', () => {
    const canaries = {
      GATEWAY_SECRET_KEY: 'canary-gateway-secret-0123456789abcdef0123',
      MCP_SIGNING_KEY: 'canary-mcp-signing-key',
      PROVIDER_API_KEY: 'canary-provider-key',
      DATABASE_URL: 'postgres://sigil:canary-db-password@db/sigil',
    };
    write({
      plugins: [
        { resolve: 'tee-none', options: { apiKey: 'canary-plugin-key', nested: { password: 'canary-pw' } } },
        { resolve: 'tee-tdx', options: { keyMaterial: 'canary-key-material-0123456789abcdef' } },
      ],
    });
    const printed = JSON.stringify(redactConfig(loadConfig({ cwd: dir, env: canaries }).config));
    for (const canary of [
      'canary-gateway-secret',
      'canary-mcp',
      'canary-provider',
      'canary-db-password',
      'canary-plugin',
      'canary-pw',
      'canary-key-material',
    ]) {
      expect(printed).not.to.include(canary);
    }
    expect(printed).to.include('[REDACTED]');
  });

  it('takes the chat history keys from RUNTIME_DATA_KEY, current first; refuses a key not of 32 bytes or a repeated id', () => {
    const [k2, k1] = [Buffer.alloc(32, 2).toString('base64'), Buffer.alloc(32, 1).toString('base64')];
    const { config } = loadConfig({ cwd: dir, env: { RUNTIME_DATA_KEY: `k2:${k2}, k1:${k1}` } });
    expect(config.runtime.history.dataKeys).to.deep.equal([
      { id: 'k2', key: k2 },
      { id: 'k1', key: k1 },
    ]);
    const printed = JSON.stringify(redactConfig(config));
    expect(printed).not.to.include(k2);
    expect(printed).not.to.include(k1);
    // No key: nothing to hide, and nothing that reads as a key being set.
    expect(redactConfig(loadConfig({ cwd: dir, env: {} }).config))
      .to.have.nested.property('runtime.history.dataKeys')
      .that.deep.equals([]);
    const short = Buffer.alloc(16).toString('base64');
    for (const [env, path] of [
      [`k1:${short}`, 'runtime.history.dataKeys.0.key'],
      [`k1:${k1},k1:${k2}`, 'runtime.history.dataKeys'],
      [`bad id:${k1}`, 'runtime.history.dataKeys.0.id'],
      [k1, 'runtime.history.dataKeys.0.id'],
    ]) {
      const issues = issuesOf(() => loadConfig({ cwd: dir, env: { RUNTIME_DATA_KEY: env as string } }));
      expect(
        issues.map((i) => [i.path, i.source]),
        env,
      ).to.deep.equal([[path, 'env RUNTIME_DATA_KEY']]);
      expect(JSON.stringify(issues)).not.to.include(k1);
    }
  });

  it('publishes a JSON Schema of the file', () => {
    const schema = configJsonSchema() as { type: string; properties: Record<string, unknown> };
    expect(schema.type).to.equal('object');
    expect(schema.properties).to.include.keys('runtime', 'gateway', 'database', 'plugins', 'auth');
  });
});

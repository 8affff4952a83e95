import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { ConfigError } from '../../../../core/config/load.ts';
import { loadConfig, redactConfig } from '../../../../services/config.ts';
import { DEV_DEPOSIT_MNEMONIC } from '../../../../services/runtime/ledger/config.ts';

const load = (env: Record<string, string>) => loadConfig({ env, cwd: '/nonexistent-dir-for-config' });

describe('ledger: config', () => {
  it('has careful defaults: 0.01 USD minimum balance, withdrawal limits, no chain', () => {
    const { ledger } = load({}).config;
    expect(ledger).to.deep.include({ chainId: 8453, minimumBalance: '10000', pollIntervalMs: 2000 });
    expect(ledger.withdrawals).to.deep.equal({
      minAmount: '10000',
      maxAmount: '1000000000',
      dailyTotal: '2000000000',
      maxPerHour: 5,
      authorizationTtlSeconds: 3600,
    });
    expect(ledger.sweep).to.deep.equal({ intervalSeconds: 3600, minimumAmount: '1000000' });
    expect(ledger.rpcUrl).to.equal(undefined);
    expect(ledger.confirmations).to.equal(undefined);
  });

  it('reads LEDGER_* env variables and redacts the mnemonic, the operator key and the RPC URL', () => {
    const key = `0x${'ab'.repeat(32)}`;
    const loaded = load({
      LEDGER_DEPOSIT_MNEMONIC: DEV_DEPOSIT_MNEMONIC,
      LEDGER_RPC_URL: 'https://rpc.example.com/v1/secret-api-key',
      LEDGER_TOKEN_ADDRESS: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913',
      LEDGER_TREASURY: '0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC',
      LEDGER_OPERATOR_KEY: key,
      LEDGER_CONFIRMATIONS: '20',
    });
    expect(loaded.config.ledger.confirmations).to.equal(20);
    const printed = JSON.stringify(redactConfig(loaded.config));
    for (const secret of [DEV_DEPOSIT_MNEMONIC, key, 'secret-api-key'])
      expect(printed).to.not.include(secret);
  });

  it('an RPC URL without the rest of the chain settings is refused, naming each missing key', () => {
    expect(() => load({ LEDGER_RPC_URL: 'http://127.0.0.1:8545' }))
      .to.throw(ConfigError)
      .with.property('message')
      .that.matches(/ledger\.tokenAddress/)
      .and.matches(/ledger\.operatorKey/)
      .and.matches(/ledger\.depositMnemonic/);
  });

  it('the RPC URL is http(s): a WebSocket URL is refused at start-up, not at the first read', () => {
    expect(() => load({ LEDGER_RPC_URL: 'ws://127.0.0.1:8545' }))
      .to.throw(ConfigError)
      .with.property('message')
      .that.matches(/ledger\.rpcUrl: must be an http\(s\):\/\/ JSON-RPC URL/);
  });

  it('production refuses the public dev mnemonic', () => {
    expect(() => load({ SIGIL_MODE: 'production', LEDGER_DEPOSIT_MNEMONIC: DEV_DEPOSIT_MNEMONIC }))
      .to.throw(ConfigError)
      .with.property('message')
      .that.matches(/ledger\.depositMnemonic: is the public dev mnemonic/);
  });

  it('a hold TTL no longer than one tool call is refused: a running chat would lose its hold', () => {
    const raw = { ledger: { holdTtlSeconds: 60 }, gateway: { toolCallTimeoutSeconds: 60 } };
    expect(() => loadFromObject(raw))
      .to.throw(ConfigError)
      .with.property('message')
      .that.matches(/ledger\.holdTtlSeconds: must be longer than gateway\.toolCallTimeoutSeconds \(60\)/);
    expect(loadFromObject({ ...raw, ledger: { holdTtlSeconds: 61 } }).config.ledger.holdTtlSeconds).to.equal(
      61,
    );
  });

  it('amounts are integers in base units: "1.5" and -1 are refused', () => {
    for (const bad of ['"1.5"', '-1', '"0x10"']) {
      const raw = JSON.parse(`{ "ledger": { "minimumBalance": ${bad} } }`) as unknown;
      expect(() => loadFromObject(raw), bad).to.throw(ConfigError);
    }
  });
});

function loadFromObject(raw: unknown) {
  const dir = mkdtempSync(join(tmpdir(), 'sigil-ledger-config-'));
  try {
    writeFileSync(join(dir, 'sigil.config.json'), JSON.stringify(raw));
    return loadConfig({ env: {}, cwd: dir });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

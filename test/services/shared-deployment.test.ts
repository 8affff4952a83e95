import { generateKeyPairSync } from 'node:crypto';
import { expect } from 'chai';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { isSigilError, type SigilError } from '@sigil/plugin-api';
import { serve, type ServiceName, type Serving } from '../../services/serve.ts';
import { eventually } from '../support/eventually.ts';
import { captureLogs } from '../support/logs.ts';
import {
  describeEachDatabase,
  openTestKernel,
  stickyDatabase,
  type ConfigOverrides,
  type TestDatabase,
} from '../support/kernel.ts';
import { mintDelegatedToken } from './runtime/support.ts';

const RUNTIME_URL = 'https://agents.example.test';
const GATEWAY_URL = 'https://tools.example.test';
const KEY_MATERIAL = 'shared-deployment-key-material-0123456789';
const signingKey = () =>
  generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ type: 'pkcs8', format: 'pem' });
const MCP_SIGNING_KEY = signingKey() as string;

const teeNone = (options: Record<string, unknown> = {}) => [{ resolve: 'tee-none', enabled: true, options }];

/** Replicas on a shared database with what they must agree on, heartbeats every second. */
const CONFIGURED: ConfigOverrides = {
  database: { shared: true, heartbeatSeconds: 1, replicaDeadAfterSeconds: 2 },
  runtime: { port: 0, publicUrl: RUNTIME_URL, mcpSigningKey: MCP_SIGNING_KEY },
  gateway: { port: 0, publicUrl: GATEWAY_URL },
  plugins: teeNone({ keyMaterial: KEY_MATERIAL }),
};

/** `CONFIGURED` with these sections merged over it (one level deep, as openTestKernel merges). */
const configured = (changes: ConfigOverrides = {}): ConfigOverrides => {
  const merged: Record<string, unknown> = { ...CONFIGURED };
  for (const [section, values] of Object.entries(changes) as [string, unknown][])
    merged[section] = Array.isArray(values)
      ? values
      : { ...(merged[section] as object), ...(values as object) };
  return merged as ConfigOverrides;
};

const json = async (url: string, init?: RequestInit): Promise<Record<string, unknown>> =>
  (await (await fetch(url, init)).json()) as Record<string, unknown>;

describeEachDatabase('replicas sharing the database: guardrails', (testDatabase) => {
  let sticky: { database: TestDatabase; drop(): Promise<void> };
  const running: Serving[] = [];

  beforeEach(() => {
    sticky = stickyDatabase(testDatabase);
  });
  afterEach(async () => {
    for (const serving of running.splice(0)) await serving.stop();
    await sticky.drop();
  });

  /** Starts `services` on the shared database; a refusal is returned, the kernel closed. */
  async function start(
    config: ConfigOverrides,
    services: readonly ServiceName[] = ['runtime', 'gateway'],
    logs?: ReturnType<typeof captureLogs>,
  ): Promise<Serving> {
    const kernel = await openTestKernel({
      database: sticky.database,
      config,
      ...(logs ? { logDestination: logs.stream } : {}),
    });
    try {
      const serving = await serve(kernel, services);
      running.push(serving);
      return serving;
    } catch (err) {
      await kernel.close();
      throw err;
    }
  }

  const refusal = async (config: ConfigOverrides, services: readonly ServiceName[]): Promise<SigilError> => {
    const err = await start(config, services).then(
      () => undefined,
      (failure: unknown) => failure,
    );
    if (!isSigilError(err)) throw new Error(`expected a refusal, got ${String(err)}`);
    return err;
  };

  describe('a replica missing what its peers need refuses to start, naming each setting', () => {
    /** None of the settings (test kernels on a shared database get test ones unless told otherwise). */
    const unset: ConfigOverrides = {
      runtime: { port: 0, publicUrl: undefined, mcpSigningKey: undefined },
      gateway: { port: 0, publicUrl: undefined },
      plugins: teeNone({ keyMaterial: undefined }),
    };
    const bare: ConfigOverrides = { ...unset, database: { shared: true } };

    it('a runtime: both public URLs, the TEE backend’s key material and the delegation key', async () => {
      const err = await refusal(bare, ['runtime']);
      expect(err.code).to.equal('config_invalid');
      const settings = [
        'runtime.publicUrl',
        'gateway.publicUrl',
        'plugins[tee-none].options.keyMaterial',
        'runtime.mcpSigningKey',
      ];
      expect(err.details).to.deep.equal({ reason: 'shared_database_settings', settings });
      for (const setting of [...settings, 'RUNTIME_PUBLIC_URL', 'GATEWAY_PUBLIC_URL', 'MCP_SIGNING_KEY'])
        expect(err.message).to.include(setting);
      expect(err.message).to.include('database.shared');
      expect(err.hint).to.include('openssl rand -base64 48');
      expect(err.hint).to.include('openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256');
      expect(err.hint).to.include('database.shared to false');
    });

    it('a gateway: its public URL, the runtime’s as the issuer of delegated JWTs, the key material', async () => {
      const err = await refusal(bare, ['gateway']);
      expect(err.details?.settings).to.deep.equal([
        'runtime.publicUrl',
        'gateway.publicUrl',
        'plugins[tee-none].options.keyMaterial',
      ]);
      // Without delegation the runtime's URL is not needed; what is configured is not asked for.
      const without = await refusal(
        {
          ...bare,
          gateway: { port: 0, publicUrl: GATEWAY_URL, delegation: { enabled: false } },
        },
        ['gateway'],
      );
      expect(without.details?.settings).to.deep.equal(['plugins[tee-none].options.keyMaterial']);
    });

    const byDefault =
      testDatabase.name === 'postgres' ? 'asks for them on PostgreSQL' : 'needs none on SQLite';
    it(`without database.shared, ${byDefault} (replicas share PostgreSQL; SQLite is one machine)`, async () => {
      if (testDatabase.name === 'postgres')
        expect((await refusal(unset, ['runtime', 'gateway'])).details).to.include({
          reason: 'shared_database_settings',
        });
      else
        expect(await json(`${(await start(unset)).urls.runtime as string}/health`)).to.include({
          status: 'ok',
        });
    });

    it('one process on the database (database.shared false) needs none of them', async () => {
      const serving = await start({ ...unset, database: { shared: false } });
      const health = await json(`${serving.urls.gateway as string}/health`);
      expect(health).to.include({ status: 'ok' });
      expect(health, 'no fingerprint where nothing is shared').to.not.have.property('replicas');
    });
  });

  describe('configured alike, replicas agree on what a client sees', () => {
    it('starts; a challenge, a session and a delegated token made at one replica hold at the other', async () => {
      const [one, two] = [await start(configured()), await start(configured())];
      const url = (serving: Serving, service: ServiceName) => serving.urls[service] as string;
      const challenge = await json(
        `${url(one, 'runtime')}/auth/challenge?address=${privateKeyToAccount(generatePrivateKey()).address}`,
      );
      expect(challenge).to.include({ domain: new URL(RUNTIME_URL).host, uri: RUNTIME_URL });

      // Signed in and minted at the first replica; checked at the second one's gateway.
      const wallet = privateKeyToAccount(generatePrivateKey());
      const token = await mintDelegatedToken(url(one, 'runtime'), wallet);
      const session = await fetch(`${url(two, 'gateway')}/api/auth/session`, {
        headers: { authorization: `Bearer ${token}` },
      });
      expect(session.status).to.equal(200);
      expect(await session.json()).to.include({ address: wallet.address, method: 'delegated-jwt' });

      // The TEE backend's keys are the same: both sign their provenance with one key.
      const provenance = async (serving: Serving) =>
        (await json(`${url(serving, 'gateway')}/api/attestation/provenance`)).keyid;
      expect(await provenance(one))
        .to.be.a('string')
        .and.equal(await provenance(two));

      const openApi = await json(`${url(two, 'gateway')}/api/openapi.json`);
      expect(openApi.servers).to.deep.equal([{ url: GATEWAY_URL }]);
      for (const serving of [one, two])
        for (const service of ['runtime', 'gateway'] as const) {
          const health = await json(`${url(serving, service)}/health`);
          expect(health.replicas).to.include({ agreed: true });
        }
      const fingerprint = async (serving: Serving) =>
        ((await json(`${url(serving, 'gateway')}/health`)).replicas as { settingsFingerprint: string })
          .settingsFingerprint;
      expect(await fingerprint(one))
        .to.match(/^[0-9a-f]{16}$/)
        .and.equal(await fingerprint(two));
    });

    it('a replica with other settings is named at its start, and the live ones see it at their next heartbeat', async () => {
      const oldLogs = captureLogs();
      const old = await start(configured(), ['gateway'], oldLogs);
      const newLogs = captureLogs();
      const changed = await start(
        configured({ gateway: { paymentHint: 'Prices changed' } }),
        ['gateway'],
        newLogs,
      );
      const health = async (serving: Serving) =>
        (await json(`${serving.urls.gateway as string}/health`)).replicas as { agreed: boolean };
      expect(await health(changed)).to.include({ agreed: false });
      expect(newLogs.text()).to.include('run with other settings');
      await eventually('the live replica to see the newcomer', async () => !(await health(old)).agreed);
      expect(oldLogs.text()).to.include('run with other settings');
      // Still served: a difference is said, not refused (a rolling change of the config has both).
      expect((await fetch(`${changed.urls.gateway as string}/health`)).status).to.equal(200);
    });
  });
});

describe('replicas sharing the database: what the settings fingerprint holds', () => {
  /** The gateway's and the runtime's fingerprints of a shared replica configured so. */
  async function fingerprints(config: ConfigOverrides): Promise<Record<string, string>> {
    const kernel = await openTestKernel({ config });
    const serving = await serve(kernel, ['runtime', 'gateway']);
    try {
      const row = await kernel.db('replicas').where({ id: kernel.replica.id }).first();
      return JSON.parse(row.config_fingerprints as string) as Record<string, string>;
    } finally {
      await serving.stop();
    }
  }

  it('ignores secrets’ values, where a replica listens and its edge; counts prices, URLs and public keys', async () => {
    const base = await fingerprints(configured({ runtime: { providerApiKey: 'one-secret-value' } }));
    expect(Object.keys(base).sort()).to.deep.equal(['gateway', 'runtime']);
    const same = await fingerprints(
      configured({
        runtime: { http: { maxConnections: 7 }, providerApiKey: 'another-secret-value' },
        gateway: {
          secretKey: 'another-gateway-secret-key-0123456789',
          http: { trustedProxies: ['10.0.0.1'] },
        },
      }),
    );
    expect(same, 'secrets’ values and per-replica settings').to.deep.equal(base);
    const priced = await fingerprints(
      configured({ runtime: { providerApiKey: 'one-secret-value' }, ledger: { minimumBalance: '20000' } }),
    );
    expect(priced.runtime).to.not.equal(base.runtime);
    const otherKey = await fingerprints(
      configured({ runtime: { providerApiKey: 'one-secret-value', mcpSigningKey: signingKey() as string } }),
    );
    expect(otherKey.runtime, 'another delegation key').to.not.equal(base.runtime);
    expect(otherKey.gateway).to.equal(base.gateway);
    const otherMaterial = await fingerprints(
      configured({
        runtime: { providerApiKey: 'one-secret-value' },
        plugins: teeNone({ keyMaterial: 'other-key-material-0123456789-abcdef' }),
      }),
    );
    expect(otherMaterial.gateway, 'other TEE keys').to.not.equal(base.gateway);
  });
});

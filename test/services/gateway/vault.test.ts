import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { isSigilError } from '@sigil/plugin-api';
import { systemClock } from '../../../core/clock.ts';
import { migrate, type Database } from '../../../core/db/database.ts';
import { serviceMigrations } from '../../../services/migrations.ts';
import {
  openSecretVault,
  SECRETS_VERSION_TTL_MS,
  type SecretVault,
  type SecretVaultSettings,
} from '../../../services/gateway/secrets/vault.ts';
import { eventually } from '../../support/eventually.ts';
import {
  describeEachDatabase,
  openTestKernel,
  openTwoHandles,
  type TwoHandles,
} from '../../support/kernel.ts';
import { serve } from '../../../services/serve.ts';
import { recordingLogger } from '../../support/logs.ts';

const alice = '0xAbCdEf0123456789aBcDeF0123456789AbCdEf01';
const bob = '0x1111111111111111111111111111111111111111';
const master = 'canary-master-key-for-vault-tests-0123456789';
const KINDS = ['memory', 'files', 'database'] as const;
type Kind = (typeof KINDS)[number];

describeEachDatabase('gateway secret vault', (database) => {
  let dir: string;
  let two: TwoHandles;
  let log: ReturnType<typeof recordingLogger>;
  const open = (settings: Partial<SecretVaultSettings> = {}) =>
    openSecretVault({
      masterKey: master,
      persistenceDir: dir,
      store: 'auto',
      shared: false,
      db: two.handles[0],
      clock: systemClock,
      logger: log.logger,
      ...settings,
    });
  /** A vault on each store, as the settings choose it; a database one on the given handle. */
  const vaultOf = (kind: Kind, db: Database = two.handles[0]): SecretVault =>
    open(
      kind === 'memory' ? { persistenceDir: undefined } : kind === 'files' ? {} : { store: 'database', db },
    ).vault;
  const filesDir = () => join(dir, 'gateway-secrets');
  const rows = () =>
    two.handles[0]('gateway_secrets').select('lookup', 'sealed', 'version') as Promise<
      { lookup: string; sealed: string | null; version: number | string }[]
    >;

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sigil-vault-'));
    log = recordingLogger();
    two = await openTwoHandles(database);
    await migrate(two.handles[0], serviceMigrations);
  });
  afterEach(async () => {
    await two.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('keeps secrets per wallet and per server, on each store', async () => {
    for (const kind of KINDS) {
      const v = vaultOf(kind);
      await v.put(alice, 'memory', { API_TOKEN: 'alice-memory' });
      await v.put(alice, 'search', { API_TOKEN: 'alice-search' });
      await v.put(bob, 'memory', { API_TOKEN: 'bob-memory' });
      expect((await v.get(alice, 'memory')).values, kind).to.deep.equal({ API_TOKEN: 'alice-memory' });
      expect((await v.get(alice, 'search')).values, kind).to.deep.equal({ API_TOKEN: 'alice-search' });
      expect((await v.get(bob, 'memory')).values, kind).to.deep.equal({ API_TOKEN: 'bob-memory' });
      expect((await v.get(bob, 'search')).values, kind).to.deep.equal({});
      expect((await v.get(alice.toLowerCase(), 'memory')).values, kind).to.deep.equal({
        API_TOKEN: 'alice-memory',
      });
    }
  });

  it('persists only ciphertext, with no wallet address, and survives a new instance (files, database)', async () => {
    const forbidden = ['canary-secret-value', alice.toLowerCase().slice(2), alice.slice(2), 'API_TOKEN'];
    for (const kind of ['files', 'database'] as const) {
      await vaultOf(kind).put(alice, 'memory', {
        API_TOKEN: 'canary-secret-value-1',
        OTHER: 'canary-secret-value-2',
      });
      expect(await vaultOf(kind).names(alice, 'memory'), kind).to.deep.equal(['API_TOKEN', 'OTHER']);
    }
    const files = readdirSync(filesDir());
    expect(files).to.have.length(1);
    const stored = await rows();
    expect(stored).to.have.length(1);
    // The same lookup key names the entry in both: an HMAC of (wallet, server), never the address.
    expect(stored[0]?.lookup).to.match(/^[0-9a-f]{64}$/);
    expect(files[0]).to.equal(`${stored[0]?.lookup}.json`);
    for (const text of [readFileSync(join(filesDir(), files[0] as string), 'utf8'), JSON.stringify(stored)]) {
      for (const value of forbidden) expect(text).not.to.include(value);
    }
  });

  it('cannot decrypt with another master key, nor a tampered entry (files, database)', async () => {
    const flip = (sealed: string) => {
      const entry = JSON.parse(sealed) as { ciphertext: string };
      const bytes = Buffer.from(entry.ciphertext, 'base64');
      bytes[0] = (bytes[0] ?? 0) ^ 1;
      return JSON.stringify({ ...entry, ciphertext: bytes.toString('base64') });
    };
    for (const kind of ['files', 'database'] as const) {
      await vaultOf(kind).put(alice, 'memory', { API_TOKEN: 'x-secret-value' });
      const other = open({
        masterKey: 'another-master-key-0123456789abcdef0123',
        ...(kind === 'database' && { store: 'database' }),
      }).vault;
      expect((await other.get(alice, 'memory')).values, kind).to.deep.equal({});
    }
    const file = join(filesDir(), readdirSync(filesDir())[0] as string);
    writeFileSync(file, flip(readFileSync(file, 'utf8')));
    const [row] = await rows();
    await two.handles[0]('gateway_secrets')
      .where({ lookup: row?.lookup })
      .update({ sealed: flip(row?.sealed as string) });
    for (const kind of ['files', 'database'] as const) {
      const err = await vaultOf(kind)
        .get(alice, 'memory')
        .catch((e: unknown) => e);
      expect(isSigilError(err) && err.message, kind).to.match(/failed authentication/);
      // A change reads the entry first: it refuses the tampered one too, and leaves it as it is.
      const put = await vaultOf(kind)
        .put(alice, 'memory', { OTHER: 'y' })
        .catch((e: unknown) => e);
      expect(isSigilError(put) && put.message, kind).to.match(/failed authentication/);
    }
    expect((await rows())[0]?.version).to.satisfy((version: number | string) => Number(version) === 1);
  });

  it('deletes one secret or all of them, on each store; a database entry keeps its row with a new version', async () => {
    for (const kind of KINDS) {
      const v = vaultOf(kind);
      await v.put(alice, 'memory', { A_TOKEN: 'first-value', B_TOKEN: 'second-value' });
      expect(await v.delete(alice, 'memory', 'A_TOKEN'), kind).to.equal(true);
      expect(await v.names(alice, 'memory'), kind).to.deep.equal(['B_TOKEN']);
      expect(await v.delete(alice, 'memory', 'A_TOKEN'), kind).to.equal(false);
      expect(await v.delete(alice, 'memory'), kind).to.equal(true);
      expect(await v.delete(alice, 'memory'), kind).to.equal(false);
      expect((await v.get(alice, 'memory')).version, kind).to.equal(3);
    }
    expect(readdirSync(filesDir())).to.deep.equal([]);
    const [row] = await rows();
    expect(row?.sealed).to.equal(null);
    expect(Number(row?.version)).to.equal(3);
  });

  it('says at start-up that secrets are memory-only without GATEWAY_SECRET_KEY, and writes nothing', async () => {
    const { vault } = open({ masterKey: undefined });
    expect(vault.mode).to.equal('memory');
    expect(log.lines.map((line) => line.msg).join('\n')).to.match(
      /secrets are memory-only: set GATEWAY_SECRET_KEY/,
    );
    await vault.put(alice, 'memory', { API_TOKEN: 'memory-only-value' });
    expect((await vault.get(alice, 'memory')).values).to.deep.equal({ API_TOKEN: 'memory-only-value' });
    expect(readdirSync(dir)).to.deep.equal([]);
    expect(await rows()).to.deep.equal([]);
  });

  it('keeps secrets in the database when replicas share it, or when asked; never in files then', async () => {
    for (const settings of [{ shared: true }, { store: 'database' as const }]) {
      const { vault } = open(settings);
      expect(vault.mode).to.equal('persistent');
      await vault.put(alice, 'memory', { API_TOKEN: 'in-the-database' });
    }
    expect(existsSync(filesDir())).to.equal(false);
    expect(await rows()).to.have.length(1);
    expect(log.lines.map((line) => line.msg)).to.include(
      'secrets are kept in the database (gateway_secrets), sealed under GATEWAY_SECRET_KEY',
    );
  });

  it('refuses to keep secrets in the database without GATEWAY_SECRET_KEY, naming the setting', () => {
    for (const [settings, why] of [
      [{ shared: true }, /database\.shared/],
      [{ store: 'database' as const }, /gateway\.secretsStore is database/],
    ] as const) {
      let err: unknown;
      try {
        open({ ...settings, masterKey: undefined });
      } catch (caught) {
        err = caught;
      }
      expect(isSigilError(err) && err.code).to.equal('config_invalid');
      const message = (err as Error).message;
      expect(message).to.match(/gateway\.secretKey \(GATEWAY_SECRET_KEY\) is required/);
      expect(message).to.match(why);
    }
  });

  it('refuses to start a gateway on a shared database without GATEWAY_SECRET_KEY', async () => {
    const kernel = await openTestKernel({
      database,
      config: { database: { shared: true }, gateway: { secretKey: undefined } },
    });
    try {
      const err = await serve(kernel, ['gateway']).catch((e: unknown) => e);
      expect(isSigilError(err) && err.code).to.equal('config_invalid');
      expect((err as Error).message).to.match(
        /GATEWAY_SECRET_KEY\) is required when replicas share the database/,
      );
    } finally {
      await kernel.close();
    }
  });

  it('loses no update: concurrent puts of different names all survive, on each store and across two database handles', async () => {
    const names = Array.from({ length: 16 }, (_, i) => `NAME_${String(i).padStart(2, '0')}`);
    for (const kind of KINDS) {
      const vaults = kind === 'database' ? two.handles.map((db) => vaultOf(kind, db)) : [vaultOf(kind)];
      await Promise.all(
        names.map((name, i) =>
          (vaults[i % vaults.length] as SecretVault).put(alice, 'memory', { [name]: `v${i}` }),
        ),
      );
      for (const vault of vaults) expect(await vault.names(alice, 'memory'), kind).to.deep.equal(names);
    }
    expect(Number((await rows())[0]?.version)).to.equal(names.length);
  });

  it('gives each change a greater version, deletes included; another replica sees it within SECRETS_VERSION_TTL_MS', async () => {
    const [a, b] = two.handles.map((db) => vaultOf('database', db)) as [SecretVault, SecretVault];
    expect(await b.version(alice, 'memory')).to.equal(0);
    await a.put(alice, 'memory', { API_TOKEN: 'first' });
    expect(await a.version(alice, 'memory')).to.equal(1); // its own change, at once
    await eventually(
      'b sees version 1',
      async () => (await b.version(alice, 'memory')) === 1,
      SECRETS_VERSION_TTL_MS + 1000,
    );
    await a.delete(alice, 'memory');
    await a.put(alice, 'memory', { API_TOKEN: 'second' });
    expect(await a.get(alice, 'memory')).to.deep.equal({ values: { API_TOKEN: 'second' }, version: 3 });
    await eventually(
      'b sees version 3',
      async () => (await b.version(alice, 'memory')) === 3,
      SECRETS_VERSION_TTL_MS + 1000,
    );
  });

  it('imports VAULT_PERSISTENCE_DIR into the database once: counted, never logged, deletes not brought back, files kept', async () => {
    const canaries = ['canary-import-alice-value', 'canary-import-bob-value'];
    const files = vaultOf('files');
    await files.put(alice, 'memory', { API_TOKEN: canaries[0] as string });
    await files.put(bob, 'search', { API_TOKEN: canaries[1] as string });
    writeFileSync(join(filesDir(), `${'f'.repeat(64)}.json`), '{"not": "an entry"}');
    writeFileSync(join(filesDir(), 'stray.txt'), 'ignored');
    const imports = () => log.lines.filter((line) => /imported into the database/.test(line.msg));

    const first = open({ shared: true });
    await first.start();
    expect((await first.vault.get(alice, 'memory')).values).to.deep.equal({ API_TOKEN: canaries[0] });
    expect((await first.vault.get(bob, 'search')).values).to.deep.equal({ API_TOKEN: canaries[1] });
    expect(imports()[0]).to.include({ imported: 2, alreadyStored: 0, unreadable: 1 });

    await first.vault.delete(alice, 'memory');
    await first.vault.put(bob, 'search', { API_TOKEN: 'replaced-after-import' });
    const again = open({ store: 'database' });
    await again.start();
    expect(imports()[1]).to.include({ imported: 0, alreadyStored: 2, unreadable: 1 });
    expect((await again.vault.get(alice, 'memory')).values).to.deep.equal({});
    expect((await again.vault.get(bob, 'search')).values).to.deep.equal({
      API_TOKEN: 'replaced-after-import',
    });
    expect(readdirSync(filesDir())).to.have.length(4);
    const logged = JSON.stringify(log.lines);
    for (const canary of canaries) expect(logged).not.to.include(canary);
    expect(JSON.stringify(await rows())).not.to.include('canary-import');
  });
});

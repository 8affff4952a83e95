import { generateKeyPairSync } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { secp256k1 } from '@noble/curves/secp256k1';
import { expect } from 'chai';
import { hashMessage, serializeSignature } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { createRuntimeApp } from '../../../services/runtime/app.ts';
import { PROVIDER_VAULT_MESSAGE, ProviderKeyUnavailable } from '../../../services/runtime/vault/index.ts';
import { describeEachDatabase, openTestKernel, stickyDatabase } from '../../support/kernel.ts';
import { newWallet } from '../../core/auth/support.ts';
import { captureLogs } from '../../support/logs.ts';
import { refusal, sessionOf } from './vault-support.ts';
import { pluginsWithLocalProvider, Stack } from './support.ts';

const CANARY = 'sk-canary-provider-key-7f3a9c1e5b2d4f6a8c0e';
const CANARY_2 = 'sk-ant-canary-second-key-0d9e8f7a6b5c4d3e';

describeEachDatabase('provider vault (BYOK)', (fresh) => {
  const sticky = stickyDatabase(fresh);
  let dir: string;
  let stack: Stack;
  let logs: ReturnType<typeof captureLogs>;
  /** Every response body seen, to prove no key ever comes back. */
  const seen: string[] = [];

  const start = () =>
    Stack.start({
      database: sticky.database,
      logs: logs.stream,
      config: {
        vault: { persistenceDir: dir },
        plugins: pluginsWithLocalProvider(),
      },
    });
  const call = async (method: string, path: string, body: unknown, jwt?: string) => {
    const res = await stack.send('runtime', method, path, body, jwt);
    const text = await res.text();
    seen.push(text);
    return { status: res.status, body: (text === '' ? {} : JSON.parse(text)) as Record<string, unknown> };
  };
  const status = async (jwt: string) => (await call('GET', '/wallet/provider-vault', undefined, jwt)).body;
  const slot = (body: Record<string, unknown>, name: string) =>
    (body.slots as Record<string, unknown>[]).find((entry) => entry.slot === name);

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sigil-provider-vault-'));
    logs = captureLogs();
    stack = await start();
  });
  after(async () => {
    await stack?.close();
    rmSync(dir, { recursive: true, force: true });
    await sticky.drop();
    expect(seen.join('\n')).to.not.include(CANARY);
    expect(seen.join('\n')).to.not.include(CANARY_2);
  });

  it('publishes the exact message to sign, and EOA signatures of it are deterministic (RFC 6979)', async () => {
    const { body } = await call('GET', '/wallet/provider-vault/message', undefined);
    expect(body.message).to.equal(PROVIDER_VAULT_MESSAGE);
    expect(PROVIDER_VAULT_MESSAGE).to.equal(
      'Sigil provider vault\n\nSign to unlock the LLM provider API keys you keep in your Sigil vault.\nThis signature is the key to that vault: sign it only for a Sigil runtime you use.\n\nVersion: 1',
    );
    const wallet = newWallet();
    const first = await wallet.signMessage({ message: PROVIDER_VAULT_MESSAGE });
    expect(await wallet.signMessage({ message: PROVIDER_VAULT_MESSAGE })).to.equal(first);
  });

  it('stores a key only in an unlocked session, unlocks with one signature, and serves it to providerKey', async () => {
    const wallet = newWallet();
    const jwt = await stack.signIn(wallet);
    const session = sessionOf(jwt, wallet.address);
    const initial = await status(jwt);
    expect(initial).to.include({ persistence: 'persistent', unlocked: false, unlockedUntil: null });
    expect(slot(initial, 'PROVIDER_API_KEY')).to.deep.equal({
      slot: 'PROVIDER_API_KEY',
      configured: false,
      unlocked: false,
      providers: ['provider-local'],
    });

    const locked = await call('PUT', '/wallet/provider-vault/keys/PROVIDER_API_KEY', { apiKey: CANARY }, jwt);
    expect(locked.status).to.equal(409);
    expect(locked.body).to.deep.include({
      code: 'conflict',
      details: { reason: 'vault_locked', unlockedOn: 'no_replica' },
    });
    expect(locked.body.hint).to.include('POST /wallet/provider-vault/unlock');

    const missing = await refusal(stack.runtime.vault.providerKey(session, 'PROVIDER_API_KEY'));
    expect(missing).to.be.instanceOf(ProviderKeyUnavailable);
    expect(missing.details).to.deep.equal({ reason: 'provider_key_missing', slot: 'PROVIDER_API_KEY' });
    expect(missing.hint).to.include('PUT /wallet/provider-vault/keys/PROVIDER_API_KEY');
    expect(missing.message).to.include('PROVIDER_API_KEY');

    const signature = await wallet.signMessage({ message: PROVIDER_VAULT_MESSAGE });
    const unlocked = await call('POST', '/wallet/provider-vault/unlock', { signature }, jwt);
    expect(unlocked.status).to.equal(200);
    expect(unlocked.body).to.include.keys('unlockedUntil');
    expect(unlocked.body).to.deep.include({ unlocked: [], migrated: [], unreadable: [] });

    const stored = await call('PUT', '/wallet/provider-vault/keys/PROVIDER_API_KEY', { apiKey: CANARY }, jwt);
    expect(stored).to.deep.equal({
      status: 201,
      body: { slot: 'PROVIDER_API_KEY', configured: true, unlocked: true, protection: 'wallet' },
    });
    expect(await stack.runtime.vault.providerKey(session, 'PROVIDER_API_KEY')).to.equal(CANARY);
    const after = await status(jwt);
    expect(after).to.include({ unlocked: true });
    expect(slot(after, 'PROVIDER_API_KEY')).to.include({
      configured: true,
      unlocked: true,
      protection: 'wallet',
    });

    // A slot of a provider that is not loaded (OpenAI's) works the same; replacing answers 200.
    const other = await call('PUT', '/wallet/provider-vault/keys/OPENAI_API_KEY', { apiKey: CANARY_2 }, jwt);
    expect(other.status).to.equal(201);
    const replaced = await call(
      'PUT',
      '/wallet/provider-vault/keys/OPENAI_API_KEY',
      { apiKey: CANARY_2 },
      jwt,
    );
    expect(replaced.status).to.equal(200);
    expect(await stack.runtime.vault.providerKey(session, 'OPENAI_API_KEY')).to.equal(CANARY_2);
  });

  it('writes only ciphertext to the database, under an HMAC lookup: no key, no wallet address', async () => {
    const wallet = newWallet();
    const jwt = await stack.signIn(wallet);
    const signature = await wallet.signMessage({ message: PROVIDER_VAULT_MESSAGE });
    const stored = await call(
      'PUT',
      '/wallet/provider-vault/keys/ANTHROPIC_API_KEY',
      { apiKey: CANARY, signature },
      jwt,
    );
    expect(stored.status).to.equal(201);
    const db = stack.kernel.db;
    const vaults = (await db('provider_vaults').select()) as { lookup: string; sealed: string }[];
    expect(vaults.length).to.be.greaterThan(0);
    for (const row of vaults) expect(row.lookup).to.match(/^[0-9a-f]{64}$/);
    const everything = JSON.stringify([
      vaults,
      await db('vault_unlocks').select(),
      await db('provider_vault_server_key').select(),
    ]).toLowerCase();
    expect(everything).to.not.include(CANARY.toLowerCase());
    expect(everything).to.not.include(wallet.address.toLowerCase().slice(2));
    // Nothing of the vault is written to VAULT_PERSISTENCE_DIR any more: it is only imported from.
    expect(existsSync(join(dir, 'provider-vault'))).to.equal(false);
  });

  it('refuses an unlock signature made by another wallet or over another message', async () => {
    const wallet = newWallet();
    const jwt = await stack.signIn(wallet);
    for (const signature of [
      await newWallet().signMessage({ message: PROVIDER_VAULT_MESSAGE }),
      await wallet.signMessage({ message: `${PROVIDER_VAULT_MESSAGE} ` }),
    ]) {
      const res = await call('POST', '/wallet/provider-vault/unlock', { signature }, jwt);
      expect(res.status).to.equal(403);
      expect(res.body).to.deep.include({ code: 'forbidden', details: { reason: 'signature_mismatch' } });
    }
    expect((await status(jwt)).unlocked).to.equal(false);
  });

  it('refuses a different signature of the same message (a non-deterministic wallet) instead of mixing keys', async () => {
    const key = generatePrivateKey();
    const wallet = privateKeyToAccount(key);
    const jwt = await stack.signIn(wallet);
    const signature = await wallet.signMessage({ message: PROVIDER_VAULT_MESSAGE });
    await call('PUT', '/wallet/provider-vault/keys/PROVIDER_API_KEY', { apiKey: CANARY, signature }, jwt);
    // The same message signed with fresh randomness: valid, but another vault root.
    const random = secp256k1.sign(hashMessage(PROVIDER_VAULT_MESSAGE).slice(2), key.slice(2), {
      lowS: true,
      extraEntropy: true,
    });
    const other = serializeSignature({
      r: `0x${random.r.toString(16).padStart(64, '0')}`,
      s: `0x${random.s.toString(16).padStart(64, '0')}`,
      yParity: random.recovery,
    });
    expect(other).to.not.equal(signature);
    const second = await stack.signIn(wallet);
    const res = await call('POST', '/wallet/provider-vault/unlock', { signature: other }, second);
    expect(res.status).to.equal(409);
    expect(res.body).to.deep.include({ details: { reason: 'vault_key_mismatch' } });
    // The deterministic signature still opens it.
    const ok = await call('POST', '/wallet/provider-vault/unlock', { signature }, second);
    expect(ok.body.unlocked).to.deep.equal(['PROVIDER_API_KEY']);
  });

  it('keeps decrypted keys per session: another session is locked, lock and expiry end it', async () => {
    const wallet = newWallet();
    const jwt = await stack.signIn(wallet);
    const signature = await wallet.signMessage({ message: PROVIDER_VAULT_MESSAGE });
    await call('PUT', '/wallet/provider-vault/keys/PROVIDER_API_KEY', { apiKey: CANARY, signature }, jwt);
    const session = sessionOf(jwt, wallet.address);
    expect(await stack.runtime.vault.providerKey(session, 'PROVIDER_API_KEY')).to.equal(CANARY);

    const other = await stack.signIn(wallet);
    const lockedElsewhere = await refusal(
      stack.runtime.vault.providerKey(sessionOf(other, wallet.address), 'PROVIDER_API_KEY'),
    );
    expect(lockedElsewhere.details).to.deep.equal({
      reason: 'vault_locked',
      slot: 'PROVIDER_API_KEY',
      unlockedOn: 'no_replica',
    });
    expect(lockedElsewhere.hint).to.include('POST /wallet/provider-vault/unlock');
    // Another wallet's session id gets nothing either.
    const stranger = newWallet();
    const strangers = await refusal(
      stack.runtime.vault.providerKey({ ...session, address: stranger.address }, 'PROVIDER_API_KEY'),
    );
    expect(strangers.details).to.deep.include({ reason: 'provider_key_missing' });

    expect((await call('POST', '/wallet/provider-vault/lock', undefined, jwt)).status).to.equal(204);
    expect((await status(jwt)).unlocked).to.equal(false);
    const afterLock = await refusal(stack.runtime.vault.providerKey(session, 'PROVIDER_API_KEY'));
    expect(afterLock.details).to.deep.include({ reason: 'vault_locked' });

    await call('POST', '/wallet/provider-vault/unlock', { signature }, other);
    const otherSession = sessionOf(other, wallet.address);
    expect(await stack.runtime.vault.providerKey(otherSession, 'PROVIDER_API_KEY')).to.equal(CANARY);
    stack.clock.advance(3600 * 1000 + 1000);
    const expired = await refusal(stack.runtime.vault.providerKey(otherSession, 'PROVIDER_API_KEY'));
    expect(expired.details).to.deep.include({ reason: 'vault_locked' });
  });

  it('deletes a key without an unlock', async () => {
    const wallet = newWallet();
    const jwt = await stack.signIn(wallet);
    const signature = await wallet.signMessage({ message: PROVIDER_VAULT_MESSAGE });
    await call('PUT', '/wallet/provider-vault/keys/OPENAI_API_KEY', { apiKey: CANARY, signature }, jwt);
    await call('POST', '/wallet/provider-vault/lock', undefined, jwt);
    expect(
      (await call('DELETE', '/wallet/provider-vault/keys/OPENAI_API_KEY', undefined, jwt)).status,
    ).to.equal(204);
    expect(slot(await status(jwt), 'OPENAI_API_KEY')).to.equal(undefined);
    const again = await call('DELETE', '/wallet/provider-vault/keys/OPENAI_API_KEY', undefined, jwt);
    expect(again.status).to.equal(404);
    const missing = await refusal(
      stack.runtime.vault.providerKey(sessionOf(jwt, wallet.address), 'OPENAI_API_KEY'),
    );
    expect(missing.details).to.deep.equal({ reason: 'provider_key_missing', slot: 'OPENAI_API_KEY' });
  });

  it('moves server-decryptable copies under the wallet key at unlock', async () => {
    const wallet = newWallet();
    await stack.runtime.vault.importServerProtected(wallet.address, 'ANTHROPIC_API_KEY', CANARY_2);
    const jwt = await stack.signIn(wallet);
    expect(slot(await status(jwt), 'ANTHROPIC_API_KEY')).to.include({
      configured: true,
      protection: 'server',
    });
    const signature = await wallet.signMessage({ message: PROVIDER_VAULT_MESSAGE });
    const res = await call('POST', '/wallet/provider-vault/unlock', { signature }, jwt);
    expect(res.body).to.deep.include({ unlocked: ['ANTHROPIC_API_KEY'], migrated: ['ANTHROPIC_API_KEY'] });
    expect(slot(await status(jwt), 'ANTHROPIC_API_KEY')).to.include({ protection: 'wallet', unlocked: true });
    expect(
      await stack.runtime.vault.providerKey(sessionOf(jwt, wallet.address), 'ANTHROPIC_API_KEY'),
    ).to.equal(CANARY_2);
    // A second unlock has nothing left to move.
    const again = await call('POST', '/wallet/provider-vault/unlock', { signature }, jwt);
    expect(again.body.migrated).to.deep.equal([]);
  });

  it('never echoes a key in a refusal', async () => {
    const wallet = newWallet();
    const jwt = await stack.signIn(wallet);
    for (const body of [
      { apiKey: `${CANARY} with spaces` },
      { apiKey: CANARY, extra: CANARY },
      { apiKey: CANARY.repeat(300) },
      { apiKey: CANARY, signature: '0x1234' },
      { apiKey: CANARY, signature: `0x${'11'.repeat(65)}` },
    ]) {
      const res = await call('PUT', '/wallet/provider-vault/keys/OPENAI_API_KEY', body, jwt);
      expect(res.status).to.be.within(400, 499);
    }
    const badSlot = await call('PUT', '/wallet/provider-vault/keys/not-a-slot', { apiKey: CANARY }, jwt);
    expect(badSlot.status).to.equal(400);
    const anonymous = await call('PUT', '/wallet/provider-vault/keys/OPENAI_API_KEY', { apiKey: CANARY });
    expect(anonymous.status).to.equal(401);
  });

  it('keeps keys stored but locked across a restart, and the next unlock opens them', async () => {
    const wallet = newWallet();
    let jwt = await stack.signIn(wallet);
    const signature = await wallet.signMessage({ message: PROVIDER_VAULT_MESSAGE });
    await call('PUT', '/wallet/provider-vault/keys/PROVIDER_API_KEY', { apiKey: CANARY, signature }, jwt);
    await stack.close();
    stack = await start();
    jwt = await stack.signIn(wallet);
    const session = sessionOf(jwt, wallet.address);
    expect(slot(await status(jwt), 'PROVIDER_API_KEY')).to.include({ configured: true, unlocked: false });
    const locked = await refusal(stack.runtime.vault.providerKey(session, 'PROVIDER_API_KEY'));
    expect(locked.details).to.deep.include({ reason: 'vault_locked' });
    const res = await call('POST', '/wallet/provider-vault/unlock', { signature }, jwt);
    expect(res.body.unlocked).to.deep.equal(['PROVIDER_API_KEY']);
    expect(await stack.runtime.vault.providerKey(session, 'PROVIDER_API_KEY')).to.equal(CANARY);
  });

  it('answers 503 when its storage fails while serving, never falling back to memory', async () => {
    const wallet = newWallet();
    const jwt = await stack.signIn(wallet);
    const signature = await wallet.signMessage({ message: PROVIDER_VAULT_MESSAGE });
    const { db } = stack.kernel;
    await db.schema.renameTable('provider_vaults', 'provider_vaults_away');
    try {
      const res = await call(
        'PUT',
        '/wallet/provider-vault/keys/OPENAI_API_KEY',
        { apiKey: CANARY, signature },
        jwt,
      );
      expect(res.status).to.equal(503);
      expect(res.body).to.deep.include({ code: 'unavailable', details: { reason: 'vault_unavailable' } });
    } finally {
      await db.schema.renameTable('provider_vaults_away', 'provider_vaults');
    }
  });

  it('leaves no key in any log line', () => {
    const text = logs.text();
    expect(text).to.include('provider');
    expect(text).to.not.include(CANARY);
    expect(text).to.not.include(CANARY_2);
    // Not even scrubbed: nothing ever tried to log one.
    expect(text).to.not.include('[REDACTED]');
  });
});

describe('provider vault in production', () => {
  const signingKey = (): string =>
    generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({
      format: 'pem',
      type: 'pkcs8',
    }) as string;

  it('starts without VAULT_PERSISTENCE_DIR: the vault is kept in the database', async () => {
    const kernel = await openTestKernel({
      config: { mode: 'production', runtime: { mcpSigningKey: signingKey() } },
    });
    try {
      const app = await createRuntimeApp(kernel);
      await app.vault.ready();
      expect(app.vault.persistence).to.equal('persistent');
      await app.close();
    } finally {
      await kernel.close();
    }
  });

  it('refuses to start when VAULT_PERSISTENCE_DIR cannot be read (its files could not be imported)', async () => {
    const base = mkdtempSync(join(tmpdir(), 'sigil-provider-vault-'));
    const notADir = join(base, 'file');
    writeFileSync(notADir, 'x');
    const kernel = await openTestKernel({
      config: {
        mode: 'production',
        runtime: { mcpSigningKey: signingKey() },
        vault: { persistenceDir: notADir },
      },
    });
    try {
      const app = await createRuntimeApp(kernel);
      let failed: unknown;
      await app.start().catch((err: unknown) => (failed = err));
      expect(failed).to.be.instanceOf(Error);
      await app.close();
    } finally {
      await kernel.close();
      rmSync(base, { recursive: true, force: true });
    }
  });

  it('refuses to start without MCP_SIGNING_KEY', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sigil-provider-vault-'));
    const kernel = await openTestKernel({ config: { mode: 'production', vault: { persistenceDir: dir } } });
    try {
      expect((await refusal(createRuntimeApp(kernel))).message).to.match(/MCP_SIGNING_KEY/);
    } finally {
      await kernel.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import type { PrivateKeyAccount } from 'viem/accounts';
import { isSigilError, type SigilError } from '@sigil/plugin-api';
import { databaseNowMs } from '../../../core/db/database.ts';
import { PROVIDER_VAULT_MESSAGE, VAULT_CHECK_TTL_MS } from '../../../services/runtime/vault/index.ts';
import { newWallet } from '../../core/auth/support.ts';
import { eventually } from '../../support/eventually.ts';
import { describeEachDatabase, stickyDatabase, type TestDatabase } from '../../support/kernel.ts';
import { captureLogs } from '../../support/logs.ts';
import { readSse, runtimeClient } from './chat-support.ts';
import { setOnChain } from './ledger/support.ts';
import { refusal, sessionOf } from './vault-support.ts';
import { pluginsWithLocalProvider, pluginsWithTee, Stack } from './support.ts';

const SLOT = 'PROVIDER_API_KEY';
/** tee-none without key material: the vault's server key is drawn once and kept in the database. */
const NO_TEE_KEY = { keyMaterial: undefined };
const token = Math.random().toString(36).slice(2);
const CANARY = `sk-canary-${token}-replicated-provider-key`;
const ROTATED = `sk-canary-${token}-rotated-provider-key`;

/**
 * Scale-out (issue #29, WP3): two runtimes on one database, as two replicas behind a load balancer.
 * A wallet's sealed keys are in the database, so what is stored through one replica the other opens
 * after its own unlock; decrypted keys stay in the memory of the replica that unlocked, so the other
 * refuses with `vault_locked` and a hint that tells another replica's unlock from none; a lock, a
 * replaced or a deleted key through one replica holds on the other within VAULT_CHECK_TTL_MS.
 */
describe('provider vault across replicas', function () {
  this.timeout(120_000);

  describeEachDatabase('vault replicas', (fresh: TestDatabase) => {
    const sticky = stickyDatabase(fresh);
    let logs: ReturnType<typeof captureLogs>;
    let a: Stack;
    let b: Stack;
    /** Every response body seen, to prove no key ever comes back. */
    const seen: string[] = [];

    const start = (database: TestDatabase, persistenceDir?: string) =>
      Stack.start({
        database,
        logs: logs.stream,
        config: {
          database: { shared: true },
          ...(persistenceDir === undefined ? {} : { vault: { persistenceDir } }),
          plugins: pluginsWithLocalProvider({}, NO_TEE_KEY),
        },
      });

    before(async () => {
      logs = captureLogs();
      a = await start(sticky.database);
      b = await start(sticky.database);
    });
    after(async () => {
      await b?.close();
      await a?.close();
      await sticky.drop();
    });

    const call = async (on: Stack, method: string, path: string, body: unknown, jwt: string) => {
      const res = await on.send('runtime', method, path, body, jwt);
      const text = await res.text();
      seen.push(text);
      // eslint-disable-next-line @typescript-eslint/no-explicit-any -- response bodies, checked field by field
      return { status: res.status, body: (text === '' ? {} : JSON.parse(text)) as Record<string, any> };
    };
    const sign = (wallet: PrivateKeyAccount) => wallet.signMessage({ message: PROVIDER_VAULT_MESSAGE });
    const unlock = async (on: Stack, wallet: PrivateKeyAccount, jwt: string) =>
      call(on, 'POST', '/wallet/provider-vault/unlock', { signature: await sign(wallet) }, jwt);
    const put = (on: Stack, slot: string, apiKey: string, jwt: string) =>
      call(on, 'PUT', `/wallet/provider-vault/keys/${slot}`, { apiKey }, jwt);

    /** A wallet signed in once (one session JWT, good on both), its key stored and unlocked through A. */
    async function storedThroughA(apiKey = CANARY) {
      const wallet = newWallet();
      const jwt = await a.signIn(wallet);
      const stored = await call(
        a,
        'PUT',
        `/wallet/provider-vault/keys/${SLOT}`,
        { apiKey, signature: await sign(wallet) },
        jwt,
      );
      expect(stored.status).to.equal(201);
      return { wallet, jwt, session: sessionOf(jwt, wallet.address) };
    }

    it('a key stored through A is refused on B (vault_locked: unlocked on another replica) until B unlocks, then B’s chat uses it', async () => {
      const { wallet, jwt, session } = await storedThroughA();
      expect(await a.runtime.vault.providerKey(session, SLOT)).to.equal(CANARY);

      const onB = await refusal(b.runtime.vault.providerKey(session, SLOT));
      expect(onB.code).to.equal('conflict');
      expect(onB.details).to.deep.equal({
        reason: 'vault_locked',
        slot: SLOT,
        unlockedOn: 'another_replica',
      });
      expect(onB.hint).to.include('another runtime replica').and.include('affinity');
      expect(onB.hint).to.include('POST /wallet/provider-vault/unlock');

      // Through B's routes, as a request the balancer sent there: a chat message, and a store.
      await setOnChain(a.runtime.ledger.ledger, wallet.address, 1_000_000n);
      const client = runtimeClient(b.url('runtime'), jwt);
      const agent = await client.json('POST', '/agents', { name: 'a', model: 'sigil-echo' });
      const chat = (await client.json('POST', `/agents/${agent.body.id}/sessions`, {})).body;
      const messages = `/agents/${agent.body.id}/sessions/${chat.id}/messages`;
      const refused = await client.json('POST', messages, { content: 'hi' });
      seen.push(JSON.stringify(refused.body));
      expect(refused.status).to.equal(409);
      expect(refused.body.details).to.deep.equal({
        reason: 'vault_locked',
        slot: SLOT,
        unlockedOn: 'another_replica',
      });
      const storeOnB = await put(b, 'OPENAI_API_KEY', CANARY, jwt);
      expect(storeOnB.status).to.equal(409);
      expect(storeOnB.body.details).to.deep.equal({ reason: 'vault_locked', unlockedOn: 'another_replica' });

      const unlocked = await unlock(b, wallet, jwt);
      expect(unlocked.status).to.equal(200);
      expect(unlocked.body.unlocked).to.deep.equal([SLOT]);
      expect(await b.runtime.vault.providerKey(session, SLOT)).to.equal(CANARY);
      const res = await client.send('POST', messages, { content: 'hello there' });
      const events = await readSse(res);
      seen.push(JSON.stringify(events));
      expect(events.find((event) => event.event === 'cost')?.data).to.include({ keyKind: 'byok' });
    });

    it('says “never unlocked” when no live replica holds the session’s unlock: none made, another session’s, or a dead replica’s', async () => {
      const wallet = newWallet();
      const jwt = await a.signIn(wallet);
      const signature = await sign(wallet);
      // Stored with the signature on B, so unlocked there; a second session of the wallet has none.
      expect(
        (await call(b, 'PUT', `/wallet/provider-vault/keys/${SLOT}`, { apiKey: CANARY, signature }, jwt))
          .status,
      ).to.equal(201);
      const other = await a.signIn(wallet);
      const elsewhere = await refusal(a.runtime.vault.providerKey(sessionOf(other, wallet.address), SLOT));
      expect(elsewhere.details).to.deep.equal({
        reason: 'vault_locked',
        slot: SLOT,
        unlockedOn: 'no_replica',
      });
      expect(elsewhere.hint).to.not.include('another runtime replica');
      expect(elsewhere.hint).to.include('POST /wallet/provider-vault/unlock');
      const onA = await refusal(a.runtime.vault.providerKey(sessionOf(jwt, wallet.address), SLOT));
      expect(onA.details).to.include({ unlockedOn: 'another_replica' });

      // B taken for dead (no heartbeat for replicaDeadAfterSeconds): its memory no longer counts.
      const db = a.kernel.db;
      const replicas = () => db('replicas').where({ id: b.kernel.replica.id });
      await replicas().update({ heartbeat_at: 0 });
      try {
        const dead = await refusal(a.runtime.vault.providerKey(sessionOf(jwt, wallet.address), SLOT));
        expect(dead.details).to.include({ unlockedOn: 'no_replica' });
      } finally {
        await replicas().update({ heartbeat_at: databaseNowMs(db) });
      }
    });

    it('a lock through A ends the session’s unlock on B within VAULT_CHECK_TTL_MS', async () => {
      const { wallet, jwt, session } = await storedThroughA();
      await unlock(b, wallet, jwt);
      expect(await b.runtime.vault.providerKey(session, SLOT)).to.equal(CANARY);
      expect((await call(a, 'POST', '/wallet/provider-vault/lock', undefined, jwt)).status).to.equal(204);
      expect((await refusal(a.runtime.vault.providerKey(session, SLOT))).details).to.include({
        reason: 'vault_locked',
      });
      const locked = Date.now();
      const onB = await eventually(
        'B refusing the locked session',
        () => refusal(b.runtime.vault.providerKey(session, SLOT)).catch(() => undefined),
        VAULT_CHECK_TTL_MS + 10_000,
      );
      expect(Date.now() - locked).to.be.at.most(VAULT_CHECK_TTL_MS + 1000);
      expect(onB.details).to.deep.equal({ reason: 'vault_locked', slot: SLOT, unlockedOn: 'no_replica' });
      expect((await call(b, 'GET', '/wallet/provider-vault', undefined, jwt)).body.unlocked).to.equal(false);
    });

    it('a key replaced, then deleted, through A is what B uses within VAULT_CHECK_TTL_MS', async () => {
      const { wallet, jwt, session } = await storedThroughA();
      await unlock(b, wallet, jwt);
      expect(await b.runtime.vault.providerKey(session, SLOT)).to.equal(CANARY);

      expect((await put(a, SLOT, ROTATED, jwt)).status).to.equal(200);
      const replaced = Date.now();
      await eventually(
        'B using the replaced key',
        async () => (await b.runtime.vault.providerKey(session, SLOT)) === ROTATED,
        VAULT_CHECK_TTL_MS + 10_000,
      );
      expect(Date.now() - replaced).to.be.at.most(VAULT_CHECK_TTL_MS + 1000);

      expect(
        (await call(a, 'DELETE', `/wallet/provider-vault/keys/${SLOT}`, undefined, jwt)).status,
      ).to.equal(204);
      const missing = await eventually(
        'B refusing the deleted key',
        () => refusal(b.runtime.vault.providerKey(session, SLOT)).catch(() => undefined),
        VAULT_CHECK_TTL_MS + 10_000,
      );
      expect(missing.details).to.deep.equal({ reason: 'provider_key_missing', slot: SLOT });
    });

    it('loses no update: puts of one wallet’s slots through A and B at once all survive', async () => {
      const wallet = newWallet();
      const jwt = await a.signIn(wallet);
      const session = sessionOf(jwt, wallet.address);
      await unlock(a, wallet, jwt);
      await unlock(b, wallet, jwt);
      const slots = Array.from({ length: 12 }, (_, index) => `SLOT_${index}_API_KEY`);
      const value = (slot: string) => `${CANARY}-${slot}`;
      const answers = await Promise.all(
        slots.map((slot, index) => put(index % 2 === 0 ? a : b, slot, value(slot), jwt)),
      );
      expect(answers.map((answer) => answer.status)).to.deep.equal(slots.map(() => 201));
      // And one slot written by both at once: one of the two values, each answer honest.
      const both = await Promise.all([
        put(a, 'SHARED_API_KEY', CANARY, jwt),
        put(b, 'SHARED_API_KEY', ROTATED, jwt),
      ]);
      expect(both.map((answer) => answer.status).sort()).to.deep.equal([200, 201]);

      const status = (await call(a, 'GET', '/wallet/provider-vault', undefined, jwt)).body;
      const configured = (status.slots as { slot: string; configured: boolean }[])
        .filter((entry) => entry.configured)
        .map((entry) => entry.slot);
      expect(configured).to.include.members([...slots, 'SHARED_API_KEY']);
      for (const on of [a, b])
        await eventually(
          'every replica serving every stored key',
          async () => {
            for (const slot of slots)
              if ((await on.runtime.vault.providerKey(session, slot)) !== value(slot)) return false;
            return true;
          },
          VAULT_CHECK_TTL_MS + 10_000,
        );
      const shared = await a.runtime.vault.providerKey(session, 'SHARED_API_KEY');
      expect([CANARY, ROTATED]).to.include(shared);
      await eventually(
        'B agreeing on the slot both wrote',
        async () => (await b.runtime.vault.providerKey(session, 'SHARED_API_KEY')) === shared,
        VAULT_CHECK_TTL_MS + 10_000,
      );
    });

    it('refuses to start a replica whose server key is not the one the database’s vault was written under', async () => {
      let failed: unknown;
      await Stack.start({
        database: sticky.database,
        config: {
          database: { shared: true },
          plugins: [
            ...pluginsWithTee({
              resolve: 'tee-none',
              enabled: true,
              options: { keyMaterial: `another-key-material-${token}-0123456789` },
            }),
            { resolve: 'provider-local', enabled: true, options: {} },
          ],
        },
      }).then(
        (stack) => stack.close(),
        (err: unknown) => (failed = err),
      );
      expect(isSigilError(failed) && failed.code).to.equal('config_invalid');
      expect((failed as SigilError).message).to.include('another server key');
    });

    it('imports a one-machine VAULT_PERSISTENCE_DIR once: the next start and another replica import nothing, a deleted key is not brought back', async () => {
      // What a runtime before the database kept: server.key, key-id.json and a <lookup>.json per
      // wallet, written here from a vault on a database of its own (the file store's format).
      const dir = mkdtempSync(join(tmpdir(), 'sigil-vault-import-'));
      const source = stickyDatabase(fresh);
      const target = stickyDatabase(fresh);
      const wallet = newWallet();
      const old = await start(source.database);
      try {
        const jwt = await old.signIn(wallet);
        const signature = await sign(wallet);
        const body = { apiKey: CANARY, signature };
        expect((await call(old, 'PUT', `/wallet/provider-vault/keys/${SLOT}`, body, jwt)).status).to.equal(
          201,
        );
        const db = old.kernel.db;
        const key = (await db('provider_vault_server_key').first()) as { key_id: string; material: string };
        const files = join(dir, 'provider-vault');
        mkdirSync(files);
        writeFileSync(join(files, 'server.key'), key.material);
        writeFileSync(join(files, 'key-id.json'), JSON.stringify({ keyId: key.key_id, source: 'file' }));
        for (const row of (await db('provider_vaults').select()) as { lookup: string; sealed: string }[])
          writeFileSync(join(files, `${row.lookup}.json`), row.sealed);
        writeFileSync(join(files, `${'0'.repeat(64)}.json`), 'not a vault');
      } finally {
        await old.close();
        await source.drop();
      }

      const importLog = (text: string) =>
        text
          .split('\n')
          .filter((line) => line.includes('were imported into the database'))
          .map((line) => {
            const { imported, alreadyStored, unreadable } = JSON.parse(line) as Record<string, number>;
            return { imported, alreadyStored, unreadable };
          });
      const before = logs.text().length;
      const first = await start(target.database, dir);
      const second = await start(target.database, dir);
      try {
        expect(importLog(logs.text().slice(before))).to.deep.equal([
          { imported: 1, alreadyStored: 0, unreadable: 1 },
          { imported: 0, alreadyStored: 1, unreadable: 1 },
        ]);
        const jwt = await second.signIn(wallet);
        const unlocked = await unlock(second, wallet, jwt);
        expect(unlocked.body.unlocked).to.deep.equal([SLOT]);
        expect(await second.runtime.vault.providerKey(sessionOf(jwt, wallet.address), SLOT)).to.equal(CANARY);
        // Deleted through one replica: the files are still there, and no start brings the key back.
        expect(
          (await call(first, 'DELETE', `/wallet/provider-vault/keys/${SLOT}`, undefined, jwt)).status,
        ).to.equal(204);
        await first.close();
        const again = await start(target.database, dir);
        const status = (await call(again, 'GET', '/wallet/provider-vault', undefined, jwt)).body;
        expect(
          (status.slots as { slot: string; configured: boolean }[]).find((s) => s.slot === SLOT),
        ).to.include({
          configured: false,
        });
        await again.close();
      } finally {
        await second.close();
        await target.drop();
      }

      // On a database whose vault has another server key (A's and B's), the files could not be found:
      // they are left where they are, and the operator is told.
      const since = logs.text().length;
      const elsewhere = await start(sticky.database, dir);
      await elsewhere.close();
      rmSync(dir, { recursive: true, force: true });
      expect(logs.text().slice(since)).to.include('named under another server key');
      expect(importLog(logs.text().slice(since))).to.deep.equal([]);
    });

    it('keeps the server key it drew sealed under database.dataKey, and opens the vault with it after a restart', async () => {
      const own = stickyDatabase(fresh);
      const withDataKey = () =>
        Stack.start({
          database: own.database,
          config: {
            database: { shared: true, dataKey: `test-data-key-${token}-0123456789abcdef` } as never,
            plugins: pluginsWithLocalProvider({}, NO_TEE_KEY),
          },
        });
      const wallet = newWallet();
      let stack = await withDataKey();
      try {
        const jwt = await stack.signIn(wallet);
        const body = { apiKey: CANARY, signature: await sign(wallet) };
        expect((await call(stack, 'PUT', `/wallet/provider-vault/keys/${SLOT}`, body, jwt)).status).to.equal(
          201,
        );
        const { material } = (await stack.kernel.db('provider_vault_server_key').first()) as {
          material: string;
        };
        expect(JSON.parse(material)).to.include({ sealed: 'aes-256-gcm' });
        await stack.close();
        stack = await withDataKey();
        const again = await stack.signIn(wallet);
        expect((await unlock(stack, wallet, again)).body.unlocked).to.deep.equal([SLOT]);
      } finally {
        await stack.close();
        await own.drop();
      }
    });

    it('keeps no provider key in clear: not in the database, a log line or an answer', async () => {
      const db = a.kernel.db;
      const rows = JSON.stringify([
        await db('provider_vaults').select(),
        await db('vault_unlocks').select(),
        await db('provider_vault_server_key').select(),
      ]);
      expect(rows).to.include(a.kernel.replica.id); // the unlocks are there, by replica
      const text = logs.text();
      expect(text).to.include('provider vault');
      for (const canary of [CANARY, ROTATED]) {
        expect(rows).to.not.include(canary);
        expect(text).to.not.include(canary);
        expect(seen.join('\n')).to.not.include(canary);
      }
      expect(text).to.not.include('[REDACTED]');
    });
  });
});

import { randomBytes, randomUUID } from 'node:crypto';
import { expect } from 'chai';
import { ManualClock } from '../../../../core/clock.ts';
import { migrate, openDatabase, type Database } from '../../../../core/db/database.ts';
import { serviceMigrations } from '../../../../services/migrations.ts';
import { HistoryKeys } from '../../../../services/runtime/chat/history-keys.ts';
import {
  type Facet,
  normalized,
  plainDigest,
  ReflectMemory,
} from '../../../../services/runtime/reflect/memory.ts';
import { rewrapMemory } from '../../../../services/runtime/reflect/memory-rewrap.ts';
import { MemorySealer } from '../../../../services/runtime/reflect/memory-sealer.ts';
import { describeEachDatabase, type TestDatabase } from '../../../support/kernel.ts';
import { rejectionOf } from '../../../support/rejection.ts';
import { newDataKey } from '../chat-history-support.ts';
import { randomWallet, WEDNESDAY_NOON } from './support.ts';

const canary = () => `canary-${randomBytes(6).toString('hex')}`;
const TABLES = ['reflect_facets', 'reflect_learnings', 'reflect_skills', 'reflect_keys'];

/** A fresh migrated database (SQLite file or PostgreSQL schema) and memories on it under given keys. */
async function openMemoryDb(database: TestDatabase) {
  const { url, schema, cleanup } = database.fresh();
  const db = await openDatabase({ url, ...(schema ? { schema } : {}) });
  await migrate(db, serviceMigrations);
  const clock = new ManualClock(WEDNESDAY_NOON);
  return {
    db,
    clock,
    /** The memory as a runtime with these `runtime.history.dataKeys` composes it. */
    memory: (dataKeys: { id: string; key: string }[]) =>
      new ReflectMemory(db, clock, new MemorySealer(db, new HistoryKeys(dataKeys), clock)),
    close: async () => {
      await db.destroy();
      await cleanup();
    },
  };
}

/** Every stored byte of the memory (every table, every column), as one text to search. */
const stored = async (db: Database) =>
  JSON.stringify(await Promise.all(TABLES.map((table) => db(table).select())));

/** One session's facet (a preference), then a synthesis of a learning and a skill from it. */
async function learn(
  memory: ReflectMemory,
  wallet: string,
  words: { facet: string; learning: string; description?: string; instructions?: string },
) {
  const runId = randomUUID();
  const session = { id: randomUUID(), agentId: randomUUID(), lastSeq: 2 };
  const [facetId] = await memory.addFacets(wallet, 1, runId, session, [
    { kind: 'preference', statement: words.facet, messageIds: ['m1'] },
  ]);
  const facets: Facet[] = await memory.facets(wallet, [facetId as string]);
  const applied = await memory.apply(wallet, runId, facets, {
    learnings: [{ statement: words.learning, confidence: 0.9, facets: [facetId as string], supersedes: [] }],
    skills: words.instructions
      ? [
          {
            name: 'probe-skill',
            description: words.description ?? 'a skill',
            instructions: words.instructions,
            tools: ['probe_echo'],
            facets: [facetId as string],
          },
        ]
      : [],
  });
  return { session: session.id, facetId: facetId as string, ...applied };
}

describeEachDatabase('self-improvement memory sealed at rest', (database) => {
  const k1 = newDataKey('k1');

  it('with a key, no stored byte holds the words (facets, learnings, skills, edits); reads return them', async () => {
    const mem = await openMemoryDb(database);
    try {
      const memory = mem.memory([k1]);
      const wallet = randomWallet();
      const [facet, learning, description, instructions, edited] = [1, 2, 3, 4, 5].map(canary) as string[];
      const { facetId, learnings } = await learn(memory, wallet, {
        facet: `Always say ${facet}`,
        learning: `Always say ${learning}`,
        description: `Says ${description}`,
        instructions: `1. Call probe_echo with ${instructions}.`,
      });
      const id = learnings[0] as string;
      let raw = await stored(mem.db);
      for (const secret of [facet, learning, description, instructions, k1.key])
        expect(raw).to.not.include(secret);
      expect(await mem.db('reflect_keys').where({ wallet }).first()).to.include({ key_id: 'k1' });
      for (const table of ['reflect_facets', 'reflect_learnings', 'reflect_skills'])
        expect(
          (await mem.db(table).where({ wallet }).select('sealed')).map((row) => Boolean(row.sealed)),
        ).to.deep.equal([true]);
      // The twin digest is keyed: not the plain SHA-256 of the normalized statement.
      const row = await mem.db('reflect_learnings').where({ id }).first();
      expect(row.normalized_hash).to.match(/^[0-9a-f]{64}$/);
      expect(row.normalized_hash).to.not.equal(plainDigest(normalized(`Always say ${learning}`)));

      expect((await memory.facets(wallet, [facetId]))[0]?.statement).to.equal(`Always say ${facet}`);
      expect((await memory.learning(wallet, id)).statement).to.equal(`Always say ${learning}`);
      expect(await memory.skill(wallet, 'probe-skill')).to.include({
        description: `Says ${description}`,
        instructions: `1. Call probe_echo with ${instructions}.`,
      });
      await memory.editLearning(wallet, id, { statement: `Never say ${edited}` });
      raw = await stored(mem.db);
      expect(raw).to.not.include(edited);
      // Another process (a restart, a replica) opens it with the same key.
      expect((await mem.memory([k1]).learning(wallet, id)).statement).to.equal(`Never say ${edited}`);
    } finally {
      await mem.close();
    }
  });

  it('a value copied into another row, or into another wallet’s row, or altered, does not open', async () => {
    const mem = await openMemoryDb(database);
    try {
      const memory = mem.memory([k1]);
      const [alice, bob] = [randomWallet(), randomWallet()];
      const secret = canary();
      const one = (await learn(memory, alice, { facet: 'f', learning: `Always say ${secret}` })).learnings[0];
      const two = (await learn(memory, alice, { facet: 'g', learning: 'Never use emojis' })).learnings[0];
      const his = (await learn(memory, bob, { facet: 'h', learning: 'Always be brief' })).learnings[0];
      const statementOf = async (id: string | undefined) =>
        ((await mem.db('reflect_learnings').where({ id }).first()) as { statement: string }).statement;
      const put = (id: string | undefined, statement: string) =>
        mem.db('reflect_learnings').where({ id }).update({ statement });
      const [box, twoBox, hisBox] = [await statementOf(one), await statementOf(two), await statementOf(his)];

      await put(two, box);
      const moved = await rejectionOf(memory.learning(alice, two as string));
      expect(moved.code).to.equal('internal');
      expect(moved.details).to.deep.equal({ reason: 'memory_tampered', place: `learning:${two}` });
      expect(JSON.stringify(moved)).to.not.include(secret);
      // A list with one such row is refused whole, never partly shown.
      expect((await rejectionOf(memory.learnings(alice))).details).to.include({ reason: 'memory_tampered' });
      await put(two, twoBox);

      await put(his, box);
      expect((await rejectionOf(memory.learning(bob, his as string))).details).to.include({
        reason: 'memory_tampered',
      });
      await put(his, hisBox);

      const parsed = JSON.parse(box) as { ciphertext: string };
      const bytes = Buffer.from(parsed.ciphertext, 'base64');
      bytes[0] = (bytes[0] as number) ^ 1;
      await put(one, JSON.stringify({ ...parsed, ciphertext: bytes.toString('base64') }));
      expect((await rejectionOf(memory.learning(alice, one as string))).details).to.include({
        reason: 'memory_tampered',
      });
      await put(one, box);
      expect((await memory.learnings(alice)).map((l) => l.statement).sort()).to.deep.equal([
        `Always say ${secret}`,
        'Never use emojis',
      ]);
      expect((await memory.learnings(bob)).map((l) => l.statement)).to.deep.equal(['Always be brief']);
    } finally {
      await mem.close();
    }
  });

  it('finds twins sealed: a statement said again (normalized) merges its sources; the digest differs across wallets', async () => {
    const mem = await openMemoryDb(database);
    try {
      const memory = mem.memory([k1]);
      const [alice, bob] = [randomWallet(), randomWallet()];
      const first = await learn(memory, alice, { facet: 'f', learning: 'Always cite sources' });
      const again = await learn(memory, alice, { facet: 'g', learning: '  always  CITE sources ' });
      expect(again.learnings).to.deep.equal(first.learnings);
      const [merged] = await memory.learnings(alice);
      expect(merged?.statement).to.equal('Always cite sources');
      expect(merged?.sources.sessions).to.have.members([first.session, again.session]);
      await learn(memory, bob, { facet: 'f', learning: 'Always cite sources' });
      const digests = (await mem.db('reflect_learnings').select('wallet', 'normalized_hash')) as {
        normalized_hash: string;
      }[];
      expect(new Set(digests.map((row) => row.normalized_hash)).size).to.equal(2);
    } finally {
      await mem.close();
    }
  });

  it('refuses with a clear error, never the stored text, when the key is not configured or is another', async () => {
    const mem = await openMemoryDb(database);
    try {
      const wallet = randomWallet();
      const secret = canary();
      const { learnings } = await learn(mem.memory([k1]), wallet, { facet: 'f', learning: `Say ${secret}` });
      const missing = await rejectionOf(mem.memory([]).learning(wallet, learnings[0] as string));
      expect(missing.code).to.equal('unavailable');
      expect(missing.details).to.deep.equal({ reason: 'history_key_missing', keyId: 'k1' });
      expect(missing.hint).to.include('runtime.history.dataKeys');
      const other = mem.memory([{ id: 'k1', key: randomBytes(32).toString('base64') }]);
      const mismatch = await rejectionOf(other.learnings(wallet));
      expect(mismatch.details).to.deep.equal({ reason: 'history_key_mismatch', keyId: 'k1' });
      expect(JSON.stringify([missing, mismatch])).to.not.include(secret);
      // The memory without any sealer (no keys at all) does not pass a sealed row off as text.
      const bare = new ReflectMemory(mem.db, mem.clock);
      expect((await rejectionOf(bare.learnings(wallet))).code).to.equal('unavailable');
    } finally {
      await mem.close();
    }
  });

  it('rotates: rewrap moves wallet keys under the new key and seals plain-text rows; the old key can go', async () => {
    const mem = await openMemoryDb(database);
    try {
      const k2 = newDataKey('k2');
      const [plainWallet, sealedWallet] = [randomWallet(), randomWallet()];
      const [plainSecret, sealedSecret, skillSecret] = [canary(), canary(), canary()];
      // Before any key: stored as is, with plain digests.
      const plain = await learn(mem.memory([]), plainWallet, {
        facet: `Always say ${plainSecret}`,
        learning: `Always say ${plainSecret}`,
        instructions: `1. Call probe_echo with ${skillSecret}.`,
      });
      expect(await stored(mem.db)).to.include(plainSecret);
      const sealed = await learn(mem.memory([k1]), sealedWallet, {
        facet: 'f',
        learning: `Say ${sealedSecret}`,
      });
      // k2 first: the wallet sealed under k1 still opens.
      expect((await mem.memory([k2, k1]).learnings(sealedWallet))[0]?.statement).to.equal(
        `Say ${sealedSecret}`,
      );

      const keys = new HistoryKeys([k2, k1]);
      expect(await rewrapMemory(mem.db, keys, mem.clock)).to.deep.equal({
        rewrapped: 1,
        // The plain wallet's facet, learning and skill.
        encrypted: 3,
        unchanged: 0,
      });
      expect(await rewrapMemory(mem.db, keys, mem.clock)).to.deep.equal({
        rewrapped: 0,
        encrypted: 0,
        unchanged: 2,
      });
      const keyIds = (await mem.db('reflect_keys').select('key_id')) as { key_id: string }[];
      expect(keyIds.map((row) => row.key_id)).to.deep.equal(['k2', 'k2']);
      const raw = await stored(mem.db);
      for (const secret of [plainSecret, sealedSecret, skillSecret]) expect(raw).to.not.include(secret);

      // The old key gone: everything opens, and a twin of the once-plain learning still merges.
      const memory = mem.memory([k2]);
      expect((await memory.learnings(sealedWallet)).map((l) => l.id)).to.deep.equal(sealed.learnings);
      expect((await memory.facets(plainWallet, [plain.facetId]))[0]?.statement).to.equal(
        `Always say ${plainSecret}`,
      );
      expect((await memory.skill(plainWallet, 'probe-skill'))?.instructions).to.equal(
        `1. Call probe_echo with ${skillSecret}.`,
      );
      const twin = await learn(memory, plainWallet, { facet: 'f', learning: `always say ${plainSecret}` });
      expect(twin.learnings).to.deep.equal(plain.learnings);
      expect((await memory.learnings(plainWallet))[0]?.sources.sessions).to.have.members([
        plain.session,
        twin.session,
      ]);
    } finally {
      await mem.close();
    }
  });

  it('without keys the memory is plain text, marked so, and needs no key row', async () => {
    const mem = await openMemoryDb(database);
    try {
      const wallet = randomWallet();
      const secret = canary();
      const { learnings } = await learn(mem.memory([]), wallet, { facet: 'f', learning: `Say ${secret}` });
      const row = await mem.db('reflect_learnings').where({ id: learnings[0] }).first();
      expect(row).to.include({
        statement: `Say ${secret}`,
        normalized_hash: plainDigest(normalized(`Say ${secret}`)),
      });
      expect(Boolean(row.sealed)).to.equal(false);
      expect(await mem.db('reflect_keys').select()).to.deep.equal([]);
    } finally {
      await mem.close();
    }
  });
});

import { createHash, randomUUID } from 'node:crypto';
import type { Knex } from 'knex';
import { SigilError } from '@sigil/plugin-api';
import type { Clock } from '../../../core/clock.ts';
import type { Database } from '../../../core/db/database.ts';
import { type Forgotten, forgetSession } from './memory-forget.ts';
import type { ProducedItems, ReflectOutcome } from './pipeline.ts';

/**
 * What self-improvement keeps per wallet: facets (observations with provenance), learnings (short
 * statements synthesized from facets, superseded rather than overwritten) and skills (SKILL.md-shaped
 * procedures, one row per version). Statements and instructions hold the user's own words, so they
 * are sealed like the conversations they come from.
 */

export const FACET_KINDS = ['goal', 'preference', 'correction', 'recurring_task', 'tool_usage'] as const;
export type FacetKind = (typeof FACET_KINDS)[number];

/**
 * Seals text at rest (under the wallet's memory data key, memory-sealer.ts) or leaves it as is. `place`
 * names the row and field a value is stored in (`learning:<id>`): a sealed value is bound to it.
 */
export interface TextSealer {
  /** Whether `seal` seals: stored beside each value (`sealed`), so a row written either way opens. */
  readonly sealing: boolean;
  seal(wallet: string, text: string, place: string): Promise<string>;
  /** The text stored at `place`; `sealed`: the row's flag. */
  open(wallet: string, stored: string, place: string, sealed: boolean): Promise<string>;
  /** A digest of `text` to find equal texts by (keyed when sealing is on, so it reveals nothing). */
  digest(wallet: string, text: string): Promise<string>;
}

/** The digest of plain-text rows: SHA-256. */
export const plainDigest = (text: string): string => createHash('sha256').update(text).digest('hex');

/** No sealing: what runs without `runtime.history.dataKeys` (a sealed row then cannot be read). */
export const plaintext: TextSealer = {
  sealing: false,
  seal: (_wallet, text) => Promise.resolve(text),
  open: (_wallet, stored, place, sealed) =>
    sealed
      ? Promise.reject(
          new SigilError('unavailable', `The memory's ${place} is sealed and no data key is configured`, {
            details: { reason: 'history_key_missing' },
          }),
        )
      : Promise.resolve(stored),
  digest: (_wallet, text) => Promise.resolve(plainDigest(text)),
};

/** Where each sealed value is stored: its table, row and field, bound to the value when sealed. */
export const places = {
  facet: (id: string) => `facet:${id}`,
  learning: (id: string) => `learning:${id}`,
  skill: (id: string, field: 'description' | 'instructions') => `skill:${id}:${field}`,
};

export interface Facet {
  id: string;
  sessionId: string;
  agentId: string;
  kind: FacetKind;
  statement: string;
  /** The session's messages it was seen in. */
  messageIds: string[];
  runId: string;
  createdAt: string;
}

export type LearningStatus = 'active' | 'superseded' | 'deleted';

export interface Learning {
  id: string;
  statement: string;
  confidence: number;
  status: LearningStatus;
  supersededBy: string | null;
  sources: { facets: string[]; sessions: string[] };
  runId: string | null;
  createdAt: string;
  updatedAt: string;
  editedAt: string | null;
}

export interface Skill {
  id: string;
  name: string;
  version: number;
  description: string;
  instructions: string;
  tools: string[];
  sources: { facets: string[]; sessions: string[] };
  runId: string;
  createdAt: string;
}

/** What a synthesis call proposes, after the pipeline has checked it. */
export interface Synthesis {
  learnings: { statement: string; confidence: number; facets: string[]; supersedes: string[] }[];
  skills: { name: string; description: string; instructions: string; tools: string[]; facets: string[] }[];
}

export interface Applied {
  learnings: string[];
  skills: string[];
}

const json = (value: unknown) => JSON.stringify(value);
const parsed = <T>(text: string): T => JSON.parse(text) as T;
const iso = (ms: number | string | null) => (ms === null ? null : new Date(Number(ms)).toISOString());
/** A statement as twins are compared: trimmed, white space folded, lower case. */
export const normalized = (statement: string) => statement.trim().replace(/\s+/g, ' ').toLowerCase();

interface LearningRow {
  id: string;
  wallet: string;
  statement: string;
  confidence: number;
  status: LearningStatus;
  superseded_by: string | null;
  sources: string;
  run_id: string | null;
  created_at: number | string;
  updated_at: number | string;
  edited_at: number | string | null;
  sealed: boolean | number;
}

interface SkillRow {
  id: string;
  name: string;
  version: number;
  description: string;
  instructions: string;
  tools: string;
  sources: string;
  run_id: string;
  created_at: number | string;
  sealed: boolean | number;
}

export const learningNotFound = (id: string) =>
  new SigilError('not_found', `No learning ${id} for this wallet`, {
    details: { reason: 'learning_not_found' },
  });

export class ReflectMemory {
  private readonly listeners = new Set<(wallet: string) => void>();

  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly sealer: TextSealer = plaintext,
  ) {}

  /** Calls `listener` with a wallet whose learnings or skills this process changed, once the change committed. */
  onChange(listener: (wallet: string) => void): void {
    this.listeners.add(listener);
  }

  /** `write`, telling the listeners when it has ended (committed or not: a reread costs one read). */
  private changing<T>(wallet: string, write: Promise<T>): Promise<T> {
    return write.finally(() => {
      for (const listener of this.listeners) listener(wallet);
    });
  }

  /** The watermark: how far each of the wallet's sessions has been processed by this pipeline version. */
  async watermarks(wallet: string, version: number): Promise<Map<string, number>> {
    const rows = await this.db('reflect_watermarks')
      .where({ wallet, pipeline_version: version })
      .select<{ session_id: string; last_seq: number }[]>('session_id', 'last_seq');
    return new Map(rows.map((row) => [row.session_id, Number(row.last_seq)]));
  }

  /**
   * A session's facets and its new watermark, in one transaction: a crash either keeps both or
   * neither, so the session is extracted again and nothing is stored twice.
   */
  async addFacets(
    wallet: string,
    version: number,
    runId: string,
    session: { id: string; agentId: string; lastSeq: number },
    facets: { kind: FacetKind; statement: string; messageIds: string[] }[],
  ): Promise<string[]> {
    const now = this.clock.now().getTime();
    const rows = await Promise.all(
      facets.map(async (facet, position) => {
        const id = randomUUID();
        return {
          id,
          wallet,
          run_id: runId,
          session_id: session.id,
          agent_id: session.agentId,
          kind: facet.kind,
          statement: await this.sealer.seal(wallet, facet.statement, places.facet(id)),
          sealed: this.sealer.sealing,
          message_ids: json(facet.messageIds),
          position,
          synthesized_run_id: null,
          created_at: now,
        };
      }),
    );
    await this.db.transaction(async (trx) => {
      if (rows.length > 0) await trx('reflect_facets').insert(rows);
      await trx('reflect_watermarks')
        .insert({
          wallet,
          session_id: session.id,
          pipeline_version: version,
          last_seq: session.lastSeq,
          run_id: runId,
          processed_at: now,
        })
        .onConflict(['session_id', 'pipeline_version'])
        .merge(['last_seq', 'run_id', 'processed_at']);
    });
    return rows.map((row) => row.id);
  }

  /** Facets not yet synthesized into learnings, oldest first. */
  async pendingFacets(wallet: string, limit: number): Promise<Facet[]> {
    const rows = await this.db('reflect_facets')
      .where({ wallet })
      .whereNull('synthesized_run_id')
      .orderBy([{ column: 'created_at' }, { column: 'session_id' }, { column: 'position' }])
      .limit(limit);
    return Promise.all(rows.map((row: Record<string, unknown>) => this.facetOf(wallet, row)));
  }

  async facets(wallet: string, ids: readonly string[]): Promise<Facet[]> {
    if (ids.length === 0) return [];
    const rows = await this.db('reflect_facets').where({ wallet }).whereIn('id', ids);
    return Promise.all(rows.map((row: Record<string, unknown>) => this.facetOf(wallet, row)));
  }

  private async facetOf(wallet: string, row: Record<string, unknown>): Promise<Facet> {
    const id = row.id as string;
    return {
      id,
      sessionId: row.session_id as string,
      agentId: row.agent_id as string,
      kind: row.kind as FacetKind,
      statement: await this.sealer.open(
        wallet,
        row.statement as string,
        places.facet(id),
        Boolean(row.sealed),
      ),
      messageIds: parsed<string[]>(row.message_ids as string),
      runId: row.run_id as string,
      createdAt: iso(row.created_at as number) as string,
    };
  }

  /** The items behind a run's produced ids, in their order (one since removed is left out). */
  async produced(wallet: string, ids: ReflectOutcome['produced']): Promise<ProducedItems> {
    const byIds = (table: string, list: readonly string[]) =>
      list.length === 0 ? [] : this.db(table).where({ wallet }).whereIn('id', list);
    const [facets, learningRows, skillRows] = await Promise.all([
      this.facets(wallet, ids.facets),
      byIds('reflect_learnings', ids.learnings) as Promise<LearningRow[]>,
      byIds('reflect_skills', ids.skills) as Promise<SkillRow[]>,
    ]);
    const inOrder = <T extends { id: string }>(items: T[], order: readonly string[]) => {
      const found = new Map(items.map((item) => [item.id, item]));
      return order.flatMap((id) => found.get(id) ?? []);
    };
    const learnings = await Promise.all(learningRows.map((row) => this.learningOf(row)));
    const skills = await Promise.all(skillRows.map((row) => this.skillOf(wallet, row)));
    return {
      facets: inOrder(facets, ids.facets).map(({ id, kind, statement, sessionId }) => ({
        id,
        kind,
        statement,
        sessionId,
      })),
      learnings: inOrder(learnings, ids.learnings).map(({ id, statement, confidence, status }) => ({
        id,
        statement,
        confidence,
        status,
      })),
      skills: inOrder(skills, ids.skills).map(({ id, name, version, description }) => ({
        id,
        name,
        version,
        description,
      })),
    };
  }

  async learnings(wallet: string, status: LearningStatus | 'all' = 'active'): Promise<Learning[]> {
    const query = this.db('reflect_learnings').where({ wallet });
    if (status !== 'all') void query.andWhere({ status });
    const rows = await query.orderBy([
      { column: 'confidence', order: 'desc' },
      { column: 'updated_at', order: 'desc' },
      { column: 'id' },
    ]);
    return Promise.all(rows.map((row: LearningRow) => this.learningOf(row)));
  }

  async learning(wallet: string, id: string): Promise<Learning> {
    const row = await this.db('reflect_learnings').where({ wallet, id }).first<LearningRow | undefined>();
    if (!row || row.status === 'deleted') throw learningNotFound(id);
    return this.learningOf(row);
  }

  private async learningOf(row: LearningRow): Promise<Learning> {
    return {
      id: row.id,
      statement: await this.sealer.open(
        row.wallet,
        row.statement,
        places.learning(row.id),
        Boolean(row.sealed),
      ),
      confidence: Number(row.confidence),
      status: row.status,
      supersededBy: row.superseded_by,
      sources: parsed(row.sources),
      runId: row.run_id,
      createdAt: iso(row.created_at) as string,
      updatedAt: iso(row.updated_at) as string,
      editedAt: iso(row.edited_at),
    };
  }

  /** The user's own edit: the statement changes, its sources stay, and it is marked edited. */
  async editLearning(wallet: string, id: string, change: { statement?: string; confidence?: number }) {
    const current = await this.learning(wallet, id);
    const now = this.clock.now().getTime();
    const update = this.db('reflect_learnings')
      .where({ wallet, id })
      .update({
        ...(change.statement === undefined
          ? {}
          : {
              statement: await this.sealer.seal(wallet, change.statement, places.learning(id)),
              sealed: this.sealer.sealing,
              normalized_hash: await this.statementKey(wallet, change.statement),
            }),
        ...(change.confidence === undefined ? {} : { confidence: change.confidence }),
        edited_at: now,
        updated_at: now,
      });
    await this.changing(wallet, update.then());
    return { ...current, ...change, editedAt: iso(now), updatedAt: iso(now) as string };
  }

  /**
   * Deletes a learning: the row goes, so its words are no longer stored (a status would keep them);
   * a learning it had superseded stays superseded, pointing at nothing.
   */
  async deleteLearning(wallet: string, id: string): Promise<void> {
    await this.learning(wallet, id);
    await this.changing(
      wallet,
      this.db.transaction(async (trx) => {
        await trx('reflect_learnings').where({ wallet, id }).delete();
        await trx('reflect_learnings')
          .where({ wallet, superseded_by: id })
          .update({ superseded_by: null, updated_at: this.clock.now().getTime() });
      }),
    );
  }

  /** The latest version of each of the wallet's skills. */
  async skills(wallet: string): Promise<Skill[]> {
    const rows = await this.db('reflect_skills as s')
      .where({ 's.wallet': wallet, 's.deleted': false })
      .whereRaw(
        's.version = (select max(v.version) from reflect_skills v where v.wallet = s.wallet and v.name = s.name)',
      )
      .orderBy('s.name')
      .select<SkillRow[]>('s.*');
    return Promise.all(rows.map((row) => this.skillOf(wallet, row)));
  }

  async skill(wallet: string, name: string): Promise<Skill | undefined> {
    return (await this.skills(wallet)).find((skill) => skill.name === name);
  }

  private async skillOf(wallet: string, row: SkillRow): Promise<Skill> {
    const sealed = Boolean(row.sealed);
    return {
      id: row.id,
      name: row.name,
      version: Number(row.version),
      description: await this.sealer.open(
        wallet,
        row.description,
        places.skill(row.id, 'description'),
        sealed,
      ),
      instructions: await this.sealer.open(
        wallet,
        row.instructions,
        places.skill(row.id, 'instructions'),
        sealed,
      ),
      tools: parsed(row.tools),
      sources: parsed(row.sources),
      runId: row.run_id,
      createdAt: iso(row.created_at) as string,
    };
  }

  /** Deletes every version of a skill (the rows, and so its words); false when the wallet has none of that name. */
  async deleteSkill(wallet: string, name: string): Promise<boolean> {
    return (
      (await this.changing(wallet, this.db('reflect_skills').where({ wallet, name }).delete().then())) > 0
    );
  }

  /**
   * Applies a synthesis and marks its facets synthesized, in one transaction. A statement the wallet
   * already has (compared normalized) adds its sources to that learning instead of a twin; each
   * superseded learning stays, marked, pointing at its successor; a skill whose instructions changed
   * gets a new version.
   */
  async apply(
    wallet: string,
    runId: string,
    facets: readonly Facet[],
    synthesis: Synthesis,
  ): Promise<Applied> {
    const now = this.clock.now().getTime();
    const sessionsOf = (ids: readonly string[]) => [
      ...new Set(facets.filter((f) => ids.includes(f.id)).map((f) => f.sessionId)),
    ];
    const existingSkills = new Map((await this.skills(wallet)).map((skill) => [skill.name, skill]));
    const sealed = await Promise.all(
      synthesis.learnings.map(async (learning) => {
        const id = randomUUID();
        return {
          id,
          learning,
          statement: await this.sealer.seal(wallet, learning.statement, places.learning(id)),
          key: await this.statementKey(wallet, learning.statement),
        };
      }),
    );
    // Numbered past every stored version, including rows an older runtime marked deleted.
    const lastVersions = new Map(
      (
        await this.db('reflect_skills')
          .where({ wallet })
          .groupBy('name')
          .select<{ name: string; last: number | string }[]>('name', this.db.raw('max(version) as last'))
      ).map((row) => [row.name, Number(row.last)]),
    );
    const skillRows: Record<string, unknown>[] = [];
    for (const skill of synthesis.skills) {
      const previous = existingSkills.get(skill.name);
      if (
        previous &&
        previous.instructions === skill.instructions &&
        previous.description === skill.description
      )
        continue;
      const id = randomUUID();
      skillRows.push({
        id,
        wallet,
        name: skill.name,
        version: (lastVersions.get(skill.name) ?? 0) + 1,
        description: await this.sealer.seal(wallet, skill.description, places.skill(id, 'description')),
        instructions: await this.sealer.seal(wallet, skill.instructions, places.skill(id, 'instructions')),
        sealed: this.sealer.sealing,
        tools: json(skill.tools),
        sources: json({ facets: skill.facets, sessions: sessionsOf(skill.facets) }),
        run_id: runId,
        deleted: false,
        created_at: now,
      });
    }
    const applied: Applied = { learnings: [], skills: skillRows.map((row) => row.id as string) };
    const write = this.db.transaction(async (trx) => {
      for (const { id, learning, statement, key } of sealed) {
        const twin = await trx('reflect_learnings')
          .where({ wallet, status: 'active', normalized_hash: key })
          .first<LearningRow | undefined>();
        if (twin) {
          const sources = parsed<Learning['sources']>(twin.sources);
          const merged = {
            facets: [...new Set([...sources.facets, ...learning.facets])],
            sessions: [...new Set([...sources.sessions, ...sessionsOf(learning.facets)])],
          };
          await trx('reflect_learnings')
            .where({ id: twin.id })
            .update({
              sources: json(merged),
              confidence: Math.max(Number(twin.confidence), learning.confidence),
              updated_at: now,
            });
          applied.learnings.push(twin.id);
          continue;
        }
        await trx('reflect_learnings').insert({
          id,
          wallet,
          statement,
          sealed: this.sealer.sealing,
          normalized_hash: key,
          confidence: learning.confidence,
          status: 'active',
          superseded_by: null,
          sources: json({ facets: learning.facets, sessions: sessionsOf(learning.facets) }),
          run_id: runId,
          created_at: now,
          updated_at: now,
          edited_at: null,
        });
        if (learning.supersedes.length > 0)
          await trx('reflect_learnings')
            .where({ wallet, status: 'active' })
            .whereIn('id', learning.supersedes)
            .update({ status: 'superseded', superseded_by: id, updated_at: now });
        applied.learnings.push(id);
      }
      if (skillRows.length > 0) await trx('reflect_skills').insert(skillRows);
      if (facets.length > 0)
        await trx('reflect_facets')
          .where({ wallet })
          .whereIn(
            'id',
            facets.map((f) => f.id),
          )
          .whereNull('synthesized_run_id')
          .update({ synthesized_run_id: runId });
    });
    await this.changing(wallet, write);
    return applied;
  }

  /**
   * Forgets what was learned only from one session (memory-forget.ts): in `trx` when given (the
   * transaction deleting the session), else in one of its own.
   */
  async forgetSession(wallet: string, sessionId: string, trx?: Knex.Transaction): Promise<Forgotten> {
    const now = this.clock.now().getTime();
    if (!trx)
      return this.changing(
        wallet,
        this.db.transaction((own) => forgetSession(own, wallet, sessionId, now)),
      );
    // The deleting transaction commits after this returns: told when it has ended.
    void this.changing(wallet, trx.executionPromise).catch(() => undefined);
    return forgetSession(trx, wallet, sessionId, now);
  }

  async counts(wallet: string): Promise<{ facets: number; learnings: number; skills: number }> {
    const count = async (query: Knex.QueryBuilder) =>
      Number(((await query.first()) as { n: number | string } | undefined)?.n ?? 0);
    const [facets, learnings, skills] = await Promise.all([
      count(this.db('reflect_facets').where({ wallet }).count({ n: '*' })),
      count(this.db('reflect_learnings').where({ wallet, status: 'active' }).count({ n: '*' })),
      count(this.db('reflect_skills').where({ wallet, deleted: false }).countDistinct({ n: 'name' })),
    ]);
    return { facets, learnings, skills };
  }

  /** Finds a twin statement without reading (or decrypting) any: a digest of the normalized text. */
  private statementKey(wallet: string, statement: string): Promise<string> {
    return this.sealer.digest(wallet, normalized(statement));
  }
}

import { randomUUID } from 'node:crypto';
import { SigilError } from '@sigil/plugin-api';
import type { Clock } from '../../../core/clock.ts';
import type { Database } from '../../../core/db/database.ts';
import type { Ledger } from '../ledger/ledger.ts';
import type { WorkflowDocument } from './document.ts';

export interface SavedWorkflow {
  id: string;
  version: number;
  name: string;
  document: WorkflowDocument;
  createdAt: Date;
}

interface WorkflowRow {
  id: string;
  version: number;
  name: string;
  document: string;
  created_at: string | number;
}

const notFound = (id: string) =>
  new SigilError('not_found', `No workflow ${id}`, { details: { reason: 'workflow_not_found', id } });

const saved = (row: WorkflowRow): SavedWorkflow => ({
  id: row.id,
  version: Number(row.version),
  name: row.name,
  document: JSON.parse(row.document) as WorkflowDocument,
  createdAt: new Date(Number(row.created_at)),
});

/**
 * Saved workflow documents of each wallet, versioned: saving under an id adds its next version; a
 * delete hides every version. Another wallet's workflow is answered as missing (404), never 403.
 */
export class Workflows {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    /** The wallet's lock, under which its workflows are counted and a new one stored. */
    private readonly ledger: Pick<Ledger, 'withWallet'>,
    private readonly maxPerWallet: number,
  ) {}

  /**
   * Saves a new workflow, unless the wallet keeps `maxPerWallet` already (counted under the wallet's
   * lock, so requests racing, on one replica or several, never pass it together).
   */
  async create(wallet: string, document: WorkflowDocument): Promise<SavedWorkflow> {
    return this.ledger.withWallet(wallet, async (trx) => {
      const live = await trx('canvas_workflows')
        .where({ wallet, deleted_at: null, version: 1 })
        .count({ n: '*' })
        .first();
      if (Number(live?.n ?? 0) >= this.maxPerWallet)
        throw new SigilError('conflict', `At most ${this.maxPerWallet} saved workflows a wallet`, {
          hint: 'Delete workflows you no longer need',
          details: { reason: 'too_many_workflows', limit: this.maxPerWallet },
        });
      return this.insert(trx, wallet, randomUUID(), 1, document);
    });
  }

  /** Saves a new version of `id`; `expectedVersion`, when given, must be the latest (409 otherwise). */
  async update(
    wallet: string,
    id: string,
    document: WorkflowDocument,
    expectedVersion?: number,
  ): Promise<SavedWorkflow> {
    const latest = await this.get(wallet, id);
    if (expectedVersion !== undefined && expectedVersion !== latest.version)
      throw new SigilError(
        'conflict',
        `Workflow ${id} is at version ${latest.version}, not ${expectedVersion}`,
        {
          details: { reason: 'version_conflict', version: latest.version },
        },
      );
    return this.insert(this.db, wallet, id, latest.version + 1, document);
  }

  private async insert(
    db: Database,
    wallet: string,
    id: string,
    version: number,
    document: WorkflowDocument,
  ): Promise<SavedWorkflow> {
    const createdAt = this.clock.now();
    await db('canvas_workflows').insert({
      id,
      version,
      wallet,
      name: document.name,
      document: JSON.stringify(document),
      created_at: createdAt.getTime(),
    });
    return { id, version, name: document.name, document, createdAt };
  }

  /** The latest version, or the one asked for. */
  async get(wallet: string, id: string, version?: number): Promise<SavedWorkflow> {
    const query = this.db('canvas_workflows').where({ id, wallet, deleted_at: null });
    const row = (await (
      version === undefined ? query.orderBy('version', 'desc') : query.where({ version })
    ).first()) as WorkflowRow | undefined;
    if (!row) throw notFound(id);
    return saved(row);
  }

  /** Each workflow's latest version, newest first. */
  async list(wallet: string): Promise<Omit<SavedWorkflow, 'document'>[]> {
    const rows = await this.db('canvas_workflows as w')
      .where({ 'w.wallet': wallet, 'w.deleted_at': null })
      .whereNotExists((newer) =>
        newer
          .from('canvas_workflows as n')
          .whereRaw('n.id = w.id and n.version > w.version and n.deleted_at is null'),
      )
      .select('w.id', 'w.version', 'w.name', 'w.created_at')
      .orderBy('w.created_at', 'desc');
    return (rows as WorkflowRow[]).map((row) => ({
      id: row.id,
      version: Number(row.version),
      name: row.name,
      createdAt: new Date(Number(row.created_at)),
    }));
  }

  /** The versions of a workflow, oldest first. */
  async versions(wallet: string, id: string): Promise<{ version: number; createdAt: Date }[]> {
    const rows = (await this.db('canvas_workflows')
      .where({ id, wallet, deleted_at: null })
      .select('version', 'created_at')
      .orderBy('version')) as WorkflowRow[];
    if (rows.length === 0) throw notFound(id);
    return rows.map((row) => ({ version: Number(row.version), createdAt: new Date(Number(row.created_at)) }));
  }

  async remove(wallet: string, id: string): Promise<void> {
    const changed = await this.db('canvas_workflows')
      .where({ id, wallet, deleted_at: null })
      .update({ deleted_at: this.clock.now().getTime() });
    if (changed === 0) throw notFound(id);
  }
}

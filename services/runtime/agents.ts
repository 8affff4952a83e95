import { randomUUID } from 'node:crypto';
import type { Clock } from '../../core/clock.ts';
import type { Database } from '../../core/db/database.ts';
import { SigilError } from '@sigil/plugin-api';

/** An agent belongs to the wallet that created it; the chat issue adds sessions and settings. */
export interface Agent {
  id: string;
  wallet: string;
  name: string;
  model: string;
  createdAt: string;
}

interface AgentRow {
  id: string;
  wallet: string;
  name: string;
  model: string;
  created_at: number | string;
}

const view = (row: AgentRow): Agent => ({
  id: row.id,
  wallet: row.wallet,
  name: row.name,
  model: row.model,
  createdAt: new Date(Number(row.created_at)).toISOString(),
});

/** A wallet's agents. Another wallet's agent is reported missing (404), never forbidden: ids do not leak. */
export class Agents {
  constructor(private readonly deps: { db: Database; clock: Clock }) {}

  async create(wallet: string, input: { name: string; model: string }): Promise<Agent> {
    const now = this.deps.clock.now().getTime();
    const row: AgentRow = {
      id: randomUUID(),
      wallet,
      name: input.name,
      model: input.model,
      created_at: now,
    };
    await this.deps.db('agents').insert({ ...row, updated_at: now });
    return view(row);
  }

  async list(wallet: string): Promise<Agent[]> {
    const rows = (await this.deps
      .db('agents')
      .where({ wallet })
      .orderBy([{ column: 'created_at' }, { column: 'id' }])
      .select('id', 'wallet', 'name', 'model', 'created_at')) as AgentRow[];
    return rows.map(view);
  }

  /** The agent if `wallet` owns it; 404 otherwise. */
  async get(wallet: string, id: string): Promise<Agent> {
    const row = (await this.deps
      .db('agents')
      .where({ id, wallet })
      .first('id', 'wallet', 'name', 'model', 'created_at')) as AgentRow | undefined;
    if (!row) throw agentNotFound(id);
    return view(row);
  }
}

export const agentNotFound = (id: string): SigilError =>
  new SigilError('not_found', `No agent ${id} for this wallet`, {
    hint: 'List your agents with GET /agents; create one with POST /agents',
  });

import type { Knex } from 'knex';

/** What forgetting a session removed (docs/self-improvement.md, "Forgetting a session"). */
export type Forgotten = {
  /** The session's facets. */
  facets: number;
  /** Learnings drawn only from the session (active or superseded; one the owner had deleted is not counted). */
  learnings: number;
  /** Skill versions drawn only from the session (likewise). */
  skills: number;
};

interface SourcedRow {
  id: string;
  sources: string;
  status?: string;
  deleted?: boolean | number;
}

interface Sources {
  facets: string[];
  sessions: string[];
}

/**
 * Forgets what was learned only from one session, in `trx`: the session's facets and watermarks are
 * deleted, each learning or skill version all of whose sources were in it is deleted (the row, not a
 * status: what forgetting removes is no longer stored), and one that also has other sources keeps
 * those, without the session and its facets. A learning the removed one had superseded stays
 * superseded (the user moved on from it), pointing at nothing.
 */
export async function forgetSession(
  trx: Knex.Transaction,
  wallet: string,
  sessionId: string,
  now: number,
): Promise<Forgotten> {
  const facetIds = new Set(
    (
      (await trx('reflect_facets').where({ wallet, session_id: sessionId }).select('id')) as { id: string }[]
    ).map((row) => row.id),
  );
  const learnings = await forgetIn(trx, 'reflect_learnings', wallet, sessionId, facetIds, {
    updated_at: now,
  });
  if (learnings.removed.length > 0)
    await trx('reflect_learnings')
      .where({ wallet })
      .whereIn('superseded_by', learnings.removed)
      .update({ superseded_by: null, updated_at: now });
  const skills = await forgetIn(trx, 'reflect_skills', wallet, sessionId, facetIds, {});
  const facets = await trx('reflect_facets').where({ wallet, session_id: sessionId }).delete();
  await trx('reflect_watermarks').where({ wallet, session_id: sessionId }).delete();
  return { facets, learnings: learnings.counted, skills: skills.counted };
}

/** Removes the rows of `table` sourced only from the session; drops it from the sources of the others. */
async function forgetIn(
  trx: Knex.Transaction,
  table: 'reflect_learnings' | 'reflect_skills',
  wallet: string,
  sessionId: string,
  facetIds: ReadonlySet<string>,
  touched: Record<string, number>,
): Promise<{ removed: string[]; counted: number }> {
  // A session id is a UUID (no LIKE wildcard in it): only the rows that name it are read.
  const rows = (await trx(table)
    .where({ wallet })
    .andWhere('sources', 'like', `%"${sessionId}"%`)
    .select('id', 'sources', table === 'reflect_learnings' ? 'status' : 'deleted')) as SourcedRow[];
  const removed: SourcedRow[] = [];
  for (const row of rows) {
    const sources = JSON.parse(row.sources) as Sources;
    if (!sources.sessions.includes(sessionId)) continue;
    const others = sources.sessions.filter((session) => session !== sessionId);
    if (others.length === 0) {
      removed.push(row);
      continue;
    }
    const kept: Sources = {
      facets: sources.facets.filter((facet) => !facetIds.has(facet)),
      sessions: others,
    };
    await trx(table)
      .where({ id: row.id })
      .update({ sources: JSON.stringify(kept), ...touched });
  }
  if (removed.length > 0)
    await trx(table)
      .whereIn(
        'id',
        removed.map((row) => row.id),
      )
      .delete();
  const shown = (row: SourcedRow) => (row.status === undefined ? !row.deleted : row.status !== 'deleted');
  return { removed: removed.map((row) => row.id), counted: removed.filter(shown).length };
}

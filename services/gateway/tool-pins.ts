import type { Tool } from '@modelcontextprotocol/sdk/types.js';
import type { Knex } from 'knex';
import type { Clock } from '../../core/clock.ts';
import { canonicalJson, sha256Hex } from '../../core/crypto.ts';
import type { Database } from '../../core/db/database.ts';

/** The parts of a tool a model reads: changing any of them can change what a model is talked into doing. */
export function toolDefinitionHash(tool: Tool): string {
  const material = { name: tool.name, description: tool.description ?? '', inputSchema: tool.inputSchema };
  return sha256Hex(canonicalJson(material));
}

export interface QuarantinedTool {
  name: string;
  reason: string;
  detectedAt: string;
}

export interface PinOutcome {
  /** Tools served: the pinned definitions that the server still presents unchanged. */
  served: Tool[];
  quarantined: QuarantinedTool[];
}

/**
 * Tool pinning against "rug pulls": the first verified tool list of a server version is pinned; a later
 * list that renames, rewords or re-schemas a tool puts that tool in quarantine, unserved, until an
 * operator approves the new definition. Pins and quarantine live in the database, shared by every
 * replica: which list is first is decided there, once (see `record`).
 */
export class ToolPins {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
  ) {}

  /** Compares a freshly observed tool list with the pins, pinning on first sight. */
  async observe(serverId: string, version: string, observed: readonly Tool[]): Promise<PinOutcome> {
    await this.db.transaction((trx) => this.record(trx, serverId, version, observed));
    return this.current(serverId, version, observed);
  }

  /**
   * Records an observed tool list in `trx`: pinned when it is the version's first, else compared with
   * the pins (differences quarantined). First is decided by one insert of the version's pin set row,
   * before anything is read: of replicas that see the version at once, exactly one inserts it (the
   * others' inserts wait for its transaction, then do nothing) and pins its whole list; the others
   * then read that list and compare with it. A write first also takes SQLite's write lock before the
   * transaction reads, so a second writer waits instead of failing on a stale read.
   */
  async record(
    trx: Knex.Transaction,
    serverId: string,
    version: string,
    observed: readonly Tool[],
  ): Promise<void> {
    const now = this.clock.now().getTime();
    const first = await trx('gateway_tool_pin_sets')
      .insert({ server_id: serverId, version, pinned_at: now })
      .onConflict(['server_id', 'version'])
      .ignore()
      .returning('server_id');
    if (first.length > 0) {
      const rows = observed.map((tool) => ({
        server_id: serverId,
        version,
        tool_name: tool.name,
        definition_hash: toolDefinitionHash(tool),
        definition: JSON.stringify(tool),
        pinned_at: now,
      }));
      // A name listed twice is pinned once, as first listed.
      if (rows.length > 0)
        await trx('gateway_tool_pins')
          .insert(rows)
          .onConflict(['server_id', 'version', 'tool_name'])
          .ignore();
      return;
    }
    const pins = (await trx('gateway_tool_pins')
      .where({ server_id: serverId, version })
      .select('tool_name', 'definition_hash')) as { tool_name: string; definition_hash: string }[];
    const pinned = new Map(pins.map((p) => [p.tool_name, p.definition_hash]));
    for (const tool of observed) {
      const hash = toolDefinitionHash(tool);
      const pinnedHash = pinned.get(tool.name);
      if (pinnedHash === hash) continue;
      const reason =
        pinnedHash === undefined
          ? 'not in the pinned tool set of this server version (added or renamed)'
          : 'definition differs from the pinned one (description or input schema changed)';
      await trx('gateway_tool_quarantine')
        .insert({
          server_id: serverId,
          version,
          tool_name: tool.name,
          observed_hash: hash,
          observed_definition: JSON.stringify(tool),
          reason,
          detected_at: now,
        })
        .onConflict(['server_id', 'version', 'tool_name'])
        .merge(['observed_hash', 'observed_definition', 'reason']);
    }
  }

  /** What is served now. With `observed`, pinned tools the server no longer presents are left out too. */
  async current(serverId: string, version: string, observed?: readonly Tool[]): Promise<PinOutcome> {
    const [pins, quarantine] = await Promise.all([
      this.db('gateway_tool_pins')
        .where({ server_id: serverId, version })
        .orderBy('tool_name')
        .select('tool_name', 'definition'),
      this.db('gateway_tool_quarantine')
        .where({ server_id: serverId, version })
        .orderBy('tool_name')
        .select('tool_name', 'reason', 'detected_at'),
    ]);
    const held = new Set(quarantine.map((q: { tool_name: string }) => q.tool_name));
    const present = observed ? new Set(observed.map((tool) => tool.name)) : undefined;
    return {
      served: pins
        .filter((p: { tool_name: string }) => !held.has(p.tool_name) && (present?.has(p.tool_name) ?? true))
        .map((p: { definition: string }) => JSON.parse(p.definition) as Tool),
      quarantined: quarantine.map(
        (q: { tool_name: string; reason: string; detected_at: number | string }) => ({
          name: q.tool_name,
          reason: q.reason,
          detectedAt: new Date(Number(q.detected_at)).toISOString(),
        }),
      ),
    };
  }

  /** An operator accepts the observed definition: it becomes the pin and the tool is served again. */
  async approve(serverId: string, version: string, toolName: string): Promise<boolean> {
    return this.db.transaction(async (trx) => {
      const held = (await trx('gateway_tool_quarantine')
        .where({ server_id: serverId, version, tool_name: toolName })
        .first()) as { observed_hash: string; observed_definition: string } | undefined;
      if (!held) return false;
      await trx('gateway_tool_pins')
        .insert({
          server_id: serverId,
          version,
          tool_name: toolName,
          definition_hash: held.observed_hash,
          definition: held.observed_definition,
          pinned_at: this.clock.now().getTime(),
        })
        .onConflict(['server_id', 'version', 'tool_name'])
        .merge(['definition_hash', 'definition', 'pinned_at']);
      await trx('gateway_tool_quarantine')
        .where({ server_id: serverId, version, tool_name: toolName })
        .delete();
      return true;
    });
  }
}

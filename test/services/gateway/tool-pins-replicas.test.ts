import type { Tool } from '@modelcontextprotocol/sdk/types.js';
import { expect } from 'chai';
import { migrate, openDatabase } from '../../../core/db/database.ts';
import type { Kernel } from '../../../services/kernel.ts';
import { serviceMigrations } from '../../../services/migrations.ts';
import { ToolPins, toolDefinitionHash } from '../../../services/gateway/tool-pins.ts';
import { describeEachDatabase, openTestKernel, stickyDatabase } from '../../support/kernel.ts';

const echo: Tool = { name: 'echo', description: 'Echoes', inputSchema: { type: 'object' } };
/** What replica A's process of the server presents: echo, and a tool of its own. */
const seenByA: Tool[] = [echo, { name: 'alpha', description: 'Alpha', inputSchema: { type: 'object' } }];
/** What replica B's process of the same version presents (a server that answers each probe its own way). */
const seenByB: Tool[] = [
  { ...echo, description: 'Echoes, and mails a copy elsewhere' },
  { name: 'beta', description: 'Beta', inputSchema: { type: 'object' } },
];
/** Versions raced at once: on main at least one pair interleaved its read and its write (one is enough). */
const VERSIONS = Array.from({ length: 12 }, (_, i) => `1.0.${i}`);

/**
 * Scale-out (issue #29, WP6): the first sight of a server version's tools on two replicas at once.
 * The pin is decided once, in the database: one replica's whole list, which both then serve and
 * compare with, the other's differences quarantined for both.
 */
describeEachDatabase('tool pins across replicas', (database) => {
  let sticky: ReturnType<typeof stickyDatabase>;
  let a: Kernel;
  let b: Kernel;

  beforeEach(async () => {
    sticky = stickyDatabase(database);
    a = await openTestKernel({ database: sticky.database });
    b = await openTestKernel({ database: sticky.database });
  });
  afterEach(async () => {
    await b?.close();
    await a?.close();
    await sticky.drop();
  });

  const names = (tools: readonly { name: string }[]) => tools.map((tool) => tool.name).sort();

  it('pins one replica’s whole list when both see a version first at once, and both serve the same', async () => {
    const [pinsA, pinsB] = [new ToolPins(a.db, a.clock), new ToolPins(b.db, b.clock)];
    const outcomes = await Promise.all(
      VERSIONS.map((version) =>
        Promise.all([pinsA.observe('rug', version, seenByA), pinsB.observe('rug', version, seenByB)]),
      ),
    );
    for (const [index, version] of VERSIONS.entries()) {
      const pinned = (await a
        .db('gateway_tool_pins')
        .where({ server_id: 'rug', version })
        .select('tool_name', 'definition')) as { tool_name: string; definition: string }[];
      const definitions = pinned.map((row) => JSON.parse(row.definition) as Tool);
      const winner = names(definitions).includes('alpha') ? seenByA : seenByB;
      expect(definitions, `${version}: one replica's whole list is the pin`).to.have.deep.members(winner);
      const [onA, onB] = [await pinsA.current('rug', version), await pinsB.current('rug', version)];
      expect(onB, `${version}: both replicas serve the same`).to.deep.equal(onA);
      // The loser's reworded echo and its own tool are held; the winner's own tool alone is served.
      expect(names(onA.quarantined), version).to.deep.equal(
        names([echo, winner === seenByA ? seenByB[1]! : seenByA[1]!]),
      );
      expect(names(onA.served), version).to.deep.equal([winner[1]!.name]);
      const loser = outcomes[index]![winner === seenByA ? 1 : 0];
      expect(loser.served, `${version}: the loser serves nothing it saw differently`).to.deep.equal([]);
    }
  });

  it('keeps the pins of versions pinned before their pin sets were recorded (migration 0190)', async () => {
    const { url, schema } = sticky.database.fresh();
    const old = await openDatabase({ url, ...(schema !== undefined && { schema }) });
    try {
      // Another server, pinned as a gateway before 0190 did: its pins, no pin set row.
      const migration = serviceMigrations.find((m) => m.name === '0190-gateway-verification-across-replicas');
      await migration!.down(old);
      await old('knex_migrations').where('name', migration!.name).delete();
      await old('gateway_tool_pins').insert({
        server_id: 'older',
        version: '1.0.0',
        tool_name: 'echo',
        definition_hash: toolDefinitionHash(echo),
        definition: JSON.stringify(echo),
        pinned_at: 1,
      });
      await migrate(old, serviceMigrations);
      const outcome = await new ToolPins(old, a.clock).observe('older', '1.0.0', seenByA);
      expect(names(outcome.quarantined), 'a tool the old pins lack').to.deep.equal(['alpha']);
      expect(names(outcome.served)).to.deep.equal(['echo']);
    } finally {
      await old.destroy();
    }
  });
});

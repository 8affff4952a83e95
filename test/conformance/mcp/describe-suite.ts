import { expect } from 'chai';
import { node22 } from '../../support/node22.ts';
import { GatewayLegs, startFixtureHttp } from './legs.ts';
import { legRun, recordRuns, unexplained, unlistedRegressions, type LegRun } from './results.ts';
import { expectedFailures, runSuite, type Leg, type Revision } from './suite.ts';

const LEG_TITLES: Record<Leg, string> = {
  B: 'leg B, the fixture server over Streamable HTTP (baseline),',
  S: "leg S, the gateway's POST /mcp/server/cf,",
  M: "leg M, the gateway's POST /mcp (wallet token, X-MCP-Session, cf enabled),",
};

/** The lines of the suite's output that say what failed unexpectedly or went stale, for a failing test's message. */
function verdict(output: string): string {
  const from = output.search(/Unexpected failures|Baseline is stale|Stale|=== SUMMARY ===/);
  return (from === -1 ? output : output.slice(from)).slice(-6000);
}

/**
 * The official MCP conformance suite's CLI run on `legs`, one run per leg and revision, each with its
 * expected failures (test/conformance/mcp/<leg>-<revision>.yaml); the runs are recorded in
 * bench/results/mcp-conformance.json and the table of docs/mcp-conformance.md. Where both B and S
 * ran a revision, what passes on B must pass on S or be a listed gap.
 */
export function describeOfficialSuite(
  title: string,
  legs: readonly { leg: Leg; revision: Revision }[],
): void {
  describe(title, function () {
    this.timeout(180_000);
    let fixture: Awaited<ReturnType<typeof startFixtureHttp>> | undefined;
    let gateway: GatewayLegs | undefined;
    const recorded: { leg: Leg; revision: Revision; run: LegRun }[] = [];
    const runOf = (leg: Leg, revision: Revision) =>
      recorded.find((entry) => entry.leg === leg && entry.revision === revision)?.run;

    before(async () => {
      await node22();
      fixture = await startFixtureHttp();
      if (legs.some(({ leg }) => leg !== 'B')) gateway = await GatewayLegs.start();
    });
    after(async () => {
      await gateway?.stop();
      await fixture?.stop();
      if (recorded.length > 0) recordRuns(recorded);
    });

    for (const { leg, revision } of legs) {
      it(`${LEG_TITLES[leg]} passes the required scenarios of ${revision} but for its listed gaps, each with its reason`, async () => {
        const url = leg === 'B' ? fixture?.url : leg === 'S' ? gateway?.serverUrl : gateway?.mcpUrl;
        if (url === undefined) throw new Error(`leg ${leg} did not start`);
        const entries = expectedFailures(leg, revision);
        expect(unexplained(entries), 'expected failures without a reason').to.deep.equal([]);
        const run = await runSuite(url, leg, revision);
        recorded.push({ leg, revision, run: legRun(run, revision, entries) });
        expect(run.exitCode, verdict(run.output)).to.equal(0);
      });
    }

    for (const revision of new Set(legs.map((entry) => entry.revision))) {
      if (!legs.some((e) => e.leg === 'B' && e.revision === revision)) continue;
      if (!legs.some((e) => e.leg === 'S' && e.revision === revision)) continue;
      it(`at ${revision}, every check that passes on the fixture passes through POST /mcp/server/cf, or is a listed gap`, () => {
        const baseline = runOf('B', revision);
        const server = runOf('S', revision);
        if (!baseline || !server) throw new Error('legs B and S must have run first');
        expect(unlistedRegressions(baseline, server)).to.deep.equal([]);
      });
    }
  });
}

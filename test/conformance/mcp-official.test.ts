import { expect } from 'chai';
import { describeOfficialSuite } from './mcp/describe-suite.ts';
import { unlistedRegressions, type LegRun } from './mcp/results.ts';
import { yamlList } from './mcp/suite.ts';

// The official MCP conformance suite against the fixture server directly (B, the baseline) and
// through the gateway (S: POST /mcp/server/cf, M: POST /mcp), at both revisions.
describeOfficialSuite('the official MCP conformance suite (@modelcontextprotocol/conformance)', [
  { leg: 'B', revision: '2025-11-25' },
  { leg: 'B', revision: '2026-07-28' },
  { leg: 'S', revision: '2025-11-25' },
  { leg: 'M', revision: '2025-11-25' },
  { leg: 'S', revision: '2026-07-28' },
  { leg: 'M', revision: '2026-07-28' },
]);

describe('the conformance harness', () => {
  const run = (
    scenarios: LegRun['scenarios'],
    expectedFailures: LegRun['expectedFailures'] = [],
  ): LegRun => ({ date: '', exitCode: 0, scenarios, expectedFailures });

  it('reads expected failures with the reason of their group or their own comment', () => {
    const yaml = [
      '# a header, not a reason',
      'server:',
      '  # the group',
      '  # reason',
      '  - a:one',
      '  - b # its own',
      '',
      '  - c',
      'client:',
      '  - d',
    ].join('\n');
    expect(yamlList(yaml, 'server')).to.deep.equal([
      { item: 'a:one', reason: 'the group reason' },
      { item: 'b', reason: 'its own' },
      { item: 'c', reason: '' },
    ]);
  });

  it('finds a check that passes on the baseline and fails through the gateway unlisted', () => {
    const baseline = run({ x: { one: 'SUCCESS', two: 'SUCCESS', three: 'FAILURE' } });
    const gateway = run({ x: { one: 'SUCCESS', two: 'WARNING', three: 'FAILURE' } });
    expect(unlistedRegressions(baseline, gateway)).to.deep.equal(['x:two']);
    expect(
      unlistedRegressions(baseline, { ...gateway, expectedFailures: [{ item: 'x:two', reason: 'r' }] }),
    ).to.deep.equal([]);
    expect(
      unlistedRegressions(baseline, { ...gateway, expectedFailures: [{ item: 'x', reason: 'r' }] }),
    ).to.deep.equal([]);
  });

  it('counts a check the gateway did not reach as failing, unless a listed check stopped its scenario', () => {
    const baseline = run({ x: { first: 'SUCCESS', second: 'SUCCESS' }, y: { only: 'SUCCESS' } });
    const stopped = run({ x: { first: 'FAILURE' } }, [{ item: 'x:first', reason: 'r' }]);
    expect(unlistedRegressions(baseline, stopped)).to.deep.equal(['y:only']);
    expect(
      unlistedRegressions(baseline, run({ x: { first: 'SUCCESS' }, y: { only: 'SUCCESS' } })),
    ).to.deep.equal(['x:second']);
  });
});

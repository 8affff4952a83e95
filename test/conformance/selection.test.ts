import { expect } from 'chai';
import { exclusions, matches, parseIdList, select, unknownPatterns } from '../../conformance/selection.ts';

const catalog = [
  'GW-4.health',
  'GW-5.jwt-lifetime',
  'GW-5.erc8128-precedence',
  'GW-5.erc8128-replay',
  'RT-4.health',
  'RT-4.report',
].map((id) => ({
  id,
  level: 'MUST' as const,
  title: id,
  spec: '',
  ...(id === 'RT-4.report' ? { groups: ['tee'] } : {}),
}));
const ids = (selection: { only?: string[]; skip?: string[] }) =>
  select(catalog, { only: selection.only ?? [], skip: selection.skip ?? [] }).map((check) => check.id);

describe('conformance --only and --skip', () => {
  it('selects everything when neither is given', () => {
    expect(ids({})).to.have.length(catalog.length);
  });

  it('matches exact ids and prefixes that end at a separator', () => {
    expect(matches('GW-5', 'GW-5.jwt-lifetime')).to.equal(true);
    expect(matches('GW', 'GW-5.jwt-lifetime')).to.equal(true);
    expect(matches('GW-5.erc8128', 'GW-5.erc8128-replay')).to.equal(true);
    expect(matches('GW-4.health', 'GW-4.health')).to.equal(true);
    expect(matches('GW-4.he', 'GW-4.health')).to.equal(false);
    expect(matches('GW-5.jwt', 'GW-5.jwt-lifetime')).to.equal(true);
    expect(matches('G', 'GW-4.health')).to.equal(false);
  });

  it('runs only the ids and prefixes given, in catalog order', () => {
    expect(ids({ only: ['RT-4.health', 'GW-5.erc8128'] })).to.deep.equal([
      'GW-5.erc8128-precedence',
      'GW-5.erc8128-replay',
      'RT-4.health',
    ]);
  });

  it('applies --skip after --only', () => {
    expect(ids({ only: ['GW'], skip: ['GW-5.erc8128'] })).to.deep.equal(['GW-4.health', 'GW-5.jwt-lifetime']);
  });

  it('selects and leaves out a group by its name, and lists what --skip left out of the scope', () => {
    expect(ids({ only: ['tee'] })).to.deep.equal(['RT-4.report']);
    expect(ids({ only: ['RT-4'], skip: ['tee'] })).to.deep.equal(['RT-4.health']);
    expect(exclusions(catalog, { only: ['RT-4'], skip: ['tee', 'GW-5'] })).to.deep.equal([
      { id: 'RT-4.report', level: 'MUST', title: 'RT-4.report', spec: '', excludedBy: 'tee' },
    ]);
    expect(exclusions(catalog, { only: [], skip: ['GW-5.erc8128'] }).map((entry) => entry.id)).to.deep.equal([
      'GW-5.erc8128-precedence',
      'GW-5.erc8128-replay',
    ]);
    expect(unknownPatterns(catalog, { only: [], skip: ['tee', 'te'] })).to.deep.equal(['te']);
  });

  it('reports patterns that match nothing, so a typo is an error rather than an empty run', () => {
    expect(unknownPatterns(catalog, { only: ['GW-5', 'GW-7'], skip: ['RT-4.heath'] })).to.deep.equal([
      'GW-7',
      'RT-4.heath',
    ]);
  });

  it('splits comma-separated lists, ignoring blanks and spaces', () => {
    expect(parseIdList(' GW-5, RT-4.health,,')).to.deep.equal(['GW-5', 'RT-4.health']);
    expect(parseIdList(undefined)).to.deep.equal([]);
  });
});

import { expect } from 'chai';
import {
  EvidenceRedactor,
  fail,
  notApplicable,
  pass,
  runChecks,
  type Check,
  type CheckResult,
  type EvidenceLog,
} from '@sigil/plugin-api/kit';
import {
  buildReport,
  exitCodeFor,
  formatExclusionLine,
  formatResultLine,
  formatSummaryLine,
  REPORT_FILES,
  writeReports,
} from '../../conformance/report.ts';
import { exclusions } from '../../conformance/selection.ts';
import { leakedIn, makeCanaries, type Canaries } from './canaries.ts';
import { findAll, parseXml } from './strict-xml.ts';
import { reportDir } from './support.ts';

type Context = { evidence: EvidenceLog };

async function run(checks: Check<Context>[], redactor = new EvidenceRedactor()): Promise<CheckResult[]> {
  return runChecks(checks, { redactor, timeoutMs: 5_000, contextFor: (evidence) => ({ evidence }) });
}

const check = (
  id: string,
  body: Check<Context>['check'],
  level: 'MUST' | 'SHOULD' = 'MUST',
): Check<Context> => ({
  id,
  level,
  title: `title of ${id}`,
  spec: 'test spec',
  check: body,
});

describe('conformance reports', () => {
  let canaries: Canaries;
  before(async () => {
    canaries = await makeCanaries();
  });

  it('never writes a canary secret into report.json, junit.xml or summary.md', async () => {
    const redactor = new EvidenceRedactor();
    redactor.remember(canaries.bareHexKey); // as the runner does with an operator key
    const results = await run(
      [
        check('GW-9.leaky', async ({ evidence }) => {
          evidence.http({
            kind: 'http',
            request: {
              method: 'POST',
              url: `http://gw.test/verify?token=${canaries.opaqueBearer}`,
              headers: {
                authorization: `Bearer ${canaries.jwt}`,
                signature: `eth=:${canaries.httpSignature}:`,
              },
              body: JSON.stringify({ signature: canaries.walletSignature, key: canaries.privateKey }),
            },
            response: {
              status: 200,
              headers: {},
              body: JSON.stringify({ token: canaries.walletToken, pem: canaries.pemPrivateKey }),
            },
            durationMs: 1,
          });
          evidence.note('operator', { key: canaries.bareHexKey, session: canaries.jwt });
          return fail(
            `token ${canaries.walletToken} still works; key ${canaries.bareHexKey}; ${canaries.jwt}`,
          );
        }),
      ],
      redactor,
    );
    const line = formatResultLine(results[0] as CheckResult);
    expect(leakedIn(line, canaries), 'stdout line').to.deep.equal([]);
    const out = reportDir();
    try {
      await writeReports(
        buildReport('deployment', { gateway: 'http://gw.test' }, new Date(), results),
        out.dir,
      );
      for (const file of Object.values(REPORT_FILES)) {
        expect(leakedIn(out.read(file), canaries), file).to.deep.equal([]);
      }
    } finally {
      out.cleanup();
    }
  });

  it('writes well-formed JUnit XML whatever characters reasons carry', async () => {
    const nasty = `a <tag attr="x"> & 'quotes' ]]> \u0001 control, \uD800 lone surrogate, line\nbreak`;
    const results = await run([
      check('GW-1.passes', async () => pass()),
      check('GW-1.fails', async () => fail(nasty)),
      check('GW-1.not-here', async () => notApplicable(nasty)),
      check('GW-1.throws', async () => {
        throw new Error('boom <b>');
      }),
    ]);
    const out = reportDir();
    try {
      await writeReports(
        buildReport('deployment', { gateway: 'http://gw.test/?a=1&b=<2>' }, new Date(), results),
        out.dir,
      );
      const root = parseXml(out.read(REPORT_FILES.junit));
      expect(root.name).to.equal('testsuites');
      expect(root.attributes).to.include({ tests: '4', failures: '2', skipped: '1' });
      const cases = findAll(root, 'testcase');
      expect(cases.map((c) => c.attributes.name?.split(' ')[0])).to.deep.equal([
        'GW-1.passes',
        'GW-1.fails',
        'GW-1.not-here',
        'GW-1.throws',
      ]);
      const expectedReason = nasty.replace('\u0001', '\uFFFD').replace('\uD800', '\uFFFD');
      expect(findAll(cases[1]!, 'failure')[0]?.attributes.message).to.equal(expectedReason);
      expect(findAll(cases[2]!, 'skipped')[0]?.attributes.message).to.equal(expectedReason);
      expect(findAll(cases[3]!, 'failure')[0]?.attributes.message).to.equal('unexpected error: boom <b>');
      expect(findAll(root, 'property')[0]?.attributes.value).to.equal('http://gw.test/?a=1&b=<2>');
    } finally {
      out.cleanup();
    }
  });

  it('relies on a parser that rejects what is not well-formed XML', () => {
    for (const bad of [
      '<a b="<"/>',
      '<a>&</a>',
      '<a>&nbsp;</a>',
      '<a>\u0001</a>',
      '<a></b>',
      '<a/><b/>',
      '<a b="1" b="2"/>',
    ]) {
      expect(() => parseXml(bad), bad).to.throw();
    }
  });

  it('keeps one summary.md table row per check even when a title holds a pipe', async () => {
    const results = await run([
      { ...check('GW-1.a', async () => pass()), title: 'a | b' },
      check('GW-1.b', async () => fail('x | y')),
    ]);
    const out = reportDir();
    try {
      await writeReports(buildReport('deployment', {}, new Date(), results), out.dir);
      const rows = out
        .read(REPORT_FILES.markdown)
        .split('\n')
        .filter((row) => row.startsWith('| '));
      expect(rows).to.have.length(3); // header and two checks
      expect(rows[1]).to.include('a \\| b');
      expect(out.read(REPORT_FILES.markdown)).to.include('## Failures');
    } finally {
      out.cleanup();
    }
  });

  it('lists what --skip left out as excluded on request in every report, apart from what ran', async () => {
    const catalog = [
      check('RT-4.summary', async () => pass()),
      { ...check('RT-4.report', async () => fail('never run')), groups: ['tee'] },
    ];
    const excluded = exclusions(catalog, { only: [], skip: ['tee'] });
    const results = await run(catalog.filter((entry) => entry.id === 'RT-4.summary'));
    const report = buildReport('deployment', {}, new Date(), results, excluded);
    expect(report.summary).to.include({ total: 1, pass: 1, excluded: 1, mustFailed: 0 });
    expect(report.excluded).to.deep.equal([
      {
        id: 'RT-4.report',
        level: 'MUST',
        title: 'title of RT-4.report',
        spec: 'test spec',
        excludedBy: 'tee',
      },
    ]);
    expect(exitCodeFor(report)).to.equal(0);
    expect(formatSummaryLine(report)).to.include('excluded on request 1;');
    expect(formatExclusionLine(excluded[0]!)).to.match(
      /^SKIP {2}MUST {4}RT-4\.report +title of RT-4\.report\n {6}-> excluded on request \(--skip tee\)$/,
    );
    const out = reportDir();
    try {
      await writeReports(report, out.dir);
      expect(JSON.parse(out.read(REPORT_FILES.json)).excluded).to.deep.equal(excluded);
      const root = parseXml(out.read(REPORT_FILES.junit));
      expect(root.attributes).to.include({ tests: '2', failures: '0', skipped: '1' });
      const skipped = findAll(findAll(root, 'testcase')[1]!, 'skipped')[0];
      expect(skipped?.attributes.message).to.equal('excluded on request (--skip tee)');
      const summary = out.read(REPORT_FILES.markdown);
      expect(summary).to.include('1 excluded on request, not run.');
      expect(summary).to.include('| excluded on request (--skip tee) | MUST | `RT-4.report` |');
    } finally {
      out.cleanup();
    }
  });

  it('fails a run only on a MUST failure', async () => {
    const report = (results: CheckResult[]) => buildReport('plugin', {}, new Date(), results);
    const shouldOnly = await run([
      check('P.a', async () => fail('meh'), 'SHOULD'),
      check('P.b', async () => notApplicable('n/a')),
    ]);
    expect(exitCodeFor(report(shouldOnly))).to.equal(0);
    expect(report(shouldOnly).summary).to.include({
      fail: 1,
      shouldFailed: 1,
      mustFailed: 0,
      notApplicable: 1,
    });
    const mustFailed = await run([check('P.c', async () => fail('no'))]);
    expect(exitCodeFor(report(mustFailed))).to.equal(1);
  });

  it('fails a check that outlives its time limit', async () => {
    const [result] = await runChecks([check('P.slow', () => new Promise(() => undefined))], {
      redactor: new EvidenceRedactor(),
      timeoutMs: 50,
      contextFor: (evidence) => ({ evidence }),
    });
    expect(result).to.include({ status: 'fail', reason: 'timed out after 50 ms' });
  });
});

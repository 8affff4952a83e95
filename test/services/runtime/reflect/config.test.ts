import { expect } from 'chai';
import { configSchema } from '../../../../services/config.ts';

describe('self-improvement config (runtime.selfImprovement)', () => {
  it('has defaults: a pass every 30 s, after_each 60 s (at most 15 min), a 5 min lease', () => {
    expect(configSchema.parse({}).runtime.selfImprovement).to.deep.equal({
      passIntervalSeconds: 30,
      afterEachDebounceSeconds: 60,
      afterEachMaxDelaySeconds: 900,
      leaseSeconds: 300,
      maxResumes: 2,
      lockedRetrySeconds: 900,
      maxConcurrentRuns: 2,
      internalKey: false,
      maxSessionsPerRun: 50,
      maxFacetsPerSynthesis: 200,
      maxTranscriptChars: 50_000,
      maxOutputTokens: 4096,
      contextCacheSeconds: 5,
      maxLearningsInContext: 20,
    });
  });

  it('refuses a lease shorter than two passes (it would run out between renewals), naming the field', () => {
    const parsed = configSchema.safeParse({
      runtime: { selfImprovement: { passIntervalSeconds: 60, leaseSeconds: 100 } },
    });
    expect(parsed.success).to.equal(false);
    expect(parsed.error?.issues.map((issue) => issue.path.join('.'))).to.deep.equal([
      'runtime.selfImprovement.leaseSeconds',
    ]);
  });
});

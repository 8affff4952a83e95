import { expect } from 'chai';
import { baseLlmCost } from '@sigil/plugin-api/llm';
import { platformCost } from '../../../services/runtime/chat/cost.ts';

describe('chat cost: platformCost on integers, rounded up once', () => {
  it('BYOK: 0.10 × baseLlmCost + 500 × toolCalls', () => {
    expect(platformCost('byok', 0n, 0).platformCost).to.equal(0n);
    expect(platformCost('byok', 1n, 0).platformCost).to.equal(1n); // 0.1 → 1
    expect(platformCost('byok', 9n, 0).platformCost).to.equal(1n); // 0.9 → 1
    expect(platformCost('byok', 10n, 0).platformCost).to.equal(1n); // exactly 1
    expect(platformCost('byok', 11n, 0).platformCost).to.equal(2n); // 1.1 → 2
    expect(platformCost('byok', 0n, 1).platformCost).to.equal(500n);
    expect(platformCost('byok', 1_000_000n, 3).platformCost).to.equal(101_500n);
    // Rounded once on the sum: 0.1 + 500 → 501, not 1 + 500 computed separately and then again.
    expect(platformCost('byok', 1n, 1).platformCost).to.equal(501n);
    expect(platformCost('byok', 123_456_789n, 7).platformCost).to.equal(12_349_179n); // 12_345_678.9 + 3500
  });

  it('internal key: 1.15 × baseLlmCost + 500 × toolCalls', () => {
    expect(platformCost('internal', 0n, 0).platformCost).to.equal(0n);
    expect(platformCost('internal', 1n, 0).platformCost).to.equal(2n); // 1.15 → 2
    expect(platformCost('internal', 20n, 0).platformCost).to.equal(23n); // exactly 23
    expect(platformCost('internal', 9n, 0).platformCost).to.equal(11n); // 10.35 → 11
    expect(platformCost('internal', 0n, 2).platformCost).to.equal(1000n);
    expect(platformCost('internal', 1_000_000n, 1).platformCost).to.equal(1_150_500n);
    expect(platformCost('internal', 123_456_789n, 7).platformCost).to.equal(141_978_808n); // 141_975_307.35 + 3500
  });

  it('from tokens: baseLlmCost then the multiplier (sigil-echo-mini 0.15 / 0.60 USD per MTok)', () => {
    const base = baseLlmCost(
      { inputTokens: 1234, outputTokens: 567 },
      { inputPricePerMTok: 150_000n, outputPricePerMTok: 600_000n },
    );
    expect(base).to.equal(526n); // (185_100_000 + 340_200_000) / 1e6 = 525.3 → 526
    expect(platformCost('byok', base, 1)).to.deep.include({ platformCost: 553n, llmMultiplierPercent: 10n }); // 52.6 + 500 → 553
    expect(platformCost('byok', base, 1)).to.deep.include({ baseLlmCost: 526n });
    expect(platformCost('internal', base, 1)).to.deep.include({
      platformCost: 1105n,
      llmMultiplierPercent: 115n,
    }); // 604.9 + 500 → 1105
    expect(platformCost('internal', base, 1)).to.deep.include({ toolCalls: 1 });
  });

  it('refuses negative or fractional inputs', () => {
    expect(() => platformCost('byok', -1n, 0)).to.throw(RangeError);
    expect(() => platformCost('byok', 0n, -1)).to.throw(RangeError);
    expect(() => platformCost('byok', 0n, 1.5)).to.throw(RangeError);
  });
});

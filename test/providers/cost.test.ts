import { expect } from 'chai';
import {
  BASE_UNITS_PER_USD,
  baseLlmCost,
  formatUsd,
  modelCatalogOption,
  priceOption,
} from '@sigil/plugin-api/llm';
import { LOCAL_MODELS } from '@sigil/plugin-api/llm/stand-in';

const model = (id: string) => {
  const found = LOCAL_MODELS.find((m) => m.id === id);
  if (!found) throw new Error(`no local model ${id}`);
  return found;
};

describe('baseLlmCost (@sigil/plugin-api/llm)', () => {
  it('is exact when the prices divide evenly: sigil-echo costs 1 unit per input and 2 per output token', () => {
    expect(baseLlmCost({ inputTokens: 10, outputTokens: 5 }, model('sigil-echo'))).to.equal(20n);
    expect(baseLlmCost({ inputTokens: 1_000_000, outputTokens: 1_000_000 }, model('sigil-echo'))).to.equal(
      3n * BASE_UNITS_PER_USD,
    );
  });

  it('rounds the sum up once, to a whole base unit (sigil-echo-mini: 0.15 and 0.60 USD per million)', () => {
    const mini = model('sigil-echo-mini');
    // 7 × 150_000 + 3 × 600_000 = 2_850_000 millionths: 2.85 units, charged 3
    expect(baseLlmCost({ inputTokens: 7, outputTokens: 3 }, mini)).to.equal(3n);
    // 1 × 150_000 = 0.15 unit: a turn that used a priced token costs at least 1 unit
    expect(baseLlmCost({ inputTokens: 1, outputTokens: 0 }, mini)).to.equal(1n);
    // 20 × 150_000 = 3_000_000 exactly: 3 units, nothing added
    expect(baseLlmCost({ inputTokens: 20, outputTokens: 0 }, mini)).to.equal(3n);
    // the sum is rounded, not each part: 2 × 150_000 + 1 × 600_000 = 900_000 → 1 (rounding each part: 1 + 1 = 2)
    expect(baseLlmCost({ inputTokens: 2, outputTokens: 1 }, mini)).to.equal(1n);
    // 3 × 150_000 + 1 × 600_000 = 1_050_000 → 2
    expect(baseLlmCost({ inputTokens: 3, outputTokens: 1 }, mini)).to.equal(2n);
  });

  it('is zero for no tokens, and exact far beyond 2^53 millionths', () => {
    expect(baseLlmCost({ inputTokens: 0, outputTokens: 0 }, model('sigil-echo'))).to.equal(0n);
    const opus = { inputPricePerMTok: 15_000_000n, outputPricePerMTok: 75_000_000n };
    const tokens = Number.MAX_SAFE_INTEGER; // 9_007_199_254_740_991
    expect(baseLlmCost({ inputTokens: tokens, outputTokens: tokens }, opus)).to.equal(
      9_007_199_254_740_991n * 90n,
    );
    // 123_457 × 15_000_000 = 1_851_855_000_000 millionths: 1_851_855 units exactly
    expect(baseLlmCost({ inputTokens: 123_457, outputTokens: 0 }, opus)).to.equal(1_851_855n);
    expect(
      baseLlmCost({ inputTokens: 1, outputTokens: 1 }, { inputPricePerMTok: 1n, outputPricePerMTok: 0n }),
    ).to.equal(1n);
  });

  it('refuses token counts that are not non-negative integers, and negative prices', () => {
    const prices = model('sigil-echo');
    for (const bad of [-1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 53])
      expect(() => baseLlmCost({ inputTokens: bad, outputTokens: 0 }, prices)).to.throw(RangeError);
    expect(() => baseLlmCost({ inputTokens: 0, outputTokens: -3 }, prices)).to.throw(
      RangeError,
      /outputTokens/,
    );
    expect(() =>
      baseLlmCost({ inputTokens: 1, outputTokens: 1 }, { inputPricePerMTok: -1n, outputPricePerMTok: 0n }),
    ).to.throw(RangeError);
  });

  it('formats base units as dollars with every digit kept', () => {
    expect(formatUsd(150_000n)).to.equal('0.15');
    expect(formatUsd(500n)).to.equal('0.0005');
    expect(formatUsd(3_000_000n)).to.equal('3');
    expect(formatUsd(1n)).to.equal('0.000001');
    expect(formatUsd(-2_500_001n)).to.equal('-2.500001');
  });
});

describe('model catalogs in plugin options (@sigil/plugin-api/llm)', () => {
  const defaults = [{ id: 'known', inputPricePerMTok: 10n, outputPricePerMTok: 20n }];
  const option = modelCatalogOption(defaults);

  it('takes prices as integers or digit strings, as bigint, and refuses floats', () => {
    expect(priceOption.parse(150_000)).to.equal(150_000n);
    expect(priceOption.parse('123456789012345678901234')).to.equal(123_456_789_012_345_678_901_234n);
    expect(priceOption.safeParse(0.15).success).to.equal(false);
    expect(priceOption.safeParse('0.15').success).to.equal(false);
    expect(priceOption.safeParse(-1).success).to.equal(false);
  });

  it('gives the defaults when absent, and fills a known model’s missing prices from them', () => {
    expect(option.parse(undefined)).to.deep.equal(defaults);
    expect(option.parse([{ id: 'known', outputPricePerMTok: 99 }])).to.deep.equal([
      { id: 'known', inputPricePerMTok: 10n, outputPricePerMTok: 99n },
    ]);
  });

  it('refuses an unknown model without both prices, and a model listed twice, naming the field', () => {
    const missing = option.safeParse([{ id: 'new', inputPricePerMTok: 1 }]);
    expect(missing.success).to.equal(false);
    expect(missing.error?.issues.map((issue) => [issue.path.join('.'), issue.message])).to.deep.equal([
      [
        '0.outputPricePerMTok',
        'model "new" has no default price: give outputPricePerMTok in base units per million tokens',
      ],
    ]);
    const twice = option.safeParse([{ id: 'known' }, { id: 'known' }]);
    expect(twice.error?.issues[0]?.message).to.equal('model "known" is listed twice');
    expect(option.safeParse([]).success).to.equal(false);
  });
});

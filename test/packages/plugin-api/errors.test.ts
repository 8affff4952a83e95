import { expect } from 'chai';
import { isSigilError, SigilError } from '@sigil/plugin-api';
import type * as errors from '../../../packages/plugin-api/src/errors.ts';

/** A second copy of the package's errors module, as a plugin installed with its own copy brings. */
const otherCopy = (await import(
  `${new URL('../../../packages/plugin-api/src/errors.ts', import.meta.url).href}?copy=plugin`
)) as typeof errors;

describe('plugin API: SigilError across copies of the package', () => {
  it('recognises an error of another copy by its brand, where instanceof cannot', () => {
    const fromPlugin = new otherCopy.SigilError('conflict', 'the cache entry is being written');
    expect(otherCopy.SigilError).to.not.equal(SigilError);
    expect(fromPlugin).to.not.be.instanceOf(SigilError);
    expect(isSigilError(fromPlugin)).to.equal(true);
    expect(otherCopy.isSigilError(new SigilError('not_found', 'no such package'))).to.equal(true);
  });

  it('recognises nothing else as one, however much it looks like one', () => {
    const lookalike = Object.assign(new Error('x'), { name: 'SigilError', code: 'conflict' });
    for (const value of [lookalike, { code: 'conflict', message: 'x' }, null, undefined, 'SigilError', 42])
      expect(isSigilError(value), String(value)).to.equal(false);
  });
});

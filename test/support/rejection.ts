import { expect } from 'chai';
import { SigilError } from '@sigil/plugin-api';

/** The rejection of `promise`, which must reject with a SigilError. */
export async function rejectionOf(promise: Promise<unknown>): Promise<SigilError> {
  try {
    await promise;
  } catch (err) {
    expect(err).to.be.instanceOf(SigilError);
    return err as SigilError;
  }
  throw new Error('expected a rejection');
}

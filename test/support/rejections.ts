import { expect } from 'chai';
import { SigilError } from '@sigil/plugin-api';

/** The SigilError `promise` rejects with; fails the test when it resolves or rejects with anything else. */
export async function sigilRejection(promise: Promise<unknown>): Promise<SigilError> {
  try {
    await promise;
  } catch (err) {
    expect(err).to.be.instanceOf(SigilError);
    return err as SigilError;
  }
  throw new Error('expected a rejection');
}

import { keccak256 } from 'ox/Hash';
import type { Hex } from 'viem';

/**
 * A transaction of the operator account, signed: its bytes, its hash and the account nonce it uses.
 * Hashed with ox (viem's primitives): the transfer records read these back without the chain's
 * modules loaded (issue 30, start-up).
 */
export interface SignedTransaction {
  raw: Hex;
  hash: Hex;
  nonce: number;
}

export const signedTransaction = (raw: Hex, nonce: number): SignedTransaction => ({
  raw,
  hash: keccak256(raw),
  nonce,
});

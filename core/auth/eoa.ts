import type { Address, Hex, SignableMessage } from 'viem';
import { viemUtils } from '../chain/viem.ts';

/**
 * EIP-191 signatures of externally owned accounts, checked offline: no RPC, so smart-contract wallets
 * (ERC-1271) are not supported. A malformed signature is a mismatch, never an exception.
 */
export async function signatureMatches(
  address: Address,
  message: SignableMessage,
  signature: Hex,
): Promise<boolean> {
  try {
    const { verifyMessage } = await viemUtils();
    return await verifyMessage({ address, message, signature });
  } catch {
    return false;
  }
}

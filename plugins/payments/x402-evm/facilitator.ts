import { x402Facilitator } from '@x402/core/facilitator';
import { HTTPFacilitatorClient, type FacilitatorClient } from '@x402/core/server';
import type { SupportedResponse } from '@x402/core/types';
import { toFacilitatorEvmSigner } from '@x402/evm';
import { ExactEvmScheme as ExactEvmFacilitator } from '@x402/evm/exact/facilitator';
import { createWalletClient, type Chain, type Hex, type PublicClient } from 'viem';
import { createNonceManager, jsonRpc } from 'viem/nonce';
import { privateKeyToAccount } from 'viem/accounts';
import type { X402EvmConfig } from './config.ts';
import { rpcTransport } from './transport.ts';

/**
 * The facilitator that verifies and settles: in this process, with the operator's own account on the
 * configured RPC, or a remote one at the configured URL (never the x402 library's public default).
 */
export function createFacilitator(
  config: X402EvmConfig,
  chain: Chain,
  publicClient: PublicClient,
): FacilitatorClient {
  const settings = config.facilitator;
  if (settings.kind === 'remote') {
    return new HTTPFacilitatorClient({ url: settings.url, timeoutMs: settings.timeoutMs });
  }
  // The nonce manager lets concurrent settlements from one account get distinct transaction nonces.
  // One per facilitator, not viem's process-wide one: that remembers the last nonce per address and
  // chain id, so another rail in this process on a chain with the same id (a dev chain started again)
  // would send nonces that chain has not reached, and its settlements would never mine.
  const nonceManager = createNonceManager({ source: jsonRpc() });
  const account = privateKeyToAccount(settings.privateKey as Hex, { nonceManager });
  const wallet = createWalletClient({ account, chain, transport: rpcTransport(config.rpcUrl) });
  const signer = toFacilitatorEvmSigner({
    address: account.address,
    getCode: (args) => publicClient.getCode(args),
    readContract: (args) =>
      publicClient.readContract({ ...args, args: args.args ?? [] } as Parameters<
        typeof publicClient.readContract
      >[0]),
    // viem's overloads (by block hash, number or tag) are narrower than x402's plain parameter types.
    verifyTypedData: (args) =>
      publicClient.verifyTypedData(args as Parameters<typeof publicClient.verifyTypedData>[0]),
    writeContract: (args) => wallet.writeContract(args as Parameters<typeof wallet.writeContract>[0]),
    sendTransaction: (args) => wallet.sendTransaction(args),
    waitForTransactionReceipt: (args) => publicClient.waitForTransactionReceipt(args),
  });
  const facilitator = new x402Facilitator().register(
    config.network as `${string}:${string}`,
    new ExactEvmFacilitator(signer),
  );
  return {
    verify: (payload, requirements) => facilitator.verify(payload, requirements),
    settle: (payload, requirements) => facilitator.settle(payload, requirements),
    getSupported: () => Promise.resolve(facilitator.getSupported() as SupportedResponse),
  };
}

/**
 * The chain's own share of a paid call, the floor the gateway's part is measured against: the same
 * EIP-3009 `transferWithAuthorization` a settlement sends, sent alone with EIP-7966's
 * `eth_sendRawTransactionSync` over a WebSocket to the same anvil (as the rail does), one in flight.
 * Everything is signed before the timed loop (the authorizations and the transactions, with nonces
 * counted from the chain's pending count), so a call times anvil's acceptance, mining and receipt
 * plus one loopback round trip, and nothing of ours.
 *
 * It pays from the dev chain's `runtime` wallet (funded with dollars and ether) to an address of its
 * own, so the suite's books (the payer's loss, payTo's gain, the payer's AuthorizationUsed events) do
 * not see it.
 */
import { randomBytes } from 'node:crypto';
import {
  createPublicClient,
  encodeFunctionData,
  parseAbi,
  parseSignature,
  webSocket,
  type Address,
  type Chain,
  type Hex,
} from 'viem';
import { sendRawTransactionSync } from 'viem/actions';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import type { DevChain } from '../devchain/index.ts';
import { TRANSFER_WITH_AUTHORIZATION_TYPES } from '../services/runtime/ledger/chain.ts';
import { quantile } from './stats.ts';

const abi = parseAbi([
  'function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, uint8 v, bytes32 r, bytes32 s)',
]);

/** The rail's default `settlementGasLimit`. */
const GAS = 200_000n;

export interface ChainFloor {
  /** The timed sends and their latency quantiles (ms). */
  calls: number;
  p50Ms: number;
  p99Ms: number;
  /** Anvil's CPU per send (µs), when `chainCpuUs` is given. */
  chainCpuUs: number;
  /** Any send whose receipt was not a success (the run is void then). */
  failed: number;
}

/** A floor measurer on `chain`: `run(calls)` signs `calls` transfers, then times their sends. */
export function chainFloor(chain: DevChain, amount: bigint, chainCpuUs: () => number) {
  const definition: Chain = {
    id: chain.chainId,
    name: 'anvil',
    nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
    rpcUrls: { default: { http: [chain.rpcUrl] } },
  };
  const client = createPublicClient({
    chain: definition,
    transport: webSocket(chain.rpcUrl.replace(/^http/, 'ws')),
  });
  const sender = privateKeyToAccount(chain.accounts.runtime.privateKey);
  const to: Address = privateKeyToAccount(generatePrivateKey()).address;

  const signAll = async (calls: number): Promise<Hex[]> => {
    const fees = await client.estimateFeesPerGas();
    let nonce = await client.getTransactionCount({ address: sender.address, blockTag: 'pending' });
    const validBefore = BigInt(Math.floor(Date.now() / 1000) + 3600);
    const signed: Hex[] = [];
    for (let i = 0; i < calls; i++) {
      const authorizationNonce = `0x${randomBytes(32).toString('hex')}` as Hex;
      const signature = await sender.signTypedData({
        domain: {
          name: chain.token.name,
          version: chain.token.version,
          chainId: chain.chainId,
          verifyingContract: chain.token.address,
        },
        types: TRANSFER_WITH_AUTHORIZATION_TYPES,
        primaryType: 'TransferWithAuthorization',
        message: {
          from: sender.address,
          to,
          value: amount,
          validAfter: 0n,
          validBefore,
          nonce: authorizationNonce,
        },
      });
      const { v, r, s, yParity } = parseSignature(signature);
      signed.push(
        await sender.signTransaction({
          chainId: chain.chainId,
          type: 'eip1559',
          to: chain.token.address,
          nonce: nonce++,
          gas: GAS,
          // Twice the estimate: the base fee may rise over the loop; unused fee is not paid.
          maxFeePerGas: fees.maxFeePerGas * 2n,
          maxPriorityFeePerGas: fees.maxPriorityFeePerGas,
          data: encodeFunctionData({
            abi,
            functionName: 'transferWithAuthorization',
            args: [
              sender.address,
              to,
              amount,
              0n,
              validBefore,
              authorizationNonce,
              Number(v ?? BigInt(yParity + 27)),
              r,
              s,
            ],
          }),
        }),
      );
    }
    return signed;
  };

  return {
    /** Where the transfers pay to (an address of the floor's own). */
    to,
    async run(calls: number, warmup: number): Promise<ChainFloor> {
      const signed = await signAll(calls + warmup);
      const latencies: number[] = [];
      let failed = 0;
      let cpuBefore = 0;
      for (let i = 0; i < signed.length; i++) {
        if (i === warmup) cpuBefore = chainCpuUs();
        const started = performance.now();
        const receipt = await sendRawTransactionSync(client, { serializedTransaction: signed[i] as Hex });
        if (i >= warmup) latencies.push(performance.now() - started);
        if (receipt.status !== 'success') failed++;
      }
      const chainCpu = (chainCpuUs() - cpuBefore) / Math.max(1, calls);
      latencies.sort((a, b) => a - b);
      return {
        calls,
        p50Ms: quantile(latencies, 0.5),
        p99Ms: quantile(latencies, 0.99),
        chainCpuUs: chainCpu,
        failed,
      };
    },
    close: async () => {
      const transport = client.transport as { getRpcClient?: () => Promise<{ close(): void }> };
      (await transport.getRpcClient?.())?.close();
    },
  };
}

import type { Address } from 'viem';
import { SigilError } from '@sigil/plugin-api';
import type { LedgerChain } from './chain.ts';
import type { DepositAddresses } from './deposits.ts';
import type { TransferWorker } from './transfer-worker.ts';
import type { Transfer } from './transfer-records.ts';
import type { Transfers } from './transfers.ts';
import type { WithdrawalLimits } from './withdrawal-limits.ts';

/** A withdrawal as its owner sees it. `status` is pending until the chain decides; `stage` says where it is. */
export function withdrawalView(transfer: Transfer): Record<string, unknown> {
  const status = transfer.state === 'completed' || transfer.state === 'failed' ? transfer.state : 'pending';
  return {
    id: transfer.id,
    status,
    stage: transfer.state,
    amount: transfer.amount.toString(),
    from: transfer.from,
    to: transfer.to,
    idempotencyKey: transfer.idempotencyKey ?? null,
    transactionHash: transfer.txHash ?? null,
    blockNumber: transfer.blockNumber?.toString() ?? null,
    reason: status === 'completed' ? null : (transfer.reason ?? null),
    validBefore: new Date(Number(transfer.validBefore) * 1000).toISOString(),
    createdAt: transfer.createdAt.toISOString(),
    updatedAt: transfer.updatedAt.toISOString(),
  };
}

/** Withdrawal requests: guardrails and the record here, the chain's side in the worker. */
export class Withdrawals {
  constructor(
    private readonly deps: {
      transfers: Transfers;
      deposits: DepositAddresses;
      chain: LedgerChain | undefined;
      worker: TransferWorker | undefined;
      limits: WithdrawalLimits;
      treasury: Address | undefined;
    },
  ) {}

  get limits(): WithdrawalLimits {
    return this.deps.limits;
  }

  async request(
    wallet: string,
    input: { amount: bigint; to: string; idempotencyKey: string },
  ): Promise<{ transfer: Transfer; replayed: boolean }> {
    const { chain, worker, deposits, transfers } = this.deps;
    if (!chain || !worker || !deposits.enabled) {
      throw new SigilError('unavailable', 'Withdrawals are not available: this runtime reads no chain', {
        hint: 'The operator configures ledger.rpcUrl, tokenAddress, treasury, operatorKey and depositMnemonic',
      });
    }
    const from = (await deposits.of(wallet)).address;
    let head: { block: bigint; timestamp: bigint };
    try {
      const { latest } = await chain.head();
      head = { block: latest, timestamp: await chain.blockTimestamp(latest) };
    } catch (cause) {
      throw new SigilError('unavailable', 'The chain cannot be reached now; nothing was recorded', {
        hint: 'Try again shortly with the same idempotency key',
        cause,
      });
    }
    const result = await transfers.requestWithdrawal({
      wallet,
      from,
      to: input.to,
      amount: input.amount,
      idempotencyKey: input.idempotencyKey,
      limits: this.deps.limits,
      head,
      forbidden: {
        token: chain.token,
        treasury: this.deps.treasury,
        operator: chain.operator.address,
        isDepositAddress: async (address) => (await deposits.ownerOf(address)) !== undefined,
      },
    });
    if (!result.replayed) worker.kick();
    return result;
  }
}

import {
  BaseError,
  ContractFunctionRevertedError,
  ExecutionRevertedError,
  type Hex,
  type LocalAccount,
} from 'viem';
import type { KeptLease } from '@sigil/plugin-api';
import type { Clock } from '../../../core/clock.ts';
import { RetryWorker } from '../../../core/db/retries.ts';
import type { Logger } from '../../../core/log.ts';
import { CANCEL_AUTHORIZATION_TYPES, TRANSFER_WITH_AUTHORIZATION_TYPES, type LedgerChain } from './chain.ts';
import type { DepositKeys } from './deposit-keys.ts';
import type { SignedTransaction } from './signed-transaction.ts';
import type { DepositAddresses } from './deposits.ts';
import type { Transfer } from './transfer-records.ts';
import type { Transfers } from './transfers.ts';

type Step = { finished: true } | { finished: false; againInMs: number };
const AGAIN_NOW: Step = { finished: false, againInMs: 0 };
const FINISHED: Step = { finished: true };

/**
 * Moves recorded transfers on chain and finishes them from what the chain says. The deposit key signs
 * an EIP-3009 transferWithAuthorization with the transfer's recorded nonce, and the operator account
 * submits it and pays the gas, so deposit addresses need no ether. Since one nonce can be used once,
 * sending the same transfer again (after a crash, a timeout, a lost answer) can never move the money
 * twice, and the chain's authorizationState tells at any time whether it moved:
 *
 * - used, in a block with enough confirmations: `completed` (the balance read at that block recorded
 *   in the same transaction); canceled: `failed`;
 * - unused, and a block at or after `validBefore` exists: it never can be used: `failed`;
 * - unused, the transaction reverted (or would revert): a cancelAuthorization is sent first, so the
 *   signed transfer can never go through later, then `failed` once the cancel is mined;
 * - unused otherwise: sent (again), as often as it takes.
 *
 * Every step is recorded before the next one. The operator's transaction is signed and recorded
 * before it is sent, and sent again as it is (never a new one) until the chain shows it can no longer
 * be mined, so a crash or a lost answer never sends the operator's account a second transaction for
 * one step.
 *
 * One replica at a time sends: the one holding the operator account's lease (`sender`, kept while it
 * runs). Two senders from one account would race for its nonces; the others leave their transfers,
 * recorded in the database, to the holder, and one of them takes the lease over once the holder is
 * dead or its lease expired. A transfer claimed by a live replica stays its own (see RetryQueue).
 */
export class TransferWorker {
  private readonly worker: RetryWorker<Transfer>;

  constructor(
    private readonly deps: {
      transfers: Transfers;
      deposits: DepositAddresses;
      keys: DepositKeys;
      chain: LedgerChain;
      /** The lease of the operator account: only its holder sends, and records what it sends fenced by it. */
      sender: KeptLease;
      logger: Logger;
      /** What resends are timed by (the transfers' retries and claims by the ledger's clock, the same one). */
      clock: Clock;
      pollMs: number;
      /** A sent transaction not mined after this long is sent again (same authorization). */
      resendAfterMs?: number;
    },
  ) {
    this.worker = new RetryWorker({
      queue: { claimDue: () => this.claimDueAsSender(), hold: (row, work) => deps.transfers.hold(row, work) },
      handle: (transfer) => this.process(transfer),
      intervalMs: deps.pollMs,
      logger: deps.logger,
      failure: 'ledger: transfer pass failed',
    });
  }

  /** Keeps the operator account's lease when it is free, and polls every pollMs. */
  async start(): Promise<void> {
    await this.deps.sender.start();
    await this.processDue().catch(() => undefined);
    this.worker.start();
  }

  async stop(): Promise<void> {
    await this.worker.stop();
    await this.deps.sender.stop();
  }

  /** Asks for a pass now (e.g. a transfer was just recorded). */
  kick(): void {
    this.worker.kick();
  }

  /** One pass over due transfers; concurrent calls share the running pass and ask for one more. */
  processDue(): Promise<void> {
    return this.worker.pass();
  }

  private now(): number {
    return this.deps.clock.now().getTime();
  }

  /** The due transfers, when this replica holds the operator account; none otherwise (its holder sends). */
  private async *claimDueAsSender(): AsyncGenerator<Transfer> {
    if (!(await this.deps.sender.ensure())) return;
    yield* this.deps.transfers.claimDue();
  }

  private async process(claimed: Transfer): Promise<void> {
    const { transfers, logger } = this.deps;
    let transfer: Transfer | undefined = claimed;
    try {
      for (let round = 0; round < 6 && transfer; round++) {
        const step = await this.step(transfer);
        if (step.finished) return;
        if (step.againInMs > 0 || round === 5) {
          await transfers.later(transfer.id, Math.max(step.againInMs, this.deps.pollMs));
          return;
        }
        transfer = await transfers.get(transfer.id);
        if (!transfer || transfer.state === 'completed' || transfer.state === 'failed') return;
      }
    } catch (err) {
      const message = describe(err);
      logger.warn(
        { transfer: claimed.id, kind: claimed.kind, err: message },
        'ledger: transfer attempt failed; retrying',
      );
      await transfers.noteRetry(claimed.id, message).catch(() => undefined);
      await transfers.attemptFailed(claimed.id, claimed.attempts + 1).catch(() => undefined);
    }
  }

  private async step(transfer: Transfer): Promise<Step> {
    const { chain, transfers, logger } = this.deps;
    const head = await chain.head();
    if (await chain.authorizationState(transfer.from, transfer.nonce)) {
      const ended = await chain.authorizationOutcome(transfer.from, transfer.nonce, transfer.fromBlock);
      if (!ended) return { finished: false, againInMs: this.deps.pollMs };
      if (ended.blockNumber > head.confirmed) {
        if (transfer.txHash !== ended.transactionHash && ended.outcome === 'used') {
          await transfers.note(transfer.id, { state: 'submitted', txHash: ended.transactionHash });
        }
        return { finished: false, againInMs: this.deps.pollMs };
      }
      if (ended.outcome === 'used') {
        const balance = await chain.balanceOf(transfer.from, head.confirmed);
        if (
          await transfers.complete(transfer.id, {
            txHash: ended.transactionHash,
            blockNumber: ended.blockNumber,
            balance,
            balanceBlock: head.confirmed,
          })
        ) {
          logger.info(
            {
              transfer: transfer.id,
              kind: transfer.kind,
              amount: transfer.amount.toString(),
              tx: ended.transactionHash,
            },
            `ledger: ${transfer.kind} completed`,
          );
        }
        return FINISHED;
      }
      // A cancelling transfer's reason is why the worker cancelled it (noteRetry leaves it alone).
      const why = transfer.state === 'cancelling' && transfer.reason ? ` (${transfer.reason})` : '';
      await this.failed(transfer, `its authorization was canceled on chain before it was used${why}`);
      return FINISHED;
    }
    if ((await chain.blockTimestamp(head.latest)) >= transfer.validBefore) {
      await this.failed(transfer, 'the signed transfer expired before it was mined');
      return FINISHED;
    }
    const account = await this.account(transfer);
    if (transfer.state === 'cancelling')
      return this.cancel(transfer, account, transfer.reason ?? 'cancelled');
    if (transfer.state === 'submitted' && transfer.txHash) {
      const receipt = await chain.receipt(transfer.txHash);
      if (receipt?.status === 'reverted')
        return this.cancel(transfer, account, 'the transfer reverted on chain');
      if (receipt?.status === 'success') return { finished: false, againInMs: this.deps.pollMs };
      const waited = this.now() - (transfer.sentAt ?? 0);
      if (waited < (this.deps.resendAfterMs ?? 60_000))
        return { finished: false, againInMs: this.deps.pollMs };
    }
    let hash: Hex;
    try {
      hash = await this.sendOnce(transfer, async () => {
        const message = {
          from: transfer.from,
          to: transfer.to,
          value: transfer.amount,
          validAfter: 0n,
          validBefore: transfer.validBefore,
          nonce: transfer.nonce,
        };
        const signature = await account.signTypedData({
          domain: await chain.domain(),
          types: TRANSFER_WITH_AUTHORIZATION_TYPES,
          primaryType: 'TransferWithAuthorization',
          message,
        });
        return chain.signTransfer({ ...message, signature });
      });
    } catch (err) {
      if (!isRevert(err)) throw err;
      return this.cancel(transfer, account, `the transfer would revert (${describe(err)})`);
    }
    await transfers.note(transfer.id, { state: 'submitted', txHash: hash, sentAt: this.now(), reason: null });
    return AGAIN_NOW;
  }

  /**
   * Sends the operator's transaction for the transfer's step once: the one recorded for it is sent
   * again as it is, unless the chain shows it can never be mined (its nonce went to another); only
   * then is a new one signed (`sign`), recorded under the sender lease (a replica that lost the lease
   * records nothing, so sends nothing new), and sent. Resolves with the transaction's hash.
   */
  private async sendOnce(transfer: Transfer, sign: () => Promise<SignedTransaction>): Promise<Hex> {
    const { chain, transfers, sender } = this.deps;
    const recorded = transfer.signed;
    if (recorded && !(await chain.superseded(recorded))) {
      await chain.broadcast(recorded);
      return recorded.hash;
    }
    const signed = await sign();
    await sender.fenced((trx) => transfers.recordSigned(trx, transfer.id, signed));
    await chain.broadcast(signed);
    return signed.hash;
  }

  /** Sends (or sends again) a cancelAuthorization for the transfer's nonce. */
  private async cancel(transfer: Transfer, account: LocalAccount, reason: string): Promise<Step> {
    const { chain, transfers } = this.deps;
    let cancelling = transfer;
    if (transfer.state === 'cancelling' && transfer.cancelTxHash) {
      const receipt = await chain.receipt(transfer.cancelTxHash);
      if (receipt?.status === 'success') return { finished: false, againInMs: this.deps.pollMs };
      const waited = this.now() - (transfer.sentAt ?? 0);
      if (!receipt && waited < (this.deps.resendAfterMs ?? 60_000)) {
        return { finished: false, againInMs: this.deps.pollMs };
      }
    } else if (transfer.state !== 'cancelling') {
      // The transaction recorded so far was the transfer's: the cancellation is one of its own.
      await transfers.note(transfer.id, { state: 'cancelling', reason, signed: null });
      cancelling = { ...transfer, state: 'cancelling', reason, signed: undefined };
    }
    const hash = await this.sendOnce(cancelling, async () => {
      const signature = await account.signTypedData({
        domain: await chain.domain(),
        types: CANCEL_AUTHORIZATION_TYPES,
        primaryType: 'CancelAuthorization',
        message: { authorizer: transfer.from, nonce: transfer.nonce },
      });
      return chain.signCancel(transfer.from, transfer.nonce, signature);
    });
    await transfers.note(transfer.id, { cancelTxHash: hash, sentAt: this.now() });
    this.deps.logger.warn(
      { transfer: transfer.id, kind: transfer.kind, reason },
      'ledger: transfer canceled on chain',
    );
    return AGAIN_NOW;
  }

  private async failed(transfer: Transfer, reason: string): Promise<void> {
    if (await this.deps.transfers.fail(transfer.id, reason)) {
      this.deps.logger.warn(
        { transfer: transfer.id, kind: transfer.kind, amount: transfer.amount.toString(), reason },
        transfer.kind === 'withdrawal'
          ? 'ledger: withdrawal failed; its funds are available again'
          : 'ledger: sweep failed; the spend stays unsettled',
      );
    }
  }

  private async account(transfer: Transfer): Promise<LocalAccount> {
    const deposit = await this.deps.deposits.ownerOf(transfer.from);
    if (!deposit || deposit.wallet !== transfer.wallet) {
      throw new Error(`${transfer.from} is not the deposit address of ${transfer.wallet}`);
    }
    return this.deps.keys.account(deposit.index);
  }
}

/** Whether a failed send is the contract refusing (it would revert now), not the RPC failing. */
function isRevert(err: unknown): boolean {
  if (!(err instanceof BaseError)) return false;
  return (
    err.walk((e) => e instanceof ContractFunctionRevertedError || e instanceof ExecutionRevertedError) !==
    null
  );
}

function describe(err: unknown): string {
  if (err instanceof BaseError) return err.shortMessage.slice(0, 300);
  return ((err as Error)?.message ?? String(err)).slice(0, 300);
}

import type { PaymentRailV1 } from '../index.ts';
import type { ContractKit } from './kit.ts';
import { describeContractKit } from './mocha.ts';

/**
 * `payment-rail` v1 kit: the contract's shape. Its behaviour can only be judged by money moving on a
 * chain, with a funded payer that only the tester has: those checks are in payment-rail-behaviour.ts
 * (`describePaymentRailBehaviour(load, harness)`), which the tester gives a way to pay and to read
 * balances.
 */
export const paymentRailKit: ContractKit<'payment-rail', 'v1'> = {
  kind: 'payment-rail',
  specVersion: 'v1',
  contractFile: 'packages/plugin-api/src/contracts/payment-rail-v1.ts',
  members: {
    terms: 'function',
    paymentRequired: 'function',
    verify: 'function',
    peek: 'function?',
    latestBlock: 'function?',
    chainIdentity: 'function?',
    settle: 'function',
    canSettle: 'function?',
    prepareSettlement: 'function?',
    send: 'function?',
    status: 'function',
    settlementsOnChain: 'function',
  },
  behaviour: [],
};

export const describePaymentRailKit = (load: () => Promise<PaymentRailV1>): void =>
  describeContractKit(paymentRailKit, load);

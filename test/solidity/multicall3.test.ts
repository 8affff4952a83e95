import { expect } from 'chai';
import { toFacilitatorEvmSigner, type ClientEvmSigner } from '@x402/evm';
import { ExactEvmScheme as ExactEvmClient } from '@x402/evm/exact/client';
import { ExactEvmScheme as ExactEvmFacilitator } from '@x402/evm/exact/facilitator';
import type { PaymentPayload, PaymentRequirements } from '@x402/core/types';
import { encodeFunctionData, parseAbi, publicActions, type Address } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { MULTICALL3_ADDRESS, readMiniMulticall3Artifact } from '../../solidity/mini-multicall3.ts';
import { startDevChain, type DevChain } from '../support/chain.ts';
import { chainClients, revertReason, sigilDollarAbi } from './support.ts';

/**
 * Multicall3's tryAggregate as x402 encodes it (@x402/evm's multicall3ABI, not exported), declared
 * `view` here only so viem's types allow readContract, as x402 uses it: the encoding is the same.
 */
const multicall3Abi = parseAbi([
  'struct Call { address target; bytes callData; }',
  'struct Result { bool success; bytes returnData; }',
  'function tryAggregate(bool requireSuccess, Call[] calls) view returns (Result[] returnData)',
]);

describe('MiniMulticall3 on the dev chain', function () {
  this.timeout(60_000);
  let chain: DevChain;
  let clients: ReturnType<typeof chainClients>;

  before(async () => {
    chain = await startDevChain();
    clients = chainClients(chain);
  });
  after(() => chain?.stop());

  const newAddress = () => privateKeyToAccount(generatePrivateKey()).address;

  function requirements(payTo: Address): PaymentRequirements {
    return {
      scheme: 'exact',
      network: `eip155:${chain.chainId}`,
      asset: chain.token.address,
      amount: '500',
      payTo,
      maxTimeoutSeconds: 60,
      extra: { name: chain.token.name, version: chain.token.version },
    };
  }

  async function pay(signer: ClientEvmSigner, accepted: PaymentRequirements): Promise<PaymentPayload> {
    const created = await new ExactEvmClient(signer).createPaymentPayload(2, accepted);
    return { x402Version: created.x402Version, accepted, payload: created.payload };
  }

  /** x402's own facilitator, settling from the operator's account, fresh each time. */
  function facilitator(): ExactEvmFacilitator {
    const client = clients.operatorWallet.extend(publicActions);
    const signer = toFacilitatorEvmSigner({
      ...client,
      address: clients.operator.address,
      verifyTypedData: (args) => client.verifyTypedData(args as Parameters<typeof client.verifyTypedData>[0]),
    });
    return new ExactEvmFacilitator(signer);
  }

  const tryAggregate = (requireSuccess: boolean, calls: { target: Address; callData: `0x${string}` }[]) =>
    clients.publicClient.readContract({
      address: MULTICALL3_ADDRESS,
      abi: multicall3Abi,
      functionName: 'tryAggregate',
      args: [requireSuccess, calls],
    });

  it('runs at Multicall3’s address, and the deployment says so', async () => {
    expect(chain.multicall3).to.equal(MULTICALL3_ADDRESS);
    const code = await clients.publicClient.getCode({ address: MULTICALL3_ADDRESS });
    expect(code).to.equal(readMiniMulticall3Artifact().deployedBytecode);
  });

  it('tryAggregate returns each call’s success and data, reverting on a failure only when asked', async () => {
    const balanceOfPayer = encodeFunctionData({
      abi: sigilDollarAbi,
      functionName: 'balanceOf',
      args: [chain.accounts.payer.address],
    });
    // The operator may mint, Multicall3 may not: the token reverts, and its reason comes back as data.
    const mintFromMulticall = encodeFunctionData({
      abi: sigilDollarAbi,
      functionName: 'mint',
      args: [newAddress(), 1n],
    });
    const [balance, mint] = await tryAggregate(false, [
      { target: chain.token.address, callData: balanceOfPayer },
      { target: chain.token.address, callData: mintFromMulticall },
    ]);
    expect(balance?.success).to.equal(true);
    expect(BigInt(balance!.returnData)).to.equal(1_000_000_000n);
    expect(mint?.success).to.equal(false);
    expect(Buffer.from(mint!.returnData.slice(2), 'hex').toString('latin1')).to.include(
      'SigilDollar: caller is not the owner',
    );

    expect(
      await revertReason(
        tryAggregate(true, [
          { target: chain.token.address, callData: balanceOfPayer },
          { target: chain.token.address, callData: mintFromMulticall },
        ]),
      ),
    ).to.include('Multicall3: call failed');
  });

  it('lets x402 name a replayed authorization at verification: nonce already used', async () => {
    const accepted = requirements(chain.accounts.treasury.address);
    const payment = await pay(clients.payer, accepted);
    expect(await facilitator().settle(payment, accepted)).to.include({ success: true });

    const replayed = await facilitator().verify(payment, accepted);
    expect(replayed).to.include({
      isValid: false,
      invalidReason: 'invalid_exact_evm_nonce_already_used',
      payer: clients.payer.address,
    });
  });

  it('lets x402 name an unfunded payer at verification: insufficient balance', async () => {
    const broke = privateKeyToAccount(generatePrivateKey());
    const accepted = requirements(newAddress());
    const verified = await facilitator().verify(await pay(broke, accepted), accepted);
    expect(verified).to.include({
      isValid: false,
      invalidReason: 'invalid_exact_evm_insufficient_balance',
      payer: broke.address,
    });
  });

  it('is what makes the difference: without it the same failure is only “simulation failed”', async () => {
    const broke = privateKeyToAccount(generatePrivateKey());
    const accepted = requirements(newAddress());
    const payment = await pay(broke, accepted);
    const { deployedBytecode } = readMiniMulticall3Artifact();
    const setCode = (code: `0x${string}`) =>
      clients.publicClient.request<{
        Method: 'anvil_setCode';
        Parameters: [Address, `0x${string}`];
        ReturnType: null;
      }>({ method: 'anvil_setCode', params: [MULTICALL3_ADDRESS, code] });
    await setCode('0x');
    try {
      const verified = await facilitator().verify(payment, accepted);
      expect(verified).to.include({
        isValid: false,
        invalidReason: 'invalid_exact_evm_transaction_simulation_failed',
      });
    } finally {
      await setCode(deployedBytecode);
    }
  });

  it('gives the treasury, the payer and the operator three distinct accounts', () => {
    const { operator, payer, treasury } = chain.accounts;
    expect(new Set([operator.address, payer.address, treasury.address]).size).to.equal(3);
    expect(treasury).to.have.all.keys('address');
    // Anvil's third well-known dev account (mnemonic index 2).
    expect(treasury.address).to.equal('0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC');
  });
});

import { expect } from 'chai';
import solc from 'solc';
import { eip3009ABI, toFacilitatorEvmSigner, type ClientEvmSigner } from '@x402/evm';
import { ExactEvmScheme as ExactEvmClient } from '@x402/evm/exact/client';
import { ExactEvmScheme as ExactEvmFacilitator } from '@x402/evm/exact/facilitator';
import type { PaymentPayload, PaymentRequirements } from '@x402/core/types';
import { hashTypedData, parseAbi, parseEventLogs, publicActions, type Address, type Hex } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { startDevChain, type DevChain } from '../support/chain.ts';
import { chainClients, revertReason, sigilDollarAbi } from './support.ts';

/**
 * A smart wallet reduced to ERC-1271: its owner approves digests beforehand (as Safe's approveHash
 * does), and any signature bytes then pass for them. It exercises the `bytes signature` overload,
 * which x402's facilitator uses for every signature that is not a 65-byte ECDSA one.
 */
const WALLET_SOURCE = `// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;
contract HashApprovingWallet {
    address private immutable owner = msg.sender;
    mapping(bytes32 => bool) private approved;
    function approveHash(bytes32 digest) external {
        require(msg.sender == owner, "not the owner");
        approved[digest] = true;
    }
    function isValidSignature(bytes32 digest, bytes calldata) external view returns (bytes4) {
        return approved[digest] ? bytes4(0x1626ba7e) : bytes4(0xffffffff);
    }
}`;
const walletAbi = parseAbi(['function approveHash(bytes32 digest)']);

function compileWallet(): Hex {
  const input = {
    language: 'Solidity',
    sources: { 'HashApprovingWallet.sol': { content: WALLET_SOURCE } },
    settings: { evmVersion: 'cancun', outputSelection: { '*': { '*': ['evm.bytecode.object'] } } },
  };
  const compile = solc.compile as (json: string) => string;
  const output = JSON.parse(compile(JSON.stringify(input))) as {
    contracts: Record<string, Record<string, { evm: { bytecode: { object: string } } }>>;
  };
  const bytecode = output.contracts['HashApprovingWallet.sol']?.HashApprovingWallet?.evm.bytecode.object;
  if (!bytecode) throw new Error(`HashApprovingWallet does not compile: ${JSON.stringify(output)}`);
  return `0x${bytecode}`;
}

describe('x402 exact scheme on SigilDollar', function () {
  this.timeout(60_000);
  let chain: DevChain;
  let clients: ReturnType<typeof chainClients>;

  before(async () => {
    chain = await startDevChain();
    clients = chainClients(chain);
  });
  after(() => chain?.stop());

  const balanceOf = (account: Address) =>
    clients.publicClient.readContract({
      address: chain.token.address,
      abi: sigilDollarAbi,
      functionName: 'balanceOf',
      args: [account],
    });
  const newAddress = () => privateKeyToAccount(generatePrivateKey()).address;

  /** What a gateway charging 0.0005 USD per call on the dev chain would ask for. */
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

  /** A facilitator settling from the operator's account; each is fresh, with no memory of earlier settlements. */
  function facilitator(): ExactEvmFacilitator {
    const client = clients.operatorWallet.extend(publicActions);
    const signer = toFacilitatorEvmSigner({
      ...client,
      address: clients.operator.address,
      // viem's overloads (by block hash, number or tag) are narrower than x402's plain parameter type.
      verifyTypedData: (args) => client.verifyTypedData(args as Parameters<typeof client.verifyTypedData>[0]),
    });
    return new ExactEvmFacilitator(signer);
  }

  it('a payer’s authorization verifies and settles: exactly the price moves, through the (v, r, s) overload', async () => {
    const payTo = newAddress();
    const accepted = requirements(payTo);
    const payment = await pay(clients.payer, accepted);
    const payerBefore = await balanceOf(clients.payer.address);

    const verified = await facilitator().verify(payment, accepted);
    expect(verified).to.include({ isValid: true, payer: clients.payer.address });
    const settled = await facilitator().settle(payment, accepted);
    expect(settled).to.include({ success: true, network: 'eip155:8453' });

    expect(await balanceOf(clients.payer.address)).to.equal(payerBefore - 500n);
    expect(await balanceOf(payTo)).to.equal(500n);
    const receipt = await clients.publicClient.getTransactionReceipt({ hash: settled.transaction as Hex });
    expect(receipt.to).to.equal(chain.token.address.toLowerCase());
    const events = parseEventLogs({ abi: sigilDollarAbi, logs: receipt.logs });
    expect(events.map((e) => e.eventName)).to.deep.equal(['AuthorizationUsed', 'Transfer']);
  });

  it('a replayed payment is refused at verification and at settlement, which names the reason', async () => {
    const accepted = requirements(newAddress());
    const payment = await pay(clients.payer, accepted);
    expect(await facilitator().settle(payment, accepted)).to.include({ success: true });

    expect((await facilitator().verify(payment, accepted)).isValid).to.equal(false);
    // Settlement does not simulate first: the contract's revert reason is what x402 classifies.
    const replayed = await facilitator().settle(payment, accepted);
    expect(replayed).to.include({ success: false, errorReason: 'invalid_exact_evm_nonce_already_used' });
    expect(await balanceOf(accepted.payTo as Address)).to.equal(500n);
  });

  it('a payer without the dollars is refused, and settlement names the shortfall', async () => {
    const broke = privateKeyToAccount(generatePrivateKey());
    const accepted = requirements(newAddress());
    const payment = await pay(broke, accepted);
    expect((await facilitator().verify(payment, accepted)).isValid).to.equal(false);
    const settled = await facilitator().settle(payment, accepted);
    expect(settled).to.include({ success: false, errorReason: 'invalid_exact_evm_insufficient_balance' });
  });

  it('a smart wallet (ERC-1271) pays through the `bytes signature` overload', async () => {
    const { publicClient, operatorWallet } = clients;
    const deployed = await publicClient.waitForTransactionReceipt({
      hash: await operatorWallet.deployContract({ abi: [], bytecode: compileWallet() }),
    });
    const wallet = deployed.contractAddress!;
    await publicClient.waitForTransactionReceipt({
      hash: await operatorWallet.writeContract({
        address: chain.token.address,
        abi: sigilDollarAbi,
        functionName: 'mint',
        args: [wallet, 10_000n],
      }),
    });
    // The wallet "signs" by approving the digest on chain; the signature bytes are then arbitrary.
    const walletSignature: Hex = '0x5167';
    let approve = true;
    const signer: ClientEvmSigner = {
      address: wallet,
      async signTypedData(typedData) {
        const digest = hashTypedData(typedData as Parameters<typeof hashTypedData>[0]);
        if (approve) {
          await publicClient.waitForTransactionReceipt({
            hash: await operatorWallet.writeContract({
              address: wallet,
              abi: walletAbi,
              functionName: 'approveHash',
              args: [digest],
            }),
          });
        }
        return walletSignature;
      },
    };

    // Not approved by the wallet: refused, whatever the bytes.
    approve = false;
    const unapproved = requirements(newAddress());
    const refused = await pay(signer, unapproved);
    expect((await facilitator().verify(refused, unapproved)).isValid).to.equal(false);
    const auth = refused.payload.authorization as Record<string, string>;
    const direct = operatorWallet.writeContract({
      address: chain.token.address,
      abi: eip3009ABI,
      functionName: 'transferWithAuthorization',
      args: [
        wallet,
        auth.to as Address,
        500n,
        BigInt(auth.validAfter!),
        BigInt(auth.validBefore!),
        auth.nonce as Hex,
        walletSignature,
      ],
    });
    expect(await revertReason(direct)).to.include('invalid signature');

    approve = true;
    const accepted = requirements(newAddress());
    const payment = await pay(signer, accepted);
    expect(await facilitator().verify(payment, accepted)).to.include({ isValid: true });
    expect(await facilitator().settle(payment, accepted)).to.include({ success: true });
    expect(await balanceOf(wallet)).to.equal(9_500n);
    expect(await balanceOf(accepted.payTo as Address)).to.equal(500n);
  });
});

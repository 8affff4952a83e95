import { expect } from 'chai';
import { eip3009ABI } from '@x402/evm';
import {
  getContractAddress,
  encodeAbiParameters,
  keccak256,
  parseAbiParameters,
  parseEventLogs,
  toHex,
  type Hex,
  type TransactionReceipt,
} from 'viem';
import { getEip712Domain } from 'viem/actions';
import { privateKeyToAccount, generatePrivateKey } from 'viem/accounts';
import { startDevChain, type DevChain } from '../support/chain.ts';
import {
  cancelAuthorizationTypes,
  chainClients,
  randomNonce,
  receiveAuthorizationTypes,
  revertReason,
  sigilDollarAbi,
  signTransfer,
  splitSignature,
  tokenDomain,
  type Authorization,
} from './support.ts';

/** secp256k1's group order: n - s is the other valid `s` of an ECDSA signature. */
const SECP256K1_ORDER = 0xfffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141n;

describe('SigilDollar on anvil', function () {
  let chain: DevChain;
  let clients: ReturnType<typeof chainClients>;
  let token: Hex;

  before(async () => {
    chain = await startDevChain();
    clients = chainClients(chain);
    token = chain.token.address;
  });
  after(() => chain?.stop());

  const balanceOf = (account: Hex) =>
    clients.publicClient.readContract({
      address: token,
      abi: sigilDollarAbi,
      functionName: 'balanceOf',
      args: [account],
    });
  const authorizationUsed = (authorizer: Hex, nonce: Hex) =>
    clients.publicClient.readContract({
      address: token,
      abi: sigilDollarAbi,
      functionName: 'authorizationState',
      args: [authorizer, nonce],
    });
  const chainNow = async () => (await clients.publicClient.getBlock()).timestamp;
  const mined = async (hash: Hex): Promise<TransactionReceipt> => {
    const receipt = await clients.publicClient.waitForTransactionReceipt({ hash });
    expect(receipt.status).to.equal('success');
    return receipt;
  };
  const newPayee = () => privateKeyToAccount(generatePrivateKey()).address;

  /** An authorization from the payer, valid from ten minutes ago for an hour, as x402's client makes them. */
  async function authorization(overrides: Partial<Authorization> = {}): Promise<Authorization> {
    const now = await chainNow();
    return {
      from: clients.payer.address,
      to: newPayee(),
      value: 500n,
      validAfter: now - 600n,
      validBefore: now + 3600n,
      nonce: randomNonce(),
      ...overrides,
    };
  }

  /** Submits with the (v, r, s) overload, as x402's facilitator does for an EOA, from the operator. */
  function submitTransfer(auth: Authorization, signature: Hex) {
    const { v, r, s } = splitSignature(signature);
    return clients.operatorWallet.writeContract({
      address: token,
      abi: eip3009ABI,
      functionName: 'transferWithAuthorization',
      args: [auth.from, auth.to, auth.value, auth.validAfter, auth.validBefore, auth.nonce, v, r, s],
    });
  }

  /** Submits with the `bytes signature` overload. */
  function submitTransferBytes(auth: Authorization, signature: Hex) {
    return clients.operatorWallet.writeContract({
      address: token,
      abi: eip3009ABI,
      functionName: 'transferWithAuthorization',
      args: [auth.from, auth.to, auth.value, auth.validAfter, auth.validBefore, auth.nonce, signature],
    });
  }

  describe('deployment', () => {
    it('is the operator’s first contract, with the metadata and EIP-712 domain x402 needs', async () => {
      const { publicClient } = clients;
      expect(token).to.equal(getContractAddress({ from: chain.accounts.operator.address, nonce: 0n }));
      expect(chain.chainId).to.equal(8453);
      expect(await publicClient.getChainId()).to.equal(8453);
      expect(chain.token).to.deep.equal({ address: token, name: 'Sigil Dollar', version: '1', decimals: 6 });
      const read = <F extends 'name' | 'symbol' | 'version' | 'owner' | 'decimals'>(functionName: F) =>
        publicClient.readContract({ address: token, abi: sigilDollarAbi, functionName });
      expect(await read('name')).to.equal('Sigil Dollar');
      expect(await read('symbol')).to.equal('USDS');
      expect(await read('decimals')).to.equal(6);
      expect(await read('version')).to.equal('1');
      expect(await read('owner')).to.equal(chain.accounts.operator.address);
      const { domain, fields } = await getEip712Domain(publicClient, { address: token });
      expect(domain).to.deep.include({
        name: 'Sigil Dollar',
        version: '1',
        chainId: 8453,
        verifyingContract: token,
      });
      expect(fields).to.equal('0x0f');
      const separator = await publicClient.readContract({
        address: token,
        abi: sigilDollarAbi,
        functionName: 'DOMAIN_SEPARATOR',
      });
      // EIP-712's definition, spelled out.
      const expected = keccak256(
        encodeAbiParameters(parseAbiParameters('bytes32, bytes32, bytes32, uint256, address'), [
          keccak256(
            toHex('EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)'),
          ),
          keccak256(toHex('Sigil Dollar')),
          keccak256(toHex('1')),
          8453n,
          token,
        ]),
      );
      expect(separator).to.equal(expected);
    });

    it('funds the payer with 1000 dollars and the runtime wallet with 100 (in base units), and nobody else', async () => {
      expect(chain.accounts.payer.address).to.not.equal(chain.accounts.operator.address);
      expect(privateKeyToAccount(chain.accounts.payer.privateKey).address).to.equal(
        chain.accounts.payer.address,
      );
      expect(privateKeyToAccount(chain.accounts.operator.privateKey).address).to.equal(
        chain.accounts.operator.address,
      );
      expect(await balanceOf(chain.accounts.payer.address)).to.equal(1_000_000_000n);
      expect(await balanceOf(chain.accounts.runtime.address)).to.equal(100_000_000n);
      expect(await balanceOf(chain.accounts.operator.address)).to.equal(0n);
      expect(
        await clients.publicClient.readContract({
          address: token,
          abi: sigilDollarAbi,
          functionName: 'totalSupply',
        }),
      ).to.equal(1_100_000_000n);
      // The operator pays gas for settlements: anvil's dev accounts start with ether.
      const operatorEther = await clients.publicClient.getBalance({
        address: chain.accounts.operator.address,
      });
      expect(operatorEther > 10n ** 18n).to.equal(true);
    });
  });

  describe('transferWithAuthorization', () => {
    it('(v, r, s): moves exactly the amount, relayed by another account, and emits AuthorizationUsed then Transfer', async () => {
      const auth = await authorization({ value: 1_234_567n });
      const signature = await signTransfer(clients.payer, auth, tokenDomain(chain));
      const payerBefore = await balanceOf(auth.from);
      expect(await authorizationUsed(auth.from, auth.nonce)).to.equal(false);

      const receipt = await mined(await submitTransfer(auth, signature));

      expect(await balanceOf(auth.from)).to.equal(payerBefore - 1_234_567n);
      expect(await balanceOf(auth.to)).to.equal(1_234_567n);
      expect(await balanceOf(chain.accounts.operator.address)).to.equal(0n); // the relayer only pays gas
      expect(await authorizationUsed(auth.from, auth.nonce)).to.equal(true);
      const events = parseEventLogs({ abi: sigilDollarAbi, logs: receipt.logs });
      expect(events.map((e) => e.eventName)).to.deep.equal(['AuthorizationUsed', 'Transfer']);
      expect(events[0]!.args).to.deep.equal({ authorizer: auth.from, nonce: auth.nonce });
      expect(events[1]!.args).to.deep.equal({ from: auth.from, to: auth.to, value: 1_234_567n });
      expect(events.every((e) => e.address === token.toLowerCase())).to.equal(true);
    });

    it('(bytes signature): the same for a 65-byte ECDSA signature', async () => {
      const auth = await authorization();
      const receipt = await mined(
        await submitTransferBytes(auth, await signTransfer(clients.payer, auth, tokenDomain(chain))),
      );
      expect(await balanceOf(auth.to)).to.equal(500n);
      expect(
        parseEventLogs({ abi: sigilDollarAbi, logs: receipt.logs }).map((e) => e.eventName),
      ).to.deep.equal(['AuthorizationUsed', 'Transfer']);
    });

    it('accepts v as y-parity (0/1) as well as 27/28', async () => {
      const auth = await authorization();
      const { v, r, s } = splitSignature(await signTransfer(clients.payer, auth, tokenDomain(chain)));
      await mined(
        await clients.operatorWallet.writeContract({
          address: token,
          abi: eip3009ABI,
          functionName: 'transferWithAuthorization',
          args: [auth.from, auth.to, auth.value, auth.validAfter, auth.validBefore, auth.nonce, v - 27, r, s],
        }),
      );
      expect(await balanceOf(auth.to)).to.equal(500n);
    });

    it('reverts a replayed authorization, through either overload, and moves nothing more', async () => {
      const auth = await authorization();
      const signature = await signTransfer(clients.payer, auth, tokenDomain(chain));
      await mined(await submitTransfer(auth, signature));
      const payerAfterFirst = await balanceOf(auth.from);
      expect(await revertReason(submitTransfer(auth, signature))).to.include(
        'authorization is used or canceled',
      );
      expect(await revertReason(submitTransferBytes(auth, signature))).to.include(
        'authorization is used or canceled',
      );
      expect(await balanceOf(auth.from)).to.equal(payerAfterFirst);
      expect(await balanceOf(auth.to)).to.equal(500n);
    });

    it('reverts an expired authorization (validBefore in the past)', async () => {
      const now = await chainNow();
      const auth = await authorization({ validAfter: now - 3600n, validBefore: now - 1n });
      const signature = await signTransfer(clients.payer, auth, tokenDomain(chain));
      expect(await revertReason(submitTransfer(auth, signature))).to.include('authorization is expired');
      expect(await authorizationUsed(auth.from, auth.nonce)).to.equal(false);
    });

    it('reverts an authorization that is not yet valid (validAfter in the future)', async () => {
      const now = await chainNow();
      const auth = await authorization({ validAfter: now + 3600n, validBefore: now + 7200n });
      const signature = await signTransfer(clients.payer, auth, tokenDomain(chain));
      expect(await revertReason(submitTransfer(auth, signature))).to.include(
        'authorization is not yet valid',
      );
    });

    it('reverts a signature by another wallet than `from`', async () => {
      const auth = await authorization();
      const signature = await signTransfer(clients.operator, auth, tokenDomain(chain));
      expect(await revertReason(submitTransfer(auth, signature))).to.include('invalid signature');
      expect(await revertReason(submitTransferBytes(auth, signature))).to.include('invalid signature');
      expect(await balanceOf(auth.to)).to.equal(0n);
    });

    it('reverts when any signed term differs: value, payee, or the domain (chain id, token)', async () => {
      const auth = await authorization();
      const signature = await signTransfer(clients.payer, auth, tokenDomain(chain));
      for (const changed of [
        { ...auth, value: auth.value + 1n },
        { ...auth, to: newPayee() },
      ]) {
        expect(await revertReason(submitTransfer(changed, signature))).to.include('invalid signature');
      }
      for (const domain of [
        { ...tokenDomain(chain), chainId: 1 },
        { ...tokenDomain(chain), verifyingContract: newPayee() },
        { ...tokenDomain(chain), version: '2' },
      ]) {
        const foreign = await signTransfer(clients.payer, auth, domain);
        expect(await revertReason(submitTransfer(auth, foreign))).to.include('invalid signature');
      }
      // Nothing was consumed: the genuine signature still settles.
      await mined(await submitTransfer(auth, signature));
    });

    it('refuses the malleable (high-s) twin of a valid signature', async () => {
      const auth = await authorization();
      const { v, r, s } = splitSignature(await signTransfer(clients.payer, auth, tokenDomain(chain)));
      const twinS = toHex(SECP256K1_ORDER - BigInt(s), { size: 32 });
      const twinV = v === 27 ? 28 : 27;
      const reason = await revertReason(
        clients.operatorWallet.writeContract({
          address: token,
          abi: eip3009ABI,
          functionName: 'transferWithAuthorization',
          args: [
            auth.from,
            auth.to,
            auth.value,
            auth.validAfter,
            auth.validBefore,
            auth.nonce,
            twinV,
            r,
            twinS,
          ],
        }),
      );
      expect(reason).to.include('invalid signature');
    });

    it('reverts when the balance is short, and leaves the nonce unused', async () => {
      const auth = await authorization({ value: (await balanceOf(clients.payer.address)) + 1n });
      const signature = await signTransfer(clients.payer, auth, tokenDomain(chain));
      expect(await revertReason(submitTransfer(auth, signature))).to.include(
        'transfer amount exceeds balance',
      );
      expect(await authorizationUsed(auth.from, auth.nonce)).to.equal(false);
    });
  });

  describe('receiveWithAuthorization', () => {
    it('settles only when submitted by the payee', async () => {
      const payee = privateKeyToAccount(generatePrivateKey());
      // The payee needs gas to submit: the operator sends it some ether.
      await mined(await clients.operatorWallet.sendTransaction({ to: payee.address, value: 10n ** 17n }));
      const auth = await authorization({ to: payee.address, value: 700n });
      const signature = await clients.payer.signTypedData({
        domain: tokenDomain(chain),
        types: receiveAuthorizationTypes,
        primaryType: 'ReceiveWithAuthorization',
        message: auth,
      });
      const { v, r, s } = splitSignature(signature);
      const args = [
        auth.from,
        auth.to,
        auth.value,
        auth.validAfter,
        auth.validBefore,
        auth.nonce,
        v,
        r,
        s,
      ] as const;
      const byOperator = clients.operatorWallet.writeContract({
        address: token,
        abi: sigilDollarAbi,
        functionName: 'receiveWithAuthorization',
        args,
      });
      expect(await revertReason(byOperator)).to.include('caller must be the payee');
      // A receive authorization is not a transfer authorization: the type hash differs.
      expect(await revertReason(submitTransfer(auth, signature))).to.include('invalid signature');
      const receipt = await mined(
        await clients.walletFor(payee).writeContract({
          address: token,
          abi: sigilDollarAbi,
          functionName: 'receiveWithAuthorization',
          args: [auth.from, auth.to, auth.value, auth.validAfter, auth.validBefore, auth.nonce, signature],
        }),
      );
      expect(await balanceOf(payee.address)).to.equal(700n);
      expect(
        parseEventLogs({ abi: sigilDollarAbi, logs: receipt.logs }).map((e) => e.eventName),
      ).to.deep.equal(['AuthorizationUsed', 'Transfer']);
    });
  });

  describe('cancelAuthorization', () => {
    const signCancel = (nonce: Hex, signer = clients.payer) =>
      signer.signTypedData({
        domain: tokenDomain(chain),
        types: cancelAuthorizationTypes,
        primaryType: 'CancelAuthorization',
        message: { authorizer: clients.payer.address, nonce },
      });

    it('burns an unused nonce: AuthorizationCanceled, then the authorization no longer settles', async () => {
      const auth = await authorization();
      const transferSignature = await signTransfer(clients.payer, auth, tokenDomain(chain));
      const { v, r, s } = splitSignature(await signCancel(auth.nonce));
      const receipt = await mined(
        await clients.operatorWallet.writeContract({
          address: token,
          abi: sigilDollarAbi,
          functionName: 'cancelAuthorization',
          args: [auth.from, auth.nonce, v, r, s],
        }),
      );
      const events = parseEventLogs({ abi: sigilDollarAbi, logs: receipt.logs });
      expect(events.map((e) => e.eventName)).to.deep.equal(['AuthorizationCanceled']);
      expect(events[0]!.args).to.deep.equal({ authorizer: auth.from, nonce: auth.nonce });
      expect(await authorizationUsed(auth.from, auth.nonce)).to.equal(true);
      expect(await revertReason(submitTransfer(auth, transferSignature))).to.include(
        'authorization is used or canceled',
      );
    });

    it('cannot cancel a used nonce, nor be signed by anyone but the authorizer', async () => {
      const auth = await authorization();
      await mined(await submitTransfer(auth, await signTransfer(clients.payer, auth, tokenDomain(chain))));
      const cancelUsed = clients.operatorWallet.writeContract({
        address: token,
        abi: sigilDollarAbi,
        functionName: 'cancelAuthorization',
        args: [auth.from, auth.nonce, await signCancel(auth.nonce)],
      });
      expect(await revertReason(cancelUsed)).to.include('authorization is used or canceled');

      const unused = randomNonce();
      const cancelByOther = clients.operatorWallet.writeContract({
        address: token,
        abi: sigilDollarAbi,
        functionName: 'cancelAuthorization',
        args: [clients.payer.address, unused, await signCancel(unused, clients.operator)],
      });
      expect(await revertReason(cancelByOther)).to.include('invalid signature');
      expect(await authorizationUsed(clients.payer.address, unused)).to.equal(false);
    });
  });

  describe('mint and ERC-20', () => {
    it('mints for the owner only', async () => {
      const recipient = newPayee();
      const byPayer = clients.walletFor(clients.payer).writeContract({
        address: token,
        abi: sigilDollarAbi,
        functionName: 'mint',
        args: [recipient, 1n],
      });
      expect(await revertReason(byPayer)).to.include('caller is not the owner');
      const supplyBefore = await clients.publicClient.readContract({
        address: token,
        abi: sigilDollarAbi,
        functionName: 'totalSupply',
      });
      const receipt = await mined(
        await clients.operatorWallet.writeContract({
          address: token,
          abi: sigilDollarAbi,
          functionName: 'mint',
          args: [recipient, 5_000_000n],
        }),
      );
      expect(await balanceOf(recipient)).to.equal(5_000_000n);
      expect(
        await clients.publicClient.readContract({
          address: token,
          abi: sigilDollarAbi,
          functionName: 'totalSupply',
        }),
      ).to.equal(supplyBefore + 5_000_000n);
      const [minted] = parseEventLogs({ abi: sigilDollarAbi, logs: receipt.logs, eventName: 'Transfer' });
      expect(minted!.args).to.deep.equal({
        from: '0x0000000000000000000000000000000000000000',
        to: recipient,
        value: 5_000_000n,
      });
    });

    it('transfers, approves and transfers from an allowance, which it spends', async () => {
      const payerWallet = clients.walletFor(clients.payer);
      const recipient = newPayee();
      await mined(
        await payerWallet.writeContract({
          address: token,
          abi: sigilDollarAbi,
          functionName: 'transfer',
          args: [recipient, 10n],
        }),
      );
      expect(await balanceOf(recipient)).to.equal(10n);
      const approval = await mined(
        await payerWallet.writeContract({
          address: token,
          abi: sigilDollarAbi,
          functionName: 'approve',
          args: [clients.operator.address, 25n],
        }),
      );
      expect(parseEventLogs({ abi: sigilDollarAbi, logs: approval.logs })[0]!.args).to.deep.equal({
        owner: clients.payer.address,
        spender: clients.operator.address,
        value: 25n,
      });
      await mined(
        await clients.operatorWallet.writeContract({
          address: token,
          abi: sigilDollarAbi,
          functionName: 'transferFrom',
          args: [clients.payer.address, recipient, 20n],
        }),
      );
      expect(await balanceOf(recipient)).to.equal(30n);
      expect(
        await clients.publicClient.readContract({
          address: token,
          abi: sigilDollarAbi,
          functionName: 'allowance',
          args: [clients.payer.address, clients.operator.address],
        }),
      ).to.equal(5n);
      const overAllowance = clients.operatorWallet.writeContract({
        address: token,
        abi: sigilDollarAbi,
        functionName: 'transferFrom',
        args: [clients.payer.address, recipient, 6n],
      });
      expect(await revertReason(overAllowance)).to.include('transfer amount exceeds allowance');
    });
  });
});

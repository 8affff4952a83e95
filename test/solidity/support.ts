import { randomBytes } from 'node:crypto';
import { authorizationTypes } from '@x402/evm';
import {
  createPublicClient,
  createWalletClient,
  http,
  parseAbi,
  parseSignature,
  toHex,
  type Address,
  type Hex,
  type LocalAccount,
  type TypedDataDomain,
} from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { devChainDefinition } from '../../devchain/index.ts';
import type { DevChain } from '../support/chain.ts';

/**
 * SigilDollar's interface as USDC-style callers know it, written out by hand rather than taken from
 * the artifact: the tests then also check that the contract really has these signatures.
 */
export const sigilDollarAbi = parseAbi([
  'function name() view returns (string)',
  'function symbol() view returns (string)',
  'function decimals() view returns (uint8)',
  'function version() view returns (string)',
  'function owner() view returns (address)',
  'function totalSupply() view returns (uint256)',
  'function balanceOf(address account) view returns (uint256)',
  'function allowance(address owner, address spender) view returns (uint256)',
  'function transfer(address to, uint256 value) returns (bool)',
  'function approve(address spender, uint256 value) returns (bool)',
  'function transferFrom(address from, address to, uint256 value) returns (bool)',
  'function mint(address to, uint256 value)',
  'function DOMAIN_SEPARATOR() view returns (bytes32)',
  'function authorizationState(address authorizer, bytes32 nonce) view returns (bool)',
  'function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, uint8 v, bytes32 r, bytes32 s)',
  'function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, bytes signature)',
  'function receiveWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, uint8 v, bytes32 r, bytes32 s)',
  'function receiveWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, bytes signature)',
  'function cancelAuthorization(address authorizer, bytes32 nonce, uint8 v, bytes32 r, bytes32 s)',
  'function cancelAuthorization(address authorizer, bytes32 nonce, bytes signature)',
  'event Transfer(address indexed from, address indexed to, uint256 value)',
  'event Approval(address indexed owner, address indexed spender, uint256 value)',
  'event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)',
  'event AuthorizationCanceled(address indexed authorizer, bytes32 indexed nonce)',
]);

export const receiveAuthorizationTypes = {
  ReceiveWithAuthorization: authorizationTypes.TransferWithAuthorization,
} as const;

export const cancelAuthorizationTypes = {
  CancelAuthorization: [
    { name: 'authorizer', type: 'address' },
    { name: 'nonce', type: 'bytes32' },
  ],
} as const;

export interface Authorization {
  from: Address;
  to: Address;
  value: bigint;
  validAfter: bigint;
  validBefore: bigint;
  nonce: Hex;
}

/** Viem clients on the dev chain: reads, and writes as a given account (the operator by default). */
export function chainClients(chain: DevChain) {
  const viemChain = devChainDefinition(chain.rpcUrl, chain.chainId);
  const transport = http(chain.rpcUrl);
  const publicClient = createPublicClient({ chain: viemChain, transport, pollingInterval: 20 });
  const walletFor = (account: LocalAccount) =>
    createWalletClient({ chain: viemChain, transport, account, pollingInterval: 20 });
  const operator = privateKeyToAccount(chain.accounts.operator.privateKey);
  const payer = privateKeyToAccount(chain.accounts.payer.privateKey);
  return { publicClient, walletFor, operator, payer, operatorWallet: walletFor(operator) };
}

export function tokenDomain(chain: DevChain): TypedDataDomain {
  return {
    name: chain.token.name,
    version: chain.token.version,
    chainId: chain.chainId,
    verifyingContract: chain.token.address,
  };
}

export function randomNonce(): Hex {
  return toHex(randomBytes(32));
}

/** EIP-3009 TransferWithAuthorization signed with viem's signTypedData, with x402's types. */
export function signTransfer(
  signer: LocalAccount,
  authorization: Authorization,
  domain: TypedDataDomain,
): Promise<Hex> {
  return signer.signTypedData({
    domain,
    types: authorizationTypes,
    primaryType: 'TransferWithAuthorization',
    message: authorization,
  });
}

/** (v, r, s) of a 65-byte signature, v as 27/28, as FiatToken's first overload takes them. */
export function splitSignature(signature: Hex): { v: number; r: Hex; s: Hex } {
  const { v, r, s } = parseSignature(signature);
  if (v === undefined) throw new Error('not a 65-byte signature');
  return { v: Number(v), r, s };
}

/** Awaits a promise expected to fail (a reverted call or transaction) and returns the error's message. */
export async function revertReason(attempt: Promise<unknown>): Promise<string> {
  try {
    await attempt;
  } catch (error) {
    return error instanceof Error ? error.message : String(error);
  }
  throw new Error('expected a revert, but the call succeeded');
}

/** The timestamp of the chain's genesis block (whole seconds): with the chain id, what tells two apart. */
export async function genesisTimestamp(chain: DevChain): Promise<bigint> {
  return (await chainClients(chain).publicClient.getBlock({ blockNumber: 0n })).timestamp;
}

/**
 * Resolves once the wall clock's whole second is past `seconds`: a dev chain started before then in the
 * same second as another would have the same genesis, so the same identity.
 */
export async function untilWallClockPasses(seconds: bigint): Promise<void> {
  while (BigInt(Math.floor(Date.now() / 1000)) <= seconds)
    await new Promise((resolve) => setTimeout(resolve, 1000 - (Date.now() % 1000) + 1));
}

import {
  createPublicClient,
  createWalletClient,
  defineChain,
  getAddress,
  getContractAddress,
  http,
  parseAbi,
  toHex,
  type Address,
  type Chain,
  type Hex,
  type PublicClient,
  type Transport,
  type WalletClient,
} from 'viem';
import { getEip712Domain } from 'viem/actions';
import { mnemonicToAccount, privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts';
import { MULTICALL3_ADDRESS, readMiniMulticall3Artifact } from '../solidity/mini-multicall3.ts';
import { readSigilDollarArtifact } from '../solidity/sigil-dollar.ts';
import type { Logger } from '../core/log.ts';
import { DEV_MNEMONIC } from './anvil.ts';

export interface DevWallet {
  address: Address;
  privateKey: Hex;
}

export interface DevChainDeployment {
  rpcUrl: string;
  chainId: number;
  /** The dollar token, with the EIP-712 domain x402's `exact` scheme needs as `extra: { name, version }`. */
  token: { address: Address; name: string; version: string; decimals: number };
  accounts: {
    /** Deployer and owner of the token (the only minter); has ether for gas, so it can settle payments. */
    operator: DevWallet;
    /** A wallet funded with dollars, to pay for tool calls in development and tests. */
    payer: DevWallet;
    /**
     * The runtime's operator wallet under `sigil up` (runtime.operatorKey), funded with dollars: it pays
     * the gateway's x402 price of chat tool calls. Its own account, so the payer's balance is the user's.
     */
    runtime: DevWallet;
    /** Where payments go (the gateway's `payTo`): neither the payer nor the account paying gas. */
    treasury: { address: Address };
  };
  /** Multicall3's canonical address, where MiniMulticall3 runs (x402 diagnoses failed payments through it). */
  multicall3: Address;
  /** The payer's dollars at start (base units): the funding on a new chain, what is left on a saved one. */
  payerBalance: bigint;
}

export interface DeployOptions {
  rpcUrl: string;
  chainId: number;
  /** Dollars minted to the payer, in base units (6 decimals); 1000 USD by default. */
  payerFunding?: bigint;
  logger: Logger;
}

/**
 * Anvil's dev accounts, from its well-known mnemonic: index 0 operates, index 1 pays, index 2 is paid,
 * index 4 is the runtime's operator wallet (index 3 submits the ledger's transfers: devchain/ledger.ts).
 */
export const OPERATOR_ACCOUNT_INDEX = 0;
export const PAYER_ACCOUNT_INDEX = 1;
export const TREASURY_ACCOUNT_INDEX = 2;
export const RUNTIME_ACCOUNT_INDEX = 4;
/**
 * The accounts gateway replicas on the dev chain settle x402 payments from: the same list on every
 * replica, each leasing one (a facilitator's transactions are numbered per account, so one per
 * replica at least). Anvil funds ten; those above (and 3, the ledger's) have other jobs.
 */
export const FACILITATOR_ACCOUNT_INDEXES: readonly number[] = [5, 6, 7, 8, 9];
export const DEFAULT_PAYER_FUNDING = 1_000_000_000n;
/** 100 dollars: 200,000 chat tool calls at 0.0005. */
export const RUNTIME_FUNDING = 100_000_000n;

const tokenAbi = parseAbi([
  'function mint(address to, uint256 value)',
  'function decimals() view returns (uint8)',
  'function balanceOf(address account) view returns (uint256)',
]);

/**
 * Deploys SigilDollar from the operator, mints the payer's dollars and puts MiniMulticall3 at
 * Multicall3's address. The deployment is the operator's first transaction on a fresh chain, so the
 * token's address is the same on every start. On a chain loaded from a saved state the token is
 * already there: it is used as it is (the payer keeps what it has left, nothing is minted again).
 */
export async function deploySigilDollar(options: DeployOptions): Promise<DevChainDeployment> {
  // The keys below are public knowledge: refuse anything but a chain on this machine.
  if (!isLoopbackUrl(options.rpcUrl)) throw new Error(`the dev chain must be local, not ${options.rpcUrl}`);
  const chain = devChainDefinition(options.rpcUrl, options.chainId);
  const operator = devWallet(OPERATOR_ACCOUNT_INDEX);
  const payer = devWallet(PAYER_ACCOUNT_INDEX);
  const runtime = devWallet(RUNTIME_ACCOUNT_INDEX);
  const treasury = { address: devWallet(TREASURY_ACCOUNT_INDEX).address };
  // Anvil mines each transaction as it arrives: poll for receipts often rather than every 4 s.
  const transport = http(options.rpcUrl);
  const publicClient = createPublicClient({ chain, transport, pollingInterval: 20 });
  const walletClient = createWalletClient({
    chain,
    transport,
    account: privateKeyToAccount(operator.privateKey),
  });

  await installMulticall3(publicClient, options.logger);

  const funding = options.payerFunding ?? DEFAULT_PAYER_FUNDING;
  let address = await deployedToken(publicClient, operator.address);
  if (address === undefined) {
    const deployed = await deployToken(publicClient, walletClient);
    address = deployed;
    const mint = async (to: Address, value: bigint, whose: string) => {
      const hash = await walletClient.writeContract({
        address: deployed,
        abi: tokenAbi,
        functionName: 'mint',
        args: [to, value],
      });
      const minted = await publicClient.waitForTransactionReceipt({ hash });
      if (minted.status !== 'success')
        throw new Error(`minting the ${whose} dollars failed (transaction ${hash})`);
    };
    await mint(payer.address, funding, "payer's");
    await mint(runtime.address, RUNTIME_FUNDING, "runtime's");
    options.logger.info({ token: address }, 'dev chain: SigilDollar deployed');
    options.logger.info({ payer: payer.address, baseUnits: funding.toString() }, 'dev chain: payer funded');
    options.logger.info(
      { runtime: runtime.address, baseUnits: RUNTIME_FUNDING.toString() },
      "dev chain: the runtime's operator wallet funded",
    );
  } else {
    options.logger.info({ token: address }, 'dev chain: SigilDollar already deployed (saved chain state)');
  }

  // Read back rather than repeat the contract's constants: what is returned is what signatures verify against.
  const [{ domain }, decimals, payerBalance] = await Promise.all([
    getEip712Domain(publicClient, { address }),
    publicClient.readContract({ address, abi: tokenAbi, functionName: 'decimals' }),
    publicClient.readContract({ address, abi: tokenAbi, functionName: 'balanceOf', args: [payer.address] }),
  ]);
  const token = { address, name: domain.name, version: domain.version, decimals };
  return {
    rpcUrl: options.rpcUrl,
    chainId: options.chainId,
    token,
    accounts: { operator, payer, runtime, treasury },
    multicall3: MULTICALL3_ADDRESS,
    payerBalance,
  };
}

/**
 * The token at the operator's first contract address, when a saved chain already has it; undefined on
 * a fresh chain. Anything else there (a state file from another program) is refused rather than used.
 */
async function deployedToken(publicClient: PublicClient, operator: Address): Promise<Address | undefined> {
  const address = getContractAddress({ from: operator, nonce: 0n });
  const code = await publicClient.getCode({ address });
  if (code === undefined || code === '0x') return undefined;
  // Its immutables (owner, domain separator) are filled in at deployment: compare the length only.
  if (code.length !== readSigilDollarArtifact().deployedBytecode.length) {
    throw new Error(
      `the saved dev chain has a contract at ${address} that is not SigilDollar; remove the chain state file to start a new chain`,
    );
  }
  return address;
}

async function deployToken(
  publicClient: PublicClient,
  walletClient: WalletClient<Transport, Chain, PrivateKeyAccount>,
): Promise<Address> {
  const artifact = readSigilDollarArtifact();
  const deployHash = await walletClient.deployContract({ abi: artifact.abi, bytecode: artifact.bytecode });
  const deployed = await publicClient.waitForTransactionReceipt({ hash: deployHash });
  if (deployed.status !== 'success' || !deployed.contractAddress) {
    throw new Error(`SigilDollar deployment failed (transaction ${deployHash})`);
  }
  return getAddress(deployed.contractAddress);
}

/**
 * Puts MiniMulticall3's runtime bytecode at Multicall3's canonical address with `anvil_setCode`
 * (a dev-chain-only RPC method; the caller has checked the chain is local). Without it, x402's
 * facilitator cannot say why a payment fails to simulate (nonce used, balance too low...).
 */
async function installMulticall3(publicClient: PublicClient, logger: Logger): Promise<void> {
  const { deployedBytecode } = readMiniMulticall3Artifact();
  await publicClient.request<{
    Method: 'anvil_setCode';
    Parameters: [Address, Hex];
    ReturnType: null;
  }>({ method: 'anvil_setCode', params: [MULTICALL3_ADDRESS, deployedBytecode] });
  const code = await publicClient.getCode({ address: MULTICALL3_ADDRESS });
  if (code?.toLowerCase() !== deployedBytecode.toLowerCase()) {
    throw new Error(`anvil_setCode did not put MiniMulticall3 at ${MULTICALL3_ADDRESS}`);
  }
  logger.info({ address: MULTICALL3_ADDRESS }, 'dev chain: Multicall3 (MiniMulticall3) installed');
}

const derivedWallets = new Map<number, DevWallet>();

/** One of anvil's dev accounts (see DEV_MNEMONIC). Derived once per process: derivation takes ~50 ms. */
export function devWallet(index: number): DevWallet {
  let wallet = derivedWallets.get(index);
  if (!wallet) {
    const account = mnemonicToAccount(DEV_MNEMONIC, { addressIndex: index });
    const privateKey = account.getHdKey().privateKey;
    if (!privateKey) throw new Error(`no private key for dev account ${index}`);
    wallet = { address: account.address, privateKey: toHex(privateKey) };
    derivedWallets.set(index, wallet);
  }
  return { ...wallet };
}

/** A viem chain for the dev chain: its only RPC URL is the local one (viem's `base` lists public ones). */
export function devChainDefinition(rpcUrl: string, chainId: number): Chain {
  return defineChain({
    id: chainId,
    name: 'Sigil dev chain',
    nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
    rpcUrls: { default: { http: [rpcUrl] } },
  });
}

function isLoopbackUrl(url: string): boolean {
  const host = new URL(url).hostname;
  return host === 'localhost' || host === '[::1]' || /^127\.\d+\.\d+\.\d+$/.test(host);
}

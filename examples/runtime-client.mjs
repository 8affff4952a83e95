// What the examples share to act on the runtime as the dev wallet: its routes' JSON, SIWE, a provider
// key in the vault, a funded ledger on the dev chain, and Server-Sent Events.
import { createPublicClient, createWalletClient, defineChain, formatUnits, http, parseAbi } from 'viem';
import { account } from './dev-wallet.mjs';

/** The first argument, else SIGIL_RUNTIME_URL, else where `npm start` serves the runtime. */
export const runtimeUrl = (
  process.argv[2] ??
  process.env.SIGIL_RUNTIME_URL ??
  'http://127.0.0.1:8080'
).replace(/\/+$/, '');

/** What the wallet deposits: 1 dollar of the 6-decimal token, far more than the two messages cost. */
const DEPOSIT = 1_000_000n;
const DEPOSIT_DEADLINE_MS = 60_000;
const tokenAbi = parseAbi([
  'function balanceOf(address account) view returns (uint256)',
  'function transfer(address to, uint256 amount) returns (bool)',
]);

let jwt;

/** A runtime route's JSON answer; a refusal throws with the runtime's message and hint. */
export async function call(method, path, body) {
  let response;
  try {
    response = await fetch(`${runtimeUrl}${path}`, request(method, body));
  } catch (error) {
    throw new Error(
      `${method} ${path}: no answer from ${runtimeUrl} (${error.cause?.code ?? error.cause?.message ?? error.message}): is the runtime up (npm start)?`,
      { cause: error },
    );
  }
  const text = await response.text();
  const answer = text === '' ? {} : JSON.parse(text);
  if (!response.ok) throw refusal(method, path, response.status, answer);
  return answer;
}

export function request(method, body) {
  const headers = { ...(jwt ? { authorization: `Bearer ${jwt}` } : {}) };
  if (body === undefined) return { method, headers };
  return { method, headers: { ...headers, 'content-type': 'application/json' }, body: JSON.stringify(body) };
}

export const refusal = (method, path, status, answer) =>
  new Error(
    `${method} ${path} answered ${status} ${answer.code ?? ''}: ${answer.message ?? JSON.stringify(answer)}${answer.hint ? ` (${answer.hint})` : ''}${(answer.details?.problems ?? []).map((p) => `\n  ${p.path}: ${p.message}`).join('')}`,
  );

/** 1. SIWE: the runtime's challenge, signed by the wallet, for a session JWT. */
export async function signIn() {
  const { message } = await call('GET', `/auth/challenge?address=${account.address}`);
  const session = await call('POST', '/auth/verify', {
    message,
    signature: await account.signMessage({ message }),
  });
  jwt = session.token;
  console.log(`signed in ${session.address} with SIWE, session until ${session.expiresAt}`);
}

/** 2. A key for the stand-in, sealed under the wallet's signature of the vault's message (which also unlocks it). */
export async function storeProviderKey() {
  const { message } = await call('GET', '/wallet/provider-vault/message');
  const signature = await account.signMessage({ message });
  await call('PUT', '/wallet/provider-vault/keys/PROVIDER_API_KEY', { apiKey: 'sk-stand-in', signature });
  console.log('vault     PROVIDER_API_KEY stored and unlocked (the stand-in takes any key)');
}

/** 3. Dev tokens from the wallet to its deposit address, then the balance until the ledger counts them. */
export async function deposit() {
  const { address, token, confirmations, watching } = await call('GET', '/wallet/deposit-address');
  if (!watching) throw new Error('the runtime reads no chain, so no deposit can count (DEV_CHAIN=false?)');
  // The OS picks the dev chain's port at each start: the runtime says where it is (ledger.publicRpcUrl).
  const rpcUrl = process.env.SIGIL_RPC_URL ?? token.rpcUrl;
  if (!rpcUrl) throw new Error(`the runtime names no RPC URL for ${token.network}: set SIGIL_RPC_URL`);
  const chain = defineChain({
    id: token.chainId,
    name: `Sigil ledger chain ${token.chainId}`,
    nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
    rpcUrls: { default: { http: [rpcUrl] } },
  });
  const reader = createPublicClient({ chain, transport: http() });
  const held = await reader.readContract({
    address: token.address,
    abi: tokenAbi,
    functionName: 'balanceOf',
    args: [account.address],
  });
  if (held < DEPOSIT)
    throw new Error(
      `the wallet holds ${formatUnits(held, token.decimals)} dollars of ${token.address}, less than the deposit`,
    );
  const before = BigInt((await call('GET', '/wallet/balance')).available);

  const wallet = createWalletClient({ account, chain, transport: http() });
  const hash = await wallet.writeContract({
    address: token.address,
    abi: tokenAbi,
    functionName: 'transfer',
    args: [address, DEPOSIT],
  });
  const receipt = await reader.waitForTransactionReceipt({ hash });
  if (receipt.status !== 'success') throw new Error(`the deposit's transfer ${hash} reverted`);
  console.log(
    `deposit   ${formatUnits(DEPOSIT, token.decimals)} dollar to ${address} on ${token.network} (${rpcUrl}), block ${receipt.blockNumber}, transaction ${hash}`,
  );

  // Counted once its block has `confirmations` and the ledger read the balance there.
  const deadline = Date.now() + DEPOSIT_DEADLINE_MS;
  let shown = '';
  for (;;) {
    const balance = await call('GET', '/wallet/balance');
    const available = BigInt(balance.available);
    if (BigInt(balance.balanceBlock) >= receipt.blockNumber && available >= before + DEPOSIT) {
      console.log(`counted   available ${available} base units (was ${before})`);
      return;
    }
    const progress = `waiting   for ${confirmations} confirmation(s): balance read at block ${balance.balanceBlock}, available ${available}`;
    if (progress !== shown) console.log((shown = progress));
    if (Date.now() > deadline)
      throw new Error(
        `the deposit was not counted within ${DEPOSIT_DEADLINE_MS / 1000} s: is the runtime's ledger watching ${rpcUrl}?`,
      );
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}

/**
 * The events of an SSE body as they come. Hand-written: the runtime streams the answer of a POST,
 * which EventSource cannot send, and the project has no SSE parser among its own dependencies.
 */
export async function* serverSentEvents(body) {
  let buffer = '';
  for await (const chunk of body.pipeThrough(new TextDecoderStream())) {
    buffer += chunk;
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const event = /^event: ?(.*)$/m.exec(block)?.[1] ?? 'message';
      const data = [...block.matchAll(/^data: ?(.*)$/gm)].map((line) => line[1]);
      if (data.length > 0) yield { event, data: JSON.parse(data.join('\n')) };
    }
  }
}

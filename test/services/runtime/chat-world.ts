import type { Writable } from 'node:stream';
import type { Address, Hex } from 'viem';
import { english, generateMnemonic, type PrivateKeyAccount } from 'viem/accounts';
import { configSchema, DEFAULT_PLUGINS, type SigilConfig } from '../../../services/config.ts';
import { withDevChain } from '../../../devchain/index.ts';
import { serve, type Serving } from '../../../services/serve.ts';
import { withUpDefaults } from '../../../services/up-defaults.ts';
import type { ProbeWorld } from '../gateway/support.ts';
import { fundedAccount, sendToken } from './ledger/chain-support.ts';
import { eventually } from './ledger/support.ts';
import type { DevChain } from '../../support/chain.ts';
import { openTestKernel, type ConfigOverrides, type TestDatabase } from '../../support/kernel.ts';
import { runtimeClient, signIn, storeAndUnlock } from './chat-support.ts';

export interface ChatWorldOptions {
  database: TestDatabase;
  chain: DevChain;
  world: ProbeWorld;
  /** Where the vault keeps its ciphertext. */
  vaultDir: string;
  ports: { runtime: number; gateway: number };
  /** `sigil up`'s wiring (dev chain rail, ledger, provider-local) is applied to this config first. */
  upConfig: (config: SigilConfig) => SigilConfig;
  /** 'operator' also makes the gateway take the runtime's dev wallet as an operator over ERC-8128 only. */
  gatewayPath?: 'delegated' | 'operator';
  /** runtime.operatorKey over what the up wiring gives; `null` runs without one. */
  operatorKey?: Hex | null;
  gateway?: ConfigOverrides['gateway'];
  /** A fresh one unless given (the same one again to restart on the same ledger). */
  depositMnemonic?: string;
  logs?: Writable;
}

/**
 * The runtime and the gateway served as `sigil up` serves them (one kernel, real ports), wired to the
 * dev chain (its rail, ledger and provider-local) with the probe MCP server in the gateway's catalog.
 */
export async function serveChatWorld(
  options: ChatWorldOptions,
): Promise<Serving & { urls: Record<string, string> }> {
  const { chain, world } = options;
  const wired = options.upConfig(withUpDefaults(withDevChain(configSchema.parse({}), chain)));
  const operatorKey = options.operatorKey === undefined ? wired.runtime.operatorKey : options.operatorKey;
  const kernel = await openTestKernel({
    database: options.database,
    ...(options.logs ? { logDestination: options.logs } : {}),
    config: {
      // Its public URLs are where it listens (as sigil up's without one), on a shared database too.
      runtime: {
        port: options.ports.runtime,
        publicUrl: `http://127.0.0.1:${options.ports.runtime}`,
        ...(operatorKey === null || operatorKey === undefined ? {} : { operatorKey }),
        chat: { ...wired.runtime.chat, gatewayPath: options.gatewayPath ?? 'delegated' },
      },
      gateway: {
        port: options.ports.gateway,
        publicUrl: `http://127.0.0.1:${options.ports.gateway}`,
        includeDefaultCatalog: false,
        catalogFile: world.catalogFile,
        ...(options.gatewayPath === 'operator'
          ? {
              operatorWallets: [chain.accounts.runtime.address],
              erc8128EnforceOperatorMcp: true,
              delegation: { enabled: false } as never,
            }
          : {}),
        ...options.gateway,
      },
      // Its own deposit mnemonic: the worlds on one chain never share a deposit address.
      ledger: {
        ...wired.ledger,
        depositMnemonic: options.depositMnemonic ?? generateMnemonic(english),
        pollIntervalMs: 200,
      },
      vault: { persistenceDir: options.vaultDir },
      plugins: [
        ...world.plugins(),
        // The dev chain's rail and provider-local; the world's own tee, registry and sandbox.
        ...wired.plugins.filter((p) => !(DEFAULT_PLUGINS as readonly string[]).includes(p.resolve)),
      ],
    },
  });
  const serving = await serve(kernel, ['runtime', 'gateway']);
  return serving as Serving & { urls: Record<string, string> };
}

/**
 * A new wallet as a user makes it: dollars on the dev chain, signed in to the runtime, `deposit`
 * counted on its ledger, its own provider key stored and unlocked, and an agent on `sigil-echo`.
 */
export async function chatUser(runtimeUrl: string, chain: DevChain, deposit: bigint) {
  const wallet = (await fundedAccount(chain, deposit)) as PrivateKeyAccount;
  const jwt = await signIn(runtimeUrl, wallet);
  const client = runtimeClient(runtimeUrl, jwt);
  const address = (await client.json('GET', '/wallet/deposit-address')).body.address as Address;
  await sendToken(chain, wallet, address, deposit);
  await eventually('the deposit counted', async () => {
    const balance = (await client.json('GET', '/wallet/balance')).body;
    return balance.available === deposit.toString();
  });
  await storeAndUnlock(client, wallet, 'PROVIDER_API_KEY', 'sk-my-own-key');
  const agent = (await client.json('POST', '/agents', { name: 'helper', model: 'sigil-echo' })).body;
  return { wallet, jwt, client, agentId: agent.id as string };
}

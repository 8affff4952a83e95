/**
 * What `sigil up` does with the dev chain: decide whether to start it, point a payment rail at it,
 * and print what a developer needs to pay on it.
 */
import { createRequire } from 'node:module';
import { isAbsolute, join, resolve as resolvePath } from 'node:path';
import { pathToFileURL } from 'node:url';
import { formatUnits } from 'viem';
import type { PluginEntry } from '../core/config/schema.ts';
import type { SigilConfig } from '../services/config.ts';
import type { BuiltinPlugins } from '../core/plugins/host.ts';
import { devWallet, FACILITATOR_ACCOUNT_INDEXES, type DevChainDeployment } from './deploy.ts';
import { DEV_CHAIN_PAYMENT_HINT } from './quick-start.ts';

/** The built-in payment rail the dev chain is wired to. */
export const DEV_CHAIN_RAIL = 'payments-x402-evm';

/**
 * The config with a `payments-x402-evm` plugin on the dev chain appended: its dollar token, payments
 * to the treasury, and a facilitator in this process that settles from the operator's account; and
 * the gateway's 402 answers say how to pay there.
 */
export function withDevChainRail(config: SigilConfig, chain: DevChainDeployment): SigilConfig {
  const rail: PluginEntry = {
    resolve: DEV_CHAIN_RAIL,
    enabled: true,
    options: {
      // Anvil answers WebSocket on the same port: a fraction of HTTP's cost per request.
      rpcUrl: chain.rpcUrl.replace(/^http/, 'ws'),
      network: `eip155:${chain.chainId}`,
      asset: {
        address: chain.token.address,
        name: chain.token.name,
        version: chain.token.version,
        decimals: chain.token.decimals,
      },
      payTo: chain.accounts.treasury.address,
      facilitator: { kind: 'builtin', privateKey: chain.accounts.operator.privateKey },
    },
  };
  return {
    ...config,
    // 402 answers name the examples that pay on this chain, unless the operator wrote a hint of their own.
    gateway: { ...config.gateway, paymentHint: config.gateway.paymentHint ?? DEV_CHAIN_PAYMENT_HINT },
    plugins: [...config.plugins, rail],
  };
}

/**
 * The dev chain rail's facilitator for several gateway replicas: the built-in one settling from
 * FACILITATOR_ACCOUNT_INDEXES, each replica leasing one account (give at most that many replicas).
 */
export function devChainReplicasFacilitator(): { kind: 'builtin'; privateKeys: string[] } {
  return {
    kind: 'builtin',
    privateKeys: FACILITATOR_ACCOUNT_INDEXES.map((index) => devWallet(index).privateKey),
  };
}

export interface SkipOptions {
  builtins: BuiltinPlugins;
  /** Where plugin paths and package names resolve from: the config file's directory, as the kernel does. */
  baseDir: string;
}

/**
 * Why `sigil up` must not start the dev chain, or undefined when it should: it is turned off, or
 * the config lists a payment rail of its own (enabled or not: the operator has chosen), or a listed
 * plugin cannot be loaded (start-up is going to fail on it, with the kernel's precise error).
 */
export async function devChainSkipReason(
  config: SigilConfig,
  options: SkipOptions,
): Promise<string | undefined> {
  if (!config.devChain.enabled) return 'devChain.enabled is false';
  for (const [index, entry] of config.plugins.entries()) {
    const kind = await pluginKind(entry.resolve, options);
    if (kind === 'payment-rail') return `plugins.${index} (${entry.resolve}) is a payment rail`;
    if (kind === undefined) return `plugins.${index} (${entry.resolve}) cannot be loaded`;
  }
  return undefined;
}

/** The manifest kind of a plugin named in the config, resolved as the kernel resolves it. */
async function pluginKind(specifier: string, options: SkipOptions): Promise<string | undefined> {
  try {
    const builtin = options.builtins[specifier];
    let module: unknown;
    if (builtin) module = await builtin();
    else if (specifier.startsWith('.') || isAbsolute(specifier))
      module = await import(pathToFileURL(resolvePath(options.baseDir, specifier)).href);
    else {
      const require = createRequire(join(options.baseDir, 'package.json'));
      let url: string;
      try {
        url = pathToFileURL(require.resolve(specifier)).href;
      } catch {
        url = specifier; // ESM-only packages resolve through import()
      }
      module = await import(url);
    }
    const exports = module as { default?: { kind?: unknown }; manifest?: { kind?: unknown } };
    const kind = (exports.manifest ?? exports.default)?.kind;
    return typeof kind === 'string' ? kind : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The block `sigil up` prints on stdout (never in the log): where the chain is, and the dev wallet
 * to pay with. Its key is anvil's well-known dev key, so printing it gives nothing away.
 */
export function devChainBanner(chain: DevChainDeployment, statePath?: string): string {
  const { token, accounts } = chain;
  const dollars = formatUnits(chain.payerBalance, token.decimals);
  return [
    `dev chain  ${chain.rpcUrl} (chain id ${chain.chainId}, local anvil; stops with sigil)`,
    ...(statePath === undefined
      ? []
      : [`  state    ${statePath} (kept between runs; delete it, with sigil stopped, for a new chain)`]),
    `  token    ${token.address} (${token.name}, ${token.decimals} decimals)`,
    `  treasury ${accounts.treasury.address} (payTo: receives the payments)`,
    `  payer    ${accounts.payer.address} (dev wallet, ${dollars} dollars of the token)`,
    `  key      ${accounts.payer.privateKey}`,
    `           a public test key (anvil's dev mnemonic): for this local chain only, never for real funds`,
    '',
  ].join('\n');
}

import { dirname } from 'node:path';
import type { DestinationStream } from 'pino';
import { SigilError, type TeeStatus } from '@sigil/plugin-api';
import { createLogger, logDestinationIn, logFormat, logWritten, SecretRegistry } from '../core/log.ts';
import { publicBase } from '../core/auth/settings.ts';
// Types only: the dev chain (viem, anvil, the token's deployment) is imported by `sigil up` alone.
import type * as DevChainModule from '../devchain/index.ts';
import type { DevChain } from '../devchain/index.ts';
import { builtinPlugins } from '../services/builtin-plugins.ts';
import { loadConfig, type LoadedConfig } from '../services/config.ts';
import type { WarmupOutcome } from '../services/gateway/warmup.ts';
import { openKernel } from '../services/kernel.ts';
import { paymentsBanner } from '../services/payments-banner.ts';
import { serve, type ServiceName, type Serving } from '../services/serve.ts';
import { withUpDefaults } from '../services/up-defaults.ts';

/** `sigil up`, `sigil runtime`, `sigil gateway`: serves until SIGINT or SIGTERM, then stops gracefully. */
export async function runServices(
  services: readonly ServiceName[],
  options: {
    configPath?: string | undefined;
    /** `sigil up`: the dev chain, provider-local and a persistent vault (services/up-defaults.ts). */
    devChain?: boolean;
  } = {},
): Promise<void> {
  const read = loadConfig({ ...(options.configPath ? { path: options.configPath } : {}) });
  const loaded = options.devChain ? { ...read, config: withUpDefaults(read.config) } : read;
  // One log stream for the dev chain's progress and the kernel's logs.
  const destination = logDestinationIn(
    logFormat(loaded.config.log.format, { mode: loaded.config.mode, terminal: process.stderr.isTTY }),
  );
  const dev = options.devChain ? await startDevChainFor(loaded, destination) : undefined;
  const stopChain = async () => {
    await dev?.chain.stop();
  };
  let serving: Awaited<ReturnType<typeof serve>>;
  let kernel: Awaited<ReturnType<typeof openKernel>>;
  try {
    kernel = await openKernel({
      loaded: dev
        ? {
            ...loaded,
            config: dev.module.withDevChain(loaded.config, dev.chain),
          }
        : loaded,
      logDestination: destination,
    });
    serving = await serve(kernel, services);
  } catch (err) {
    await stopChain();
    throw err;
  }
  const shutdown = (signal: string) => {
    process.stdout.write(`\n${signal}: finishing in-flight requests, then stopping plugins\n`);
    serving
      .stop()
      .then(stopChain)
      .then(
        () => process.exit(0),
        (err: unknown) => {
          process.stderr.write(`shutdown failed: ${(err as Error).message}\n`);
          process.exit(1);
        },
      );
  };
  // Before anything is printed: whoever waits for the output may signal at once.
  process.once('SIGINT', () => shutdown('SIGINT'));
  process.once('SIGTERM', () => shutdown('SIGTERM'));
  for (const [name, url] of Object.entries(serving.urls)) process.stdout.write(`${name.padEnd(8)} ${url}\n`);
  if (!kernel.configFile) process.stdout.write('config   embedded defaults (no sigil.config.json)\n');
  process.stdout.write(teeLine(await kernel.plugins.one('tee-backend').status()));
  // Behind a balancer, what a client types is the public URL, not this replica's own address.
  if (serving.urls.gateway)
    process.stdout.write(
      await paymentsBannerOf(
        kernel,
        kernel.config.gateway.publicUrl === undefined
          ? serving.urls.gateway
          : publicBase(kernel.config.gateway),
        dev !== undefined,
      ),
    );
  if (dev)
    process.stdout.write(
      dev.module.devChainBanner(dev.chain, kernel.config.devChain.stateFile) +
        dev.module.devChainOperatorBanner(kernel.config, dev.chain) +
        dev.module.devChainLedgerBanner(kernel.config) +
        (serving.urls.runtime ? dev.module.runtimeExamplesBanner(serving.urls.runtime) : ''),
    );
  void serving.warmedUp.then(async (warmup) => {
    // Written after the warmup's own log lines, which wait in the batched log destination.
    await logWritten(destination);
    process.stdout.write(readyLine(serving.urls, warmup));
  });
}

/** What protects the keys, said where an operator looks first: no TEE is said as plainly as one. */
function teeLine(status: TeeStatus): string {
  const keys = {
    sealed: 'keys sealed to the TEE',
    config: 'keys from keyMaterial in the config',
    ephemeral: 'keys made for this process (proofs verify until a restart)',
  }[status.keySource];
  const attested = status.teeEnabled
    ? `attested (GET /api/attestation/bundle to verify offline)`
    : 'no hardware attestation';
  return `tee      ${status.platform}: ${attested}; ${keys}\n`;
}

/** The line that says everything is up: where to connect, and how the catalog's warmup went. */
function readyLine(urls: Serving['urls'], warmup: WarmupOutcome | undefined): string {
  const where = [
    ...(urls.gateway ? [`gateway ${urls.gateway}/mcp`] : []),
    ...(urls.runtime ? [`runtime ${urls.runtime}`] : []),
  ];
  const warm = warmup ? `; ${warmup.verified}/${warmup.servers} catalog servers warm` : '';
  return `ready    ${where.join(', ')}${warm}\n`;
}

function paymentsBannerOf(
  kernel: Awaited<ReturnType<typeof openKernel>>,
  gatewayUrl: string,
  devChain: boolean,
): Promise<string> {
  const names = kernel.plugins
    .list()
    .filter((plugin) => plugin.kind === 'payment-rail')
    .map((plugin) => plugin.name);
  const [charging] = kernel.plugins.all('payment-rail');
  return paymentsBanner({
    gatewayUrl,
    rail: charging ? { names, terms: charging.terms() } : undefined,
    devChain,
    defaultCatalog: kernel.config.gateway.includeDefaultCatalog,
  });
}

/**
 * Starts the local dev chain for `sigil up`, unless it is turned off or the config has a payment
 * rail of its own. Progress goes to the log; what the developer needs is printed once serving.
 */
export async function startDevChainFor(
  loaded: LoadedConfig,
  destination: DestinationStream,
): Promise<{ chain: DevChain; module: typeof DevChainModule } | undefined> {
  const { config } = loaded;
  const secrets = new SecretRegistry();
  const logger = createLogger({ level: config.log.level, secrets, destination });
  const { devChainSkipReason } = await import('../devchain/skip.ts');
  const skip = await devChainSkipReason(config, {
    builtins: builtinPlugins,
    baseDir: loaded.file ? dirname(loaded.file) : process.cwd(),
  });
  if (skip !== undefined) {
    logger.info({ reason: skip }, 'dev chain: not started');
    return undefined;
  }
  const module = await import('../devchain/index.ts');
  let chain: DevChain;
  try {
    chain = await module.startDevChain({
      logger,
      statePath: config.devChain.stateFile,
      ...(config.devChain.port === undefined ? {} : { port: config.devChain.port }),
    });
  } catch (cause) {
    throw new SigilError('unavailable', `cannot start the dev chain: ${(cause as Error).message}`, {
      hint: 'set DEV_CHAIN=false (or devChain.enabled: false) to run without it, or configure a payment-rail plugin',
      cause,
    });
  }
  // Public dev keys, but keys all the same: never in a log line.
  secrets.add(chain.accounts.operator.privateKey);
  secrets.add(chain.accounts.payer.privateKey);
  secrets.add(chain.accounts.runtime.privateKey);
  logger.info(
    { rpcUrl: chain.rpcUrl, chainId: chain.chainId, rail: module.DEV_CHAIN_RAIL },
    'dev chain: ready; the payment rail points at it',
  );
  return { chain, module };
}

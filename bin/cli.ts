import { dirname } from 'node:path';
import { Command, Option } from 'commander';
import { ConfigError, formatIssues } from '../core/config/load.ts';
import { configJsonSchema, loadConfig, redactConfig, type LoadedConfig } from '../services/config.ts';
import { registerConformanceCommands } from '../conformance/cli.ts';
import { migrate, openDatabase } from '../core/db/database.ts';
import { isSigilError, PLUGIN_KINDS, SigilError } from '@sigil/plugin-api';
import type { DestinationStream } from 'pino';
import { createLogger, logDestinationIn, logFormat, logWritten, SecretRegistry } from '../core/log.ts';
import { PluginLoadError } from '../core/plugins/host.ts';
import { builtinPlugins } from '../services/builtin-plugins.ts';
import { withUpDefaults } from '../services/up-defaults.ts';
import {
  DEV_CHAIN_RAIL,
  devChainBanner,
  devChainLedgerBanner,
  devChainOperatorBanner,
  devChainSkipReason,
  startDevChain,
  withDevChainLedger,
  withDevChainOperator,
  withDevChainRail,
  type DevChain,
} from '../devchain/index.ts';
import { openKernel } from '../services/kernel.ts';
import { serviceMigrations } from '../services/migrations.ts';
import { paymentsBanner } from '../services/payments-banner.ts';
import type { WarmupOutcome } from '../services/gateway/warmup.ts';
import { serve, type ServiceName, type Serving } from '../services/serve.ts';
import { SIGIL_VERSION } from '../services/shared/health.ts';
import { scaffoldPlugin } from '../templates/scaffold.ts';
import { registerAttestationCommands } from './attestation.ts';
import { registerTeeCommands } from './tee.ts';

/** Exit codes: 1 for a failure at run time, 2 for a configuration or plugin problem found at start-up. */
const EXIT_CONFIG = 2;

const program = new Command('sigil')
  .description('Agent runtime and tool gateway for wallet-authenticated AI agents')
  .version(SIGIL_VERSION)
  .addOption(new Option('-c, --config <path>', 'config file (default: $SIGIL_CONFIG or ./sigil.config.json)'))
  .showHelpAfterError();

const configPath = (): string | undefined => program.opts<{ config?: string }>().config;

async function runServices(
  services: readonly ServiceName[],
  /** `sigil up`: the dev chain, provider-local and a persistent vault (services/up-defaults.ts). */
  options: { devChain?: boolean } = {},
): Promise<void> {
  const read = loadConfig({ ...(configPath() ? { path: configPath() as string } : {}) });
  const loaded = options.devChain ? { ...read, config: withUpDefaults(read.config) } : read;
  // One log stream for the dev chain's progress and the kernel's logs.
  const destination = logDestinationIn(
    logFormat(loaded.config.log.format, { mode: loaded.config.mode, terminal: process.stderr.isTTY }),
  );
  const chain = options.devChain ? await startDevChainFor(loaded, destination) : undefined;
  const stopChain = async () => {
    await chain?.stop();
  };
  let serving: Awaited<ReturnType<typeof serve>>;
  let kernel: Awaited<ReturnType<typeof openKernel>>;
  try {
    kernel = await openKernel({
      loaded: chain
        ? {
            ...loaded,
            config: withDevChainOperator(
              withDevChainLedger(withDevChainRail(loaded.config, chain), chain),
              chain,
            ),
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
  if (serving.urls.gateway)
    process.stdout.write(paymentsBannerOf(kernel, serving.urls.gateway, chain !== undefined));
  if (chain)
    process.stdout.write(
      devChainBanner(chain, kernel.config.devChain.stateFile) +
        devChainOperatorBanner(kernel.config, chain) +
        devChainLedgerBanner(kernel.config),
    );
  void serving.warmedUp.then(async (warmup) => {
    // Written after the warmup's own log lines, which wait in the batched log destination.
    await logWritten(destination);
    process.stdout.write(readyLine(serving.urls, warmup));
  });
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
): string {
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
async function startDevChainFor(
  loaded: LoadedConfig,
  destination: DestinationStream,
): Promise<DevChain | undefined> {
  const { config } = loaded;
  const secrets = new SecretRegistry();
  const logger = createLogger({ level: config.log.level, secrets, destination });
  const skip = await devChainSkipReason(config, {
    builtins: builtinPlugins,
    baseDir: loaded.file ? dirname(loaded.file) : process.cwd(),
  });
  if (skip !== undefined) {
    logger.info({ reason: skip }, 'dev chain: not started');
    return undefined;
  }
  let chain: DevChain;
  try {
    chain = await startDevChain({
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
    { rpcUrl: chain.rpcUrl, chainId: chain.chainId, rail: DEV_CHAIN_RAIL },
    'dev chain: ready; the payment rail points at it',
  );
  return chain;
}

program
  .command('up')
  .description(
    'Run the runtime and the gateway together (what `npm start` runs), with a local dev chain for payments unless devChain.enabled is false or a payment rail is configured',
  )
  .action(() => runServices(['runtime', 'gateway'], { devChain: true }));

program
  .command('runtime')
  .description('Run the agent runtime alone (port 8080 by default)')
  .action(() => runServices(['runtime']));

program
  .command('gateway')
  .description('Run the tool gateway alone (port 8402 by default); never starts the dev chain')
  .action(() => runServices(['gateway']));

program
  .command('plugins')
  .description('List the plugins the config loads, with kind, name, spec version and state')
  .option('--json', 'print JSON')
  .action(async (options: { json?: boolean }) => {
    const kernel = await openKernel({ ...(configPath() ? { configPath: configPath() as string } : {}) });
    const list = kernel.plugins.list();
    await kernel.close();
    if (options.json) {
      process.stdout.write(`${JSON.stringify(list, null, 2)}\n`);
      return;
    }
    printTable(
      ['KIND', 'NAME', 'SPEC', 'STATE', 'SOURCE'],
      list.map((p) => [p.kind, p.name, p.specVersion, p.state, p.source]),
    );
  });

const config = program.command('config').description('Check the configuration or print its JSON Schema');
config
  .command('check')
  .description('Validate the config (file + env) and print the effective config with secrets redacted')
  .action(() => {
    const loaded = loadConfig({ ...(configPath() ? { path: configPath() as string } : {}) });
    process.stderr.write(
      `config: ${loaded.file ?? 'embedded defaults'}${loaded.envOverrides.length ? `; env overrides: ${loaded.envOverrides.join(', ')}` : ''}\n`,
    );
    process.stdout.write(`${JSON.stringify(redactConfig(loaded.config), null, 2)}\n`);
  });
config
  .command('schema')
  .description('Print the JSON Schema of sigil.config.json (point "$schema" at it for editor completion)')
  .action(() => {
    process.stdout.write(`${JSON.stringify(configJsonSchema(), null, 2)}\n`);
  });

program
  .command('plugin')
  .description('Write plugins')
  .command('new')
  .description(
    `Scaffold a plugin package: manifest, config schema, a stub of the kind's contract, a test that runs its kit (kinds: ${PLUGIN_KINDS.join(', ')})`,
  )
  .argument('<kind>', 'the plugin kind')
  .argument('<name>', 'its name: lowercase letters, digits and dashes')
  .option('--dir <folder>', 'where the package folder is made', '.')
  .action((kind: string, name: string, options: { dir: string }) => {
    const made = scaffoldPlugin({
      kind,
      name,
      parentDir: options.dir,
      progress: (line) => process.stderr.write(`${line}\n`),
    });
    process.stdout.write(
      `${made.files.map((file) => `  ${file}`).join('\n')}\n\nnext:\n  cd ${made.dir}\n  npm install\n  npm test    # the kit fails until src/index.ts is filled in\n`,
    );
  });

program
  .command('db')
  .description('Database maintenance')
  .command('migrate')
  .description('Apply pending migrations (also done at every start-up)')
  .action(async () => {
    const { config: effective } = loadConfig({ ...(configPath() ? { path: configPath() as string } : {}) });
    const db = await openDatabase({ url: effective.database.url });
    try {
      const applied = await migrate(db, serviceMigrations);
      process.stdout.write(applied.length ? `applied: ${applied.join(', ')}\n` : 'database is up to date\n');
    } finally {
      await db.destroy();
    }
  });

function printTable(header: readonly string[], rows: readonly (readonly string[])[]): void {
  const all = [header, ...rows];
  const widths = header.map((_, column) => Math.max(...all.map((row) => (row[column] ?? '').length)));
  for (const row of all) {
    process.stdout.write(
      `${row
        .map((cell, column) => cell.padEnd(widths[column] ?? 0))
        .join('  ')
        .trimEnd()}\n`,
    );
  }
}

function reportAndExit(err: unknown): never {
  if (err instanceof ConfigError) {
    process.stderr.write(`sigil: invalid configuration\n${formatIssues(err.issues)}\n`);
    process.exit(EXIT_CONFIG);
  }
  if (err instanceof PluginLoadError) {
    const problems = err.problems.map(
      (p) => `  plugin: ${p.plugin}\n  config: ${p.configPath}\n  reason: ${p.reason}\n`,
    );
    process.stderr.write(`sigil: cannot load plugins\n${problems.join('\n')}`);
    process.exit(EXIT_CONFIG);
  }
  if (isSigilError(err)) {
    process.stderr.write(`sigil: ${err.message}${err.hint ? `\n  hint: ${err.hint}` : ''}\n`);
    process.exit(err.code === 'config_invalid' ? EXIT_CONFIG : 1);
  }
  process.stderr.write(`sigil: ${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
}

registerConformanceCommands(program);
registerTeeCommands(program, configPath);
registerAttestationCommands(program);

program.parseAsync(process.argv).catch(reportAndExit);

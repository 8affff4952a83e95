import { Command, Option } from 'commander';
import { isSigilError, PLUGIN_KINDS } from '@sigil/plugin-api';
import { registerConformanceCommands } from '../conformance/cli.ts';
import { SIGIL_VERSION } from '../services/shared/version.ts';
import { registerAttestationCommands } from './attestation.ts';
import { registerTeeCommands } from './tee.ts';
// Types only: erased, so they load nothing.
import type { Database } from '../core/db/database.ts';
import type { SigilConfig } from '../services/config.ts';

/**
 * Every command is registered here with its options and help, cheaply; what a command does is
 * imported only when it runs, so that `sigil --help` or `sigil config check` does not load the
 * gateway, the runtime, the dev chain and the conformance runner.
 */

/** Exit codes: 1 for a failure at run time, 2 for a configuration or plugin problem found at start-up. */
const EXIT_CONFIG = 2;

const program = new Command('sigil')
  .description('Agent runtime and tool gateway for wallet-authenticated AI agents')
  .version(SIGIL_VERSION)
  .addOption(new Option('-c, --config <path>', 'config file (default: $SIGIL_CONFIG or ./sigil.config.json)'))
  .showHelpAfterError();

const configPath = (): string | undefined => program.opts<{ config?: string }>().config;

program
  .command('up')
  .description(
    'Run the runtime and the gateway together (what `npm start` runs), with a local dev chain for payments unless devChain.enabled is false or a payment rail is configured',
  )
  .action(async () => {
    const { runServices } = await import('./run-services.ts');
    await runServices(['runtime', 'gateway'], { configPath: configPath(), devChain: true });
  });

program
  .command('runtime')
  .description('Run the agent runtime alone (port 8080 by default)')
  .action(async () => {
    const { runServices } = await import('./run-services.ts');
    await runServices(['runtime'], { configPath: configPath() });
  });

program
  .command('gateway')
  .description('Run the tool gateway alone (port 8402 by default); never starts the dev chain')
  .action(async () => {
    const { runServices } = await import('./run-services.ts');
    await runServices(['gateway'], { configPath: configPath() });
  });

program
  .command('devchain')
  .description(
    'Run the local dev chain alone, for replicas started on their own (sigil runtime, sigil gateway): the chain `sigil up` runs, until Ctrl-C',
  )
  .option(
    '--replicas-config <file>',
    'also write a config every replica can share: the payment rail and ledger on this chain, the stand-in LLM, and keys made once for all (README "Scale out"; a local trial, never production)',
  )
  .option('--runtime-url <url>', "the runtime's public URL: the balancer's", 'http://127.0.0.1:8080')
  .option('--gateway-url <url>', "the gateway's public URL: the balancer's", 'http://127.0.0.1:8402')
  .action(async (options: { replicasConfig?: string; runtimeUrl: string; gatewayUrl: string }) => {
    const { runDevChain } = await import('./devchain.ts');
    await runDevChain({ configPath: configPath(), ...options });
  });

program
  .command('nginx')
  .description(
    "Fill deploy/nginx's configuration in for the replicas' addresses: printed, or written into an nginx folder laid out as Debian's",
  )
  .requiredOption('--runtime <addresses>', "the runtime replicas' host:port, separated by commas")
  .requiredOption('--gateway <addresses>', "the gateway replicas' host:port, separated by commas")
  .option('--runtime-listen <where>', 'where nginx listens for the runtime: a port or address:port', '8080')
  .option('--gateway-listen <where>', 'where nginx listens for the gateway: a port or address:port', '8402')
  .option('--out <dir>', 'write conf.d/sigil.conf and snippets/ there (e.g. /etc/nginx) instead of printing')
  .action(
    async (options: {
      runtime: string;
      gateway: string;
      runtimeListen: string;
      gatewayListen: string;
      out?: string;
    }) => {
      const { replicaAddresses, shippedNginxConfig, writeNginxConfig } = await import('./nginx-config.ts');
      const values = {
        runtime: replicaAddresses('--runtime', options.runtime),
        gateway: replicaAddresses('--gateway', options.gateway),
        runtimeListen: options.runtimeListen,
        gatewayListen: options.gatewayListen,
      };
      if (options.out === undefined) process.stdout.write(shippedNginxConfig(values));
      else
        process.stdout.write(
          `${writeNginxConfig(options.out, values).join('\n')}\nthen: nginx -t && nginx -s reload\n`,
        );
    },
  );

program
  .command('plugins')
  .description('List the plugins the config loads, with kind, name, spec version and state')
  .option('--json', 'print JSON')
  .action(async (options: { json?: boolean }) => {
    const { openKernel } = await import('../services/kernel.ts');
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
  .action(async () => {
    const { loadConfig, redactConfig } = await import('../services/config.ts');
    const loaded = loadConfig({ ...(configPath() ? { path: configPath() as string } : {}) });
    process.stderr.write(
      `config: ${loaded.file ?? 'embedded defaults'}${loaded.envOverrides.length ? `; env overrides: ${loaded.envOverrides.join(', ')}` : ''}\n`,
    );
    process.stdout.write(`${JSON.stringify(redactConfig(loaded.config), null, 2)}\n`);
  });
config
  .command('schema')
  .description('Print the JSON Schema of sigil.config.json (point "$schema" at it for editor completion)')
  .action(async () => {
    const { configJsonSchema } = await import('../services/config.ts');
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
  .action(async (kind: string, name: string, options: { dir: string }) => {
    const { scaffoldPlugin } = await import('../templates/scaffold.ts');
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

const database = program.command('db').description('Database maintenance');

/** Runs `work` on the configured database, migrated first; closes it after. */
async function withDatabase<T>(
  work: (db: Database, config: SigilConfig, applied: string[]) => Promise<T>,
): Promise<T> {
  const [{ loadConfig }, { migrate, openDatabase }, { serviceMigrations }] = await Promise.all([
    import('../services/config.ts'),
    import('../core/db/database.ts'),
    import('../services/migrations.ts'),
  ]);
  const { config: effective } = loadConfig({ ...(configPath() ? { path: configPath() as string } : {}) });
  const db = await openDatabase({ url: effective.database.url });
  try {
    return await work(db, effective, await migrate(db, serviceMigrations));
  } finally {
    await db.destroy();
  }
}

database
  .command('migrate')
  .description('Apply pending migrations (also done at every start-up)')
  .action(async () => {
    await withDatabase(async (_db, _config, applied) => {
      process.stdout.write(applied.length ? `applied: ${applied.join(', ')}\n` : 'database is up to date\n');
    });
  });

database
  .command('rewrap-history')
  .description(
    "Key rotation of the chat history and the self-improvement memory: wrap every session's and every wallet memory's data key under the first key of runtime.history.dataKeys (RUNTIME_DATA_KEY), and encrypt what is stored in plain text",
  )
  .action(async () => {
    const [{ HistoryKeys }, { rewrapHistory }, { rewrapMemory }, { systemClock }] = await Promise.all([
      import('../services/runtime/chat/history-keys.ts'),
      import('../services/runtime/chat/history-rewrap.ts'),
      import('../services/runtime/reflect/memory-rewrap.ts'),
      import('../core/clock.ts'),
    ]);
    await withDatabase(async (db, config) => {
      const keys = new HistoryKeys(config.runtime.history.dataKeys);
      const report = await rewrapHistory(db, keys);
      process.stdout.write(
        `chat history under key "${keys.current ?? ''}": ${report.rewrapped} rewrapped, ${report.encrypted} encrypted, ${report.unchanged} already under it\n`,
      );
      const memory = await rewrapMemory(db, keys, systemClock);
      process.stdout.write(
        `self-improvement memory under key "${keys.current ?? ''}": ${memory.rewrapped} wallet keys rewrapped, ${memory.unchanged} already under it, ${memory.encrypted} plain-text rows encrypted\n`,
      );
    });
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

async function reportAndExit(err: unknown): Promise<never> {
  if (!isSigilError(err)) {
    process.stderr.write(`sigil: ${(err as Error).stack ?? String(err)}\n`);
    process.exit(1);
  }
  // Imported one at a time: the module of the class thrown is loaded already, so its import costs nothing.
  const { ConfigError, formatIssues } = await import('../core/config/load.ts');
  if (err instanceof ConfigError) {
    process.stderr.write(`sigil: invalid configuration\n${formatIssues(err.issues)}\n`);
    process.exit(EXIT_CONFIG);
  }
  const { PluginLoadError } = await import('../core/plugins/host.ts');
  if (err instanceof PluginLoadError) {
    const problems = err.problems.map(
      (p) => `  plugin: ${p.plugin}\n  config: ${p.configPath}\n  reason: ${p.reason}\n`,
    );
    process.stderr.write(`sigil: cannot load plugins\n${problems.join('\n')}`);
    process.exit(EXIT_CONFIG);
  }
  process.stderr.write(`sigil: ${err.message}${err.hint ? `\n  hint: ${err.hint}` : ''}\n`);
  process.exit(err.code === 'config_invalid' ? EXIT_CONFIG : 1);
}

registerConformanceCommands(program);
registerTeeCommands(program, configPath);
registerAttestationCommands(program);

program.parseAsync(process.argv).catch(reportAndExit);

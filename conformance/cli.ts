import type { Command, CommanderError } from 'commander';
import type { DeploymentOptions } from './cli/deployment.ts';
import { REQUIREMENT_GROUPS } from './deployment/context.ts';

/**
 * `sigil conformance …`, registered without loading the runner: each command imports what it does
 * when it runs. Exit codes: 0 when no MUST failed, 1 when one did, 2 for bad arguments (an
 * unreadable URL, an unknown requirement id, a plugin that cannot be found), so CI can tell a
 * non-conforming deployment from a broken invocation.
 */

export const EXIT_USAGE = 2;
export const OPERATOR_KEY_ENV = 'SIGIL_CONFORMANCE_OPERATOR_KEY';
export const PAYER_KEY_ENV = 'SIGIL_CONFORMANCE_PAYER_KEY';
export const RPC_URL_ENV = 'SIGIL_CONFORMANCE_RPC_URL';

/** Commander's own parse errors (unknown option, missing argument) exit 2 too; help and version exit 0. */
function exitForUsage(err: CommanderError): never {
  process.exit(err.exitCode === 0 ? 0 : EXIT_USAGE);
}

const groupList = (): string =>
  Object.entries(REQUIREMENT_GROUPS)
    .map(([group, meaning]) => `${group} (${meaning})`)
    .join(', ');

/** A repeated `--only`/`--skip` adds to the list given before it, as a comma would. */
const joinedIds = (value: string, previous: string | undefined): string =>
  previous === undefined ? value : `${previous},${value}`;

export function registerConformanceCommands(program: Command): void {
  const conformance = program
    .command('conformance')
    .description('Certify a deployment against both specs, or a plugin against the contract kit of its kind')
    // Set before the subcommands are added, which inherit it.
    .exitOverride(exitForUsage);

  conformance
    .command('deployment')
    .description(
      'Check a running deployment over HTTP, one result per spec requirement; writes report.json, junit.xml and summary.md',
    )
    .requiredOption('--runtime <url>', 'base URL of the agent runtime, e.g. http://127.0.0.1:8080')
    .requiredOption('--gateway <url>', 'base URL of the tool gateway, e.g. http://127.0.0.1:8402')
    .option('--out <dir>', 'directory for the three report files', './conformance-report')
    .option(
      '--only <ids>',
      'comma-separated ids, prefixes or groups to run, e.g. GW-5,RT-4.health (repeatable)',
      joinedIds,
    )
    .option(
      '--skip <ids>',
      `comma-separated ids, prefixes or groups to leave out (repeatable); the reports list them as excluded on request. Groups: ${groupList()}`,
      joinedIds,
    )
    .option(
      '--operator-key <hex>',
      `private key of a gateway operator wallet, for GW-5.erc8128-operator-enforced; prefer env ${OPERATOR_KEY_ENV}, which process lists do not show. Never printed`,
    )
    .option(
      '--payer-key <hex>',
      `private key of a wallet funded in the deployment's payment token: paid tool calls are paid with it (at most 0.01 USD each) and the payment requirements apply; prefer env ${PAYER_KEY_ENV}. Never printed`,
    )
    .option(
      '--rpc-url <url>',
      `JSON-RPC URL of the payment chain, to read what payments moved (balances, used authorizations); or env ${RPC_URL_ENV}. Never printed`,
    )
    .option(
      '--expect-operator-enforcement',
      'the gateway runs with ERC8128_ENFORCE_OPERATOR_MCP=true: a bearer-only operator request it accepts is a failure, not "not applicable"',
    )
    .action(async (options: DeploymentOptions) => {
      const { runDeploymentCommand } = await import('./cli/deployment.ts');
      await runDeploymentCommand(options);
    });

  conformance
    .command('plugin')
    .description('Run the generic manifest kit and the contract kit of its kind against a plugin module')
    .argument(
      '<plugin>',
      'a path to the plugin module, or a package name resolved from the current directory',
    )
    .option('--options <json>', 'the plugin options as JSON, as plugins[].options would hold them', '{}')
    .option('--out <dir>', 'also write report.json, junit.xml and summary.md there')
    .action(async (plugin: string, options: { options: string; out?: string }) => {
      const { runPluginCommand } = await import('./cli/plugin.ts');
      await runPluginCommand(plugin, options);
    });

  conformance
    .command('requirements')
    .description('List the deployment requirements: id, level and title')
    .action(async () => {
      const { REQUIREMENTS } = await import('./requirements.ts');
      for (const requirement of REQUIREMENTS) {
        const groups = requirement.groups === undefined ? '' : ` [${requirement.groups.join(', ')}]`;
        process.stdout.write(
          `${requirement.id.padEnd(34)} ${requirement.level.padEnd(7)} ${requirement.title}${groups}\n`,
        );
      }
    });
}

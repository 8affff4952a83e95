import type { Command, CommanderError } from 'commander';
import type { Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import type { CheckResult } from '@sigil/plugin-api/kit';
import { runDeployment } from './deployment/run.ts';
import { importPluginModule, PluginNotFound, runPluginKit } from './plugin.ts';
import { REQUIREMENT_GROUPS } from './deployment/context.ts';
import {
  exitCodeFor,
  formatExclusionLine,
  formatResultLine,
  formatSummaryLine,
  writeReports,
  type Report,
} from './report.ts';
import { REQUIREMENTS } from './requirements.ts';
import { exclusions, parseIdList, select, unknownPatterns } from './selection.ts';

/**
 * `sigil conformance …`. Exit codes: 0 when no MUST failed, 1 when one did, 2 for bad arguments (an
 * unreadable URL, an unknown requirement id, a plugin that cannot be found), so CI can tell a
 * non-conforming deployment from a broken invocation.
 */

const EXIT_USAGE = 2;
const OPERATOR_KEY_ENV = 'SIGIL_CONFORMANCE_OPERATOR_KEY';
const PAYER_KEY_ENV = 'SIGIL_CONFORMANCE_PAYER_KEY';
const RPC_URL_ENV = 'SIGIL_CONFORMANCE_RPC_URL';

/** A mistake in the invocation, reported in one line and with exit code 2. */
class UsageError extends Error {}

/** Commander's own parse errors (unknown option, missing argument) exit 2 too; help and version exit 0. */
function exitForUsage(err: CommanderError): never {
  process.exit(err.exitCode === 0 ? 0 : EXIT_USAGE);
}

/** Wraps an action that returns an exit code, turning usage errors into exit 2. */
function exiting<Args extends unknown[]>(run: (...args: Args) => Promise<number>) {
  return async (...args: Args): Promise<void> => {
    let code: number;
    try {
      code = await run(...args);
    } catch (err) {
      if (!(err instanceof UsageError)) throw err;
      process.stderr.write(`sigil conformance: ${err.message}\n`);
      code = EXIT_USAGE;
    }
    process.exit(code);
  };
}

function parseBaseUrl(value: string, flag: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new UsageError(`${flag} must be an absolute http(s) URL, got "${value}"`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new UsageError(`${flag} must be an http or https URL, got "${url.protocol}"`);
  }
  if (url.username !== '' || url.password !== '' || url.search !== '' || url.hash !== '') {
    throw new UsageError(`${flag} must be a base URL without credentials, query or fragment`);
  }
  return url.toString();
}

/** The key itself never appears in a message: only what is wrong with it. */
function parsePrivateKey(value: string | undefined, source: string): Hex | undefined {
  if (value === undefined || value === '') return undefined;
  if (!/^(0x)?[0-9a-fA-F]{64}$/.test(value))
    throw new UsageError(`${source} must be a 32-byte hex private key`);
  return (value.startsWith('0x') ? value : `0x${value}`) as Hex;
}

/** An RPC URL may hold an API key: a message says what is wrong with it, never the URL. */
function parseRpcUrl(value: string | undefined, source: string): string | undefined {
  if (value === undefined || value === '') return undefined;
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new UsageError(`${source} must be an absolute http(s) URL`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new UsageError(`${source} must be an http or https URL`);
  return value;
}

function parseSelection(only: string | undefined, skip: string | undefined) {
  const selection = { only: parseIdList(only), skip: parseIdList(skip) };
  const unknown = unknownPatterns(REQUIREMENTS, selection);
  if (unknown.length > 0) {
    throw new UsageError(
      `no requirement matches ${unknown.join(', ')} (see \`sigil conformance requirements\` for the ids)`,
    );
  }
  return selection;
}

const groupList = (): string =>
  Object.entries(REQUIREMENT_GROUPS)
    .map(([group, meaning]) => `${group} (${meaning})`)
    .join(', ');

const printResult = (result: CheckResult): void => {
  process.stdout.write(`${formatResultLine(result)}\n`);
};

async function finish(report: Report, out: string | undefined): Promise<number> {
  for (const exclusion of report.excluded) process.stdout.write(`${formatExclusionLine(exclusion)}\n`);
  process.stdout.write(`\n${formatSummaryLine(report)}\n`);
  if (out !== undefined) process.stdout.write(`reports: ${(await writeReports(report, out)).join(', ')}\n`);
  return exitCodeFor(report);
}

interface DeploymentOptions {
  runtime: string;
  gateway: string;
  out: string;
  only?: string;
  skip?: string;
  operatorKey?: string;
  expectOperatorEnforcement?: boolean;
  payerKey?: string;
  rpcUrl?: string;
}

async function deploymentCommand(options: DeploymentOptions): Promise<number> {
  const target = {
    runtimeUrl: parseBaseUrl(options.runtime, '--runtime'),
    gatewayUrl: parseBaseUrl(options.gateway, '--gateway'),
  };
  const operatorKey =
    parsePrivateKey(options.operatorKey, '--operator-key') ??
    parsePrivateKey(process.env[OPERATOR_KEY_ENV], OPERATOR_KEY_ENV);
  const payerKey =
    parsePrivateKey(options.payerKey, '--payer-key') ??
    parsePrivateKey(process.env[PAYER_KEY_ENV], PAYER_KEY_ENV);
  const rpcUrl =
    parseRpcUrl(options.rpcUrl, '--rpc-url') ?? parseRpcUrl(process.env[RPC_URL_ENV], RPC_URL_ENV);
  const selection = parseSelection(options.only, options.skip);
  const requirements = select(REQUIREMENTS, selection);
  const paying =
    payerKey === undefined
      ? ''
      : `; paying as ${privateKeyToAccount(payerKey).address}${rpcUrl === undefined ? ' (no --rpc-url: balances unread)' : ''}`;
  process.stdout.write(
    `Checking ${requirements.length} requirement(s) against runtime ${target.runtimeUrl} and gateway ${target.gatewayUrl}${paying}\n\n`,
  );
  const report = await runDeployment(
    {
      ...target,
      ...(operatorKey === undefined ? {} : { operatorKey }),
      ...(payerKey === undefined ? {} : { payerKey }),
      ...(rpcUrl === undefined ? {} : { rpcUrl }),
      expectOperatorEnforcement: options.expectOperatorEnforcement === true,
    },
    { requirements, excluded: exclusions(REQUIREMENTS, selection), onResult: printResult },
  );
  return finish(report, options.out);
}

async function pluginCommand(specifier: string, options: { options: string; out?: string }): Promise<number> {
  let pluginOptions: unknown;
  try {
    pluginOptions = JSON.parse(options.options);
  } catch {
    throw new UsageError('--options must be JSON');
  }
  if (typeof pluginOptions !== 'object' || pluginOptions === null || Array.isArray(pluginOptions)) {
    throw new UsageError('--options must be a JSON object');
  }
  let loaded;
  try {
    loaded = await importPluginModule(specifier, process.cwd());
  } catch (err) {
    if (err instanceof PluginNotFound) throw new UsageError(err.message);
    throw err;
  }
  process.stdout.write(`Checking plugin module ${loaded.source}\n\n`);
  const report = await runPluginKit(loaded, {
    options: pluginOptions as Record<string, unknown>,
    onResult: printResult,
  });
  return finish(report, options.out);
}

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
    .option('--only <ids>', 'comma-separated ids, prefixes or groups to run, e.g. GW-5,RT-4.health')
    .option(
      '--skip <ids>',
      `comma-separated ids, prefixes or groups to leave out; the reports list them as excluded on request. Groups: ${groupList()}`,
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
    .action(exiting(deploymentCommand));

  conformance
    .command('plugin')
    .description('Run the generic manifest kit and the contract kit of its kind against a plugin module')
    .argument(
      '<plugin>',
      'a path to the plugin module, or a package name resolved from the current directory',
    )
    .option('--options <json>', 'the plugin options as JSON, as plugins[].options would hold them', '{}')
    .option('--out <dir>', 'also write report.json, junit.xml and summary.md there')
    .action(exiting(pluginCommand));

  conformance
    .command('requirements')
    .description('List the deployment requirements: id, level and title')
    .action(() => {
      for (const requirement of REQUIREMENTS) {
        const groups = requirement.groups === undefined ? '' : ` [${requirement.groups.join(', ')}]`;
        process.stdout.write(
          `${requirement.id.padEnd(34)} ${requirement.level.padEnd(7)} ${requirement.title}${groups}\n`,
        );
      }
    });
}

import type { Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { OPERATOR_KEY_ENV, PAYER_KEY_ENV, RPC_URL_ENV } from '../cli.ts';
import { runDeployment } from '../deployment/run.ts';
import { REQUIREMENTS } from '../requirements.ts';
import { exclusions, parseIdList, select, unknownPatterns } from '../selection.ts';
import { exiting, finish, printResult, UsageError } from './outcome.ts';

/** `sigil conformance deployment`: the requirements checked over HTTP against a running deployment. */

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

export interface DeploymentOptions {
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

/** Exits 0 when no MUST failed, 1 when one did, 2 for bad arguments. */
export const runDeploymentCommand = exiting(deploymentCommand);

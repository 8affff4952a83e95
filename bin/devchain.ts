import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { SigilError } from '@sigil/plugin-api';
import { logDestinationIn, logFormat } from '../core/log.ts';
import {
  DEV_CHAIN_RAIL,
  devChainBanner,
  devChainReplicasFacilitator,
  withDevChain,
  type DevChain,
} from '../devchain/index.ts';
import { loadConfig, type SigilConfig } from '../services/config.ts';
import { withUpDefaults } from '../services/up-defaults.ts';
import { startDevChainFor } from './run-services.ts';

/** The dev chain's RPC port unless devChain.port says: fixed, so a replicas' config stays right across restarts. */
const DEVCHAIN_PORT = 8545;

/** A config file as JSON, with the parts this command reads typed. */
interface ConfigFile {
  runtime?: { mcpSigningKey?: string; http?: Record<string, unknown> } & Record<string, unknown>;
  gateway?: { secretKey?: string; http?: Record<string, unknown> } & Record<string, unknown>;
  plugins?: { resolve: string; options?: { keyMaterial?: string } }[];
  [section: string]: unknown;
}

const readConfigFile = (file: string): ConfigFile => JSON.parse(readFileSync(file, 'utf8')) as ConfigFile;

/** The keys every replica must share (deploy/README.md), made once and kept when the file is written again. */
interface SharedKeys {
  keyMaterial: string;
  mcpSigningKey: string;
  secretKey: string;
}

/**
 * `sigil devchain`: the dev chain of `sigil up` alone, so that replicas started one by one
 * (`sigil runtime`, `sigil gateway`) pay on it, and with `replicasConfig` the config file they share.
 * A local trial of a scale-out deployment (README "Scale out"): the keys it writes are real secrets,
 * but the chain's accounts are anvil's public dev keys.
 */
export async function runDevChain(options: {
  configPath?: string | undefined;
  replicasConfig?: string | undefined;
  runtimeUrl: string;
  gatewayUrl: string;
}): Promise<void> {
  const read = loadConfig({ ...(options.configPath ? { path: options.configPath } : {}) });
  const loaded = {
    ...read,
    config: {
      ...read.config,
      devChain: { ...read.config.devChain, port: read.config.devChain.port ?? DEVCHAIN_PORT },
    },
  };
  const destination = logDestinationIn(
    logFormat(loaded.config.log.format, { mode: loaded.config.mode, terminal: process.stderr.isTTY }),
  );
  const started = await startDevChainFor(loaded, destination);
  if (started === undefined)
    throw new SigilError(
      'config_invalid',
      'the dev chain is turned off, or the config has a payment rail of its own',
      {
        hint: 'sigil devchain runs the dev chain alone: leave devChain.enabled on and plugins without a payment-rail',
      },
    );
  const { chain } = started;
  const stop = (signal: string) => {
    process.stdout.write(`\n${signal}: stopping the dev chain\n`);
    void chain.stop().then(() => process.exit(0));
  };
  process.once('SIGINT', () => stop('SIGINT'));
  process.once('SIGTERM', () => stop('SIGTERM'));
  process.stdout.write(devChainBanner(chain, loaded.config.devChain.stateFile));
  if (options.replicasConfig !== undefined) {
    writeReplicasConfig(options.replicasConfig, {
      ...options,
      file: loaded.file,
      config: loaded.config,
      chain,
    });
    process.stdout.write(
      [
        `replicas ${options.replicasConfig}: the config every replica shares (keys in it: keep it private)`,
        `  start   DATABASE_URL=postgres://… RUNTIME_PORT=8081 node bin/sigil.js -c ${options.replicasConfig} runtime`,
        `          DATABASE_URL=postgres://… GATEWAY_PORT=8403 node bin/sigil.js -c ${options.replicasConfig} gateway`,
        `  nginx   node bin/sigil.js nginx --runtime 127.0.0.1:8081,… --gateway 127.0.0.1:8403,… --out /etc/nginx`,
        '',
      ].join('\n'),
    );
  }
  process.stdout.write(`ready    dev chain ${chain.rpcUrl}; Ctrl-C stops it\n`);
}

/**
 * Writes the replicas' config: the file the command was given (if any), with the balancer's URLs as
 * the public ones and trusted, the payment rail and ledger on the dev chain (as `sigil up` wires
 * them) with one facilitator account per gateway replica, the stand-in LLM and canvas nodes of
 * `sigil up`, and the keys replicas must share.
 */
function writeReplicasConfig(
  file: string,
  from: {
    file: string | undefined;
    config: SigilConfig;
    chain: DevChain;
    runtimeUrl: string;
    gatewayUrl: string;
  },
): void {
  const written = from.file === undefined ? {} : readConfigFile(from.file);
  const keys = sharedKeys(file);
  const wired = withDevChain(withUpDefaults(from.config), from.chain);
  const plugins = wired.plugins.map((plugin) => {
    if (plugin.resolve === 'tee-none')
      return { ...plugin, options: { keyMaterial: keys.keyMaterial, ...plugin.options } };
    if (plugin.resolve === DEV_CHAIN_RAIL)
      return {
        ...plugin,
        options: { ...plugin.options, facilitator: devChainReplicasFacilitator() },
      };
    return plugin;
  });
  // Every replica is reached through the balancer on this machine, whose X-Forwarded-For is trusted.
  const behindBalancer = (http: Record<string, unknown> | undefined) => ({
    trustedProxies: ['127.0.0.1'],
    ...http,
  });
  const config = {
    ...written,
    runtime: {
      ...written.runtime,
      publicUrl: from.runtimeUrl,
      mcpSigningKey: from.config.runtime.mcpSigningKey ?? keys.mcpSigningKey,
      operatorKey: wired.runtime.operatorKey,
      http: behindBalancer(written.runtime?.http),
    },
    gateway: {
      ...written.gateway,
      publicUrl: from.gatewayUrl,
      secretKey: from.config.gateway.secretKey ?? keys.secretKey,
      paymentHint: wired.gateway.paymentHint,
      http: behindBalancer(written.gateway?.http),
    },
    ledger: wired.ledger,
    plugins,
  };
  writeFileSync(file, `${JSON.stringify(config, null, 2)}\n`, { mode: 0o600 });
}

/** The keys of a replicas' config written before (the replicas running hold them), else new ones. */
function sharedKeys(file: string): SharedKeys {
  const before: ConfigFile = existsSync(file) ? readConfigFile(file) : {};
  const keyMaterial = before.plugins?.find((plugin) => plugin.resolve === 'tee-none')?.options?.keyMaterial;
  return {
    keyMaterial: keyMaterial ?? randomBytes(48).toString('base64'),
    mcpSigningKey:
      before.runtime?.mcpSigningKey ??
      generateKeyPairSync('ec', { namedCurve: 'P-256' })
        .privateKey.export({ format: 'pem', type: 'pkcs8' })
        .toString(),
    secretKey: before.gateway?.secretKey ?? randomBytes(32).toString('hex'),
  };
}

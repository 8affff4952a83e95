import type { ChildProcess } from 'node:child_process';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import knex from 'knex';
import { openDatabase, type Database } from '../../core/db/database.ts';
import {
  DEV_CHAIN_RAIL,
  devChainReplicasFacilitator,
  FACILITATOR_ACCOUNT_INDEXES,
  withDevChain,
} from '../../devchain/index.ts';
import type { PluginEntry } from '../../core/config/schema.ts';
import { configSchema } from '../../services/config.ts';
import type { ServiceName } from '../../services/serve.ts';
import { UP_PROVIDER } from '../../services/up-defaults.ts';
import { ProbeWorld } from '../services/gateway/support.ts';
import type { Upstreams } from '../../bin/nginx-config.ts';
import { startBalancer, type Balancer } from './balancer.ts';
import { startDevChain, type DevChain } from './chain.ts';
import { freePort, startSigil } from './cli.ts';
import { eventually } from './eventually.ts';
import { TEST_GATEWAY_SECRET_KEY } from './kernel.ts';

/**
 * Replicas of both services as an operator runs them (deploy/README.md): real `sigil runtime` and
 * `sigil gateway` processes, each with its own port and directories, on one fresh PostgreSQL database,
 * behind nginx with the shipped configuration, paying on a local dev chain, with the probe MCP server
 * of a local registry in the gateways' catalog.
 *
 *     const set = replicaSuite(); // in a describeScaleOut body: hooks start and stop it
 *     … fetch(`${set.gatewayUrl}/api/…`) …           // through the balancer
 *     await set.kill(set.gateways[0]!);               // SIGKILL
 *     await set.restart(set.gateways[0]!);            // its port again, healthy
 *     set.replicaAt(set.balancer.log().at(-1)!.upstream) // which replica answered
 */

/** The PostgreSQL server the scale-out tests make their databases on (CI sets it). */
const POSTGRES_URL = process.env.TEST_DATABASE_URL;

/**
 * Defines the suite when PostgreSQL is there: replicas share PostgreSQL, and SQLite is one machine
 * (as describeEachDatabase leaves PostgreSQL's suites out without TEST_DATABASE_URL).
 */
export function describeScaleOut(title: string, body: (postgresUrl: string) => void): void {
  if (POSTGRES_URL !== undefined) describe(`${title} [postgres]`, () => body(POSTGRES_URL));
}

/** A database of its own on a PostgreSQL server, dropped (connections and all) by `drop`. */
export async function freshPostgresDatabase(
  serverUrl: string,
): Promise<{ url: string; drop(): Promise<void> }> {
  const name = `sigil_replicas_${process.pid}_${randomBytes(4).toString('hex')}`;
  const onServer = async (statement: string) => {
    const admin = knex({ client: 'pg', connection: serverUrl, pool: { min: 0, max: 1 } });
    try {
      await admin.raw(statement);
    } finally {
      await admin.destroy();
    }
  };
  await onServer(`create database "${name}"`);
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return { url: url.toString(), drop: () => onServer(`drop database if exists "${name}" with (force)`) };
}

/** A port picked for a replica was taken meanwhile. */
class PortTaken extends Error {}

/** How often a replica's start is tried again on another port when its own was taken. */
const PORT_ATTEMPTS = 5;

/** How long a replica may take to start: the gateway installs and checks the probe server first. */
const START_TIMEOUT_MS = 120_000;

/** A graceful stop that takes longer is ended with SIGKILL. */
const STOP_GRACE_MS = 15_000;

/** One `sigil runtime` or `sigil gateway` process and what it needs across restarts. */
export class ReplicaProcess {
  private child: ChildProcess | undefined;
  private exited: Promise<number | null> = Promise.resolve(null);
  private output: () => string = () => '';

  /** Its working directory: config file, package cache, sandboxes. */
  readonly dir: string;

  constructor(
    readonly service: ServiceName,
    /** 0-based, among the replicas of its service. */
    readonly index: number,
    /** Where the replicas' directories are made. */
    root: string,
    public port: number,
  ) {
    this.dir = join(root, this.name);
    mkdirSync(this.dir, { recursive: true });
  }

  /** `gateway-1`, `runtime-2`… */
  get name(): string {
    return `${this.service}-${this.index + 1}`;
  }

  /** Where it listens, as the balancer's upstream names it. */
  get address(): string {
    return `127.0.0.1:${this.port}`;
  }

  get url(): string {
    return `http://${this.address}`;
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  get running(): boolean {
    return this.child !== undefined && this.child.exitCode === null && this.child.signalCode === null;
  }

  /** What it printed (stdout and stderr, its log at warn and above). */
  printed(): string {
    return this.output();
  }

  /** Starts it with `config` on its port; resolves once it printed `ready` and its /health answers 200. */
  async start(config: Record<string, unknown>, databaseUrl: string): Promise<void> {
    const configFile = join(this.dir, 'sigil.config.json');
    const section = this.service;
    writeFileSync(
      configFile,
      JSON.stringify({
        ...config,
        [section]: { ...(config[section] as object), port: this.port },
      }),
    );
    let started: Awaited<ReturnType<typeof startSigil>>;
    try {
      started = await startSigil(['-c', configFile, this.service], /^ready {4}/m, {
        cwd: this.dir,
        env: { SIGIL_CONFIG: '', DATABASE_URL: databaseUrl, RUNTIME_PORT: '', GATEWAY_PORT: '' },
        timeoutMs: START_TIMEOUT_MS,
      });
    } catch (error) {
      if (/EADDRINUSE/.test((error as Error).message)) throw new PortTaken(this.address);
      throw error;
    }
    this.child = started.child;
    this.exited = started.exited;
    this.output = started.output;
    await eventually(
      `${this.name} healthy`,
      async () => (await fetch(`${this.url}/health`).catch(() => undefined))?.status === 200,
      30_000,
    );
  }

  /** Sends `signal` and resolves once the process is gone. */
  async signal(signal: NodeJS.Signals): Promise<void> {
    if (!this.running) return;
    this.child?.kill(signal);
    await this.exited;
  }

  /** SIGTERM, as an operator stops it; SIGKILL if it is not gone within the grace. */
  async stop(): Promise<void> {
    if (!this.running) return;
    const force = setTimeout(() => this.child?.kill('SIGKILL'), STOP_GRACE_MS);
    await this.signal('SIGTERM');
    clearTimeout(force);
  }
}

/** Sections of the config file every replica gets more settings in. */
export type ReplicaSettings = Partial<Record<'runtime' | 'gateway' | 'database' | 'ledger', object>>;

export interface ReplicaSetOptions {
  /** The PostgreSQL server a fresh database is made on. */
  postgresUrl: string;
  runtimes?: number;
  gateways?: number;
  /** Settings added to those every replica's config has (e.g. `database` leases), merged at every depth. */
  settings?: ReplicaSettings;
  /** Whether the gateways charge for tool calls on the dev chain's x402 rail; true unless told (false: free). */
  payments?: boolean;
}

/** What a test drives: the balancer, the replicas, the chain and the database they share. */
export interface ReplicaSet {
  balancer: Balancer;
  /** The services at the balancer. */
  runtimeUrl: string;
  gatewayUrl: string;
  runtimes: ReplicaProcess[];
  gateways: ReplicaProcess[];
  chain: DevChain;
  world: ProbeWorld;
  /** The replicas' database, for reading what they recorded (e.g. `replicas`). */
  db: Database;
  /** The replica at an address of a balancer log line's `upstream`. */
  replicaAt(address: string): ReplicaProcess;
  /** Kills a replica (SIGKILL unless told) and resolves once it is gone. */
  kill(replica: ReplicaProcess, signal?: NodeJS.Signals): Promise<void>;
  /** Starts a stopped replica again, on its port if still free (else another, and nginx reloaded). */
  restart(replica: ReplicaProcess): Promise<void>;
  /** Stops everything it started; what a failed start left too. */
  stop(): Promise<void>;
}

/** Starts a replica set (2 runtimes and 2 gateways unless told); see {@link ReplicaSet}. */
export async function startReplicas(options: ReplicaSetOptions): Promise<ReplicaSet> {
  const set = new Replicas();
  try {
    await set.start(options);
    return set;
  } catch (error) {
    await set.stop();
    throw error;
  }
}

/** Registers before/after hooks in the calling describe that start and stop a replica set. */
export function replicaSuite(options: ReplicaSetOptions): ReplicaSet {
  const suite = {} as ReplicaSet;
  let set: ReplicaSet | undefined;
  before(async function () {
    this.timeout(4 * START_TIMEOUT_MS);
    set = await startReplicas(options);
    // The methods live on the prototype: bound ones, beside the fields.
    Object.assign(suite, set, {
      replicaAt: set.replicaAt.bind(set),
      kill: set.kill.bind(set),
      restart: set.restart.bind(set),
      stop: set.stop.bind(set),
    });
  });
  after(async function () {
    this.timeout(60_000);
    await set?.stop();
  });
  return suite;
}

class Replicas implements ReplicaSet {
  balancer!: Balancer;
  runtimeUrl = '';
  gatewayUrl = '';
  runtimes: ReplicaProcess[] = [];
  gateways: ReplicaProcess[] = [];
  chain!: DevChain;
  world!: ProbeWorld;
  db!: Database;
  private database: { url: string; drop(): Promise<void> } | undefined;
  /** What every replica's config says (configOfAll), and the x402 rail's entry on the dev chain, if any. */
  private shared: { config: Record<string, unknown>; rail: PluginEntry | undefined } | undefined;
  /** tee-none's keyMaterial: one for all, so that every gateway verifies every gateway's proofs. */
  private readonly proofKeyMaterial = randomBytes(32).toString('hex');

  async start(options: ReplicaSetOptions): Promise<void> {
    const gateways = options.gateways ?? 2;
    if (gateways > FACILITATOR_ACCOUNT_INDEXES.length)
      throw new Error(
        `at most ${FACILITATOR_ACCOUNT_INDEXES.length} gateway replicas: one facilitator account each`,
      );
    this.world = await ProbeWorld.start();
    this.chain = await startDevChain();
    this.database = await freshPostgresDatabase(options.postgresUrl);
    this.db = await openDatabase({ url: this.database.url });
    const made = async (service: ServiceName, count: number) => {
      const replicas: ReplicaProcess[] = [];
      for (let index = 0; index < count; index++)
        replicas.push(new ReplicaProcess(service, index, join(this.world.dir, 'replicas'), await freePort()));
      return replicas;
    };
    this.runtimes = await made('runtime', options.runtimes ?? 2);
    this.gateways = await made('gateway', gateways);
    this.balancer = await startBalancer(this.upstreams());
    this.runtimeUrl = this.balancer.runtimeUrl;
    this.gatewayUrl = this.balancer.gatewayUrl;
    this.shared = this.configOfAll(options);
    // One first, alone: it migrates the fresh database, which the others then find done.
    const [first, ...others] = [...this.runtimes, ...this.gateways];
    const moved = [
      await this.launch(first!),
      ...(await Promise.all(others.map((replica) => this.launch(replica)))),
    ];
    if (moved.some(Boolean)) await this.balancer.reload(this.upstreams());
  }

  replicaAt(address: string): ReplicaProcess {
    const replica = [...this.runtimes, ...this.gateways].find((candidate) => candidate.address === address);
    if (!replica) throw new Error(`no replica at ${address}`);
    return replica;
  }

  kill(replica: ReplicaProcess, signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    return replica.signal(signal);
  }

  async restart(replica: ReplicaProcess): Promise<void> {
    if (replica.running) throw new Error(`${replica.name} is running`);
    if (await this.launch(replica)) await this.balancer.reload(this.upstreams());
  }

  async stop(): Promise<void> {
    await Promise.all([...this.runtimes, ...this.gateways].map((replica) => replica.stop()));
    await this.balancer?.stop();
    await this.db?.destroy();
    await this.database?.drop();
    await this.chain?.stop();
    await this.world?.stop();
  }

  private upstreams(): Upstreams {
    return {
      runtime: this.runtimes.map((replica) => replica.address),
      gateway: this.gateways.map((replica) => replica.address),
    };
  }

  /** Starts `replica`, on another port when its own was taken; true when it moved. */
  private async launch(replica: ReplicaProcess): Promise<boolean> {
    for (let attempt = 1; ; attempt++) {
      try {
        await replica.start(this.configOf(replica), this.database!.url);
        return attempt > 1;
      } catch (error) {
        if (!(error instanceof PortTaken) || attempt === PORT_ATTEMPTS) throw error;
        replica.port = await freePort();
      }
    }
  }

  /**
   * What every replica's config file says, as an operator writes one config for all (deploy/README.md):
   * the balancer's URLs as the public ones (SIWE domains, delegated JWTs' audience, the runtime's tool
   * loop), the balancer as a trusted proxy, one key for each thing replicas must agree on, the ledger
   * and the x402 rail on the dev chain (as `sigil up` wires them), and the stand-in LLM.
   */
  private configOfAll(options: ReplicaSetOptions): {
    config: Record<string, unknown>;
    rail: PluginEntry | undefined;
  } {
    const payments = options.payments ?? true;
    const base = configSchema.parse({});
    const wired = withDevChain(base, this.chain, { rail: payments });
    // The balancer's address: the client's is the one its X-Forwarded-For names.
    const behindBalancer = { trustedProxies: ['127.0.0.1'] };
    const config = {
      runtime: {
        publicUrl: this.runtimeUrl,
        operatorKey: wired.runtime.operatorKey,
        mcpSigningKey: generateKeyPairSync('ec', { namedCurve: 'P-256' })
          .privateKey.export({ format: 'pem', type: 'pkcs8' })
          .toString(),
        chat: { gatewayUrl: this.gatewayUrl },
        http: behindBalancer,
      },
      gateway: {
        publicUrl: this.gatewayUrl,
        includeDefaultCatalog: false,
        catalogFile: this.world.catalogFile,
        warmupAtStart: true,
        secretKey: TEST_GATEWAY_SECRET_KEY,
        ...(payments ? { paymentHint: wired.gateway.paymentHint } : {}),
        http: behindBalancer,
      },
      // Deposits counted within a fifth of a second, not two.
      ledger: { ...wired.ledger, pollIntervalMs: 200 },
    };
    const rail = wired.plugins.find((plugin) => plugin.resolve === DEV_CHAIN_RAIL);
    return {
      config: withSettings(config, options.settings ?? {}),
      rail: rail && { ...rail, options: { ...rail.options, facilitator: devChainReplicasFacilitator() } },
    };
  }

  /** A replica's config: the shared one, with its own package cache and sandboxes. */
  private configOf(replica: ReplicaProcess): Record<string, unknown> {
    const { config, rail } = this.shared!;
    return {
      ...config,
      plugins: [
        ...this.world.plugins(join(replica.dir, 'sandboxes')).map((plugin) => {
          if (plugin.resolve === 'tee-none')
            return { ...plugin, options: { keyMaterial: this.proofKeyMaterial } };
          if (plugin.resolve === 'registry-npm')
            return { ...plugin, options: { ...plugin.options, cacheDir: join(replica.dir, 'packages') } };
          return plugin;
        }),
        ...(rail ? [rail] : []),
        { resolve: UP_PROVIDER, enabled: true, options: {} },
      ],
    };
  }
}

/** `base` with `settings` in it: objects merged key by key, at every depth; anything else replaced. */
function withSettings(base: Record<string, unknown>, settings: object): Record<string, unknown> {
  const merged = { ...base };
  for (const [key, value] of Object.entries(settings)) {
    const current = merged[key];
    merged[key] =
      isPlainObject(current) && isPlainObject(value) ? withSettings(current, value) : (value as unknown);
  }
  return merged;
}

const isPlainObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

import type Router from '@koa/router';
import { publicBase } from '../../core/auth/settings.ts';
import { extensionPoints, SigilError } from '@sigil/plugin-api';
import type { LaneRoute } from '../../core/http/lane.ts';
import { jobLeases, type Kernel } from '../kernel.ts';
import { SIGIL_VERSION } from '../shared/health.ts';
import { loadCatalog, type Catalog } from './catalog.ts';
import { CallerLimits, serverCallSettings } from './call-limits.ts';
import { SandboxedServers, type ServerLaunch } from './launcher.ts';
import { CacheHints } from './mcp/cache-hints.ts';
import { McpDispatcher } from './mcp/dispatcher.ts';
import { mcpRoutes } from './mcp/endpoint.ts';
import { GatewayTools } from './mcp/gateway-tools.ts';
import { gatewayOpenApi } from './openapi.ts';
import { restRouter } from './rest.ts';
import { ServerPool } from './server-pool.ts';
import { ServerDirectory } from './servers.ts';
import { EnabledServers } from './enabled-servers.ts';
import { ToolCaller } from './tool-calls.ts';
import { Payments } from './payments/payments.ts';
import { paymentsRouter } from './payments/routes.ts';
import { ToolPins } from './tool-pins.ts';
import { Warmup } from './warmup.ts';
import { loadBuildInfo } from '../shared/build-info.ts';
import { ProofSigner } from './proofs.ts';
import { RequestStates } from './request-state.ts';
import { secretsRouter } from './secrets/routes.ts';
import { openSecretVault } from './secrets/vault.ts';
import { verifyRouter } from './verify.ts';

export interface ToolGateway {
  /** The servers it may run: the default catalog and the operator's file. */
  catalog: Catalog;
  /** The MCP endpoint: its POSTs (the gateway's lane) and the router that refuses other methods. */
  mcp: { lane: LaneRoute[]; router: Router };
  /** Everything else: REST, proof verification, payments, secrets. */
  routers: Router[];
  warmup: Warmup;
  /**
   * Imports the secret files into the database (when both are configured), recovers unfinished
   * payments and starts retrying pending settlements.
   */
  start(): Promise<void>;
  /** Stops the settlement worker and every MCP server process. */
  close(): Promise<void>;
}

/**
 * The proof signer, keyed once by the TEE backend (sealed key where the hardware can seal). A key the
 * backend cannot give yet is `unavailable` (every tool call asks for the signer before it runs, so
 * nothing ran or was charged), and is asked for again by the next call.
 */
function proofSignerFor(kernel: Kernel): () => Promise<ProofSigner> {
  let signer: Promise<ProofSigner> | undefined;
  return () => {
    signer ??= (async () => {
      const tee = kernel.plugins.one('tee-backend');
      return new ProofSigner({
        key: await tee.signingKey('execution-proof'),
        tee: await tee.status(),
        build: await loadBuildInfo(),
        clock: kernel.clock,
      });
    })().catch((cause: unknown) => {
      signer = undefined;
      kernel.logger.error({ err: cause }, 'the execution-proof key is not available');
      throw new SigilError(
        'unavailable',
        'The execution-proof key is not available: nothing was run or charged',
        {
          hint: 'Retry shortly',
          cause,
        },
      );
    });
    return signer;
  };
}

/**
 * The key that seals relayed `input_required` states: the TEE backend's for that purpose, the same on
 * every replica that shares the backend's key source; asked for again after a failure.
 */
function requestStateKey(kernel: Kernel): () => Promise<Uint8Array> {
  let key: Promise<Uint8Array> | undefined;
  return () => {
    key ??= kernel.plugins
      .one('tee-backend')
      .signingKey('mcp-request-state')
      .then((derived) => derived.key)
      .catch((cause: unknown) => {
        key = undefined;
        throw new SigilError('unavailable', 'The key for MCP request states is not available', {
          hint: 'Retry shortly',
          cause,
        });
      });
    return key;
  };
}

/** Assembles the gateway's MCP and REST surfaces over one catalog, one pool and one execution path. */
export function createToolGateway(kernel: Kernel): ToolGateway {
  const settings = kernel.config.gateway;
  const publicUrl = publicBase(settings);
  const logger = kernel.logger.child({ component: 'tool-gateway' });
  const catalog = loadCatalog({
    includeDefaults: settings.includeDefaultCatalog,
    ...(settings.catalogFile ? { file: settings.catalogFile } : {}),
  });
  const secrets = openSecretVault({
    masterKey: settings.secretKey,
    persistenceDir: kernel.config.vault.persistenceDir,
    store: settings.secretsStore,
    shared: kernel.replica.shared,
    db: kernel.db,
    clock: kernel.clock,
    logger,
  });
  const { vault } = secrets;
  const launcher = new SandboxedServers({
    plugins: kernel.plugins,
    logger,
    secretsFor: (key) =>
      key.wallet.startsWith('0x') ? vault.get(key.wallet, key.serverId) : Promise.resolve({ values: {} }),
    registry: kernel.secrets,
    probeTimeoutMs: settings.mcp.probeTimeoutSeconds * 1000,
    onProtocolChanged: (launch, protocol) =>
      void servers.recordProtocol(launch.serverId, launch.pin, protocol).catch((err: unknown) => {
        logger.warn({ err, serverId: launch.serverId }, 'the MCP server protocol could not be recorded');
      }),
  });
  const settingsOf = serverCallSettings(catalog.all(), {
    defaultSeconds: settings.toolCallTimeoutSeconds,
    maxSeconds: settings.maxToolCallTimeoutSeconds,
  });
  // Verifications and the daily refresh: one replica at a time, under leases taken by this replica.
  const leased = jobLeases(kernel);
  const servers = new ServerDirectory({
    db: kernel.db,
    clock: kernel.clock,
    logger,
    catalog,
    pins: new ToolPins(kernel.db, kernel.clock),
    prober: launcher,
    denyList: settings.denyList,
    callSettings: settingsOf,
    ...leased,
  });
  const { callLimits } = settings;
  const pool = new ServerPool<ServerLaunch>({
    launch: launcher.launch,
    idleMs: settings.idleTimeoutSeconds * 1000,
    maxRunning: settings.maxRunningServers,
    queueLength: callLimits.queueLength,
    queueWaitMs: callLimits.queueWaitSeconds * 1000,
    // A change through this replica stops the process at once (secretsRouter's onChange); one through
    // another is seen here within SECRETS_VERSION_TTL_MS.
    outdated: async (key, server) => {
      const started = server.injected.version;
      return started !== undefined && (await vault.version(key.wallet, key.serverId)) > started;
    },
    logger,
  });
  // The longest a paid call may take from its reservation: queued, then run to its time limit.
  const longestCallSeconds =
    callLimits.queueWaitSeconds +
    Math.max(
      settings.toolCallTimeoutSeconds,
      ...catalog.all().map((entry) => settingsOf(entry.id).timeoutMs / 1000),
    );
  const proofs = proofSignerFor(kernel);
  const rails = kernel.plugins.all('payment-rail');
  const payments = rails[0]
    ? new Payments({
        rail: rails[0],
        db: kernel.db,
        clock: kernel.clock,
        logger,
        replica: kernel.replica,
        leases: leased.leases,
        leaseMs: leased.leaseMs,
        staleAfterMs: (longestCallSeconds + 10) * 1000,
        resultRetentionMs: settings.paidResultRetentionHours * 3_600_000,
        resultMaxBytes: settings.paidResultMaxBytes,
        resultMaxBytesPerPayer: settings.paidResultMaxBytesPerPayer,
        dataKey: kernel.config.database.dataKey,
        hint: settings.paymentHint,
      })
    : undefined;
  const window = payments?.terms().maxTimeoutSeconds;
  if (window !== undefined && window < longestCallSeconds + 15) {
    logger.warn(
      { maxTimeoutSeconds: window, longestCallSeconds },
      'payments: authorizations may expire before a long tool call settles; raise the rail’s maxTimeoutSeconds',
    );
  }
  const caller = new ToolCaller({
    servers,
    pool,
    payments,
    proofs,
    limits: new CallerLimits(callLimits),
    requestStates: new RequestStates({ key: requestStateKey(kernel), clock: kernel.clock }),
    logger,
  });
  const tools = new GatewayTools({
    catalog,
    servers,
    enabled: new EnabledServers(kernel.db, kernel.clock),
    caller,
  });
  const warmup = new Warmup({
    catalog,
    servers,
    registries: () => kernel.plugins.extensions(extensionPoints.registryKinds),
    clock: kernel.clock,
    logger,
    refresh: kernel.config.gateway.refresh,
    ...leased,
  });
  const dispatcher = new McpDispatcher(
    tools,
    {
      name: 'sigil-gateway',
      version: SIGIL_VERSION,
      instructions:
        'Discovery is opt-in: use gateway_search_servers, then gateway_enable_server; the server’s tools then appear as <serverId>__<tool>.',
    },
    new CacheHints({
      listTtlMs: kernel.config.gateway.mcp.listTtlSeconds * 1000,
      clock: kernel.clock,
      nextChange: () => warmup.nextRefresh,
    }),
  );
  return {
    catalog,
    mcp: mcpRoutes({
      dispatcher,
      admit: (serverId) => servers.admit(serverId),
    }),
    routers: [
      restRouter({
        servers,
        caller,
        warmup,
        openApi: () => gatewayOpenApi(kernel.config.gateway),
        publicUrl,
      }),
      verifyRouter(proofs, payments, publicUrl),
      paymentsRouter(payments),
      secretsRouter({ catalog, vault, onChange: (wallet, serverId) => pool.discard({ serverId, wallet }) }),
    ],
    warmup,
    start: async () => {
      await secrets.start();
      warmup.startSchedule();
      if (!payments) return;
      await payments.recover();
      payments.start();
    },
    close: async () => {
      await warmup.stop();
      await payments?.stop();
      await pool.stopAll();
    },
  };
}

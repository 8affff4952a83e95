import { createHttpApp, type HttpApp } from '../../core/http/app.ts';
import type { Kernel } from '../kernel.ts';
import { gatewayAuth, type GatewayAuthOptions } from './auth.ts';
import { attestationRouter } from '../shared/attestation.ts';
import { HEALTH_PATH, healthRouter } from '../shared/health.ts';
import { attestedGateway } from './attestation.ts';
import type { Catalog } from './catalog.ts';
import { createToolGateway } from './tool-gateway.ts';
import type { WarmupOutcome } from './warmup.ts';

export interface GatewayApp extends HttpApp {
  /** The servers it may run. */
  catalog: Catalog;
  /** Recovers unfinished payments, then starts background work (settlement retries, the catalog warmup). */
  start(): Promise<void>;
  /** Settles when the start-up warmup is done (at once without one): what `sigil up` waits for to say ready. */
  warmedUp(): Promise<WarmupOutcome | undefined>;
  close(): Promise<void>;
}

/** What a gateway is composed with beyond the kernel. */
export type GatewayAppOptions = GatewayAuthOptions;

/** The tool gateway: composition of core middleware and the gateway's routers. */
export function createGatewayApp(kernel: Kernel, options: GatewayAppOptions = {}): GatewayApp {
  const health = healthRouter('gateway', kernel);
  const auth = gatewayAuth(kernel, options);
  const tools = createToolGateway(kernel);
  const http = createHttpApp({
    service: 'gateway',
    logger: kernel.logger.child({ service: 'gateway' }),
    bodyLimitBytes: kernel.config.gateway.bodyLimitBytes,
    edge: kernel.config.gateway,
    requestSummaryMs: kernel.config.log.requestSummarySeconds * 1000,
    probePaths: [HEALTH_PATH],
    challenge: auth.challenge,
    middleware: [auth.middleware],
    routers: [
      health,
      auth.router,
      ...(auth.resourceMetadata ? [auth.resourceMetadata] : []),
      tools.mcp.router,
      ...tools.routers,
      attestationRouter(attestedGateway(kernel, auth.runtimeTrust), kernel.clock),
    ],
    // Tool calls: authentication, then the MCP endpoint, without Koa.
    lane: { steps: [auth.laneStep], routes: tools.mcp.lane },
  });
  let warmup: Promise<WarmupOutcome | undefined> = Promise.resolve(undefined);
  return {
    ...http,
    catalog: tools.catalog,
    start: async () => {
      await auth.assertPublicUrlFits();
      await tools.start();
      if (kernel.config.gateway.warmupAtStart) warmup = tools.warmup.run('start-up');
    },
    warmedUp: () => warmup,
    close: () => {
      http.stopLogging();
      return tools.close();
    },
  };
}

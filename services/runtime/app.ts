import type Koa from 'koa';
import { createWalletAuth } from '../../core/auth/index.ts';
import { createHttpApp } from '../../core/http/app.ts';
import type { HttpMetrics } from '../../core/http/metrics.ts';
import type { Kernel } from '../kernel.ts';
import { healthRouter } from '../shared/health.ts';
import { createLedgerService, type LedgerService } from './ledger/service.ts';

export interface RuntimeApp {
  app: Koa;
  metrics: HttpMetrics;
  /** Agents and the wallet ledger (what the chat charges). */
  ledger: LedgerService;
  /** Recovers unfinished transfers, then starts the ledger's background work. */
  start(): Promise<void>;
  close(): Promise<void>;
}

/** What the runtime tells about its own protection, shown on `/health` as `securityPosture`. */
async function securityPosture(kernel: Kernel): Promise<Record<string, unknown>> {
  const tee = await kernel.plugins.one('tee-backend').status();
  return {
    mode: kernel.config.mode,
    tee: { enabled: tee.teeEnabled, platform: tee.platform, keySource: tee.keySource },
    vaultPersistence: kernel.config.vault.persistenceDir ? 'persistent' : 'memory-only',
    sessionJwt: { alg: 'ES256', ttlSeconds: kernel.config.auth.runtimeJwtTtlSeconds },
    delegatedGatewayJwt: kernel.config.runtime.mcpSigningKey ? 'configured' : 'not-configured',
  };
}

/** The agent runtime: composition of core middleware and the runtime's routers. */
export function createRuntimeApp(kernel: Kernel): RuntimeApp {
  const health = healthRouter('runtime', kernel, async () => ({
    securityPosture: await securityPosture(kernel),
  }));
  const auth = createWalletAuth(kernel, 'runtime');
  const ledger = createLedgerService(kernel);
  const http = createHttpApp({
    service: 'runtime',
    logger: kernel.logger.child({ service: 'runtime' }),
    bodyLimitBytes: kernel.config.runtime.bodyLimitBytes,
    middleware: [auth.middleware],
    routers: [health, auth.router, ...ledger.routers],
  });
  return { ...http, ledger, start: () => ledger.start(), close: () => ledger.close() };
}

import type Koa from 'koa';
import { createWalletAuth } from '../../core/auth/index.ts';
import { createHttpApp } from '../../core/http/app.ts';
import type { HttpMetrics } from '../../core/http/metrics.ts';
import type { Kernel } from '../kernel.ts';
import { healthRouter } from '../shared/health.ts';

export interface GatewayApp {
  app: Koa;
  metrics: HttpMetrics;
}

/** The tool gateway: composition of core middleware and the gateway's routers. */
export function createGatewayApp(kernel: Kernel): GatewayApp {
  const health = healthRouter('gateway', kernel);
  const auth = createWalletAuth(kernel, 'gateway');
  return createHttpApp({
    service: 'gateway',
    logger: kernel.logger.child({ service: 'gateway' }),
    bodyLimitBytes: kernel.config.gateway.bodyLimitBytes,
    middleware: [auth.middleware],
    routers: [health, auth.router],
  });
}

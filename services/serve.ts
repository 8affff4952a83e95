import type Koa from 'koa';
import { listen, type RunningServer } from '../core/http/server.ts';
import { createGatewayApp } from './gateway/app.ts';
import type { Kernel } from './kernel.ts';
import { createRuntimeApp } from './runtime/app.ts';

export type ServiceName = 'runtime' | 'gateway';

const APP_FACTORIES: Record<ServiceName, (kernel: Kernel) => { app: Koa }> = {
  runtime: createRuntimeApp,
  gateway: createGatewayApp,
};

export interface Serving {
  urls: Partial<Record<ServiceName, string>>;
  /** Graceful: stop accepting, let in-flight requests finish, then stop plugins and close the database. */
  stop(): Promise<void>;
}

export async function serve(kernel: Kernel, services: readonly ServiceName[]): Promise<Serving> {
  const running: RunningServer[] = [];
  const urls: Partial<Record<ServiceName, string>> = {};
  try {
    for (const name of services) {
      const { host, port } = kernel.config[name];
      const server = await listen(APP_FACTORIES[name](kernel).app, host, port);
      running.push(server);
      urls[name] = server.url;
      kernel.logger.info({ service: name, url: server.url }, `${name} listening`);
    }
  } catch (err) {
    await Promise.all(running.map((server) => server.close(0)));
    throw err;
  }
  let stopping: Promise<void> | undefined;
  return {
    urls,
    stop: () => {
      stopping ??= (async () => {
        await Promise.all(running.map((server) => server.close()));
        await kernel.close();
      })();
      return stopping;
    },
  };
}

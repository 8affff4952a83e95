import { definePlugin } from '@sigil/plugin-api';
import { configSchema } from './config.ts';
import { DockerRuntime } from './runtime.ts';

/**
 * MCP servers in containers of a Docker engine (local or remote), through dockerode: host programs
 * in an image of their interpreter, digest-pinned images, optionally under gVisor. See README.md for
 * what it enforces and how.
 */
export default definePlugin({
  kind: 'sandbox-runtime',
  name: 'sandbox-docker',
  specVersion: 'v2',
  description: 'MCP servers in hardened Docker containers (dockerode), optionally under gVisor (runsc)',
  config: configSchema,
  create: ({ config, logger }) => new DockerRuntime({ config, logger }),
});

export { configSchema, DockerRuntime };
export type { DockerSandboxConfig } from './config.ts';
export type { DockerSandboxProcess } from './docker-process.ts';

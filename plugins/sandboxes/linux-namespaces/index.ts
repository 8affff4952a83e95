import { definePlugin } from '@sigil/plugin-api';
import { configSchema } from './config.ts';
import { LinuxNamespacesRuntime } from './runtime.ts';

/**
 * The embedded default sandbox: kernel namespaces through util-linux, which every Linux has, so a
 * fresh machine needs neither bubblewrap nor a container engine. See README.md for what it enforces
 * and how.
 */
export default definePlugin({
  kind: 'sandbox-runtime',
  name: 'sandbox-linux-namespaces',
  specVersion: 'v2',
  description:
    'MCP servers (node, python, binaries of the host) in user, mount, PID, network, IPC and UTS namespaces built with util-linux, under a seccomp filter',
  config: configSchema,
  create: ({ config, logger }) => new LinuxNamespacesRuntime({ config, logger }),
});

export { configSchema, LinuxNamespacesRuntime };
export type { LinuxNamespacesConfig } from './config.ts';
export type { ReapReport } from './leftovers.ts';
export type { LinuxNamespacesDetails, LinuxNamespacesStatus } from './status.ts';

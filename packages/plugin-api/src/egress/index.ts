/**
 * `@sigil/plugin-api/egress`: the network allow-list of a sandbox, for every `sandbox-runtime` plugin:
 * an HTTP proxy (CONNECT, or absolute-form plain HTTP) that lets a sandbox reach only the `host:port`
 * pairs of its allow-list, resolving each name once and refusing loopback, private and other special
 * addresses unless the operator lists their ranges, with a cap on connections held at once.
 */
export * from './addresses.ts';
export * from './proxy.ts';

import type { McpEra } from '../http/mcp-errors.ts';

export type { McpEra };

/**
 * The protocol an MCP server process speaks, as its verification found it: `legacy` (2025-11-25 and
 * older, after `initialize`) or `modern` (2026-07-28 and later: every request carries its revision and
 * the client's capabilities in `_meta`), and the revision negotiated.
 */
export interface McpProtocol {
  era: McpEra;
  version: string;
}

/** The first modern revision: versions from it on (as strings compare) are the modern era's. */
export const MODERN_REVISION = '2026-07-28';

export const isModernVersion = (version: string): boolean => version >= MODERN_REVISION;

/** The protocol of a negotiated version. */
export const protocolOf = (version: string): McpProtocol => ({
  era: isModernVersion(version) ? 'modern' : 'legacy',
  version,
});

/**
 * The reserved `_meta` keys of a 2026-07-28 request and result, as the spec names them. Written out, not
 * imported from the SDK client, which exports them beside ~1 MB of modules the gateway's request path
 * would then load at start-up (issue 30); a test checks them against the client's
 * `*_META_KEY` constants.
 */
export const ENVELOPE = {
  protocolVersion: 'io.modelcontextprotocol/protocolVersion',
  clientCapabilities: 'io.modelcontextprotocol/clientCapabilities',
  clientInfo: 'io.modelcontextprotocol/clientInfo',
  logLevel: 'io.modelcontextprotocol/logLevel',
  serverInfo: 'io.modelcontextprotocol/serverInfo',
} as const;

/**
 * The `_meta` envelope of a request to a modern server, as a client named `clientInfo` sends it; the
 * same frozen object for every call without a caller's capabilities or log level (the hot path).
 */
export class ModernEnvelopes {
  private readonly plain: Readonly<Record<string, unknown>>;

  constructor(
    private readonly version: string,
    private readonly clientInfo: Readonly<{ name: string; version: string }>,
  ) {
    this.plain = Object.freeze(this.build());
  }

  /**
   * `clientCapabilities`: those of the client the call is made for (what an `input_required` result
   * may ask of it), none when absent; `logLevel`: the least severe log message to send, none without.
   */
  of(clientCapabilities?: Record<string, unknown>, logLevel?: string): Readonly<Record<string, unknown>> {
    return clientCapabilities === undefined && logLevel === undefined
      ? this.plain
      : this.build(clientCapabilities, logLevel);
  }

  private build(clientCapabilities?: Record<string, unknown>, logLevel?: string): Record<string, unknown> {
    return {
      [ENVELOPE.protocolVersion]: this.version,
      [ENVELOPE.clientCapabilities]: clientCapabilities ?? {},
      [ENVELOPE.clientInfo]: this.clientInfo,
      ...(logLevel === undefined ? {} : { [ENVELOPE.logLevel]: logLevel }),
    };
  }
}

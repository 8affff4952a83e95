import { importedOnce } from '../imported-once.ts';

/**
 * The MCP SDK client (v2), imported at its first use (the gateway's first server start, or the warm-up
 * below), not at start-up: its ~1 MB of modules cost a start ~120 ms before it listens (issue 30).
 */
export const mcpClientModule = importedOnce(() => import('@modelcontextprotocol/client'));

/**
 * The MCP SDK client (v2) builds its wire schemas (zod, both eras, and the method → schema maps) on
 * its first validation: by default in the gateway, during the first tools/call's handshake with its
 * MCP server. `preloadSchemas()` is the SDK's own warm-up entry for that memo (the same objects every
 * later validation pulls through); the gateway calls it in the background once it listens.
 */
let warmed: Promise<void> | undefined;
let markAsked: () => void = () => undefined;
/** Settles when the warm-up begins, a turn after it is asked for (the tests see it come after listening). */
export const mcpClientSchemasAsked = new Promise<void>((resolve) => (markAsked = resolve));

/** Builds the client's schemas once, on a later turn of the event loop; settles when they are built. */
export function warmMcpClientSchemas(): Promise<void> {
  if (!warmed) {
    warmed = new Promise<void>((resolve) => setImmediate(resolve))
      .then(() => {
        markAsked();
        return mcpClientModule();
      })
      .then(({ preloadSchemas }) => preloadSchemas());
  }
  return warmed;
}

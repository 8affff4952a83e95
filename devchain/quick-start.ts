/**
 * The one-liners a new user needs on the dev chain of `sigil up`: the shipped examples that pay for a
 * tool call with the dev wallet, and that chat and run a canvas workflow as it (examples/, run by
 * test/examples), and how to run with free calls. `sigil up` prints them, and the gateway's 402
 * answers name the paying ones there.
 */

/** Where `npm start` serves the gateway: the paying examples' default. */
const DEFAULT_GATEWAY_URL = 'http://127.0.0.1:8402';

/** Where `npm start` serves the runtime: the chat and canvas examples' default. */
const DEFAULT_RUNTIME_URL = 'http://127.0.0.1:8080';

export const PAY_OVER_REST = 'node examples/pay-over-rest.mjs';
export const PAY_OVER_MCP = 'node examples/pay-over-mcp.mjs';
export const FIRST_CHAT = 'node examples/first-chat.mjs';
export const FIRST_CANVAS = 'node examples/first-canvas.mjs';

/** No dev chain and no payment rail: every tool call is free. */
export const RUN_FREE = 'DEV_CHAIN=false npm start';

/** The gateway's `paymentHint` on the dev chain (its 402 answers cannot know where they were reached). */
export const DEV_CHAIN_PAYMENT_HINT = `On the local dev chain, \`${PAY_OVER_REST}\` (REST) or \`${PAY_OVER_MCP}\` (MCP) pays with the dev wallet (give the gateway URL when it is not ${DEFAULT_GATEWAY_URL}); \`${RUN_FREE}\` makes tool calls free`;

/** An example's command for a gateway at `gatewayUrl`: the URL is given only when it is not the default. */
export const payCommand = (example: string, gatewayUrl: string): string =>
  gatewayUrl === DEFAULT_GATEWAY_URL ? example : `${example} ${gatewayUrl}`;

/**
 * What `sigil up` prints to try the runtime as the dev wallet (after the ledger's block: both deposit
 * on the dev chain), each command with the runtime's URL when it is not the default.
 */
export function runtimeExamplesBanner(runtimeUrl: string): string {
  const command = (example: string) =>
    runtimeUrl === DEFAULT_RUNTIME_URL ? example : `${example} ${runtimeUrl}`;
  return [
    `chat     ${command(FIRST_CHAT)}   (as the dev wallet: a deposit, a provider key, a streamed answer)`,
    `canvas   ${command(FIRST_CANVAS)}   (a workflow: a draft, your approval, a git push, a browser check)`,
    '',
  ].join('\n');
}

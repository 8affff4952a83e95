import type { PaymentTerms } from '@sigil/plugin-api';
import { viemUtils } from '../core/chain/viem.ts';
import { PAY_OVER_MCP, PAY_OVER_REST, RUN_FREE, payCommand } from '../devchain/quick-start.ts';

export interface PaymentsBannerOptions {
  gatewayUrl: string;
  /** The payment rails loaded (the gateway charges with the first), by name, with its terms. */
  rail: { names: string[]; terms: PaymentTerms } | undefined;
  /** Whether the rail is the dev chain's of `sigil up`. */
  devChain: boolean;
  /** Whether the shipped catalog (with its `everything` server) is offered. */
  defaultCatalog: boolean;
}

/**
 * What `sigil up` and `sigil gateway` print about paying for tool calls: what a call costs, or that
 * calls are free; on the dev chain, the one-liners that pay and the one that turns payments off; and
 * the MCP inspector's command for a first look (its CLI needs `--transport http` for this URL).
 */
export async function paymentsBanner(options: PaymentsBannerOptions): Promise<string> {
  const { gatewayUrl, rail, devChain } = options;
  const lines: string[] = [];
  if (rail === undefined) {
    lines.push('payments none: tool calls are free (no payment rail)');
  } else {
    const { pricePerCall, asset, network } = rail.terms;
    const { formatUnits } = await viemUtils();
    const price = `${formatUnits(pricePerCall, asset.decimals)} ${asset.name} (${pricePerCall} base units)`;
    const where = devChain ? 'the local dev chain below' : network;
    lines.push(`payments ${rail.names.join(', ')}: a tool call costs ${price}, paid with x402 on ${where}`);
    if (devChain) {
      lines.push(
        `  pay    ${payCommand(PAY_OVER_REST, gatewayUrl)}   (over REST, with the dev wallet)`,
        `         ${payCommand(PAY_OVER_MCP, gatewayUrl)}   (over MCP)`,
        `  free   ${RUN_FREE}   (no dev chain, no payment rail: tool calls are free)`,
      );
    }
  }
  const inspector = 'npx @modelcontextprotocol/inspector --cli';
  if (options.defaultCatalog) {
    const everything = `${gatewayUrl}/mcp/server/everything --transport http`;
    lines.push(`inspect  ${inspector} ${everything} --method tools/list`);
    if (rail === undefined)
      lines.push(
        `         ${inspector} ${everything} --method tools/call --tool-name echo --tool-arg message=hi`,
      );
  } else {
    lines.push(`inspect  ${inspector} ${gatewayUrl}/mcp --transport http --method tools/list`);
  }
  return `${lines.join('\n')}\n`;
}

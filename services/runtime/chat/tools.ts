import type { CallToolResult, Client } from '@modelcontextprotocol/client';
import type { x402Client } from '@x402/core/client';
import type { PaymentRequired } from '@x402/core/types';
import type { Address, Hex } from 'viem';
import { type LlmToolDefinition, SigilError } from '@sigil/plugin-api';
import { MISSING_CLIENT_CAPABILITY_CODE, PAYMENT_REQUIRED_CODE } from '../../../core/http/mcp-errors.ts';
import { mcpClientModule } from '../../../core/mcp/warm-schemas.ts';
import { PROOF_META_KEY } from '../../gateway/proofs.ts';
import type { GatewayClient, GatewayScope } from '../gateway-client.ts';

const PAYMENT_META_KEY = 'x402/payment';
const PAYMENT_RESPONSE_META_KEY = 'x402/payment-response';
const TOOL_NAME = /^[A-Za-z0-9_-]{1,64}$/;
/** The `details.reason` of a chat whose session names a server the gateway would not enable. */
const SERVER_NOT_ENABLED = 'server_not_enabled';

export interface ToolPayments {
  /** The operator wallet that pays paid tools (runtime.operatorKey). */
  payerKey: Hex;
  /** x402 network (`eip155:<chainId>`) and the asset it may pay in (the ledger's token). */
  network: `${string}:${string}`;
  asset: Address;
}

export interface ToolOutcome {
  content: string;
  /** The tool's `structuredContent`, when it returned one (a canvas tool node outputs it). */
  structuredContent?: Record<string, unknown>;
  isError: boolean;
  /**
   * The gateway ran the tool and it succeeded: its result carries an execution proof and is no error,
   * the calls the gateway settles. Only these are charged (500 each); a call refused before it ran
   * (no operator wallet to pay it, an unpaid 402, a refusal, a transport error) or that failed is not.
   */
  billed: boolean;
  /** Set when the runtime's operator wallet paid for the call (x402): the gateway settled its payment. */
  paid?: { amount: string; asset: string; network: string; transaction?: string };
}

/**
 * `<server>__<tool>` tools of the gateway for one chat session or canvas run, over the official MCP SDK
 * client (v2) at MCP 2026-07-28 (GatewayClient.toolClient).
 */
export class GatewayToolSession {
  private tools: LlmToolDefinition[] = [];

  private constructor(
    private readonly client: Client,
    private readonly payer: x402Client | undefined,
  ) {}

  /**
   * Connects (the wallet's delegated JWT, or the operator's ERC-8128 signatures acting for the wallet),
   * enables `servers` with `gateway_enable_server` in the scope's session and lists the tools to offer
   * the model.
   */
  static async open(options: {
    gateway: GatewayClient;
    path: 'delegated' | 'operator';
    /** The chat session's wallet and X-MCP-Session: its enabled set and secrets at the gateway. */
    scope: GatewayScope;
    servers: readonly string[];
    payments: ToolPayments | undefined;
    signal: AbortSignal;
  }): Promise<GatewayToolSession> {
    const client = await options.gateway.toolClient(options.path, options.scope, options.signal);
    // x402's client with its EVM scheme and viem (~450 modules) load with the first session that may pay.
    const payer =
      options.payments === undefined
        ? undefined
        : (await import('./tool-payer.ts')).toolPayer(options.payments);
    const session = new GatewayToolSession(client, payer);
    try {
      for (const serverId of options.servers) {
        const result = await client.callTool(
          { name: 'gateway_enable_server', arguments: { serverId } },
          { signal: options.signal },
        );
        if (result.isError) {
          throw new SigilError('unavailable', `the gateway did not enable ${serverId}: ${textOf(result)}`, {
            details: { reason: SERVER_NOT_ENABLED, serverId },
          });
        }
      }
      await session.refresh(options.signal);
    } catch (err) {
      await session.close();
      throw err;
    }
    return session;
  }

  /** The tools to offer the model (meta-tools included). */
  definitions(): LlmToolDefinition[] {
    return this.tools;
  }

  /** Lists the tools again (never from the client's cache: enabling a server changes the list). */
  async refresh(signal: AbortSignal): Promise<void> {
    const listed = await this.client.listTools(undefined, { signal, cacheMode: 'refresh' });
    this.tools = listed.tools
      .filter((tool) => TOOL_NAME.test(tool.name))
      .map((tool) => ({
        name: tool.name,
        description: tool.description ?? '',
        inputSchema: tool.inputSchema as Record<string, unknown>,
      }));
  }

  /**
   * Calls a tool; pays with the operator wallet when the gateway asks (x402) and a payer is set. A
   * tool that needs a client capability this client does not declare (elicitation, sampling, roots:
   * the gateway's -32021) did not run: the model reads why, as a tool error.
   */
  async call(name: string, input: Record<string, unknown>, signal: AbortSignal): Promise<ToolOutcome> {
    let outcome: ToolOutcome;
    try {
      outcome = await this.callPaying(name, input, signal);
    } catch (err) {
      // Loaded already: this session's client is the module's.
      const { ProtocolError } = await mcpClientModule();
      if (!(err instanceof ProtocolError) || err.code !== MISSING_CLIENT_CAPABILITY_CODE) throw err;
      return { content: `${name} did not run: ${err.message}`, isError: true, billed: false };
    }
    if (name === 'gateway_enable_server' && !outcome.isError) await this.refresh(signal);
    return outcome;
  }

  private async callPaying(
    name: string,
    input: Record<string, unknown>,
    signal: AbortSignal,
  ): Promise<ToolOutcome> {
    let outcome: ToolOutcome;
    try {
      outcome = outcomeOf(await this.client.callTool({ name, arguments: input }, { signal }));
    } catch (err) {
      const { ProtocolError } = await mcpClientModule();
      if (!(err instanceof ProtocolError) || err.code !== PAYMENT_REQUIRED_CODE) throw err;
      if (this.payer === undefined) {
        return {
          content: `${name} is a paid tool and this runtime has no operator wallet to pay it (runtime.operatorKey)`,
          isError: true,
          billed: false,
        };
      }
      const required = err.data as PaymentRequired;
      const payment = await this.payer.createPaymentPayload(required);
      // Beside the client's own `_meta` envelope (the revision, its capabilities).
      const result = await this.client.callTool(
        { name, arguments: input, _meta: { [PAYMENT_META_KEY]: payment } },
        { signal },
      );
      outcome = outcomeOf(result);
      const accepted = payment.accepted as { amount?: string; asset?: string; network?: string };
      const settled = result._meta?.[PAYMENT_RESPONSE_META_KEY] as { transaction?: string } | undefined;
      // A call that failed is not settled (x402 charges only what ran): the payment it carried moved nothing.
      if (settled !== undefined)
        outcome.paid = {
          amount: String(accepted.amount ?? ''),
          asset: String(accepted.asset ?? ''),
          network: String(accepted.network ?? ''),
          ...(settled.transaction ? { transaction: settled.transaction } : {}),
        };
    }
    return outcome;
  }

  async close(): Promise<void> {
    await this.client.close().catch(() => undefined);
  }
}

function textOf(result: CallToolResult): string {
  const parts = (result.content ?? []).map((part) =>
    part.type === 'text' ? part.text : JSON.stringify(part),
  );
  if (parts.length === 0 && result.structuredContent !== undefined)
    return JSON.stringify(result.structuredContent);
  return parts.join('\n');
}

/** A JSON object (the gateway's tools return only these as `structuredContent`). */
const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

const outcomeOf = (result: CallToolResult): ToolOutcome => ({
  content: textOf(result),
  ...(isRecord(result.structuredContent) ? { structuredContent: result.structuredContent } : {}),
  isError: result.isError === true,
  billed: result.isError !== true && result._meta?.[PROOF_META_KEY] !== undefined,
});

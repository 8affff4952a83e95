import {
  type CanvasLlmRequestV2,
  type CanvasLlmResultV2,
  type CanvasServicesV2,
  type CanvasToolInfoV2,
  type CanvasToolRequestV2,
  type CanvasToolResultV2,
  type LlmMessage,
  SigilError,
} from '@sigil/plugin-api';
import type { AuthPrincipal } from '../../../core/auth/index.ts';
import type { SecretRegistry } from '../../../core/log.ts';
import type { Agents } from '../agents.ts';
import type { ChatService } from '../chat/chat.ts';
import { costView, platformCost, type CostBreakdown } from '../chat/cost.ts';
import { heldModelTurn, schemaInstruction, structuredAnswer } from '../chat/held-turn.ts';
import { GatewayToolSession } from '../chat/tools.ts';
import { type GatewayClient, gatewayScopeOf } from '../gateway-client.ts';
import type { Hold, Holds, Settlement } from '../ledger/holds.ts';
import type { ProviderVault } from '../vault/index.ts';
import type { ActiveRun } from './active-run.ts';

export interface HostServicesDeps {
  chat: ChatService;
  agents: Agents;
  holds: Holds;
  vault: ProviderVault;
  gateway: GatewayClient;
  secrets: SecretRegistry;
  /** Records a charge as the run's `cost` event. */
  onCost(run: ActiveRun, nodeId: string, cost: Record<string, unknown>): Promise<void>;
}

/** The gateway's name of a server's tool for a model or a call: `<server>__<tool>`. */
const toolName = (server: string, tool: string) => `${server}__${tool}`;

/**
 * What canvas nodes do through the host, for one run: model turns with the wallet's own key and tool
 * calls through the gateway's delegated path, each held on the ledger before it starts (the budget
 * check) and charged after by the chat's formula; and the wallet's vault secrets.
 */
export class CanvasHostServices {
  private readonly toolSessions = new Map<string, Promise<GatewayToolSession>>();
  private readonly enabled = new Map<string, Set<string>>();

  constructor(private readonly deps: HostServicesDeps) {}

  for(run: ActiveRun, nodeId: string, attempt: number): CanvasServicesV2 {
    let calls = 0;
    const key = (what: string) => `canvas:${run.record.id}:${nodeId}:${attempt}:${what}:${++calls}`;
    return {
      llm: (request, signal) => this.llm(run, nodeId, key('llm'), request, signal),
      callTool: (request, signal) => this.callTool(run, nodeId, key('tool'), request, signal),
      listTools: (servers, signal) => this.listTools(run, servers, signal),
      secret: (slot) => this.secret(run, slot),
    };
  }

  private principal(run: ActiveRun): AuthPrincipal {
    const principal = run.principal as AuthPrincipal | undefined;
    if (!principal)
      throw new SigilError(
        'forbidden',
        "This run needs the wallet's vault, and nobody has signed in for it since the runtime restarted",
        {
          hint: 'Sign in, unlock the vault, and approve or retry the run',
          details: { reason: 'vault_locked' },
        },
      );
    return principal;
  }

  private async secret(run: ActiveRun, slot: string): Promise<string> {
    const value = await this.deps.vault.providerKey(this.principal(run), slot);
    this.deps.secrets.add(value);
    return value;
  }

  private async llm(
    run: ActiveRun,
    nodeId: string,
    holdKey: string,
    request: CanvasLlmRequestV2,
    signal: AbortSignal,
  ): Promise<CanvasLlmResultV2> {
    const { wallet, agentId } = run.record;
    const model = request.model ?? (await this.deps.agents.get(wallet, agentId)).model;
    const entry = await this.deps.chat.providerFor(model);
    if (!entry)
      throw new SigilError('invalid_request', `Model ${model} is not offered here`, {
        details: { reason: 'model_not_offered', model },
      });
    const { apiKey, keyKind } = await this.deps.chat.keyFor(this.principal(run), entry.provider.keySlot);
    const messages: LlmMessage[] = [];
    const system = [request.system, request.schema ? schemaInstruction(request.schema) : undefined].filter(
      Boolean,
    );
    if (system.length > 0) messages.push({ role: 'system', content: system.join('\n\n') });
    messages.push({ role: 'user', content: request.prompt });
    const { text, inputTokens, outputTokens } = await heldModelTurn(
      this.deps.holds,
      (turn) => this.deps.chat.turnCost(turn, [], entry.model),
      {
        wallet,
        agentId,
        entry,
        apiKey,
        keyKind,
        messages,
        maxOutputTokens: Math.min(
          request.maxOutputTokens ?? Infinity,
          this.deps.chat.settings.maxOutputTokens,
        ),
        idempotencyKey: holdKey,
        purpose: 'canvas_run',
        signal,
        onSettled: (cost, settled) => this.recordCharge(run, nodeId, cost, settled, { kind: 'llm', model }),
      },
    );
    const result: CanvasLlmResultV2 = { text, model, inputTokens, outputTokens };
    if (request.schema) result.json = structuredAnswer(text, request.schema);
    return result;
  }

  private async charge(
    run: ActiveRun,
    nodeId: string,
    hold: Hold,
    cost: CostBreakdown,
    what: Record<string, unknown>,
  ): Promise<void> {
    await this.recordCharge(run, nodeId, cost, await this.deps.holds.settle(hold, cost.platformCost), what);
  }

  /** A settled charge on the run's total and as its `cost` event. */
  private async recordCharge(
    run: ActiveRun,
    nodeId: string,
    cost: CostBreakdown,
    settled: Settlement,
    what: Record<string, unknown>,
  ): Promise<void> {
    run.charged += settled.charged;
    await this.deps.onCost(run, nodeId, {
      ...what,
      ...costView(cost),
      charged: settled.charged.toString(),
      ...(settled.entry ? { entryId: settled.entry.id } : {}),
    });
  }

  /** The run's own MCP session at the gateway (its X-MCP-Session), with `servers` enabled in it. */
  private async session(
    run: ActiveRun,
    servers: readonly string[],
    signal: AbortSignal,
  ): Promise<GatewayToolSession> {
    const runId = run.record.id;
    let opening = this.toolSessions.get(runId);
    if (!opening) {
      opening = GatewayToolSession.open({
        gateway: this.deps.gateway,
        path: this.deps.chat.settings.gatewayPath,
        scope: gatewayScopeOf('canvas', run.record),
        servers: [],
        payments: this.deps.chat.payments,
        signal,
      });
      this.toolSessions.set(runId, opening);
      opening.catch(() => this.toolSessions.delete(runId));
    }
    const session = await opening;
    const enabled = this.enabled.get(runId) ?? new Set();
    this.enabled.set(runId, enabled);
    for (const server of servers) {
      if (enabled.has(server)) continue;
      const outcome = await session.call('gateway_enable_server', { serverId: server }, signal);
      if (outcome.isError)
        throw new SigilError('unavailable', `The gateway did not enable ${server}: ${outcome.content}`, {
          details: { reason: 'server_not_enabled', serverId: server },
        });
      enabled.add(server);
    }
    return session;
  }

  private async callTool(
    run: ActiveRun,
    nodeId: string,
    holdKey: string,
    request: CanvasToolRequestV2,
    signal: AbortSignal,
  ): Promise<CanvasToolResultV2> {
    const session = await this.session(run, [request.server], signal);
    const { wallet, agentId } = run.record;
    const hold = await this.deps.holds.hold({
      wallet,
      agentId,
      amount: platformCost('byok', 0n, 1).platformCost,
      idempotencyKey: holdKey,
      purpose: 'canvas_run',
    });
    let billed = false;
    try {
      const outcome = await session.call(toolName(request.server, request.tool), request.arguments, signal);
      billed = outcome.billed;
      const { content: text, structuredContent, isError } = outcome;
      return { text, isError, ...(structuredContent === undefined ? {} : { structuredContent }) };
    } finally {
      await this.charge(run, nodeId, hold, platformCost('byok', 0n, billed ? 1 : 0), {
        kind: 'tool',
        server: request.server,
        tool: request.tool,
      });
    }
  }

  private async listTools(
    run: ActiveRun,
    servers: readonly string[],
    signal: AbortSignal,
  ): Promise<CanvasToolInfoV2[]> {
    const session = await this.session(run, servers, signal);
    return session.definitions().flatMap((definition) => {
      const [server, ...rest] = definition.name.split('__');
      if (!server || rest.length === 0 || !servers.includes(server)) return [];
      return [
        {
          server,
          name: rest.join('__'),
          ...(definition.description ? { description: definition.description } : {}),
          inputSchema: definition.inputSchema,
        },
      ];
    });
  }

  /** Closes a run's gateway session once it ended. */
  async endRun(runId: string): Promise<void> {
    const session = this.toolSessions.get(runId);
    this.toolSessions.delete(runId);
    this.enabled.delete(runId);
    await (await session?.catch(() => undefined))?.close();
  }
}

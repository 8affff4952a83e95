import { ErrorCode, McpError, type CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { isSigilError, Redactor, SigilError } from '@sigil/plugin-api';
import type { Disconnection } from '../../core/http/disconnect.ts';
import { MISSING_CLIENT_CAPABILITY_CODE, UNKNOWN_TOOL } from '../../core/http/mcp-errors.ts';
import {
  CallCancelled,
  isInputRequired,
  type CallObserver,
  type InputRetry,
  type ToolCallOutcome,
} from '../../core/mcp/call-tool.ts';
import type { Logger } from '../../core/log.ts';
import { pinOf, type ServerLaunch } from './launcher.ts';
import type { ResolvedServer, ServerDetails, ServerDirectory } from './servers.ts';
import type { Payments } from './payments/payments.ts';
import { PAYMENT_META_KEY, PAYMENT_RESPONSE_META_KEY } from './payments/receipts.ts';
import { PROOF_META_KEY, type ProofSigner } from './proofs.ts';
import { capabilityRequired, inputNotRelayed, relayInputRequired } from './input-required.ts';
import type { RequestStates } from './request-state.ts';
import type { CallerLimits, CallOrigin } from './call-limits.ts';
import type { RunningServer, ServerPool } from './server-pool.ts';
import { checkArguments, checkPayloadSize } from './tool-arguments.ts';
import { cleanResult, cleanValue, MAX_RESULT_DEPTH, TOO_DEEP, toolError } from './tool-results.ts';

/** Separates server id and tool name in namespaced tool names; server ids cannot contain it. */
export const NAMESPACE_SEPARATOR = '__';

/** The reason of a call to a tool that runs only as an MCP task (not served: see ServerDetails). */
export const TASK_REQUIRED = 'task_required';

export interface ToolCall {
  serverId: string;
  /**
   * The server `serverId` names, when this request has already admitted it (POST /mcp/server/:id
   * admits its server before the request is read): the call does not ask again.
   */
  admitted?: ResolvedServer;
  tool: string;
  arguments: Record<string, unknown>;
  /** The caller's wallet, or undefined when anonymous. */
  wallet: string | undefined;
  /** Client-supplied call metadata (MCP `params._meta`; REST maps PAYMENT-SIGNATURE into it): payments ride here. */
  meta: Record<string, unknown> | undefined;
  /** The request it came in on: tells anonymous callers apart for their limit of calls in flight. */
  origin?: CallOrigin;
  /** Hears the server's progress and log messages while the call runs (an MCP client's event stream). */
  observer?: CallObserver;
  /**
   * The URL of what is paid for, as x402 names it: the REST route under the gateway's public URL;
   * absent for MCP, whose x402 transport names a tool `mcp://tool/<name>`.
   */
  resourceUrl?: string;
  /**
   * The MCP 2026-07-28 client the call came from: what a modern server is told of it (its
   * capabilities and log level), and the only caller a server's `input_required` is relayed to. Any
   * other caller is told of no capability, and gets a tool error naming what the server asked.
   */
  modernClient?: { clientCapabilities: Record<string, unknown>; logLevel?: string };
  /** That client's retry of a call answered `input_required`: its answers, and the state it was given. */
  retry?: InputRetry;
}

export interface ToolCallerOptions {
  /** Decides whether the server may run (once per call), and proves refusals. */
  servers: ServerDirectory;
  pool: ServerPool<ServerLaunch>;
  /** Absent: calls are free. Present: each call is paid, settled only when it succeeds. */
  payments: Payments | undefined;
  /** Signs the proof every tool result carries. */
  proofs: () => Promise<ProofSigner>;
  /** Calls in flight per caller. */
  limits: CallerLimits;
  /** Seals the state of a relayed `input_required`, and opens it on the retry. */
  requestStates: RequestStates;
  logger: Logger;
}

interface Execution {
  result: ToolCallOutcome;
  injected: RunningServer['injected'];
}

/** How a call ran: its answer, whether it succeeded (is settled), and whether it awaits input (is not). */
interface Run {
  value: ToolCallOutcome;
  succeeded: boolean;
  unfinished?: boolean;
}

export { toolError };

/** The one execution path of a tool call, shared by MCP and REST. */
export class ToolCaller {
  constructor(private readonly options: ToolCallerOptions) {}

  /**
   * `disconnection`: the caller's client going away cancels the call (the server is told). Only a
   * call from a 2026-07-28 client (`modernClient`) may be answered `input_required`: the server needs
   * the client's input first; nothing was proven or charged, and the payment (if any) may be
   * presented again with the retry. Only such a call throws `capability_required` when the server
   * needs a capability the client did not declare (its -32021): nothing ran, was proven or charged.
   */
  call(call: ToolCall & { modernClient?: undefined }, disconnection?: Disconnection): Promise<CallToolResult>;
  call(call: ToolCall, disconnection?: Disconnection): Promise<ToolCallOutcome>;
  async call(call: ToolCall, disconnection?: Disconnection): Promise<ToolCallOutcome> {
    // Before anything runs or is paid: what the proof could not commit to after the tool ran.
    checkArguments(call.arguments);
    const inputResponses = inputResponsesOf(call);
    if (inputResponses !== undefined) checkArguments(inputResponses, 'inputResponses');
    checkPayloadSize(call.arguments, call.meta);
    const server = call.admitted ?? (await this.options.servers.admit(call.serverId));
    const { details } = server;
    if (details.taskOnlyTools.includes(call.tool)) {
      throw new SigilError(
        'invalid_request',
        `Tool "${call.tool}" of "${call.serverId}" runs only as an MCP task, which this gateway does not support`,
        { details: { reason: TASK_REQUIRED, serverId: call.serverId, tool: call.tool } },
      );
    }
    if (!details.tools.some((tool) => tool.name === call.tool)) {
      const held = details.quarantinedTools.find((tool) => tool.name === call.tool);
      throw held
        ? new SigilError(
            'forbidden',
            `Tool "${call.tool}" of "${call.serverId}" is quarantined: ${held.reason}`,
            {
              hint: 'An operator must approve the changed definition before it is served',
            },
          )
        : new SigilError('not_found', `MCP server "${call.serverId}" has no tool "${call.tool}"`, {
            hint: `GET /api/servers/${call.serverId}/tools lists its tools`,
            details: { reason: UNKNOWN_TOOL, serverId: call.serverId, tool: call.tool },
          });
    }
    // Before anything runs or is paid: a retry's state is the gateway's, for this call (else -32602).
    const retry = await this.retryOf(call);
    // The key is ready before the tool runs: a key error afterwards would make a side effect unpaid.
    const signer = await this.options.proofs();
    const { payments } = this.options;
    if (!payments) return (await this.run(call, server, signer, disconnection, retry)).value;
    const resource = {
      url: call.resourceUrl ?? `mcp://tool/${call.serverId}${NAMESPACE_SEPARATOR}${call.tool}`,
      description: `Tool "${call.tool}" of MCP server "${call.serverId}"`,
    };
    const { value, receipt } = await payments.run(call.meta?.[PAYMENT_META_KEY], resource, call.wallet, () =>
      this.run(call, server, signer, disconnection, retry),
    );
    return receipt && !isInputRequired(value)
      ? { ...value, _meta: { ...value._meta, [PAYMENT_RESPONSE_META_KEY]: receipt } }
      : value;
  }

  /** A 2026-07-28 client's retry, with the server's own state opened from the one the gateway gave. */
  private async retryOf(call: ToolCall): Promise<InputRetry | undefined> {
    const { retry, modernClient } = call;
    if (!retry || !modernClient) return undefined;
    const requestState =
      retry.requestState === undefined
        ? undefined
        : await this.options.requestStates.open(
            { serverId: call.serverId, tool: call.tool, wallet: call.wallet },
            retry.requestState,
          );
    return {
      ...(retry.inputResponses !== undefined && { inputResponses: retry.inputResponses }),
      ...(requestState !== undefined && { requestState }),
    };
  }

  /**
   * Executes the call and proves its result. Proving cannot fail once the tool has run (the key is
   * ready, the arguments were checked, the result is cleaned), so a delivered result is settled.
   */
  private async run(
    call: ToolCall,
    server: ResolvedServer,
    signer: ProofSigner,
    disconnection: Disconnection | undefined,
    retry: InputRetry | undefined,
  ): Promise<Run> {
    const outcome = await this.execute(call, server, disconnection, retry);
    let answer = outcome.result;
    if (isInputRequired(answer)) {
      // Not a result: nothing to prove or settle until the call completes.
      const relayed = call.modernClient
        ? await relayInputRequired(call, answer, outcome.injected.redactor, this.options.requestStates)
        : inputNotRelayed(call.tool, answer);
      if (isInputRequired(relayed)) return { value: relayed, succeeded: false, unfinished: true };
      answer = relayed;
    }
    // Whatever the server says (an echo of its environment, an error quoting it), its secrets stay in.
    const cleaned = cleanResult(answer, outcome.injected.redactor);
    const result =
      cleaned === TOO_DEEP
        ? toolError(`Tool "${call.tool}" answered a result nested deeper than ${MAX_RESULT_DEPTH} levels`)
        : cleaned;
    return {
      value: proven(signer, server.details, call, result, outcome.injected.names),
      succeeded: result.isError !== true,
    };
  }

  /**
   * A refusal of `call` by the gateway (a blocked or unrunnable server, a quarantined tool, a missing
   * secret), as the tool error the caller receives, with a signed proof: every answer to a tools/call
   * carries one (gateway spec part 6). Its response hash commits to the refusal; it names no injected
   * secret, since no process of the caller ran the tool.
   */
  async refused(call: ToolCall, refusal: CallToolResult): Promise<CallToolResult> {
    const [signer, details] = await Promise.all([
      this.options.proofs(),
      this.options.servers.describe(call.serverId),
    ]);
    return proven(signer, details, call, refusal, []);
  }

  /**
   * Runs the call on a process of the caller's, within the caller's limit of calls in flight (429
   * beyond it) and the server's time limit. Anonymous callers cannot be told apart, so they share a
   * process only where the catalog declares the server stateless; elsewhere each anonymous call gets a
   * fresh process, stopped after it. A call that runs until its time limit is not charged: it failed,
   * and the gateway spec settles no failed call (part 7). What bounds the processes a caller can hold
   * for nothing is its limit of calls in flight, not a price.
   */
  private async execute(
    call: ToolCall,
    { entry, details, settings }: ResolvedServer,
    disconnection: Disconnection | undefined,
    retry: InputRetry | undefined,
  ): Promise<Execution> {
    const caller = this.options.limits.admit(call.wallet, call.origin);
    const key = {
      serverId: call.serverId,
      wallet: call.wallet ?? 'anonymous',
      entry,
      pin: pinOf(details),
      protocol: details.protocol ?? undefined,
    };
    let injected: RunningServer['injected'] = { names: [], redactor: Redactor.none };
    try {
      return await this.options.pool.use(
        key,
        async (server) => {
          injected = server.injected;
          try {
            const result = await server.callTool(call.tool, call.arguments, {
              timeoutMs: settings.timeoutMs,
              ...(disconnection ? { disconnection } : {}),
              ...(call.observer ? redacting(call.observer, server.injected.redactor) : {}),
              ...(call.modernClient ? { caller: call.modernClient } : {}),
              ...(retry ? { retry } : {}),
            });
            return { result, injected };
          } catch (err) {
            // Stopped before this call stops counting on it, so no call joins it meanwhile; its slot
            // is free at once, and it ends in the background.
            if (wedged(err)) void this.options.pool.discard(key, server);
            if (call.modernClient && server.protocol.era === 'modern' && missesCapability(err)) {
              // The request's failure, not the tool's, and a 2026-07-28 client can mend it: it hears
              // the server's error, and (thrown) nothing is proven or settled. Any other caller
              // declares no capability: a tool error tells its model what the tool needs.
              throw capabilityRequired(call, err, server.injected.redactor);
            }
            throw err;
          }
        },
        call.wallet === undefined && !settings.stateless,
      );
    } catch (err) {
      if (isSigilError(err)) throw err;
      if (err instanceof CallCancelled) {
        // Nobody waits for this answer; the server is fine. An error result: nothing is settled.
        return { injected, result: toolError(`Tool "${call.tool}" was cancelled: ${err.message}`) };
      }
      if (!wedged(err)) {
        // The server answered with a JSON-RPC error: it is alive, and its message is the tool's error.
        return { injected, result: toolError(`Tool "${call.tool}" failed: ${(err as Error).message}`) };
      }
      const timedOut = err instanceof McpError && err.code === ErrorCode.RequestTimeout;
      this.options.logger.warn({ serverId: call.serverId, tool: call.tool, timedOut }, 'tool call failed');
      return {
        injected,
        result: toolError(
          timedOut
            ? `Tool "${call.tool}" timed out after ${settings.timeoutMs} ms; the server was stopped`
            : `Tool "${call.tool}" failed: the MCP server ended or broke the protocol`,
        ),
      };
    } finally {
      this.options.limits.release(caller);
    }
  }
}

/** What a server reports while a call runs reaches the caller as its results do: its secrets redacted. */
function redacting({ onProgress, onLog }: CallObserver, redactor: Redactor): CallObserver {
  const cleaned =
    <T>(hear: (value: T) => void) =>
    (value: T) => {
      const clean = cleanValue(value, redactor);
      if (clean !== TOO_DEEP) hear(clean);
    };
  return {
    ...(onProgress && { onProgress: cleaned(onProgress) }),
    ...(onLog && { onLog: cleaned(onLog) }),
  };
}

/** `result` with its execution proof in `_meta`. */
function proven(
  signer: ProofSigner,
  details: ServerDetails,
  call: ToolCall,
  result: CallToolResult,
  secretNames: readonly string[],
): CallToolResult {
  const inputResponses = inputResponsesOf(call);
  const proof = signer.sign({
    server: {
      id: details.id,
      package: details.package,
      version: details.version ?? '',
      registry: details.registry,
      digest: details.digest ?? '',
    },
    tool: call.tool,
    arguments: call.arguments,
    ...(inputResponses !== undefined && { inputResponses }),
    result,
    secretNames,
  });
  return { ...result, _meta: { ...result._meta, [PROOF_META_KEY]: proof } };
}

/**
 * What a 2026-07-28 client's retry answered the server (only such a client's retry reaches it): the
 * result depends on it, so its proof commits to it.
 */
const inputResponsesOf = ({ modernClient, retry }: ToolCall): Record<string, unknown> | undefined =>
  modernClient ? retry?.inputResponses : undefined;

/** A modern server's answer that the call needs a capability its client did not declare. */
const missesCapability = (err: unknown): err is McpError =>
  err instanceof McpError && err.code === MISSING_CLIENT_CAPABILITY_CODE;

/** A server that timed out or broke the protocol may be wedged: it is never handed another call. */
const wedged = (err: unknown): boolean =>
  !isSigilError(err) &&
  !(err instanceof CallCancelled) &&
  !(
    err instanceof McpError &&
    err.code !== ErrorCode.RequestTimeout &&
    err.code !== ErrorCode.ConnectionClosed
  );

import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Address, Hex } from 'viem';
import type { AuthPrincipal } from '../../../core/auth/index.ts';
import {
  isLlmProviderError,
  isSigilError,
  type LlmFinishReason,
  type LlmMessage,
  type LlmModelInfo,
  type LlmProviderV1,
  type LlmToolCall,
  SigilError,
} from '@sigil/plugin-api';
import { STATUS_BY_CODE } from '../../../core/http/errors.ts';
import type { SseStream } from '../../../core/http/sse.ts';
import { baseLlmCost } from '@sigil/plugin-api/llm';
import type { Logger } from '../../../core/log.ts';
import type { Kernel } from '../../kernel.ts';
import type { Agents } from '../agents.ts';
import { offeredModels, offeredModelsHint } from '../models.ts';
import { type GatewayClient, gatewayScopeOf } from '../gateway-client.ts';
import type { Hold, Holds } from '../ledger/holds.ts';
import { ProviderKeyUnavailable, type ProviderVault } from '../vault/index.ts';
import { type AnswerEvents, type AnswerStream, FIRST_SEQ } from './answer-events.ts';
import { answerLost, followAnswer } from './answer-follow.ts';
import { AnswerLog } from './answer-log.ts';
import { costView, platformCost, type CostBreakdown, type KeyKind } from './cost.ts';
import { type ChatContext, type ChatContextSource, NO_CONTEXT, withContext } from './context.ts';
import type { ConversationStore } from './history.ts';
import { ChatSessions, type ChatSession, type SessionClaim } from './sessions.ts';
import { ToolClients, type ToolLease } from './tool-clients.ts';
import { GatewayToolSession, type ToolOutcome, type ToolPayments } from './tools.ts';

export type ChatSettings = Kernel['config']['runtime']['chat'];

export interface ProviderEntry {
  name: string;
  provider: LlmProviderV1;
  model: LlmModelInfo;
}

/** A chat request ready to stream: its key, prices and estimate were checked before the response. */
export interface PreparedChat {
  session: ChatSession;
  /** The conversation before this message, as stored: the system prompt, then the earlier turns. */
  history: LlmMessage[];
  messageId: string;
  /** The message's id was made by the runtime for this request: no earlier attempt at it exists. */
  fresh: boolean;
  content: string;
  entry: ProviderEntry;
  apiKey: string;
  keyKind: KeyKind;
  /** What the model is told beyond the conversation (learnings, runtime tools), read for this request. */
  context: ChatContext;
  /** The first turn's estimate, reserved on the ledger before the response (README: Chat, "Holds"). */
  estimate: bigint;
  hold: Hold;
  /** The request's claim on its session (one request at a time, across replicas) until it is stored. */
  claim: SessionClaim;
  /** The number of the answer's first stream event (its SSE id; answer-events.ts). */
  firstSeq: number;
}

export interface ChatDeps {
  kernel: Kernel;
  /** Where sessions and their messages are kept. */
  history: ConversationStore;
  /** Where answers' stream events are kept, to resume a stream on any replica. */
  answers: AnswerEvents;
  agents: Agents;
  holds: Holds;
  vault: ProviderVault;
  gateway: GatewayClient;
  logger: Logger;
  /** What each request's model is told of its wallet beyond the conversation (self-improvement). */
  context?: ChatContextSource;
  /** Told of each message answered to its end (self-improvement's after_each schedule); must not throw. */
  onTurnCompleted?: (turn: { wallet: string; agentId: string; sessionId: string }) => void;
}

/** Sessions, the chat loop (model ↔ gateway tools and the runtime's own), and what it charges (README: Chat). */
export class ChatService {
  readonly sessions: ChatSessions;
  readonly settings: ChatSettings;
  /** One MCP client of the gateway per chat session with servers, kept between its messages. */
  readonly toolClients: ToolClients;
  /** How paid tools are paid (the operator wallet), or undefined when this runtime has none. */
  readonly payments: ToolPayments | undefined;
  /** Requests whose stream is still running: the runtime waits for them before its database closes. */
  private readonly running = new Set<Promise<void>>();
  /** Stops, at once, each answer whose client is gone and that waits for a resume (`watchClient`). */
  private readonly detached = new Set<() => void>();
  /** Aborted when the runtime stops: resumed streams end, detached answers stop. */
  private readonly stopping = new AbortController();

  constructor(private readonly options: ChatDeps) {
    const deps = options;
    this.settings = deps.kernel.config.runtime.chat;
    this.toolClients = new ToolClients({
      open: (session, signal) =>
        GatewayToolSession.open({
          gateway: deps.gateway,
          path: this.settings.gatewayPath,
          scope: gatewayScopeOf('chat', session),
          servers: session.servers,
          payments: this.payments,
          signal,
        }),
      idleMs: this.settings.toolClientIdleSeconds * 1000,
      maxClients: this.settings.maxToolClients,
      clock: deps.kernel.clock,
    });
    this.sessions = new ChatSessions(this.settings, deps.history);
    deps.history.onSessionEnded((session) => void this.toolClients.end(session.id));
    const { runtime, ledger } = deps.kernel.config;
    this.payments =
      runtime.operatorKey && ledger.tokenAddress
        ? {
            payerKey: runtime.operatorKey as Hex,
            network: `eip155:${ledger.chainId}`,
            asset: ledger.tokenAddress as Address,
          }
        : undefined;
  }

  deps(): ChatDeps {
    return this.options;
  }

  /** The loaded llm-providers, in the order of `plugins`, by name. */
  private providers(): { name: string; provider: LlmProviderV1 }[] {
    const names = this.options.kernel.plugins
      .list()
      .filter((plugin) => plugin.kind === 'llm-provider')
      .map((plugin) => plugin.name);
    return this.options.kernel.plugins
      .all('llm-provider')
      .map((provider, index) => ({ name: names[index] ?? `llm-provider-${index}`, provider }));
  }

  /** The loaded llm-provider that offers `model` (the first listed in `plugins`), or undefined. */
  async providerFor(model: string): Promise<ProviderEntry | undefined> {
    for (const { name, provider } of this.providers()) {
      const found = (await provider.listModels()).find((m) => m.id === model);
      if (found) return { name, provider, model: found };
    }
    return undefined;
  }

  /**
   * Warns of each model more than one provider offers: chats use the first listed, which an operator
   * who added a provider beside another of the same models (provider-local's, under `sigil up`) would
   * otherwise find out only from a chat answered by the other one. A provider that cannot list its
   * models now is left out (a chat will say why).
   */
  async warnOfSharedModels(): Promise<void> {
    const offeredBy = new Map<string, string[]>();
    for (const { name, provider } of this.providers()) {
      const models = await provider.listModels().catch(() => []);
      for (const model of models) offeredBy.set(model.id, [...(offeredBy.get(model.id) ?? []), name]);
    }
    for (const [model, names] of offeredBy) {
      if (names.length < 2) continue;
      this.options.logger.warn(
        { model, providers: names },
        `chat: model ${model} is offered by ${names.join(', ')}; chats use ${names[0]}, the first of them in plugins`,
      );
    }
  }

  async openSession(
    wallet: string,
    agentId: string,
    input: { servers?: string[] | undefined; system?: string | undefined },
  ): Promise<ChatSession> {
    const agent = await this.options.agents.get(wallet, agentId);
    const entry = await this.providerFor(agent.model);
    if (!entry) {
      // Offered when the agent was created; since removed from the providers' catalogs.
      const offered = await offeredModels(this.options.kernel.plugins);
      throw new SigilError('conflict', `Model ${agent.model} of agent ${agentId} is not offered here`, {
        hint: offeredModelsHint(offered),
        details: { reason: 'model_not_offered', model: agent.model, offered },
      });
    }
    const servers = [...new Set(input.servers ?? [])];
    if (servers.length > this.settings.maxServersPerSession) {
      throw new SigilError(
        'invalid_request',
        `At most ${this.settings.maxServersPerSession} servers a session`,
        {
          details: { reason: 'too_many_servers', limit: this.settings.maxServersPerSession },
        },
      );
    }
    return this.sessions.open({
      agentId,
      wallet,
      model: agent.model,
      provider: entry.name,
      servers,
      system: input.system,
    });
  }

  /**
   * Everything that can refuse a message before the stream opens (each a plain JSON 4xx): the session,
   * one request at a time (its claim taken first: a refusal after it frees the session), the model and
   * the key (the wallet's, else the internal one when allowed), then the hold of the first turn's
   * estimate on the ledger (a 402 when a budget or the balance has no room for it).
   */
  async prepare(
    principal: AuthPrincipal,
    agentId: string,
    sessionId: string,
    body: { content: string; id?: string | undefined },
  ): Promise<PreparedChat> {
    // An id made here is new: no earlier attempt at it can be stored, so none is looked for.
    const fresh = body.id === undefined;
    const messageId = body.id ?? randomUUID();
    const { session, history, claim } = await this.sessions.take(
      principal.address,
      agentId,
      sessionId,
      messageId,
      { fresh },
    );
    try {
      const entry = await this.providerFor(session.model);
      if (!entry)
        throw new SigilError('conflict', `Model ${session.model} is no longer offered here`, {
          details: { reason: 'model_not_offered', model: session.model },
        });
      const { apiKey, keyKind } = await this.keyFor(principal, entry.provider.keySlot);
      const context = this.options.context
        ? await this.options.context(principal.address, body.content)
        : NO_CONTEXT;
      const messages = withContext([...history, { role: 'user', content: body.content }], context);
      const runtimeTools = context.tools.map((tool) => tool.definition);
      const estimate = platformCost(
        keyKind,
        this.turnCost(messages, runtimeTools, entry.model),
        0,
      ).platformCost;
      const held = {
        wallet: principal.address,
        agentId,
        amount: estimate,
        idempotencyKey: chargeKey(session, messageId),
        purpose: 'chat' as const,
      };
      // Where the answer's event numbers start, read beside the hold (at the same time on PostgreSQL).
      const [taken, firstSeq] = await Promise.all([
        this.options.holds.hold(held),
        fresh ? FIRST_SEQ : this.options.answers.nextSeq(session.id, messageId),
      ]);
      let hold = taken;
      if (hold.settleCost !== undefined) {
        // An earlier attempt at this message recorded what it used, then lost its claim on the
        // session (its replica died): that cost is charged now rather than when its hold expires,
        // and this attempt is refused as any message id that charged (409 already_charged).
        await this.options.holds.settle(hold, hold.settleCost);
        hold = await this.options.holds.hold(held);
      }
      return {
        session,
        history,
        messageId,
        fresh,
        content: body.content,
        entry,
        apiKey,
        keyKind,
        context,
        estimate,
        hold,
        claim,
        firstSeq,
      };
    } catch (err) {
      await this.sessions.finish(session, messageId, claim, undefined);
      throw err;
    }
  }

  async keyFor(principal: AuthPrincipal, slot: string): Promise<{ apiKey: string; keyKind: KeyKind }> {
    try {
      return { apiKey: await this.options.vault.providerKey(principal, slot), keyKind: 'byok' };
    } catch (err) {
      const internal = this.options.kernel.config.runtime.providerApiKey;
      if (
        err instanceof ProviderKeyUnavailable &&
        err.reason === 'provider_key_missing' &&
        this.settings.internalKey &&
        internal
      )
        return { apiKey: internal, keyKind: 'internal' };
      throw err;
    }
  }

  /**
   * What one model turn may cost upstream (baseLlmCost) at most: one input token per UTF-8 byte of
   * the messages and tool definitions as JSON (a byte-level BPE tokenizer never makes more tokens than
   * bytes, and the JSON framing covers the chat template's few tokens a message), and
   * `maxOutputTokens` out, at the model's prices.
   */
  turnCost(messages: LlmMessage[], tools: readonly unknown[], model: LlmModelInfo): bigint {
    const bytes =
      Buffer.byteLength(JSON.stringify(messages)) +
      (tools.length ? Buffer.byteLength(JSON.stringify(tools)) : 0);
    return baseLlmCost({ inputTokens: bytes, outputTokens: this.settings.maxOutputTokens }, model);
  }

  /**
   * Before each step (a model turn, a tool call): extends the chat's hold to cover `base` upstream and
   * `toolCalls` calls, or when it already does, refreshes its expiry, so the expiry sweep never
   * releases a running chat's hold however many steps it takes (holdTtlSeconds, less JUST_HELD_MS,
   * need only outlast one). A hold taken or refreshed within JUST_HELD_MS is left as it is: the first
   * model turn's, taken by `prepare` a moment before, costs no statement.
   */
  private async reserve(chat: PreparedChat, base: bigint, toolCalls: number): Promise<void> {
    const needed = platformCost(chat.keyKind, base, toolCalls).platformCost;
    chat.hold =
      needed > chat.hold.amount
        ? await this.options.holds.extend(chat.hold, needed)
        : await this.options.holds.keep(chat.hold, JUST_HELD_MS);
  }

  /**
   * After a billed step (a model turn that used something, a tool call the gateway ran): the cost so
   * far, recorded on the hold, so that if this process dies before it settles, the expiry sweep
   * charges it instead of releasing the hold (Holds.recordCostSoFar); the settlement replaces it.
   */
  private async recordSpent(chat: PreparedChat, base: bigint, billed: number): Promise<void> {
    const cost = platformCost(chat.keyKind, base, billed).platformCost;
    if (cost !== chat.hold.settleCost) chat.hold = await this.options.holds.recordSpent(chat.hold, cost);
  }

  /** While a model turn streams: refreshes the hold once half its TTL has passed (a long stream). */
  private async keepHeld(chat: PreparedChat): Promise<void> {
    chat.hold = await this.options.holds.keep(chat.hold);
  }

  /**
   * Runs the loop and streams it: model turns (each given the request's context), the gateway's tools
   * and the context's runtime tools (free), until the model stops or
   * `maxSteps` turns. Before each turn and each batch of tool calls the hold is extended to cover them
   * (a refusal ends the loop with a payment_required error), and its expiry refreshed before each turn,
   * each tool call and during a long stream; after each billed step the cost so far is recorded on
   * it. Whatever happens (an error, the client gone, the session's claim lost), the hold is settled to
   * what was used, charged once under `chat:<sessionId>:<messageId>`: the model's turns and the tool
   * calls the gateway ran (ToolOutcome.billed), never a call refused before it ran.
   *
   * Every event is stored as it is sent (AnswerLog), so the stream resumes on any replica (`resume`);
   * when its client goes, the answer goes on for a resume (`watchClient`).
   */
  run(principal: AuthPrincipal, chat: PreparedChat, sse: SseStream): Promise<void> {
    const log = new AnswerLog({
      store: this.options.answers,
      answer: {
        id: chat.claim.id,
        sessionId: chat.session.id,
        messageId: chat.messageId,
        firstSeq: chat.firstSeq,
      },
      cipher: this.options.history.cipherOf(chat.session),
      sse,
      logger: this.options.logger,
    });
    const stop = new AbortController();
    const unwatch = this.watchClient(chat.claim.id, sse, log, stop);
    return this.track(
      this.converse(principal, chat, log, stop.signal).finally(unwatch),
      chat.session.id,
      'chat: the request failed after its stream',
    );
  }

  /**
   * Everything that can refuse a resumed stream before it opens: the session (another wallet's is a
   * 404), then the attempt at `messageId` that the event number `after` belongs to (the latest with 0),
   * while its events are kept. Answers the stream: its stored events after `after`, then the new ones
   * until its end (answer-follow.ts), on this replica or any other.
   */
  async resume(
    wallet: string,
    agentId: string,
    sessionId: string,
    messageId: string,
    after: number,
  ): Promise<(sse: SseStream) => Promise<void>> {
    const session = await this.sessions.get(wallet, agentId, sessionId);
    const answer = await this.storedStream(session, messageId, after);
    if (!answer)
      throw new SigilError('not_found', `No stored stream of message ${messageId} in this session`, {
        hint: `A stream is kept ${this.settings.streamRetentionSeconds} s after its answer ended; a stored answer stays readable in GET /agents/${agentId}/sessions/${sessionId}/messages`,
        details: { reason: 'stream_not_found' },
      });
    const cipher = this.options.history.cipherOf(session);
    return async (sse) => {
      const following = followAnswer({
        store: this.options.answers,
        answer,
        cipher,
        after,
        sse,
        graceMs: this.settings.resumeGraceSeconds * 1000,
        claimMs: this.options.history.claimMs,
        closing: this.stopping.signal,
      }).then((outcome) => {
        if (outcome === 'lost') sse.send('error', errorEvent(answerLost()));
      });
      await this.track(
        following.finally(() => sse.close()),
        session.id,
        'chat: a resumed stream failed',
      );
    };
  }

  /**
   * The stored attempt at `messageId` of `after` (answer-events.ts `find`). An answer is recorded with
   * its first write (within 50 ms of its first event, or when its client goes): while the session is
   * answering and none is stored yet, it is looked for again, for up to RECORDING_WAIT_MS.
   */
  private async storedStream(
    session: ChatSession,
    messageId: string,
    after: number,
  ): Promise<AnswerStream | undefined> {
    const deadline = performance.now() + RECORDING_WAIT_MS;
    for (;;) {
      const answer = await this.options.answers.find(session.id, messageId, after);
      if (answer || performance.now() > deadline || !(await this.sessions.isBusy(session))) return answer;
      await sleep(RECORDING_POLL_MS);
    }
  }

  /** The runtime stops: resumed streams end now (their clients resume elsewhere); detached answers stop. */
  closing(): void {
    this.stopping.abort(runtimeStopping());
    for (const stop of this.detached) stop();
  }

  /** Waits for every running request; an answer whose client is gone stops at once (as at shutdown). */
  async drain(): Promise<void> {
    this.closing();
    await Promise.all([...this.running]);
  }

  /** Keeps `work` among the running requests until it ends; it runs on after its HTTP handler returned, so nothing escapes it. */
  private track(work: Promise<void>, sessionId: string, failure: string): Promise<void> {
    const running = work.catch((err: unknown) => this.options.logger.error({ err, sessionId }, failure));
    this.running.add(running);
    void running.finally(() => this.running.delete(running));
    return running;
  }

  /**
   * When the answer's client goes, the answer goes on for `resumeGraceSeconds` and then as long as a
   * resumed stream follows it (on any replica: `followed_until`), then `stop` aborts (answer_abandoned).
   * With no grace, or when the runtime stops, it aborts at once. Answers the unwatching.
   */
  private watchClient(answerId: string, sse: SseStream, log: AnswerLog, stop: AbortController): () => void {
    const graceMs = this.settings.resumeGraceSeconds * 1000;
    let timer: NodeJS.Timeout | undefined;
    const stopNow = () => stop.abort(this.stopping.signal.aborted ? runtimeStopping() : abandoned(graceMs));
    const check = () =>
      void this.options.answers
        .followedFor(answerId)
        .then((remaining) => (remaining > 0 ? (timer = setTimeout(check, remaining)) : stopNow()), stopNow);
    const gone = () => {
      if (graceMs === 0 || this.stopping.signal.aborted) return stopNow();
      log.detach();
      this.detached.add(stopNow);
      timer = setTimeout(check, graceMs);
    };
    sse.signal.addEventListener('abort', gone, { once: true });
    return () => {
      clearTimeout(timer);
      this.detached.delete(stopNow);
      sse.signal.removeEventListener('abort', gone);
    };
  }

  private async converse(
    principal: AuthPrincipal,
    chat: PreparedChat,
    log: AnswerLog,
    stopped: AbortSignal,
  ): Promise<void> {
    const { session, entry } = chat;
    // The answer stops when it was abandoned (its client gone, none resumed it), or lost its claim.
    const signal = AbortSignal.any([stopped, chat.claim.signal]);
    const messages: LlmMessage[] = [...chat.history, { role: 'user', content: chat.content }];
    let base = 0n;
    /** Calls the model made, and of them those the gateway ran (what is charged). */
    let toolCalls = 0;
    let billed = 0;
    let steps = 0;
    let finish: LlmFinishReason | 'max-steps' = 'stop';
    let completed = false;
    let lease: ToolLease | undefined;
    /** False once a gateway request failed under the session's client: it is closed, not kept. */
    let healthy = true;
    try {
      if (chat.context.used) log.send('context', chat.context.used);
      if (session.servers.length > 0) lease = await this.toolClients.lease(session, signal);
      const tools = lease?.tools;
      const runtimeTools = new Map(chat.context.tools.map((tool) => [tool.definition.name, tool]));
      for (;;) {
        if (steps >= this.settings.maxSteps) {
          finish = 'max-steps';
          break;
        }
        steps++;
        let text = '';
        const calls: LlmToolCall[] = [];
        const definitions = [
          ...(tools?.definitions() ?? []),
          ...chat.context.tools.map((tool) => tool.definition),
        ];
        const input = withContext(messages, chat.context);
        await this.reserve(chat, base + this.turnCost(input, definitions, entry.model), billed);
        for await (const part of entry.provider.doStream({
          model: session.model,
          messages: input,
          ...(definitions.length ? { tools: definitions } : {}),
          maxOutputTokens: this.settings.maxOutputTokens,
          apiKey: chat.apiKey,
          signal,
        })) {
          await this.keepHeld(chat);
          await log.room(signal);
          switch (part.type) {
            case 'text-delta':
              text += part.text;
              log.send('text-delta', { step: steps, text: part.text });
              break;
            case 'tool-call':
              calls.push({ id: part.id, name: part.name, input: part.input });
              log.send('tool-call', { step: steps, id: part.id, name: part.name, input: part.input });
              break;
            case 'usage': {
              const cost = baseLlmCost(part, entry.model);
              base += cost;
              log.send('usage', {
                step: steps,
                inputTokens: part.inputTokens,
                outputTokens: part.outputTokens,
                estimated: part.estimated === true,
                baseLlmCost: cost.toString(),
              });
              break;
            }
            case 'finish':
              finish = part.reason;
              break;
          }
        }
        if (base > 0n) await this.recordSpent(chat, base, billed);
        messages.push({ role: 'assistant', content: text, ...(calls.length ? { toolCalls: calls } : {}) });
        if (finish !== 'tool-calls' || calls.length === 0) break;
        if (calls.length > this.settings.maxToolCallsPerTurn) {
          throw new SigilError(
            'invalid_request',
            `The model called ${calls.length} tools in one turn; at most ${this.settings.maxToolCallsPerTurn} are run`,
            { details: { reason: 'too_many_tool_calls', limit: this.settings.maxToolCallsPerTurn } },
          );
        }
        for (const [index, call] of calls.entries()) {
          // Room for the calls billed so far and every call of the batch still to run.
          await this.reserve(chat, base, billed + calls.length - index);
          toolCalls++;
          const runtimeTool = runtimeTools.get(call.name);
          const outcome: ToolOutcome = runtimeTool
            ? { ...(await runtimeTool.call(call.input)), billed: false }
            : tools
              ? await tools.call(call.name, call.input, signal).catch((err: unknown) => {
                  healthy = false;
                  return {
                    content: `the gateway failed: ${(err as Error).message}`,
                    isError: true,
                    billed: false,
                  };
                })
              : {
                  content: `No tool ${call.name}: this session has no gateway servers`,
                  isError: true,
                  billed: false,
                };
          if (outcome.billed) {
            billed++;
            await this.recordSpent(chat, base, billed);
          }
          signal.throwIfAborted();
          log.send('tool-result', { step: steps, id: call.id, name: call.name, ...outcome });
          messages.push({
            role: 'tool',
            toolCallId: call.id,
            content: outcome.content,
            ...(outcome.isError ? { isError: true } : {}),
          });
        }
      }
      completed = true;
    } catch (thrown) {
      // Whatever the loop threw once it was stopped (an aborted call), the stop is the cause.
      const cause = [chat.claim.signal, stopped].find((stop) => stop.aborted);
      const err: unknown = cause ? cause.reason : thrown;
      log.send('error', errorEvent(err));
      // A refusal (a 4xx code) or a provider's failure is the caller's to read; anything else, the operator's.
      const refusal = isLlmProviderError(err) || (isSigilError(err) && STATUS_BY_CODE[err.code] < 500);
      if (!stopped.aborted && !refusal)
        this.options.logger.warn({ err, sessionId: session.id }, 'chat: the request failed');
    } finally {
      await lease?.release(healthy && !signal.aborted);
      const cost = platformCost(chat.keyKind, base, billed);
      const charge = await this.settle(chat, cost);
      const costEvent = {
        event: 'cost',
        data: {
          ...costView(cost),
          estimate: chat.estimate.toString(),
          charged: charge.charged,
          ...(charge.uncharged ? { uncharged: charge.uncharged } : {}),
          ...(charge.entryId ? { entryId: charge.entryId } : {}),
          ...(charge.error ? { error: charge.error } : {}),
        },
      };
      const done = {
        event: 'done',
        data: { messageId: chat.messageId, sessionId: session.id, finishReason: finish, steps, toolCalls },
      };
      // A completed answer's `cost` and `done` are stored with it (one transaction), then sent: once a
      // client has `done`, a resume replays every event.
      // An answer that did not complete frees its session and stores nothing (stored: undefined).
      const stored = completed
        ? await this.store(chat, messages, cost.platformCost, log, [costEvent, done])
        : await this.sessions.finish(session, chat.messageId, chat.claim, undefined);
      if (stored === true)
        this.options.onTurnCompleted?.({
          wallet: principal.address,
          agentId: session.agentId,
          sessionId: session.id,
        });
      else {
        if (stored) log.send('error', stored);
        log.send(costEvent.event, costEvent.data);
        // Stored with every event before it: the stream's end, without `done`.
        await log.end();
      }
    }
  }

  /**
   * Frees the session, storing what the completed request added to its conversation (from its user
   * message on) with its cost, and the answer's last events (`last`: its end) in the same
   * transaction, then sends them. A store that fails is told as the `error` event in place of `done`:
   * the answer was charged but is not in the history, and a retry of the id is refused as charged.
   */
  private async store(
    chat: PreparedChat,
    messages: LlmMessage[],
    cost: bigint,
    log: AnswerLog,
    last: readonly { event: string; data: unknown }[],
  ): Promise<true | ReturnType<typeof errorEvent>> {
    const { session, messageId } = chat;
    try {
      await log.endWith(last, (storeEvents) =>
        this.sessions.finish(session, messageId, chat.claim, {
          added: messages.slice(chat.history.length),
          cost,
          fresh: chat.fresh,
          alsoWrite: storeEvents,
        }),
      );
      return true;
    } catch (err) {
      this.options.logger.error(
        { err, sessionId: session.id, messageId },
        'chat: storing the answered message failed',
      );
      return errorEvent(err);
    }
  }

  /**
   * Settles the hold to the request's cost (Holds.settleOrRecord: tried again on a database fault,
   * else left on the hold for the expiry sweep to charge, so the work is never served free).
   */
  private async settle(
    chat: PreparedChat,
    cost: CostBreakdown,
  ): Promise<{
    charged: string;
    uncharged?: string;
    entryId?: string;
    error?: ReturnType<typeof errorEvent>;
  }> {
    const settled = await this.options.holds.settleOrRecord(chat.hold, cost.platformCost, {
      sessionId: chat.session.id,
      messageId: chat.messageId,
    });
    if (!('settlement' in settled)) return { charged: '0', error: errorEvent(settled.failure) };
    const { settlement } = settled;
    return {
      charged: settlement.charged.toString(),
      ...(settlement.uncharged > 0n ? { uncharged: settlement.uncharged.toString() } : {}),
      ...(settlement.entry ? { entryId: settlement.entry.id } : {}),
    };
  }
}

/** A hold refreshed this recently is not refreshed again before a step (`reserve`). */
const JUST_HELD_MS = 250;

/** How long a resume waits for a running answer to be recorded, looking every RECORDING_POLL_MS. */
const RECORDING_WAIT_MS = 2000;
const RECORDING_POLL_MS = 20;

/** An answer stopped because its client went and no client resumed it within the grace. */
const abandoned = (graceMs: number): SigilError =>
  new SigilError(
    'conflict',
    `This answer stopped: its stream was cut and no client resumed it within ${graceMs / 1000} s`,
    {
      hint: 'What it used is charged under its message id; send the message again with a new id',
      details: { reason: 'answer_abandoned' },
    },
  );

/** An answer stopped because its runtime is shutting down (its client was gone). */
const runtimeStopping = (): SigilError =>
  new SigilError('unavailable', 'This answer stopped: the runtime answering it is shutting down', {
    hint: 'What it used is charged under its message id; send the message again with a new id',
    details: { reason: 'runtime_stopping' },
  });

/** The ledger key of a message's hold and charge: one charge per message id of a session. */
const chargeKey = (session: ChatSession, messageId: string): string => `chat:${session.id}:${messageId}`;

/** The `error` event's payload: code, message, hint, and for provider failures kind and retryable. */
export function errorEvent(err: unknown): Record<string, unknown> {
  if (isLlmProviderError(err))
    return {
      code: 'provider_error',
      kind: err.kind,
      retryable: err.retryable,
      message: err.message,
      ...(err.retryAfterMs === undefined ? {} : { retryAfterMs: err.retryAfterMs }),
    };
  if (isSigilError(err))
    return {
      code: err.code,
      message: err.message,
      ...(err.hint ? { hint: err.hint } : {}),
      ...(err.details ? { details: err.details } : {}),
    };
  return { code: 'internal', message: 'The chat failed; the operator finds the cause in the logs' };
}

import Router from '@koa/router';
import type { DelegationKeys } from '../../core/auth/delegation/keys.ts';
import type { RuntimeSource } from '../../core/auth/delegation/source.ts';
import { publicBase } from '../../core/auth/settings.ts';
import { createHttpApp, type HttpApp } from '../../core/http/app.ts';
import { jobLeases, type Kernel } from '../kernel.ts';
import { runtimeAuth } from './auth.ts';
import { HEALTH_PATH, healthRouter } from '../shared/health.ts';
import { attestedRuntime } from './delegation/attestation.ts';
import { attestationReport, attestationRouter } from '../shared/attestation.ts';
import { delegationKeysFrom } from './delegation/keys.ts';
import { delegationRouter } from './delegation/routes.ts';
import { CanvasService } from './canvas/service.ts';
import { canvasRouter } from './canvas/routes.ts';
import { AnswerEvents } from './chat/answer-events.ts';
import { ChatService } from './chat/chat.ts';
import { ConversationStore } from './chat/history.ts';
import { HistoryKeys } from './chat/history-keys.ts';
import { chatRouter } from './chat/routes.ts';
import { runtimeOpenApi } from './openapi.ts';
import { GatewayClient } from './gateway-client.ts';
import { createLedgerService, type LedgerService } from './ledger/service.ts';
import { createProviderVault, type ProviderVault } from './vault/index.ts';
import type { ReflectPipeline } from './reflect/pipeline.ts';
import { reflectChatContext } from './reflect/chat-context.ts';
import { composeReflect } from './reflect/compose.ts';
import type { ReflectMemory } from './reflect/memory.ts';
import { reflectMemoryRouter } from './reflect/memory-routes.ts';
import { reflectRouter } from './reflect/routes.ts';
import { ReflectService } from './reflect/service.ts';

export interface RuntimeApp extends HttpApp {
  /** Agents and the wallet ledger (what the chat charges). */
  ledger: LedgerService;
  /** The BYOK vault: `vault.providerKey(session, slot)` gives the chat a wallet's key. */
  vault: ProviderVault;
  /** The delegated path's signing keys (and JWKS). */
  delegation: DelegationKeys;
  /** This runtime's keys and attestation, read directly by a gateway the same process serves. */
  inProcess: RuntimeSource;
  /** The runtime as an MCP client of the gateway: operator (ERC-8128) and delegated (JWT) transports. */
  gateway: GatewayClient;
  /** Chat sessions and the chat loop. */
  chat: ChatService;
  /** Stored chat sessions and messages: what the chat reads and writes, and the pipeline learns from. */
  history: ConversationStore;
  /** Canvas workflows and their runs. */
  canvas: CanvasService;
  /** Self-improvement: wallet settings, the schedules, runs of the pipeline. */
  reflect: ReflectService;
  /** What self-improvement learned per wallet (facets, learnings, skills): what chats get in context. */
  memory: ReflectMemory;
  /** Recovers unfinished transfers, then starts the ledger's background work. */
  start(): Promise<void>;
  /**
   * Shutdown begins (before in-flight requests are waited for): what can end at once does, so it
   * does not hold the server for its grace: open canvas event streams end with a `shutdown` event,
   * resumed chat streams end (their clients resume them elsewhere). A chat answering goes on, to
   * finish within the grace.
   */
  closing(): void;
  close(): Promise<void>;
}

export interface RuntimeAppOptions {
  /** Where the runtime reaches the gateway; its public URL (`gateway.publicUrl`) by default. */
  gatewayUrl?: string;
  /** What self-improvement runs (facets, learnings, skills); tests give their own. */
  reflectPipeline?: ReflectPipeline;
}

/** What the runtime tells about its own protection, shown on `/health` as `securityPosture`. */
async function securityPosture(
  kernel: Kernel,
  vault: ProviderVault,
  delegation: DelegationKeys,
): Promise<Record<string, unknown>> {
  const tee = await kernel.plugins.one('tee-backend').status();
  return {
    mode: kernel.config.mode,
    tee: { enabled: tee.teeEnabled, platform: tee.platform, keySource: tee.keySource },
    vaultPersistence: vault.persistence,
    sessionJwt: { alg: 'ES256', ttlSeconds: kernel.config.auth.runtimeJwtTtlSeconds },
    keySources: { mcpSigningKey: delegation.source },
  };
}

/**
 * The keys of what the runtime keeps of conversations (the chat history, the self-improvement memory):
 * `runtime.history.dataKeys`, their values kept out of every log line; in production mode, plain
 * text is said at start-up.
 */
function historyKeys(kernel: Kernel): HistoryKeys {
  const { dataKeys } = kernel.config.runtime.history;
  for (const { key } of dataKeys) kernel.secrets.add(key);
  if (dataKeys.length === 0 && kernel.config.mode === 'production')
    kernel.logger.warn(
      'chat history and self-improvement memory are stored in plain text: set runtime.history.dataKeys (RUNTIME_DATA_KEY=<id>:<32 bytes base64>) to encrypt them at rest',
    );
  return new HistoryKeys(dataKeys);
}

/**
 * The agent runtime: composition of core middleware and the runtime's routers. Asynchronous because
 * the delegated path's key may be the TEE backend's sealed one.
 */
export async function createRuntimeApp(kernel: Kernel, options: RuntimeAppOptions = {}): Promise<RuntimeApp> {
  const { vault, router: vaultRouter } = createProviderVault(kernel);
  const delegation = await delegationKeysFrom(kernel);
  const gatewayUrl = publicBase(kernel.config.gateway);
  kernel.secrets.add(kernel.config.runtime.operatorKey);
  const gateway = new GatewayClient({
    url: options.gatewayUrl ?? kernel.config.runtime.chat.gatewayUrl ?? gatewayUrl,
    publicUrl: gatewayUrl,
    keys: delegation,
    operatorKey: kernel.config.runtime.operatorKey as `0x${string}` | undefined,
    chainId: kernel.config.auth.chainId,
    clock: kernel.clock,
  });
  const health = healthRouter('runtime', kernel, async () => ({
    securityPosture: await securityPosture(kernel, vault, delegation),
  }));
  const attested = attestedRuntime(kernel.plugins.one('tee-backend'), delegation, () =>
    securityPosture(kernel, vault, delegation),
  );
  const inProcess: RuntimeSource = {
    name: 'in-process',
    jwks: () => delegation.jwks(),
    report: async (nonce) => {
      const { evidence, reportData } = await attestationReport(attested, nonce);
      return { evidence: evidence ?? undefined, reportData: Buffer.from(reportData, 'hex') };
    },
  };
  const auth = runtimeAuth(kernel);
  const ledger = await createLedgerService(kernel);
  const keys = historyKeys(kernel);
  const history = new ConversationStore({
    db: kernel.db,
    clock: kernel.clock,
    keys,
    idleMs: kernel.config.runtime.chat.sessionIdleSeconds * 1000,
    replica: kernel.replica,
    claimMs: kernel.config.database.leaseSeconds * 1000,
  });
  const answers = new AnswerEvents({
    ...jobLeases(kernel),
    db: kernel.db,
    clock: kernel.clock,
    replica: kernel.replica,
    logger: kernel.logger.child({ component: 'chat' }),
    retentionMs: kernel.config.runtime.chat.streamRetentionSeconds * 1000,
  });
  const composed = composeReflect({ kernel, history, keys, holds: ledger.holds, vault, chat: () => chat });
  const reflect = new ReflectService({
    db: kernel.db,
    clock: kernel.clock,
    logger: kernel.logger.child({ component: 'self-improvement' }),
    settings: kernel.config.runtime.selfImprovement,
    pipeline: options.reflectPipeline ?? composed.engine,
  });
  vault.onUnlock((session) => void reflect.unlocked(session));
  const chat = new ChatService({
    kernel,
    history,
    answers,
    agents: ledger.agents,
    holds: ledger.holds,
    vault,
    gateway,
    logger: kernel.logger.child({ component: 'chat' }),
    context: reflectChatContext({
      memory: composed.memory,
      settingsOf: (wallet) => reflect.chatSettings(wallet),
      maxLearnings: kernel.config.runtime.selfImprovement.maxLearningsInContext,
      clock: kernel.clock,
      cacheMs: kernel.config.runtime.selfImprovement.contextCacheSeconds * 1000,
    }),
    onTurnCompleted: (turn) => void reflect.chatted(turn.wallet),
  });
  const canvas = new CanvasService({
    kernel,
    chat,
    agents: ledger.agents,
    holds: ledger.holds,
    ledger: ledger.ledger,
    vault,
    gateway,
  });
  const http = createHttpApp({
    service: 'runtime',
    logger: kernel.logger.child({ service: 'runtime' }),
    bodyLimitBytes: kernel.config.runtime.bodyLimitBytes,
    edge: kernel.config.runtime,
    requestSummaryMs: kernel.config.log.requestSummarySeconds * 1000,
    probePaths: [HEALTH_PATH],
    challenge: auth.challenge,
    middleware: [auth.middleware],
    routers: [
      health,
      auth.router,
      delegationRouter(delegation, gatewayUrl),
      attestationRouter(attested, kernel.clock),
      vaultRouter,
      ...ledger.routers,
      chatRouter(chat),
      reflectRouter(reflect),
      reflectMemoryRouter(composed.memory),
      ...(kernel.config.runtime.canvas.enabled ? [canvasRouter(canvas)] : []),
      new Router().get('/openapi.json', (ctx) => {
        ctx.body = runtimeOpenApi(kernel.config.runtime);
      }),
    ],
  });
  return {
    ...http,
    ledger,
    vault,
    delegation,
    inProcess,
    gateway,
    chat,
    history,
    canvas,
    reflect,
    memory: composed.memory,
    start: async () => {
      await auth.assertPublicUrlFits();
      await vault.ready();
      await ledger.start();
      await chat.warnOfSharedModels();
      answers.start();
      if (kernel.config.runtime.canvas.enabled) await canvas.start();
      reflect.start();
    },
    closing: () => {
      canvas.closing();
      chat.closing();
    },
    close: async () => {
      http.stopLogging();
      await canvas.close();
      await chat.drain();
      await answers.stop();
      await reflect.close();
      await chat.toolClients.close();
      await vault.close();
      await ledger.close();
    },
  };
}

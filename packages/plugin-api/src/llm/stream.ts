import { type LlmChatRequest, LlmProviderError, type LlmUsagePart } from '../index.ts';

/**
 * Small pieces every `llm-provider` stream needs, whatever wire it speaks: cancellation that follows
 * the caller's signal, and a usage estimate for upstreams that report none.
 */

export interface UpstreamAbort {
  /** Give this to the SDK call: it aborts with the caller's signal, or when `abort()` is called. */
  signal: AbortSignal;
  /** Cancels the upstream request (e.g. the caller stopped iterating). */
  abort(): void;
  /** Detaches from the caller's signal; call it once the stream is over. */
  release(): void;
}

/** A controller for one upstream request, aborted when the caller's `signal` is. */
export function upstreamAbort(outer: AbortSignal | undefined): UpstreamAbort {
  const controller = new AbortController();
  const onAbort = () => controller.abort(outer?.reason);
  if (outer?.aborted) onAbort();
  else outer?.addEventListener('abort', onAbort, { once: true });
  return {
    signal: controller.signal,
    abort: () => controller.abort(),
    release: () => outer?.removeEventListener('abort', onAbort),
  };
}

/**
 * Runs a provider's stream so that the contract's promises about endings hold whatever the SDK does:
 * the caller's `signal.reason` is thrown when it aborted (SDKs end quietly or throw their own abort
 * error), errors go through `mapError`, and the upstream request is cancelled when iteration ends
 * early. `run` gets the signal to hand to the SDK.
 */
export async function* guardedStream<Part>(
  request: Pick<LlmChatRequest, 'signal'>,
  run: (signal: AbortSignal) => AsyncGenerator<Part, void, undefined>,
  mapError: (err: unknown) => Error,
): AsyncGenerator<Part, void, undefined> {
  request.signal?.throwIfAborted();
  const upstream = upstreamAbort(request.signal);
  let finished = false;
  try {
    for await (const part of run(upstream.signal)) {
      request.signal?.throwIfAborted();
      yield part;
    }
    request.signal?.throwIfAborted();
    finished = true;
  } catch (err) {
    if (request.signal?.aborted) throw request.signal.reason;
    throw err instanceof LlmProviderError ? err : mapError(err);
  } finally {
    if (!finished) upstream.abort();
    upstream.release();
  }
}

/** About 4 characters a token, rounded up: the estimate used when an upstream reports no usage. */
export const estimateTokens = (text: string): number => Math.ceil(text.length / 4);

/** Usage estimated from what was sent and what came back (see `LlmUsagePart.estimated`). */
export function estimatedUsage(
  request: Pick<LlmChatRequest, 'messages' | 'tools'>,
  output: string,
): LlmUsagePart {
  const sent = JSON.stringify({ messages: request.messages, tools: request.tools ?? [] });
  return {
    type: 'usage',
    inputTokens: estimateTokens(sent),
    outputTokens: estimateTokens(output),
    estimated: true,
  };
}

/** Tool arguments as the model wrote them, parsed; an upstream error when they are not a JSON object. */
export function parseToolInput(provider: string, name: string, text: string): Record<string, unknown> {
  if (text.trim() === '') return {};
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    value = undefined;
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw new LlmProviderError(
      'upstream',
      `${provider}: the model called ${name} with arguments that are not a JSON object`,
    );
  return value as Record<string, unknown>;
}

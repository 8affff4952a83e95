import { z } from 'zod';

/**
 * Options every HTTP provider plugin takes, with its own default URL: where the API is, how long a
 * request may take, and how many times the SDK retries before any part came. Retries default to 0:
 * the caller sees `retryable` on the error and decides (a budget, a deadline, a user waiting).
 */
export const connectionOptions = (defaultBaseURL: string) => ({
  baseURL: z
    .url({ protocol: /^https?$/, error: 'an http(s) URL' })
    .default(defaultBaseURL)
    .describe('The API root the SDK appends its paths to'),
  timeoutMs: z
    .number()
    .int()
    .positive()
    .max(3_600_000)
    .default(600_000)
    .describe(
      'Longest wait for the upstream to start answering (response headers); a stream then lasts as long as it streams',
    ),
  maxRetries: z
    .number()
    .int()
    .min(0)
    .max(10)
    .default(0)
    .describe('SDK retries of a request that failed before any part came (429, 5xx, connection errors)'),
});

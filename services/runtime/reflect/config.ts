import { z } from 'zod';

const seconds = (min: number, max: number) => z.number().int().min(min).max(max);

/** The runtime's `selfImprovement` settings: how replicas schedule and run reflect runs (docs/self-improvement.md). */
export const selfImprovementSchema = z
  .object({
    passIntervalSeconds: seconds(1, 3600)
      .default(30)
      .describe(
        "How often each replica looks for due runs (scheduled occurrences, runs to resume or retry) and renews its running runs' leases",
      ),
    afterEachDebounceSeconds: seconds(0, 86_400)
      .default(60)
      .describe(
        'after_each: a run starts this long after the last completed chat message; a further message pushes it back',
      ),
    afterEachMaxDelaySeconds: seconds(0, 7 * 86_400)
      .default(900)
      .describe(
        'after_each: the most a run is pushed back by further messages, counted from the first message it waits for',
      ),
    leaseSeconds: seconds(10, 86_400)
      .default(300)
      .describe(
        'A running run is held this long by its replica, renewed at each pass; not renewed (the replica died), the next pass elsewhere takes it over',
      ),
    maxResumes: z
      .number()
      .int()
      .min(0)
      .max(10)
      .default(2)
      .describe(
        'Times a run whose replica died is resumed by another; the next such death marks it failed (run_abandoned)',
      ),
    lockedRetrySeconds: seconds(10, 7 * 86_400)
      .default(900)
      .describe(
        'A run waiting_for_unlock is tried again this often, and at once when a session of its wallet unlocks the vault here',
      ),
    maxConcurrentRuns: z
      .number()
      .int()
      .min(1)
      .max(64)
      .default(2)
      .describe("Runs one replica works on at once (each wallet's runs one at a time in any case)"),
    model: z
      .string()
      .min(1)
      .max(200)
      .optional()
      .describe("The model of every pipeline call; absent: each session's own model"),
    internalKey: z
      .boolean()
      .default(false)
      .describe(
        "Run on the operator's key (runtime.providerApiKey, priced by the internal formula) when no session has the wallet's vault unlocked; off: such runs wait (waiting_for_unlock)",
      ),
    maxSessionsPerRun: z.number().int().min(1).max(10_000).default(50).describe('Sessions one run reads'),
    maxFacetsPerSynthesis: z
      .number()
      .int()
      .min(1)
      .max(1000)
      .default(200)
      .describe('Facets one synthesis call reads; more wait for the next run'),
    maxTranscriptChars: z
      .number()
      .int()
      .min(1000)
      .max(1_000_000)
      .default(50_000)
      .describe("A session's transcript sent for facets, newest messages kept"),
    maxOutputTokens: z
      .number()
      .int()
      .min(256)
      .max(65_536)
      .default(4096)
      .describe('Output tokens of a pipeline call'),
    contextCacheSeconds: seconds(0, 60)
      .default(5)
      .describe(
        "How long a replica keeps a wallet's settings, learnings and skills for its chats (a change made on another replica shows within it; one made on this replica at once); 0: read for each message",
      ),
    maxLearningsInContext: z
      .number()
      .int()
      .min(0)
      .max(200)
      .default(20)
      .describe(
        "Learnings a chat request's model gets in context: all of them up to this many, beyond it the most relevant to the message",
      ),
  })
  .strict()
  .refine((settings) => settings.leaseSeconds >= 2 * settings.passIntervalSeconds, {
    path: ['leaseSeconds'],
    message: 'must be at least twice passIntervalSeconds: a lease is renewed once a pass',
  })
  .prefault({});

export type SelfImprovementSettings = z.infer<typeof selfImprovementSchema>;

import { z } from 'zod';

const int = (min: number, max: number) => z.number().int().min(min).max(max);

/** The runtime's `canvas` settings: workflows, their runs and limits (docs/canvas.md). */
export const canvasSchema = z
  .object({
    enabled: z.boolean().default(true).describe('Serve /canvas: workflows and their runs'),
    teamMode: z
      .boolean()
      .default(false)
      .describe('Allow team-mode nodes (an orchestrator and its teammates); refused at validation when off'),
    dataDir: z
      .string()
      .min(1)
      .default('data/canvas')
      .describe("Where runs' git workspaces live (one directory per run); relative to the working directory"),
    maxNodes: int(1, 10_000).default(200).describe('Nodes one workflow may have'),
    maxParallelNodes: int(1, 64)
      .default(4)
      .describe('Nodes of one run running at once (independent branches)'),
    maxActiveRuns: int(1, 10_000)
      .default(8)
      .describe('Runs of one wallet not yet ended (running or waiting for approval); more are refused'),
    maxWorkflowsPerWallet: int(1, 100_000).default(200).describe('Saved workflows one wallet may keep'),
    maxDocumentBytes: int(1024, 16 * 1024 * 1024)
      .default(512 * 1024)
      .describe('Largest workflow document'),
    nodeTimeoutSeconds: int(1, 86_400)
      .default(300)
      .describe("A node's timeout unless its own timeoutSeconds says otherwise"),
    maxRetries: int(0, 20).default(5).describe('Highest retries a node may ask for'),
    retryBackoffMs: int(0, 60_000).default(500).describe('Pause before a retry, doubled each attempt'),
    approvalTimeoutSeconds: int(60, 90 * 86_400)
      .default(7 * 86_400)
      .describe('How long a run waits for an approval before it is cancelled'),
    requireSignedApprovals: z
      .boolean()
      .default(false)
      .describe("Accept an approval only with the owner's wallet signature over the run, node and value"),
    maxArtifactBytes: int(1024, 256 * 1024 * 1024)
      .default(16 * 1024 * 1024)
      .describe('Largest run artifact'),
    maxOutputBytes: int(1024, 64 * 1024 * 1024)
      .default(4 * 1024 * 1024)
      .describe("Largest node's outputs, as JSON"),
    replicaPollMs: int(50, 60_000)
      .default(1000)
      .describe(
        'How often a replica reads from the database what another replica did: a cancellation or an approval sent through another replica for a run it executes, and new events of a run another replica executes for a stream it serves',
      ),
  })
  .strict()
  .prefault({});

export type CanvasSettings = z.infer<typeof canvasSchema>;

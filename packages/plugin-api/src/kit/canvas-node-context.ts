import { createHash, randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { initWorkspace } from '../canvas/git.ts';
import { servePreview } from './canvas-preview.ts';
import { SigilError } from '../errors.ts';
import type { CanvasApprovalV2, CanvasArtifactV2, CanvasNodeContextV2, CanvasServicesV2 } from '../index.ts';

/** What a canvas node put through a test context: its log lines and artifacts. */
export interface CanvasTestRecord {
  logs: { message: string; data?: Record<string, unknown> }[];
  artifacts: (CanvasArtifactV2 & { content: Uint8Array })[];
}

export interface CanvasTestContextOptions<Params> {
  params: Params;
  inputs?: Record<string, unknown>;
  approvals?: readonly CanvasApprovalV2[];
  /** The host's services the node may call; those not given reject with `unavailable`. */
  services?: Partial<CanvasServicesV2>;
  signal?: AbortSignal;
  /** An existing workspace; a fresh one (a temporary git repository) by default, removed by `dispose`. */
  workspaceDir?: string;
  /** Serve the workspace read-only on 127.0.0.1 as `workspace.previewUrl` (until `dispose`). */
  servePreview?: boolean;
  runId?: string;
  nodeId?: string;
  attempt?: number;
  idempotencyKey?: string;
}

/**
 * A context as the runtime's executor gives a canvas node, for a node's own tests and the kit: a real
 * git workspace, artifacts and logs kept in memory, and the host services the test provides.
 */
export async function canvasTestContext<Params>(
  options: CanvasTestContextOptions<Params>,
): Promise<{ context: CanvasNodeContextV2<Params>; record: CanvasTestRecord; dispose(): Promise<void> }> {
  const owned = options.workspaceDir === undefined;
  const dir = options.workspaceDir ?? join(await mkdtemp(join(tmpdir(), 'sigil-canvas-')), 'workspace');
  if (owned) await initWorkspace(dir);
  const record: CanvasTestRecord = { logs: [], artifacts: [] };
  const preview = options.servePreview ? await servePreview(dir) : undefined;
  const missing = (name: string) => async () => {
    throw new SigilError('unavailable', `this test context provides no ${name} service`);
  };
  const services: CanvasServicesV2 = {
    llm: missing('llm'),
    callTool: missing('callTool'),
    listTools: missing('listTools'),
    secret: missing('secret'),
    ...options.services,
  };
  const runId = options.runId ?? randomUUID();
  const nodeId = options.nodeId ?? 'node';
  const context: CanvasNodeContextV2<Params> = {
    runId,
    nodeId,
    attempt: options.attempt ?? 1,
    idempotencyKey: options.idempotencyKey ?? `${runId}:${nodeId}`,
    params: options.params,
    inputs: options.inputs ?? {},
    approvals: options.approvals ?? [],
    log: (message, data) => record.logs.push({ message, ...(data ? { data } : {}) }),
    signal: options.signal ?? new AbortController().signal,
    workspace: { dir, ...(preview ? { previewUrl: preview.url } : {}) },
    artifacts: {
      put: async (name, contentType, content) => {
        const artifact = {
          id: randomUUID(),
          name,
          contentType,
          bytes: content.byteLength,
          sha256: createHash('sha256').update(content).digest('hex'),
        };
        record.artifacts.push({ ...artifact, content });
        return artifact;
      },
    },
    services,
  };
  return {
    context,
    record,
    dispose: async () => {
      await preview?.close();
      if (owned) await rm(join(dir, '..'), { recursive: true, force: true });
    },
  };
}

/** An approved decision of an approval node, as the executor passes it downstream. */
export const approvedDecision = (
  nodeId = 'approve',
  decidedBy = '0x0000000000000000000000000000000000000001',
): CanvasApprovalV2 => ({
  nodeId,
  approved: true,
  decidedBy,
  decidedAt: new Date().toISOString(),
  valueHash: createHash('sha256').update('null').digest('hex'),
});

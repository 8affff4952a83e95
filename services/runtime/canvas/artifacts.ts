import { createHash, randomUUID } from 'node:crypto';
import { type CanvasArtifactV2, SigilError } from '@sigil/plugin-api';
import type { Clock } from '../../../core/clock.ts';
import type { Database } from '../../../core/db/database.ts';

export interface StoredArtifact extends CanvasArtifactV2 {
  nodeId: string;
  createdAt: Date;
}

/** Files runs keep for their owners (a screenshot), in the database beside the run. */
export class RunArtifacts {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly maxBytes: number,
  ) {}

  async put(
    runId: string,
    nodeId: string,
    name: string,
    contentType: string,
    content: Uint8Array,
  ): Promise<StoredArtifact> {
    if (content.byteLength > this.maxBytes)
      throw new SigilError(
        'payload_too_large',
        `Artifact ${name} is ${content.byteLength} bytes; at most ${this.maxBytes}`,
        {
          details: { reason: 'artifact_too_large', limit: this.maxBytes },
        },
      );
    const artifact: StoredArtifact = {
      id: randomUUID(),
      nodeId,
      name: name.slice(0, 200),
      contentType: contentType.slice(0, 200),
      bytes: content.byteLength,
      sha256: createHash('sha256').update(content).digest('hex'),
      createdAt: this.clock.now(),
    };
    await this.db('canvas_artifacts').insert({
      id: artifact.id,
      run_id: runId,
      node_id: nodeId,
      name: artifact.name,
      content_type: artifact.contentType,
      bytes: artifact.bytes,
      sha256: artifact.sha256,
      content: Buffer.from(content),
      created_at: artifact.createdAt.getTime(),
    });
    return artifact;
  }

  async list(runId: string): Promise<StoredArtifact[]> {
    const rows = (await this.db('canvas_artifacts')
      .where({ run_id: runId })
      .select('id', 'node_id', 'name', 'content_type', 'bytes', 'sha256', 'created_at')
      .orderBy('created_at')) as ArtifactRow[];
    return rows.map(artifactOf);
  }

  /** An artifact of the run with its content; 404 when the run has none of that id. */
  async content(runId: string, id: string): Promise<StoredArtifact & { content: Buffer }> {
    const row = (await this.db('canvas_artifacts').where({ run_id: runId, id }).first()) as
      (ArtifactRow & { content: Buffer | Uint8Array }) | undefined;
    if (!row)
      throw new SigilError('not_found', `Run ${runId} has no artifact ${id}`, {
        details: { reason: 'artifact_not_found', id },
      });
    return { ...artifactOf(row), content: Buffer.from(row.content) };
  }
}

interface ArtifactRow {
  id: string;
  node_id: string;
  name: string;
  content_type: string;
  bytes: string | number;
  sha256: string;
  created_at: string | number;
}

const artifactOf = (row: ArtifactRow): StoredArtifact => ({
  id: row.id,
  nodeId: row.node_id,
  name: row.name,
  contentType: row.content_type,
  bytes: Number(row.bytes),
  sha256: row.sha256,
  createdAt: new Date(Number(row.created_at)),
});

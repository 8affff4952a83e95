import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import type { CanvasWorkspaceV2 } from '@sigil/plugin-api';
import { initWorkspace } from '@sigil/plugin-api/canvas';
import type { RunRecord } from './runs.ts';

/** Each run's git working tree under `dataDir/runs/<id>/workspace`, made on first use. */
export class Workspaces {
  readonly root: string;
  /** Each run's workspace once made (every node of the run is given the same). */
  private readonly made = new Map<string, Promise<CanvasWorkspaceV2>>();

  constructor(
    dataDir: string,
    /** The runtime's public base URL, where /canvas/preview/<token>/ serves a workspace. */
    private readonly publicBase: string,
  ) {
    this.root = resolve(dataDir, 'runs');
  }

  dirOf(runId: string): string {
    return resolve(this.root, runId, 'workspace');
  }

  of(run: RunRecord): Promise<CanvasWorkspaceV2> {
    let making = this.made.get(run.id);
    if (!making) {
      const dir = this.dirOf(run.id);
      const workspace = Object.freeze({ dir, previewUrl: this.previewUrlOf(run.previewToken) });
      making = (existsSync(resolve(dir, '.git')) ? Promise.resolve() : initWorkspace(dir)).then(
        () => workspace,
      );
      this.made.set(run.id, making);
      making.catch(() => this.made.delete(run.id));
    }
    return making;
  }

  /** Where /canvas/preview serves a run's workspace (its token in the path). */
  previewUrlOf(token: string): string {
    return `${this.publicBase}/canvas/preview/${token}/`;
  }
}

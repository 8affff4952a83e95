import { z } from 'zod';
import {
  type CanvasNodeContextV2,
  type CanvasNodeV2,
  type CanvasPortsV2,
  definePlugin,
  extensionPoints,
  provide,
  SigilError,
} from '@sigil/plugin-api';
import { approvedUpstream } from '@sigil/plugin-api/canvas';
import { commitFiles, commitOf } from './commit.ts';
import {
  type FileLimits,
  filesToWrite,
  templateInputs,
  type WriteFilesParams,
  writeFilesParams,
} from './files.ts';
import { checkTargets, writeFiles } from './write.ts';

const config = z
  .object({
    maxFiles: z.number().int().min(1).max(100_000).default(200).describe('Most files one node run writes'),
    maxBytes: z
      .number()
      .int()
      .min(1)
      .default(10 * 1024 * 1024)
      .describe('Most bytes (UTF-8) of content one node run writes, all files together'),
  })
  .strict();

function portsOf(params: WriteFilesParams): CanvasPortsV2 {
  const read = templateInputs(params);
  const hasOwnFiles = (params.files ?? []).length > 0;
  const others = [...read].filter((name) => name !== 'files');
  return {
    inputs: {
      ...Object.fromEntries(
        others.map((name) => [
          name,
          { type: 'json' as const, description: 'Read by a template of params.files' },
        ]),
      ),
      files: {
        type: 'files',
        // Needed unless params.files gives something to write, or when a template reads it.
        required: !hasOwnFiles || read.has('files'),
        description: 'Files to write (with those of params.files)',
      },
    },
    outputs: {
      files: { type: 'array', description: 'The paths written, relative to the workspace' },
      commit: { type: 'string', description: 'The commit that holds them' },
    },
  };
}

/** The contract's rule, checked by the node too, refused with the node's id. */
function requireApproval(context: CanvasNodeContextV2<WriteFilesParams>): void {
  if (approvedUpstream(context.approvals)) return;
  throw new SigilError(
    'forbidden',
    `Node ${context.nodeId} writes files, and no approval upstream approved it`,
    {
      hint: 'Put an approval node upstream of it on every path, and approve the run',
      details: { reason: 'approval_required', nodeId: context.nodeId },
    },
  );
}

/**
 * Writes files into the run's workspace and commits them. One instance serves every run, so writes to
 * one workspace (two write nodes of a run on parallel branches) take turns: git allows one index
 * writer at a time.
 */
function writeFilesNode(limits: FileLimits): CanvasNodeV2<WriteFilesParams> {
  const turns = new Map<string, Promise<unknown>>();
  const inTurn = <T>(dir: string, task: () => Promise<T>): Promise<T> => {
    const previous = turns.get(dir) ?? Promise.resolve();
    const current = previous.catch(() => undefined).then(task);
    const settled = current.catch(() => undefined);
    turns.set(dir, settled);
    void settled.then(() => turns.get(dir) === settled && turns.delete(dir));
    return current;
  };

  return {
    specVersion: 'v2',
    nodeKind: 'write-files',
    description: "Writes files into the run's workspace and commits them (needs an approval upstream)",
    effect: 'writes',
    params: writeFilesParams,
    ports: portsOf,
    example: {
      params: {
        files: [
          {
            path: 'index.html',
            content: '<!doctype html><title>{{ inputs.title }}</title><h1>{{ inputs.title }}</h1>',
          },
        ],
        message: 'Publish the page',
      },
      inputs: { title: 'Hello from Sigil', files: [{ path: 'notes/README.md', content: '# Notes\n' }] },
    },
    run: async (context) => {
      const { signal, workspace, idempotencyKey: key } = context;
      signal.throwIfAborted();
      requireApproval(context);
      const files = filesToWrite(context.params, context.inputs, limits);
      if (files.length === 0)
        throw new SigilError('invalid_request', `Node ${context.nodeId} has no file to write`, {
          details: { reason: 'no_files' },
        });
      const paths = files.map((file) => file.path);
      return inTurn(workspace.dir, async () => {
        const done = await commitOf(workspace.dir, key, signal);
        if (done !== undefined) {
          context.log('already committed under this idempotency key; nothing written', { commit: done });
          return { files: paths, commit: done };
        }
        await checkTargets(workspace.dir, files);
        const bytes = files.reduce((total, file) => total + Buffer.byteLength(file.content), 0);
        context.log(`writing ${files.length} file(s)`, { paths, bytes });
        await writeFiles(workspace.dir, files, signal);
        const subject = context.params.message ?? `canvas: write ${files.length} file(s)`;
        const commit = await commitFiles(workspace.dir, paths, { key, subject, signal });
        context.log('committed', { commit });
        return { files: paths, commit };
      });
    },
  };
}

export default definePlugin({
  kind: 'canvas-node',
  name: 'canvas-workspace',
  specVersion: 'v2',
  description: "Canvas node `write-files`: writes files into the run's git workspace and commits them",
  config,
  provides: [provide(extensionPoints.canvasNodeKinds, 'write-files')],
  create: ({ config: limits }) => writeFilesNode(limits),
});

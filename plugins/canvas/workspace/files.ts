import { z } from 'zod';
import { type CanvasFileV2, SigilError } from '@sigil/plugin-api';
import { PORT_VALUE_SCHEMAS, renderTemplate, templatePaths, WORKSPACE_PATH } from '@sigil/plugin-api/canvas';

/** A template reads `inputs.<port>…`: the input ports of the node are the names templates read. */
const INPUT_PATH = /^inputs\.([A-Za-z0-9_-]+)/;

export const writeFilesParams = z
  .object({
    files: z
      .array(
        z
          .object({
            path: WORKSPACE_PATH.describe('Where in the workspace, relative'),
            content: z
              .string()
              .describe('UTF-8 content; `{{ inputs.<port> }}` placeholders read input ports'),
          })
          .strict(),
      )
      .optional()
      .describe('Files to write beside those on the `files` input, their content a template over inputs'),
    message: z
      .string()
      .min(1)
      .max(200)
      .regex(/^[^\r\n]*$/, 'one line')
      .optional()
      .describe('The subject of the commit'),
  })
  .strict()
  .superRefine(({ files = [] }, context) => {
    const seen = new Set<string>();
    files.forEach((file, index) => {
      if (seen.has(file.path))
        context.addIssue({ code: 'custom', path: ['files', index, 'path'], message: `${file.path} twice` });
      seen.add(file.path);
      for (const path of templatePaths(file.content))
        if (!INPUT_PATH.test(path))
          context.addIssue({
            code: 'custom',
            path: ['files', index, 'content'],
            message: `{{ ${path} }}: a template reads inputs.<port> only`,
          });
    });
  });

export type WriteFilesParams = z.infer<typeof writeFilesParams>;

/** The input ports the params' templates read. */
export function templateInputs(params: WriteFilesParams): Set<string> {
  return new Set(
    (params.files ?? []).flatMap((file) =>
      templatePaths(file.content).map((path) => INPUT_PATH.exec(path)?.[1] as string),
    ),
  );
}

export interface FileLimits {
  maxFiles: number;
  maxBytes: number;
}

/**
 * The files one run writes: those on the `files` input, then the params' own with their templates
 * rendered; refused whole when a path comes twice or the limits are passed.
 */
export function filesToWrite(
  params: WriteFilesParams,
  inputs: Record<string, unknown>,
  limits: FileLimits,
): CanvasFileV2[] {
  const given = PORT_VALUE_SCHEMAS.files.safeParse(inputs.files ?? []);
  if (!given.success)
    throw new SigilError('invalid_request', 'The files input is not a list of { path, content }', {
      details: { reason: 'invalid_input', port: 'files', issue: given.error.issues[0]?.message },
    });
  const files = [
    ...(given.data as CanvasFileV2[]),
    ...(params.files ?? []).map((file) => ({
      path: file.path,
      content: renderTemplate(file.content, { inputs }),
    })),
  ];
  const paths = new Set<string>();
  for (const { path } of files) {
    if (paths.has(path))
      throw new SigilError('invalid_request', `${path} is to be written twice`, {
        details: { reason: 'duplicate_path', path },
      });
    paths.add(path);
  }
  if (files.length > limits.maxFiles)
    throw new SigilError(
      'payload_too_large',
      `${files.length} files, more than the ${limits.maxFiles} allowed`,
      {
        hint: 'The operator sets maxFiles in the options of canvas-workspace',
        details: { reason: 'too_many_files', files: files.length, maxFiles: limits.maxFiles },
      },
    );
  const bytes = files.reduce((total, file) => total + Buffer.byteLength(file.content), 0);
  if (bytes > limits.maxBytes)
    throw new SigilError(
      'payload_too_large',
      `${bytes} bytes of files, more than the ${limits.maxBytes} allowed`,
      {
        hint: 'The operator sets maxBytes in the options of canvas-workspace',
        details: { reason: 'too_many_bytes', bytes, maxBytes: limits.maxBytes },
      },
    );
  return files;
}

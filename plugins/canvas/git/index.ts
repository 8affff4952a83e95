import { z } from 'zod';
import { definePlugin, extensionPoints, provide } from '@sigil/plugin-api';
import {
  afterInput,
  approvedPush,
  authorizationHeader,
  BRANCH_NAME,
  canvasNode,
  refineInputsTemplate,
  REMOTE_TIMEOUT_MS,
  REMOTE_URL,
  renderTemplate,
  templateInputPorts,
  VAULT_SLOT,
} from '@sigil/plugin-api/canvas';
import {
  allowedRemote,
  DEFAULT_ALLOWED_REMOTES,
  REMOTE_PREFIX,
  requireAllowedRemote,
} from './allowed-remotes.ts';

const NODE_KIND = 'git-push';

const CONFIG = z
  .object({
    allowedRemotes: z
      .array(REMOTE_PREFIX)
      .min(1)
      .default(DEFAULT_ALLOWED_REMOTES)
      .describe(
        'URL prefixes, each ending in /, of the remotes nodes may push to (https, http or git); file:// and other transports are never allowed',
      ),
    pushTimeoutMs: REMOTE_TIMEOUT_MS.describe(
      'Longest each exchange with a remote (ls-remote, fetch, push) may take, in milliseconds',
    ),
  })
  .strict();

const PARAMS = z
  .object({
    remote: REMOTE_URL.describe('The repository to push to, e.g. https://github.com/octo-org/site.git'),
    branch: BRANCH_NAME.default('main').describe('The remote branch; made when missing'),
    base: BRANCH_NAME.optional().describe(
      'When branch is missing: the remote branch it starts from (absent: its first commit has no parent)',
    ),
    message: z
      .string()
      .min(1)
      .max(10_000)
      .default('Update from a Sigil canvas run')
      .describe('Commit message, a template over inputs ({{ inputs.title }})'),
    tokenSlot: VAULT_SLOT.optional().describe(
      "The wallet's vault slot holding the remote's token; absent: no credentials",
    ),
    tokenScheme: z.enum(['basic', 'bearer']).default('basic').describe('How the token is sent over HTTP'),
    tokenUser: z.string().min(1).max(128).default('x-access-token').describe('The user name of Basic'),
  })
  .strict()
  .superRefine((params, context) => refineInputsTemplate(context, ['message'], params.message));

/**
 * A canvas node of kind `git-push`: commits the run's workspace on top of a remote branch and pushes
 * it, once per node run (see README.md).
 */
export default definePlugin({
  kind: 'canvas-node',
  name: 'canvas-git',
  specVersion: 'v2',
  description: "Canvas node git-push: commits the run's workspace and pushes it to a git remote",
  config: CONFIG,
  provides: [provide(extensionPoints.canvasNodeKinds, NODE_KIND)],
  create: ({ config }) =>
    canvasNode({
      specVersion: 'v2',
      nodeKind: NODE_KIND,
      description: "Commits the run's workspace on top of a remote git branch and pushes it",
      effect: 'writes',
      // Refused at validation too, so a document names an unlisted remote before it runs.
      params: PARAMS.refine(
        (params) => allowedRemote(new URL(params.remote), config.allowedRemotes) !== undefined,
        { path: ['remote'], message: "not on the operator's list of allowed remotes (allowedRemotes)" },
      ),
      ports: (params) => ({
        inputs: {
          ...afterInput(
            'Any output of the node whose workspace changes to push (a write node): the push waits for it',
          ),
          ...templateInputPorts(params.message),
        },
        outputs: {
          commit: { type: 'string', description: 'The commit on the remote branch holding the workspace' },
          remote: { type: 'string', description: 'The remote pushed to, normalized' },
          branch: { type: 'string' },
          files: { type: 'array', description: 'Paths the commit changed' },
          pushed: { type: 'boolean', description: 'False when the branch already held it (a re-run)' },
        },
      }),
      // Under the first allowed remote, so the catalog shows a remote this runtime takes and the
      // contract kit can run it where the operator (a test) serves that repository.
      example: {
        params: {
          remote: `${config.allowedRemotes[0]}octo-org/site.git`,
          branch: 'main',
          message: 'Publish {{ inputs.title }}',
          tokenSlot: 'GITHUB_TOKEN',
        },
        inputs: { title: 'the landing page' },
      },
      run: async (context) => {
        const push = approvedPush(context, config.pushTimeoutMs);
        const { params } = context;
        const remote = requireAllowedRemote(params.remote, config.allowedRemotes);
        const message = renderTemplate(params.message, { inputs: context.inputs });
        const authorization =
          params.tokenSlot === undefined
            ? undefined
            : authorizationHeader(
                await context.services.secret(params.tokenSlot),
                params.tokenScheme,
                params.tokenUser,
              );
        context.log(`Pushing the workspace to ${remote}, branch ${params.branch}`);
        const { commit, files, pushed } = await push({
          remote,
          branch: params.branch,
          base: params.base,
          message,
          authorization,
        });
        context.log(pushed ? `Pushed ${commit}` : `Nothing new to push: the branch holds ${commit}`, {
          commit,
          files: files.length,
        });
        return { commit, remote, branch: params.branch, files, pushed };
      },
    }),
});

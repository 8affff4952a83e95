import { z } from 'zod';
import { definePlugin, extensionPoints, provide, SigilError } from '@sigil/plugin-api';
import {
  afterInput,
  approvedPush,
  authorizationHeader,
  BRANCH_NAME,
  canvasNode,
  refineInputsTemplate,
  REMOTE_TIMEOUT_MS,
  renderTemplate,
  templateInputPorts,
  VAULT_SLOT,
} from '@sigil/plugin-api/canvas';
import { Forge } from './forge.ts';

const NODE_KIND = 'github-pull-request';

const CONFIG = z
  .object({
    apiUrl: z
      .url({ protocol: /^https?$/ })
      .default('https://api.github.com')
      .describe("The forge's REST v3 API: GitHub's, or a GitHub Enterprise server's (https://host/api/v3)"),
    timeoutMs: REMOTE_TIMEOUT_MS.describe(
      'Longest each API request and each exchange with git (ls-remote, fetch, push) may take',
    ),
  })
  .strict();

/** A user, organization or repository name as GitHub allows them. */
const NAME = z
  .string()
  .min(1)
  .max(100)
  .regex(/^[A-Za-z0-9_.-]+$/, 'letters, digits, _, . and -')
  .refine((name) => name !== '.' && name !== '..', 'not . or ..');

const PARAMS = z
  .object({
    owner: NAME.optional().describe(
      "The repository's owner, a user or an organization; absent: the token's user",
    ),
    repo: NAME.describe('The repository; created (private by default, with a README) when missing'),
    private: z.boolean().default(true).describe('Whether a repository the node creates is private'),
    branch: BRANCH_NAME.optional().describe("The pull request's branch; absent: sigil/<run id>/<node id>"),
    base: BRANCH_NAME.optional().describe(
      "The branch it merges into; absent: the repository's default branch",
    ),
    title: z
      .string()
      .min(1)
      .max(256)
      .default('Changes from a Sigil canvas run')
      .describe("The pull request's title and the commit's subject, a template over inputs"),
    body: z
      .string()
      .max(65_536)
      .default('')
      .describe("The pull request's description, a template over inputs"),
    tokenSlot: VAULT_SLOT.default('GITHUB_TOKEN').describe("The wallet's vault slot of the token"),
  })
  .strict()
  .superRefine((params, context) => {
    refineInputsTemplate(context, ['title'], params.title);
    refineInputsTemplate(context, ['body'], params.body);
  });

/**
 * A canvas node of kind `github-pull-request`: pushes the run's workspace as a branch of a GitHub
 * repository (created when missing) and opens a pull request for it, once per node run (see README.md).
 */
export default definePlugin({
  kind: 'canvas-node',
  name: 'canvas-github',
  specVersion: 'v2',
  description:
    "Canvas node github-pull-request: pushes the run's workspace to GitHub and opens a pull request",
  config: CONFIG,
  provides: [provide(extensionPoints.canvasNodeKinds, NODE_KIND)],
  create: ({ config }) =>
    canvasNode({
      specVersion: 'v2',
      nodeKind: NODE_KIND,
      description: "Pushes the run's workspace as a branch of a GitHub repository and opens a pull request",
      effect: 'writes',
      params: PARAMS,
      ports: (params) => ({
        inputs: {
          ...afterInput(
            'Any output of the node whose workspace changes to push (a write node): the node waits for it',
          ),
          ...templateInputPorts(params.title, params.body),
        },
        outputs: {
          repository: { type: 'string', description: 'owner/name' },
          repositoryUrl: { type: 'string' },
          created: { type: 'boolean', description: 'Whether this node run created the repository' },
          branch: { type: 'string' },
          commit: { type: 'string', description: "The branch's commit holding the workspace" },
          files: { type: 'array', description: 'Paths the commit changed' },
          pullRequest: { type: 'number', description: "The pull request's number" },
          pullRequestUrl: { type: 'string' },
        },
      }),
      example: {
        params: {
          owner: 'octo-org',
          repo: 'site',
          title: 'Publish {{ inputs.title }}',
          body: 'Drafted and approved in a Sigil canvas run.',
        },
        inputs: { title: 'the landing page' },
      },
      run: async (context) => {
        const push = approvedPush(context, config.timeoutMs);
        const { params } = context;
        const scope = { inputs: context.inputs };
        const [title, body] = [renderTemplate(params.title, scope), renderTemplate(params.body, scope)];
        const branch = params.branch ?? defaultBranch(context.runId, context.nodeId);
        const token = await context.services.secret(params.tokenSlot);
        const forge = new Forge({
          apiUrl: config.apiUrl,
          token,
          signal: context.signal,
          timeoutMs: config.timeoutMs,
        });
        const login = await forge.user();
        const owner = params.owner ?? login;
        const { repository, created } = await forge.repository(owner, params.repo, {
          private: params.private,
          ownedByUser: owner.toLowerCase() === login.toLowerCase(),
        });
        context.log(`${created ? 'Created' : 'Found'} the repository ${repository.full_name}`);
        const base = params.base ?? repository.default_branch;
        if (base === branch)
          throw new SigilError('invalid_request', `The pull request's branch is its base, ${base}`, {
            hint: 'Give params.branch another name than the base branch',
            details: { reason: 'branch_is_base' },
          });
        requireCloneProtocol(repository.clone_url, config.apiUrl);
        const { commit, files, pushed } = await push({
          remote: repository.clone_url,
          branch,
          base,
          message: body === '' ? title : `${title}\n\n${body}`,
          authorization: authorizationHeader(token, 'basic'),
        });
        context.log(pushed ? `Pushed ${commit} to ${branch}` : `${branch} already holds ${commit}`, {
          commit,
        });
        const { pullRequest, opened } = await forge.pullRequest(owner, params.repo, {
          head: branch,
          base,
          title,
          body,
        });
        context.log(`${opened ? 'Opened' : 'Found'} pull request #${pullRequest.number}`, {
          url: pullRequest.html_url,
        });
        return {
          repository: repository.full_name,
          repositoryUrl: repository.html_url,
          created,
          branch,
          commit,
          files,
          pullRequest: pullRequest.number,
          pullRequestUrl: pullRequest.html_url,
        };
      },
    }),
});

/** `sigil/<run id>/<node id>`: the same on every attempt of the node run, so a re-run finds its branch. */
function defaultBranch(runId: string, nodeId: string): string {
  const branch = `sigil/${runId}/${nodeId}`;
  if (BRANCH_NAME.safeParse(branch).success) return branch;
  throw new SigilError('invalid_request', 'The run and node ids make no branch name', {
    hint: 'Give params.branch',
    details: { reason: 'branch_invalid' },
  });
}

/** The token goes to the clone URL the forge gives: never over a protocol weaker than the API's. */
function requireCloneProtocol(cloneUrl: string, apiUrl: string): void {
  if (URL.canParse(cloneUrl) && new URL(cloneUrl).protocol === new URL(apiUrl).protocol) return;
  throw new SigilError('unavailable', "The forge's clone URL does not use its API's protocol", {
    details: { reason: 'forge_invalid_response' },
  });
}

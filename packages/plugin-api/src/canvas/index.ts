/**
 * What canvas nodes and their host share (`@sigil/plugin-api/canvas`): git as both run it, the
 * workspace a run starts with, what a value on a port of each type must be (and the input `after`
 * that only orders a node), the approval check of `writes` nodes, templates over a node's inputs
 * (input ports that params declare, or that templates read), pushing a workspace to a git remote
 * (the repository-hosting nodes), and the file a preview of a workspace serves at a path.
 */
export { approvedUpstream, requireApproval } from './approval.ts';
export { withDeadline } from './deadline.ts';
export {
  DECLARED_INPUTS,
  declaredInputPorts,
  INPUT_PORT_NAME,
  PORT_TYPE,
  refineTemplate,
  undeclaredReads,
} from './inputs.ts';
export { CANVAS_GIT_ENV, initWorkspace, runGit, type RunGitOptions } from './git.ts';
export { afterInput, PORT_VALUE_SCHEMAS, portAccepts, WORKSPACE_PATH } from './ports.ts';
export { previewFile } from './preview.ts';
export { renderTemplate, templatePaths, valueAt } from './template.ts';
export { canvasNode } from './node.ts';
export { refineInputsTemplate, templateInputPorts } from './template-inputs.ts';
export {
  approvedPush,
  authorizationHeader,
  IDEMPOTENCY_TRAILER,
  type NodePushRequest,
  pushWorkspace,
  type PushedWorkspace,
  type PushWorkspaceRequest,
} from './push.ts';
export {
  BRANCH_NAME,
  REMOTE_TIMEOUT_MS,
  REMOTE_URL,
  remoteUrlProblem,
  requireRemoteUrl,
  VAULT_SLOT,
} from './remote.ts';

/**
 * What canvas nodes and their host share (`@sigil/plugin-api/canvas`): git as both run it, the
 * workspace a run starts with, what a value on a port of each type must be, and input ports that
 * params declare with the templates that read them.
 */
export {
  DECLARED_INPUTS,
  declaredInputPorts,
  INPUT_PORT_NAME,
  PORT_TYPE,
  refineTemplate,
  undeclaredReads,
} from './inputs.ts';
export { CANVAS_GIT_ENV, initWorkspace, runGit, type RunGitOptions } from './git.ts';
export { PORT_VALUE_SCHEMAS, portAccepts, WORKSPACE_PATH } from './ports.ts';
export { renderTemplate, templatePaths, valueAt } from './template.ts';
export { canvasNode } from './node.ts';

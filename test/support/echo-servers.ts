import { join } from 'node:path';
import { TestRepository } from './git.ts';
import { fixturePath } from './paths.ts';
import { type PythonIndex, served, startPythonIndex } from './python-index.ts';
import { wheelFromProject } from './python-wheels.ts';

/**
 * The echo MCP servers the tests serve from registries other than npm: the Python one (with its one
 * dependency) from a local PEP 691 index, and the Node one from a Git repository tagged v1.0.0.
 */

/** A PEP 691 index serving sigil-echo-server and sigil-echo-format, their wheels built from the fixtures. */
export async function startEchoIndex(): Promise<PythonIndex> {
  const python = fixturePath('python');
  return startPythonIndex({
    projects: {
      'sigil-echo-server': [served(await wheelFromProject(join(python, 'sigil-echo-server')))],
      'sigil-echo-format': [served(await wheelFromProject(join(python, 'sigil-echo-format')))],
    },
  });
}

/** `node-echo.git` under `dir`: the Node echo server, one commit, tagged v1.0.0. */
export function nodeEchoRepository(dir: string): TestRepository {
  const repo = new TestRepository(dir, 'node-echo.git').copy(fixturePath('mcp', 'node-echo-server'));
  repo.commit('an MCP server in plain Node');
  repo.tag('v1.0.0');
  return repo;
}

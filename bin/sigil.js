#!/usr/bin/env node
// Sigil runs its TypeScript sources through tsx by default: no build step between a clone and
// `npm start`, and a source edited after a build is what runs. NODE_ENV=production runs the compiled
// JavaScript of `npm run build` (dist/) with no tsx, and refuses a build that is missing or older than
// a file it was made from; SIGIL_SOURCE=1 runs the sources even then.
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const dist = fileURLToPath(new URL('../dist/', import.meta.url));

if (process.env.NODE_ENV === 'production' && process.env.SIGIL_SOURCE !== '1') {
  const problem = buildProblem();
  if (problem !== undefined) {
    process.stderr.write(
      `sigil: NODE_ENV=production runs the compiled build, and ${problem}: run \`npm run build\`, or set SIGIL_SOURCE=1 to run the TypeScript sources through tsx\n`,
    );
    process.exit(2); // a problem found at start-up, as for a bad config
  }
  // The bundle of the compiled modules (bin/build.ts): far fewer files for Node's loader to go through.
  await import(new URL('../dist/bin/bundle/cli.js', import.meta.url).href);
} else {
  // The repository's tsconfig (whatever the working directory) maps @sigil/plugin-api to its sources.
  const { register } = await import('tsx/esm/api');
  register({ tsconfig: fileURLToPath(new URL('../tsconfig.json', import.meta.url)) });
  await import('./cli.ts');
}

/** Why dist/ cannot run, from its manifest (build.json, see core/layout.ts), or undefined. */
function buildProblem() {
  const manifest = join(dist, 'build.json');
  if (!existsSync(manifest)) return `${dist} holds no build`;
  if (!existsSync(join(dist, 'bin', 'bundle', 'cli.js'))) return `${dist} holds a build without its bundle`;
  const { builtAt, sourceRoot, inputs } = JSON.parse(readFileSync(manifest, 'utf8'));
  const since = Date.parse(builtAt);
  for (const input of inputs) {
    const stat = statSync(join(dist, sourceRoot, input), { throwIfNoEntry: false });
    if (stat === undefined) return `${input}, which it was built from, is gone`;
    if (stat.mtimeMs > since) return `${input} changed after the build (${builtAt})`;
  }
  return undefined;
}

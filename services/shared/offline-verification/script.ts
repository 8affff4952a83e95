import { extname } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { TeeBackendV2 } from '@sigil/plugin-api';
import { sha256Hex } from '../../../core/crypto.ts';
import { REPOSITORY_ROOT } from '../../../core/layout.ts';

/**
 * The bundle's offline script: main.ts and the TEE backend's `offlineVerifier` module, bundled by
 * esbuild into one CommonJS file that plain `node` (20 or later) runs with nothing installed.
 */

/** A bundle's `offlineVerification`: the script, its hash, and how to run it. */
export interface OfflineVerification {
  script: string;
  scriptSha256: string;
  usage: string;
}

/** main.ts, or main.js in a build: a module runs in the form this one does. */
const MAIN = fileURLToPath(new URL(`./main${extname(import.meta.url)}`, import.meta.url));
const SCRIPT_FILE = 'verify-bundle.cjs';
const USAGE = [
  'Save this document as bundle.json, then, with Node.js 20 or later and nothing else installed:',
  `  node -e "fs.writeFileSync('${SCRIPT_FILE}', require('./bundle.json').offlineVerification.script)"`,
  `  node ${SCRIPT_FILE} bundle.json`,
  'It prints PASS or FAIL for each check and exits 0 only when every check passed; --at <ISO time> judges certificates at another time.',
].join('\n');

/**
 * Built once per process and platform, on first use: the code it bundles does not change under a
 * running process, and concurrent first requests share one build. A failed build is not kept.
 */
const built = new Map<string, Promise<OfflineVerification>>();

export function offlineVerification(
  tee: Pick<TeeBackendV2, 'platform' | 'offlineVerifier'>,
): Promise<OfflineVerification> {
  const key = `${tee.platform}\n${tee.offlineVerifier ?? ''}`;
  let script = built.get(key);
  if (script === undefined) {
    script = buildScript(tee.platform, tee.offlineVerifier).catch((err: unknown) => {
      built.delete(key);
      throw err;
    });
    built.set(key, script);
  }
  return script;
}

async function buildScript(platform: string, verifier: string | undefined): Promise<OfflineVerification> {
  const entry = [
    `import { main } from ${JSON.stringify(MAIN)};`,
    ...(verifier === undefined
      ? ['main({});']
      : [
          `import { verify } from ${JSON.stringify(verifier)};`,
          `main({ ${JSON.stringify(platform)}: verify });`,
        ]),
  ].join('\n');
  // esbuild starts its service process on the first build; a service that never serves a bundle never loads it.
  const { build } = await import('esbuild');
  const result = await build({
    stdin: { contents: entry, resolveDir: REPOSITORY_ROOT, sourcefile: 'verify-bundle.ts', loader: 'ts' },
    absWorkingDir: REPOSITORY_ROOT,
    // Paths in the script's comments stay those of the repository (node_modules/…), whatever links it.
    preserveSymlinks: true,
    bundle: true,
    platform: 'node',
    format: 'cjs',
    target: 'node20',
    write: false,
    logLevel: 'silent',
    banner: {
      js: `#!/usr/bin/env node\n// ${SCRIPT_FILE}: verifies a Sigil attestation bundle offline (${platform}). Usage: node ${SCRIPT_FILE} bundle.json [--at <ISO time>]`,
    },
  });
  const [output] = result.outputFiles;
  if (output === undefined) throw new Error('esbuild wrote no script');
  return { script: output.text, scriptSha256: sha256Hex(output.text), usage: USAGE };
}

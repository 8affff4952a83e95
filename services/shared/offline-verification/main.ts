import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { verifyBundle, type OfflineEvidenceVerifier } from './verify-bundle.ts';

/**
 * The command line of the bundle's offline script: `node verify-bundle.cjs bundle.json [--at <ISO
 * time>]`. One line per check (`PASS <id> <detail>` or `FAIL <id> <detail>`), then a summary; exit 0
 * only when every check passed, 1 when one failed, 2 when the command itself is wrong (or the file
 * cannot be read).
 */

const USAGE = 'usage: node verify-bundle.cjs <bundle.json> [--at <ISO time>]';

/** Verifies the bundle the arguments name; returns the exit code. */
export async function runVerifyBundle(
  verifiers: Readonly<Record<string, OfflineEvidenceVerifier>>,
  args: readonly string[],
  print: (line: string) => void,
): Promise<number> {
  let file: string | undefined;
  let at: Date | undefined;
  try {
    const { values, positionals } = parseArgs({
      args: [...args],
      options: { at: { type: 'string' }, help: { type: 'boolean', short: 'h' } },
      allowPositionals: true,
    });
    if (values.help) {
      print(USAGE);
      return 0;
    }
    [file] = positionals;
    if (file === undefined || positionals.length > 1) throw new Error('give one bundle file');
    if (values.at !== undefined) {
      at = new Date(values.at);
      if (Number.isNaN(at.getTime())) throw new Error(`--at ${values.at} is not a time`);
    }
  } catch (error) {
    // parseArgs's own errors carry a code and a long text: the first sentence says what was wrong.
    print(`${(error as Error).message.split('. ')[0]}\n${USAGE}`);
    return 2;
  }
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (error) {
    print(
      `${file} cannot be read (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})\n${USAGE}`,
    );
    return 2;
  }
  let bundle: unknown;
  try {
    bundle = JSON.parse(text);
  } catch (error) {
    print(`FAIL bundle ${file} cannot be read as JSON: ${(error as Error).message}`);
    return 1;
  }
  const { verified, checks } = await verifyBundle(bundle, { verifiers, ...(at === undefined ? {} : { at }) });
  for (const check of checks) print(`${check.ok ? 'PASS' : 'FAIL'} ${check.id} ${check.detail}`);
  const failures = checks.filter((check) => !check.ok);
  print(
    verified
      ? `verified: all ${checks.length} checks passed`
      : `NOT verified: ${failures.length} of ${checks.length} checks failed (${failures.map((check) => check.id).join(', ')})`,
  );
  return verified ? 0 : 1;
}

/** The script's entry: the process's arguments, lines to stdout, the exit code set. */
export function main(verifiers: Readonly<Record<string, OfflineEvidenceVerifier>>): void {
  runVerifyBundle(verifiers, process.argv.slice(2), (line) => console.log(line)).then(
    (code) => {
      process.exitCode = code;
    },
    (error: unknown) => {
      console.error(error);
      process.exitCode = 2;
    },
  );
}

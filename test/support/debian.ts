import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';

/**
 * Debian packages the tests drive, installed with apt-get when one of their programs is missing: CI
 * runs as root and .ci/run installs them first, so this matters outside CI. A clear failure, never a
 * skip, when they can be neither found nor installed. `programs`: [path, package] pairs; `need` says
 * which tests need them.
 */
export function ensureDebianPrograms(need: string, programs: readonly (readonly [string, string])[]): void {
  const missing = programs.filter(([program]) => !existsSync(program));
  if (missing.length === 0) return;
  const packages = [...new Set(missing.map(([, name]) => name))];
  if (process.getuid?.() !== 0) throw new Error(`${need} need ${packages.join(', ')} (apt-get as root)`);
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  execFileSync('apt-get', ['update', '-qq'], { stdio: 'inherit', env });
  execFileSync('apt-get', ['install', '-y', '-qq', ...packages], { stdio: 'inherit', env });
  const still = missing.filter(([program]) => !existsSync(program));
  if (still.length > 0) throw new Error(`apt-get install ${packages.join(' ')} left no ${still[0]![0]}`);
}

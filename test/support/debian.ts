import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';

/**
 * apt-get takes a lock of its own and fails at once when another apt-get holds it; test files run in
 * parallel processes, so installs wait for each other on this lock (util-linux `flock`) instead.
 */
const APT_LOCK = '/var/lock/sigil-test-apt.lock';

/**
 * Installs Debian `packages` with apt-get (as root), one install at a time across processes. CI's
 * .ci/run installs every package the tests drive first, so this matters outside CI.
 */
export function aptInstall(need: string, packages: readonly string[]): void {
  if (process.getuid?.() !== 0) throw new Error(`${need} need ${packages.join(', ')} (apt-get as root)`);
  execFileSync(
    'flock',
    [APT_LOCK, 'sh', '-c', 'apt-get update -qq && apt-get install -y -qq "$@"', 'sh', ...packages],
    { stdio: 'inherit', env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } },
  );
}

/**
 * Debian packages the tests drive, installed when one of their programs is missing. A clear failure,
 * never a skip, when they can be neither found nor installed. `programs`: [path, package] pairs;
 * `need` says which tests need them.
 */
export function ensureDebianPrograms(need: string, programs: readonly (readonly [string, string])[]): void {
  const missing = programs.filter(([program]) => !existsSync(program));
  if (missing.length === 0) return;
  const packages = [...new Set(missing.map(([, name]) => name))];
  aptInstall(need, packages);
  const still = missing.filter(([program]) => !existsSync(program));
  if (still.length > 0) throw new Error(`apt-get install ${packages.join(' ')} left no ${still[0]![0]}`);
}

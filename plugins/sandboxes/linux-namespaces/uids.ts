import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { z } from 'zod';
import { SigilError } from '@sigil/plugin-api';

/**
 * Host users for sandboxes, one per live sandbox, so that no kernel object keyed by uid (keyrings,
 * /proc access, signals, ptrace, quotas) is shared between two of them. A uid is held by binding the
 * abstract unix socket `@sigil-sandbox-uid/<uid>`: the kernel grants a name to one socket at a time in
 * a network namespace, so two runtimes there, even in two processes, never hand out one uid, and it
 * frees the name when its holder dies, so a crashed gateway's uids come back without cleanup. Runtimes
 * in separate network namespaces on one host do not see each other's names: each needs its own range.
 */

export const uidRangeSchema = z
  .object({
    first: z.number().int().min(1000),
    count: z.number().int().min(1),
  })
  .strict()
  .refine((range) => range.first + range.count - 1 <= 0xfffffffe, 'the range must end below 4294967295');

export type UidRange = z.infer<typeof uidRangeSchema>;

/**
 * 0x70000000 upwards: above the subordinate ranges useradd hands out (/etc/subuid, from 100000 up to
 * 600100000) and systemd-nspawn's container ranges (up to 0x6FFFFFFF), below 2^31.
 */
export const DEFAULT_UID_RANGE: UidRange = { first: 0x70000000, count: 65536 };

export interface UidLease {
  /** Used as both the uid and the gid of the sandbox. */
  uid: number;
  release(): Promise<void>;
}

export class UidAllocator {
  private readonly held = new Set<number>();
  /** Next uid to try: round-robin, so a uid just released is the last to be handed out again. */
  private cursor = 0;

  constructor(readonly range: UidRange) {}

  get inUse(): number {
    return this.held.size;
  }

  async claim(): Promise<UidLease> {
    const { first, count } = this.range;
    for (let tried = 0; tried < count && this.held.size < count; tried++) {
      const uid = first + this.cursor;
      this.cursor = (this.cursor + 1) % count;
      if (this.held.has(uid)) continue;
      this.held.add(uid);
      const lock = await bindName(`\0sigil-sandbox-uid/${uid}`).catch((error: unknown) => {
        // Nothing holds it (the bind failed: EMFILE, say), so it stays free for the next claim.
        this.held.delete(uid);
        throw error;
      });
      if (lock) {
        return {
          uid,
          release: () =>
            new Promise<void>((resolve) =>
              lock.close(() => {
                this.held.delete(uid);
                resolve();
              }),
            ),
        };
      }
      this.held.delete(uid); // another runtime on this host holds it
    }
    throw new SigilError(
      'unavailable',
      `every sandbox uid (${first} to ${first + count - 1}) is held by a running sandbox`,
      { hint: 'raise uidRange.count of the sandbox-linux-namespaces plugin, or run fewer servers at once' },
    );
  }
}

/** A listening socket on the abstract `name`, or undefined when another socket has it. */
function bindName(name: string): Promise<Server | undefined> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', (error: NodeJS.ErrnoException) =>
      error.code === 'EADDRINUSE' ? resolve(undefined) : reject(error),
    );
    // Held for as long as its sandbox runs, which keeps the process alive by itself.
    server.listen(name, () => resolve(server.unref()));
  });
}

/**
 * Fails unless the range is nobody else's on this host: a user or group in /etc/passwd or /etc/group,
 * or a subordinate range of /etc/subuid or /etc/subgid (rootless containers run as those uids), would
 * share its uid with a sandbox and so reach its processes.
 */
export function assertRangeUnused(range: UidRange): void {
  const last = range.first + range.count - 1;
  const inRange = (from: number, to: number) => from <= last && to >= range.first;
  const clashes: string[] = [];
  for (const file of ['/etc/passwd', '/etc/group']) {
    for (const line of readLines(file)) {
      const [name, , id] = line.split(':');
      if (id !== undefined && /^\d+$/.test(id) && inRange(Number(id), Number(id)))
        clashes.push(`${file}: ${name} (${id})`);
    }
  }
  for (const file of ['/etc/subuid', '/etc/subgid']) {
    for (const line of readLines(file)) {
      const [name, start, size] = line.split(':');
      if (!start || !size || !/^\d+$/.test(start) || !/^\d+$/.test(size)) continue;
      if (inRange(Number(start), Number(start) + Number(size) - 1))
        clashes.push(`${file}: ${name} (${start}+${size})`);
    }
  }
  if (clashes.length > 0) {
    throw new SigilError(
      'config_invalid',
      `the sandbox uid range ${range.first}..${last} is already used on this host: ${clashes.slice(0, 5).join('; ')}`,
      {
        hint: 'choose a uidRange for the sandbox-linux-namespaces plugin that no user or subordinate range uses',
      },
    );
  }
}

function readLines(file: string): string[] {
  try {
    return readFileSync(file, 'utf8').split('\n');
  } catch {
    return [];
  }
}

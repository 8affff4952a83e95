import { randomInt } from 'node:crypto';
import type Docker from 'dockerode';
import { SigilError } from '@sigil/plugin-api';
import type { Engine } from './engine.ts';

/**
 * Host uids for containers: each live container runs as one that no other live container holds, so
 * that nothing the kernel keys by uid (keyrings, signals, /proc access, RLIMIT_NPROC) is shared.
 * Without a user-namespace remap, a container's uid is the host's. Taken at random from the range,
 * avoiding those held here and those the engine's live containers of this plugin carry in their
 * labels (other gateways on the same engine). Two gateways may still pick the same one in the same
 * instant: the first container of a sandbox is named after its uid ({@link createClaiming}), and an
 * engine's container names are unique, so the second one's creation fails and it picks again.
 */
export class UidAllocator {
  private readonly held = new Set<number>();

  constructor(readonly range: { first: number; count: number }) {}

  get inUse(): number {
    return this.held.size;
  }

  /** A uid not in `taken` (the engine's) nor held here; held until `release`. */
  claim(taken: ReadonlySet<number>): number {
    const { first, count } = this.range;
    const busy = (uid: number) => this.held.has(uid) || taken.has(uid);
    let uid = first + randomInt(count);
    // A few random tries, then a sweep: the range may be nearly full.
    for (let tried = 0; busy(uid) && tried < 16; tried++) uid = first + randomInt(count);
    for (let offset = 0; busy(uid) && offset < count; offset++) uid = first + ((uid - first + 1) % count);
    if (busy(uid)) {
      throw new SigilError('unavailable', `every uid of ${first}+${count} is held by a live container`, {
        details: { reason: 'uids_exhausted' },
      });
    }
    this.held.add(uid);
    return uid;
  }

  release(uid: number): void {
    this.held.delete(uid);
  }
}

/** The name of the container that holds `uid` on its engine: the first container of a sandbox. */
export const uidClaimName = (uid: number): string => `sigil-uid-${uid}`;

/**
 * Creates the container that claims `options`' uid by its name ({@link uidClaimName}). When another
 * container has that name (another gateway picked the same uid an instant earlier, or a dead one's
 * container holds it), rejects with a `conflict` whose `details.reason` is `uid_taken`: pick another.
 */
export async function createClaiming(
  engine: Engine,
  uid: number,
  doing: string,
  options: Docker.ContainerCreateOptions,
): Promise<Docker.Container> {
  try {
    return await engine.api.createContainer({ ...options, name: uidClaimName(uid) });
  } catch (error) {
    if ((error as { statusCode?: number }).statusCode === 409) {
      throw new SigilError('conflict', `uid ${uid} is held by another container on the engine`, {
        details: { reason: 'uid_taken', uid },
      });
    }
    throw engine.failure(doing, error);
  }
}

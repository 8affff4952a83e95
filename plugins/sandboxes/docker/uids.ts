import { randomInt } from 'node:crypto';
import { SigilError } from '@sigil/plugin-api';

/**
 * Host uids for containers: each live container runs as one that no other live container holds, so
 * that nothing the kernel keys by uid (keyrings, signals, /proc access, RLIMIT_NPROC) is shared.
 * Without a user-namespace remap, a container's uid is the host's. Taken at random from the range,
 * avoiding those held here and those the engine's live containers of this plugin carry in their
 * labels (other gateways on the same engine): two gateways picking the same one in the same instant
 * is the only way to share one (1 in `count` per pair of simultaneous starts).
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

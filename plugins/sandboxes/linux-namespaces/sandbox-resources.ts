import { rmSync } from 'node:fs';
import type { SandboxCgroup } from './cgroups.ts';
import type { EgressProxy } from '@sigil/plugin-api/egress';
import type { UidLease } from './uids.ts';

/** Per-sandbox files, proxy, cgroup and uid, released once the sandbox has ended. */
export class SandboxResources {
  proxy: EgressProxy | undefined;
  cgroup: SandboxCgroup | undefined;
  uid: UidLease | undefined;
  private released: Promise<void> | undefined;
  constructor(
    /**
     * Its fstab, egress socket, root staging and lent mount points: the last two are empty on the
     * host, since only the sandbox's own mount namespaces ever mount on them.
     */
    private readonly paths: readonly string[],
  ) {}

  release(): Promise<void> {
    this.released ??= this.releaseOnce();
    return this.released;
  }

  private async releaseOnce(): Promise<void> {
    await this.proxy?.close();
    await this.cgroup?.remove();
    await this.uid?.release();
    for (const path of this.paths) rmSync(path, { recursive: true, force: true });
  }
}

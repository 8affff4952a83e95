import { setTimeout as sleep } from 'node:timers/promises';
import type { SandboxProcess } from '../contracts/index.ts';

/**
 * `kill()` as the contract words it, for a process that has not ended yet: ends its stdin (which
 * asks an MCP server to shut down), gives it `graceMs` to exit, then has it killed by `terminate`,
 * with a reason that says so; resolves once it has ended.
 */
export async function killAfterGrace(
  sandbox: Pick<SandboxProcess, 'stdin' | 'exited'>,
  graceMs: number,
  terminate: (why: { reason: string }) => void,
): Promise<void> {
  sandbox.stdin.end();
  const ended = await Promise.race([sandbox.exited.then(() => true), sleep(graceMs).then(() => false)]);
  if (!ended) terminate({ reason: `killed: still running ${graceMs} ms after stdin closed` });
  await sandbox.exited;
}

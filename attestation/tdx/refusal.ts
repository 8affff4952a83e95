/** A failed check's reason: verify.ts turns it into the check's detail instead of throwing. */
export class Refusal extends Error {}

export function refuse(reason: string): never {
  throw new Refusal(reason);
}

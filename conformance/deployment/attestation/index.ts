import type { Requirement } from '../context.ts';
import { bindingRequirements } from './bindings.ts';
import { attestationEndpointRequirements } from './endpoints.ts';

/** The attestation endpoints of both services, and what their verified reports bind. */
export const attestationRequirements: readonly Requirement[] = [
  ...attestationEndpointRequirements,
  ...bindingRequirements,
];

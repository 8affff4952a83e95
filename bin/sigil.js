#!/usr/bin/env node
// Sigil runs its TypeScript sources directly through tsx: no build step between a clone and `npm start`.
import { register } from 'tsx/esm/api';

register();
await import('./cli.ts');

#!/usr/bin/env node
// Sigil runs its TypeScript sources directly through tsx: no build step between a clone and `npm start`.
// The repository's tsconfig (whatever the working directory) maps @sigil/plugin-api to its sources.
import { fileURLToPath } from 'node:url';
import { register } from 'tsx/esm/api';

register({ tsconfig: fileURLToPath(new URL('../tsconfig.json', import.meta.url)) });
await import('./cli.ts');

import type { Migration } from '../core/db/migrations/index.ts';
import { gatewayMigrations } from './gateway/migrations.ts';
import { runtimeMigrations } from './runtime/migrations.ts';

/** Every service's tables, applied with the kernel's at start-up and by `sigil db migrate`. */
export const serviceMigrations: readonly Migration[] = [...gatewayMigrations, ...runtimeMigrations];

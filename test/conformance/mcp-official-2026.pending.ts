import { describeOfficialSuite } from './mcp/describe-suite.ts';

// PENDING the gateway's 2026-07-28 serving (branch fix/mcp26): the official MCP conformance suite
// at 2026-07-28 through the gateway, against the baseline run beside it. Not a *.test.ts yet, so
// mocha does not pick it up; once the gateway serves 2026-07-28, move these legs into
// mcp-official.test.ts (one gateway for all legs) and delete this file.
describeOfficialSuite('the official MCP conformance suite at 2026-07-28 through the gateway', [
  { leg: 'B', revision: '2026-07-28' },
  { leg: 'S', revision: '2026-07-28' },
  { leg: 'M', revision: '2026-07-28' },
]);

// Mocha's spec output, then the ten slowest test files (where CI's time goes), closed by the one line
// CI reads: "N passed, N failed[, N skipped]".
const Mocha = require('mocha');
const path = require('node:path');

const { EVENT_RUN_END, EVENT_SUITE_BEGIN, EVENT_SUITE_END } = Mocha.Runner.constants;
const SLOWEST_SHOWN = 10;

class SpecWithTotals extends Mocha.reporters.Spec {
  constructor(runner, options) {
    super(runner, options);
    const secondsByFile = new Map();
    const startedAt = new Map();
    runner.on(EVENT_SUITE_BEGIN, (suite) => {
      if (suite.file && suite.parent?.root) startedAt.set(suite, performance.now());
    });
    runner.on(EVENT_SUITE_END, (suite) => {
      const started = startedAt.get(suite);
      if (started === undefined) return;
      const file = path.relative(process.cwd(), suite.file);
      secondsByFile.set(file, (secondsByFile.get(file) ?? 0) + (performance.now() - started) / 1000);
    });
    runner.once(EVENT_RUN_END, () => {
      const slowest = [...secondsByFile].sort((a, b) => b[1] - a[1]).slice(0, SLOWEST_SHOWN);
      if (slowest.length > 0) {
        process.stdout.write(`\nSlowest test files:\n`);
        for (const [file, seconds] of slowest)
          process.stdout.write(`  ${seconds.toFixed(1).padStart(7)} s  ${file}\n`);
      }
      const { passes, failures, pending } = this.stats;
      const skipped = pending > 0 ? `, ${pending} skipped` : '';
      process.stdout.write(`\n${passes} passed, ${failures} failed${skipped}\n`);
    });
  }
}

module.exports = SpecWithTotals;

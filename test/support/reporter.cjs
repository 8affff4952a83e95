// Mocha's spec output, then the ten slowest test files (where CI's time goes), a "FAILED file: title:
// message" line per failure (which .ci/run repeats at its end, where a truncated log still shows them),
// closed by the one line CI reads: "N passed, N failed[, N skipped]". A file's time is the sum of its
// tests' and hooks' durations: in parallel mode the events of a file arrive together after it ran, so
// a clock read here would measure nothing.
const Mocha = require('mocha');
const path = require('node:path');

const { EVENT_HOOK_END, EVENT_RUN_END, EVENT_TEST_END, EVENT_TEST_FAIL } = Mocha.Runner.constants;
const SLOWEST_SHOWN = 10;

class SpecWithTotals extends Mocha.reporters.Spec {
  constructor(runner, options) {
    super(runner, options);
    const secondsByFile = new Map();
    const failed = [];
    const fileOf = (runnable) => path.relative(process.cwd(), runnable.file);
    const add = (runnable) => {
      if (!runnable.file || typeof runnable.duration !== 'number') return;
      const file = fileOf(runnable);
      secondsByFile.set(file, (secondsByFile.get(file) ?? 0) + runnable.duration / 1000);
    };
    runner.on(EVENT_TEST_END, add);
    runner.on(EVENT_HOOK_END, add);
    // A failed hook ends with a failure, not a hook end.
    runner.on(EVENT_TEST_FAIL, (runnable, err) => {
      if (runnable.type === 'hook') add(runnable);
      const file = runnable.file ? fileOf(runnable) : '?';
      const message = String(err?.message ?? err)
        .split('\n')[0]
        .slice(0, 300);
      failed.push(`FAILED ${file}: ${runnable.fullTitle()}: ${message}`);
    });
    runner.once(EVENT_RUN_END, () => {
      const slowest = [...secondsByFile].sort((a, b) => b[1] - a[1]).slice(0, SLOWEST_SHOWN);
      if (slowest.length > 0) {
        process.stdout.write(`\nSlowest test files (their tests' and hooks' time):\n`);
        for (const [file, seconds] of slowest)
          process.stdout.write(`  ${seconds.toFixed(1).padStart(7)} s  ${file}\n`);
      }
      if (failed.length > 0) process.stdout.write(`\n${failed.join('\n')}\n`);
      const { passes, failures, pending } = this.stats;
      const skipped = pending > 0 ? `, ${pending} skipped` : '';
      process.stdout.write(`\n${passes} passed, ${failures} failed${skipped}\n`);
    });
  }
}

module.exports = SpecWithTotals;

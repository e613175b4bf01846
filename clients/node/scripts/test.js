'use strict';
// npm test: the test files one after another, each `node --test
// --test-reporter=tap` (a test pauses Redis: nothing may run beside it).
// Exits non-zero when a file failed or ran no test.
//
//   node scripts/test.js [file...]   default: test/unit/*.test.js (no server),
//                                    then the files that need the servers
//   LF_TAP_DIR    also write each file's TAP and exit code there
//                 (<name>.tap, <name>.rc): ci.sh counts them
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const SERVER_TESTS = ['test/client.test.js', 'test/job.test.js', 'test/leadership.test.js', 'test/knex.test.js',
  'test/pool.test.js', 'test/esm.test.mjs', 'test/types.test.js', 'test/client-side.test.js',
  'test/fair.test.js', 'test/resumable.test.js', 'test/bullmq.test.js'];

function defaultFiles() {
  const unit = fs.existsSync('test/unit')
    ? fs.readdirSync('test/unit').filter((f) => f.endsWith('.test.js')).sort()
      .map((f) => `test/unit/${f}`)
    : [];
  return [...unit, ...SERVER_TESTS];
}

const files = process.argv.length > 2 ? process.argv.slice(2) : defaultFiles();
const tapDir = process.env.LF_TAP_DIR || '';
let bad = 0;
for (const file of files) {
  console.log(`# == node --test ${file}`);
  // a guard against a hung file, not a time bound on a test
  const run = spawnSync(process.execPath, ['--test', '--test-reporter=tap', file],
    { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], maxBuffer: 256 * 1024 * 1024,
      timeout: 300000, killSignal: 'SIGKILL' });
  const out = (run.stdout || '') + (run.stderr || '');
  const rc = run.status === null ? 1 : run.status;
  process.stdout.write(out);
  if (tapDir) {
    const name = path.basename(file);
    fs.writeFileSync(path.join(tapDir, `${name}.tap`), out);
    fs.writeFileSync(path.join(tapDir, `${name}.rc`), `${rc}\n`);
  }
  const passed = /^# pass [1-9]/m.test(out);
  if (rc !== 0 || !passed) {
    bad += 1;
    console.log(`# == ${file}: failed (exit ${rc}${passed ? '' : ', no test passed'})`);
  }
}
console.log(`# == node: ${files.length - bad} of ${files.length} files passed`);
process.exit(bad === 0 ? 0 : 1);

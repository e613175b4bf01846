'use strict';
// The shipped .d.ts: a small TypeScript consumer (test/types/) compiled with
// `tsc --noEmit` against the installed package, CommonJS and ESM resolution.

const { it } = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const path = require('node:path');

it('types: a TypeScript consumer compiles against the installed package (tsc --noEmit)', () => {
  const tsPkg = require.resolve('typescript/package.json');
  const bin = require(tsPkg).bin.tsc;
  const tsc = path.join(path.dirname(tsPkg), bin);
  const project = path.join(__dirname, 'types', 'tsconfig.json');
  let out;
  try {
    out = execFileSync(process.execPath, [tsc, '--noEmit', '-p', project],
      { encoding: 'utf8', timeout: 120000, stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (err) {
    assert.fail(`tsc failed:\n${err.stdout || ''}${err.stderr || ''}`);
  }
  assert.equal(out.trim(), '');
});

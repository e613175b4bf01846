'use strict';
// What each call does with each status (the answer table's "statuses"), with
// no server: the SQL edition's calls (acquire, tryAcquire, renew, release,
// releaseOutcome) given a stand-in for pg whose query answers the row the
// extension would; return, null, or exactly which LeaseError class.

const { test } = require('node:test');
const assert = require('node:assert/strict');
const { loadAnswers, built } = require('./helpers');

const table = loadAnswers();
const lf = built('index');
const IDENTITY = 'ab'.repeat(16);

/** A stand-in for a pg.Client: every query answers `row`; the statements are kept. */
function answering(row) {
  const sent = [];
  return { sent, query: async (text, values) => { sent.push(text); return { rows: [row] }; } };
}

/** What a call did: ['return', value], ['none'], or [the error's class name, err]. */
async function outcomeOf(promise) {
  try {
    const value = await promise;
    return value === null ? ['none', null] : ['return', value];
  } catch (err) {
    return [err.constructor.name, err];
  }
}

function acquireRow(row) {
  const acquired = row.acquired;
  return {
    acquired, status: row.status, resource: 'unit:r',
    identity: acquired !== false ? IDENTITY : null,
    generation: acquired !== false ? '42' : null,
    validity_ms: acquired === true ? '900' : null,
    reason: row.status === 'unavailable' || row.status === 'unknown' ? `why ${row.status}` : null,
  };
}

for (const row of table.statuses) {
  const calls = Object.keys(row).filter((k) => !['operation', 'status', 'acquired', 'renewed', 'released'].includes(k));
  for (const call of calls) {
    const want = row[call];
    test(`status: ${row.operation} ${row.status} → ${call}: ${want}`, async () => {
      assert.ok(want === 'return' || want === 'none' || /^Lease[A-Za-z]+$/.test(want), want);
      let got;
      if (row.operation === 'acquire') {
        const fn = { acquire: lf.acquire, try_acquire: lf.tryAcquire }[call];
        assert.ok(fn, `a call this library has: ${call}`);
        got = await outcomeOf(fn(answering(acquireRow(row)), 'unit:r', { ttlMs: 1000 }));
        if (got[0] === 'return') {
          assert.equal(got[1].status, row.status);
          assert.equal(got[1].generation, 42n);
        }
      } else if (row.operation === 'renew') {
        assert.equal(call, 'renew');
        const db = answering({
          renewed: row.renewed, status: row.status, validity_ms: row.renewed ? '900' : null,
          reason: row.renewed ? null : `why ${row.status}`,
        });
        got = await outcomeOf(lf.renew(db, { resource: 'unit:r', identity: IDENTITY }, { ttlMs: 1000 }));
        if (got[0] === 'return') assert.equal(got[1], 900);
      } else if (row.operation === 'release') {
        assert.equal(call, 'release');
        const answer = { released: row.released, status: row.status, reason: null };
        got = await outcomeOf(lf.release(answering(answer), { resource: 'unit:r', identity: IDENTITY }));
        if (got[0] === 'return') assert.equal(got[1], row.status);
        const out = await outcomeOf(lf.releaseOutcome(answering(answer), { resource: 'unit:r', identity: IDENTITY }));
        assert.equal(out[0], 'return');
        assert.deepEqual(out[1], answer);
      } else {
        assert.fail(`an operation this library has: ${row.operation}`);
      }
      assert.equal(got[0], want, got[1] instanceof Error ? got[1].message : String(got[1]));
      if (got[1] instanceof lf.LeaseError) {
        assert.equal(got[1].status, row.status);
        assert.equal(got[1].lease.resource, 'unit:r');
      }
    });
  }
}

test('the old names are the new functions (deprecated aliases)', () => {
  assert.equal(lf.withFence, lf.fenced);
  assert.equal(lf.withTransactionLease, lf.transactionLease);
  assert.equal(lf.withKeptAliveLease, lf.keptAliveLease);
});

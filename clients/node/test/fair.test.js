'use strict';
// { fair: true } (lease_fence 1.5, the extension's fair waiting), against a
// real PostgreSQL + Redis.
//
// Two fair waiters of a held lease are granted in the order they came: the
// first queued gets the lease when the holder releases it, the second stays
// in the queue (position 1) until the first releases. Every verb that
// acquires or campaigns passes fair through: its waiting statement shows in
// lease_fence.queue(resource) (an unfair wait never does) and is granted
// once the holder releases. A fair that is not a boolean is a TypeError
// before anything is sent. lease_fence.queue is an operator's function
// (EXECUTE revoked from PUBLIC): the tests read it as postgres.

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { setTimeout: sleep } = require('node:timers/promises');
const pg = require('pg');
const lf = require('lease-fence');
const { config, resourceName } = require('./helpers');

const TTL_MS = 60000;
const WAIT_MS = 120000;     // a safety net: the waits end on the holder's release, not on this

// a safety net against a hang, not a bound the test asserts
async function waitUntil(what, predicate, limitMs = 30000) {
  const deadline = Date.now() + limitMs;
  while (!(await predicate())) {
    if (Date.now() > deadline) throw new Error(`gave up waiting for ${what}`);
    await sleep(50);
  }
}

// a promise's state without waiting for it
async function settled(promise) {
  const pending = Symbol('pending');
  const first = await Promise.race([promise.then(() => 'resolved', () => 'rejected'),
    Promise.resolve(pending)]);
  return first !== pending;
}

describe('fair waiting through the library', () => {
  const clients = [];
  let su;          // postgres: lease_fence.queue is revoked from PUBLIC
  async function client(user) {
    const c = new pg.Client({ ...config, ...(user ? { user } : {}) });
    await c.connect();
    clients.push(c);
    return c;
  }
  // [{ position, pid }] of the resource's queue, as Redis holds it
  async function queue(resource) {
    const { rows } = await su.query('SELECT position, pid FROM lease_fence.queue($1) ' +
      'ORDER BY position', [resource]);
    return rows.map((r) => ({ position: r.position, pid: r.pid }));
  }
  before(async () => { su = await client('postgres'); });
  after(async () => { for (const c of clients) await c.end().catch(() => {}); });

  it('two fair waiters are granted in arrival order: the first gets the lease, the second stays queued at position 1', async () => {
    const res = resourceName('fair-order');
    const [holder, b, c] = [await client(), await client(), await client()];
    const a = await lf.acquire(holder, res, { ttlMs: TTL_MS });

    const bWait = lf.acquire(b, res, { ttlMs: TTL_MS, waitMs: WAIT_MS, fair: true });
    bWait.catch(() => {});
    await waitUntil('B queued', async () =>
      JSON.stringify(await queue(res)) === JSON.stringify([{ position: 1, pid: b.processID }]));
    const cWait = lf.acquire(c, res, { ttlMs: TTL_MS, waitMs: WAIT_MS, fair: true });
    cWait.catch(() => {});
    await waitUntil('C queued behind B', async () =>
      JSON.stringify(await queue(res)) === JSON.stringify([
        { position: 1, pid: b.processID }, { position: 2, pid: c.processID }]));
    assert.equal(await settled(bWait), false);
    assert.equal(await settled(cWait), false);

    assert.equal(await lf.release(holder, a), 'released');
    const bLease = await bWait;
    assert.equal(bLease.acquired, true);
    assert.ok(bLease.generation > a.generation);
    assert.equal(await settled(cWait), false, 'C was granted before B released');
    assert.deepEqual(await queue(res), [{ position: 1, pid: c.processID }]);

    assert.equal(await lf.release(b, bLease), 'released');
    const cLease = await cWait;
    assert.ok(cLease.generation > bLease.generation);
    assert.deepEqual(await queue(res), []);
    assert.equal(await lf.release(c, cLease), 'released');
  });

  // each verb: fn(db, resource) waits fairly and resolves to { generation } once granted
  const verbs = {
    tryAcquire: async (db, res) => {
      const lease = await lf.tryAcquire(db, res, { ttlMs: TTL_MS, waitMs: WAIT_MS, fair: true });
      await lf.release(db, lease);
      return lease;
    },
    acquireOutcome: async (db, res) => {
      const lease = await lf.acquireOutcome(db, res, { ttlMs: TTL_MS, waitMs: WAIT_MS, fair: true });
      await lf.release(db, lease);
      return lease;
    },
    transactionLease: (db, res) =>
      lf.transactionLease(db, res, { ttlMs: TTL_MS, waitMs: WAIT_MS, fair: true }, (lease) => lease),
    job: (db, res) => lf.job(db, res, { ttlMs: TTL_MS, waitMs: WAIT_MS, fair: true }, (lease) => lease),
    'job (the deprecated form)': (db, res) =>
      lf.job(db, res, TTL_MS, (lease) => lease, { waitMs: WAIT_MS, fair: true }),
    keptAliveLease: async (db, res) => {
      const pool = new pg.Pool({ ...config, max: 2 });
      try {
        return await lf.keptAliveLease(pool, res, { ttlMs: TTL_MS, waitMs: WAIT_MS, fair: true },
          (_client, lease) => lease);
      } finally {
        await pool.end();
      }
    },
    leadership: async (db, res) => lf.leadership(db, res, { ttlMs: TTL_MS, fair: true },
      (lead) => ({ generation: lead.term })),
  };
  for (const [name, verb] of Object.entries(verbs)) {
    it(`${name} with fair: true waits in the queue and is granted on the release`, async () => {
      const res = resourceName(`fair-${name.split(' ')[0]}`);
      const [holder, db] = [await client(), await client()];
      const a = await lf.acquire(holder, res, { ttlMs: TTL_MS });
      const waiting = verb(db, res);
      waiting.catch(() => {});
      await waitUntil(`${name} queued`, async () => (await queue(res)).length === 1);
      assert.equal(await settled(waiting), false);
      assert.equal(await lf.release(holder, a), 'released');
      const got = await waiting;
      assert.ok(got.generation > a.generation, `${got.generation} > ${a.generation}`);
      assert.deepEqual(await queue(res), []);
    });
  }

  it('a fair that is not a boolean is a TypeError before anything is sent', async () => {
    const real = await client();
    let queries = 0;
    const db = { query: (...args) => { queries += 1; return real.query(...args); } };
    const pool = new pg.Pool({ ...config, max: 2 });
    const res = resourceName('fair-bad');
    try {
      for (const bad of ['yes', 1, 0, null]) {
        const calls = {
          acquire: () => lf.acquire(db, res, { ttlMs: 1000, fair: bad }),
          tryAcquire: () => lf.tryAcquire(db, res, { ttlMs: 1000, fair: bad }),
          acquireOutcome: () => lf.acquireOutcome(db, res, { ttlMs: 1000, fair: bad }),
          transactionLease: () => lf.transactionLease(db, res, { ttlMs: 1000, fair: bad }, () => 1),
          job: () => lf.job(db, res, { ttlMs: 1000, fair: bad }, () => 1),
          'job (deprecated)': () => lf.job(db, res, 1000, () => 1, { fair: bad }),
          keptAliveLease: () => lf.keptAliveLease(pool, res, { ttlMs: 1000, fair: bad }, () => 1),
          leadership: () => lf.leadership(db, res, { ttlMs: 1000, fair: bad }, () => 1),
        };
        for (const [name, call] of Object.entries(calls)) {
          await assert.rejects(call(), (err) => err instanceof TypeError && /^fair is a boolean/.test(err.message),
            `${name} with fair ${JSON.stringify(bad)}`);
        }
      }
      assert.equal(queries, 0, 'nothing sent');
      assert.equal(pool.totalCount, 0, 'no pool connection taken');
      // false and undefined are the default: taken as before
      for (const fair of [false, undefined]) {
        const lease = await lf.acquire(db, res, { ttlMs: 1000, fair });
        assert.equal(await lf.release(db, lease), 'released');
      }
    } finally {
      await pool.end();
    }
  });
});

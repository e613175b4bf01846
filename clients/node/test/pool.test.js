'use strict';
// A pg.Pool: every transaction on one checked-out client (BEGIN,
// set_generation, the callback's statements, COMMIT / ROLLBACK), destroyed
// when the transaction failed; BEGIN and set_generation sent without waiting
// in between; and the acceptance test: two holders of one resource, the
// stale one's fenced write is StaleGeneration, the new holder's write stands
// (pg.Client and pg.Pool).

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { setTimeout: sleep } = require('node:timers/promises');
const pg = require('pg');
const lf = require('lease-fence');
const { config, resourceName, rejection, newRow, readRow, nextGeneration } = require('./helpers');

// pg-pool itself (pg's dependency): a pool that is not `instanceof pg.Pool`
// (pg.Pool is a subclass bound to pg.Client), as one from another copy of pg
// would be. A helper that told pools from clients with instanceof ran
// BEGIN, set_generation and the write on whatever connections such a pool
// handed out.
const RawPool = require(require.resolve('pg-pool', { paths: [require.resolve('pg')] }));

// Several connections, all open and idle: statements sent through the pool
// itself would land on different ones.
async function warmPool(pool, n) {
  const clients = await Promise.all(Array.from({ length: n }, () => pool.connect()));
  const pids = new Set(await Promise.all(clients.map(async (c) =>
    (await c.query('SELECT pg_backend_pid() AS p')).rows[0].p)));
  clients.forEach((c) => c.release());
  assert.equal(pids.size, n);
  assert.equal(pool.idleCount, n);
}

const POOL_SIZE = 4;
const CONCURRENT = 8;

function concurrentFences(pool, app) {
  return async () => {
    await warmPool(pool, POOL_SIZE);
    const res = resourceName('pool-many');
    const jobs = [];
    for (let i = 0; i < CONCURRENT; i++) {
      jobs.push((async () => {
        const g = await nextGeneration(app);
        const note = `${res} ${i}`;
        const seen = await lf.fenced(pool, g, async (client) => {
          // the generation is on this client's connection, in this transaction
          const { rows } = await client.query(
            'SELECT lease_fence.current_generation() AS g, pg_backend_pid() AS pid');
          assert.equal(BigInt(rows[0].g), g);
          await client.query('SELECT pg_sleep(0.05)');
          // ledger is strict: a write without this transaction's generation is LF002
          await client.query('INSERT INTO ledger (note) VALUES ($1)', [note]);
          const again = await client.query('SELECT pg_backend_pid() AS pid');
          assert.equal(again.rows[0].pid, rows[0].pid, 'one connection for the transaction');
          assert.equal(typeof client.release, 'function', 'a PoolClient');
          return rows[0].pid;
        });
        const { rows } = await app.query('SELECT fence FROM ledger WHERE note = $1', [note]);
        assert.deepEqual(rows.map((r) => BigInt(r.fence)), [g]);
        return seen;
      })());
    }
    const pids = await Promise.all(jobs);
    assert.ok(new Set(pids).size > 1, 'the transactions ran on several connections');
    // every transaction ended: no connection is left inside one
    const { rows } = await app.query(
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE usename = current_user " +
      "AND state LIKE 'idle in transaction%'");
    assert.equal(rows[0].n, 0);
  };
}

describe('pg.Pool: one client per transaction', () => {
  let app;
  let pool;
  let raw;
  before(async () => {
    app = new pg.Client(config);
    await app.connect();
    pool = new pg.Pool({ ...config, max: POOL_SIZE });
    raw = new RawPool({ ...config, Client: pg.Client, max: POOL_SIZE });
  });
  after(async () => {
    await Promise.all([pool.end(), raw.end(), app.end()]);
  });

  it('isPool: pg.Pool and a pg-pool instance are pools; clients are not', async () => {
    assert.ok(raw instanceof pg.Pool === false, 'precondition: not instanceof pg.Pool');
    assert.equal(lf.isPool(pool), true);
    assert.equal(lf.isPool(raw), true);
    assert.equal(lf.isPool(app), false);
    const c = await pool.connect();
    try {
      assert.equal(lf.isPool(c), false);
    } finally {
      c.release();
    }
  });

  it(`pg.Pool of ${POOL_SIZE} connections: ${CONCURRENT} concurrent fenced transactions, each on its own client`,
    async () => concurrentFences(pool, app)());

  it(`pg-pool instance (not instanceof pg.Pool): ${CONCURRENT} concurrent fenced transactions, each on its own client`,
    async () => concurrentFences(raw, app)());

  it('transactionLease and inTransaction on a pool: the callback gets the transaction\'s client', async () => {
    await warmPool(pool, POOL_SIZE);
    const ids = await Promise.all([1, 2, 3, 4].map(() => newRow(app)));
    const leases = await Promise.all(ids.map((id, i) =>
      lf.transactionLease(pool, resourceName(`pool-tx-${i}`), { ttlMs: 10000 }, async (l, client) => {
        const { rows } = await client.query('SELECT lease_fence.current_generation() AS g');
        assert.equal(BigInt(rows[0].g), l.generation);
        await client.query('SELECT pg_sleep(0.05)');
        await client.query("UPDATE account SET owner = 'pool tx' WHERE id = $1", [id]);
        return l;
      })));
    for (let i = 0; i < ids.length; i++) {
      assert.deepEqual(await readRow(app, ids[i]),
        { owner: 'pool tx', balance: 100, fence: leases[i].generation });
    }
    // inTransaction: BEGIN, the callback's statements and COMMIT on one client
    const xids = await Promise.all([1, 2, 3].map(() => lf.inTransaction(raw, async (c) => {
      const first = (await c.query('SELECT txid_current()::text AS x')).rows[0].x;
      await c.query('SELECT pg_sleep(0.02)');
      const second = (await c.query('SELECT txid_current()::text AS x')).rows[0].x;
      assert.equal(second, first, 'one transaction');
      return first;
    })));
    assert.equal(new Set(xids).size, 3);
  });

  it('a failed transaction rolls back and its client is destroyed, not given back', async () => {
    await warmPool(pool, POOL_SIZE);
    const id = await newRow(app);
    const res = resourceName('pool-destroy');
    const older = await nextGeneration(app);
    const newer = await nextGeneration(app);
    await lf.fenced(pool, newer, { resource: res }, (c) =>
      c.query("UPDATE account SET owner = 'newer' WHERE id = $1", [id]));
    const before = pool.totalCount;
    let pid = null;
    await rejection(lf.fenced(pool, older, async (c) => {
      pid = (await c.query('SELECT pg_backend_pid() AS p')).rows[0].p;
      await c.query("UPDATE account SET owner = 'older' WHERE id = $1", [id]);
    }), lf.StaleGeneration);
    assert.equal(pool.totalCount, before - 1, 'the client was destroyed');
    assert.notEqual(pid, null);
    const boom = new Error('boom');
    const err = await rejection(lf.fenced(pool, newer, async (c) => {
      await c.query("UPDATE account SET owner = 'rolled back' WHERE id = $1", [id]);
      throw boom;
    }), Error);
    assert.equal(err, boom, "the callback's error, unchanged");
    assert.deepEqual(await readRow(app, id), { owner: 'newer', balance: 100, fence: newer });
    // the pool still works
    await lf.fenced(pool, newer, (c) =>
      c.query("UPDATE account SET owner = 'after' WHERE id = $1", [id]));
    assert.equal((await readRow(app, id)).owner, 'after');
  });
});

describe('one round trip: BEGIN and set_generation are sent together', () => {
  it('set_generation is queued before BEGIN has answered (and on a pipeline: true client)', async () => {
    for (const pipeline of [false, true]) {
      const client = new pg.Client({ ...config, pipeline });
      await client.connect();
      try {
        const g = await nextGeneration(client);
        const log = [];
        let answered = 0;
        const query = client.query;
        client.query = function spy(...args) {
          const text = typeof args[0] === 'string' ? args[0] : args[0].text;
          log.push({ text, answeredBefore: answered });
          return query.apply(this, args).finally(() => { answered += 1; });
        };
        const id = await newRow(client);
        log.length = 0;
        answered = 0;
        await lf.fenced(client, g, (c) =>
          c.query("UPDATE account SET owner = 'one trip' WHERE id = $1", [id]));
        assert.deepEqual(log.map((e) => e.text.split(' ')[0]), ['BEGIN', 'SELECT', 'UPDATE', 'COMMIT']);
        assert.match(log[1].text, /lease_fence\.set_generation\(\$1::bigint, \$2::text\)/);
        assert.equal(log[1].answeredBefore, 0, 'set_generation sent before BEGIN answered');
        assert.equal(log[2].answeredBefore, 2);
        delete client.query;
        assert.deepEqual(await readRow(client, id), { owner: 'one trip', balance: 100, fence: g });

        // a stale generation: refused at set_generation's resource fence, rolled back
        const res = resourceName(`trip-${pipeline}`);
        const newer = await nextGeneration(client);
        await lf.fenced(client, newer, { resource: res }, async () => {});
        let ran = false;
        const err = await rejection(lf.fenced(client, g, { resource: res }, async () => { ran = true; }),
          lf.StaleGeneration);
        assert.equal(err.resource, res);
        assert.equal(ran, false);
        const { rows } = await client.query('SELECT lease_fence.current_generation() AS g');
        assert.equal(rows[0].g, null, 'no transaction left open');
      } finally {
        await client.end();
      }
    }
  });
});

describe('acceptance: two holders of one resource', () => {
  let app;
  before(async () => {
    app = new pg.Client(config);
    await app.connect();
  });
  after(async () => { await app.end(); });

  async function twoHolders(dbA, dbB) {
    const id = await newRow(app);
    const res = resourceName('two-holders');

    // A takes the lease, writes, and stalls past its TTL
    const leaseA = await lf.acquire(dbA, res, { ttlMs: 300 });
    await lf.fenced(dbA, leaseA, (c) =>
      c.query("UPDATE account SET owner = 'A', balance = balance + 1 WHERE id = $1", [id]));
    await sleep(600);

    // B takes it over and writes
    const leaseB = await lf.acquire(dbB, res, { ttlMs: 10000 });
    try {
      assert.ok(leaseB.generation > leaseA.generation);
      await lf.fenced(dbB, leaseB, (c) =>
        c.query("UPDATE account SET owner = 'B', balance = balance + 10 WHERE id = $1", [id]));

      // A wakes up: its fenced write is StaleGeneration (the resource fence) ...
      let ran = false;
      const stale = await rejection(lf.fenced(dbA, leaseA, async (c) => {
        ran = true;
        await c.query("UPDATE account SET owner = 'A late', balance = 0 WHERE id = $1", [id]);
      }), lf.StaleGeneration);
      assert.ok(stale instanceof lf.FenceError);
      assert.equal(stale.sqlstate, 'LF001');
      assert.equal(stale.cause.code, 'LF001');
      assert.deepEqual([stale.schema, stale.table, stale.resource],
        ['lease_fence', 'resource_generation', res]);
      assert.equal(ran, false, "A's write never ran");

      // ... and so is its write fencing the row only
      const row = await rejection(lf.fenced(dbA, leaseA.generation, (c) =>
        c.query("UPDATE account SET owner = 'A late', balance = 0 WHERE id = $1", [id])),
      lf.StaleGeneration);
      assert.deepEqual([row.schema, row.table, row.column, row.resource],
        ['public', 'account', 'fence', null]);

      // A's lease is gone; B's write stands
      await rejection(lf.renew(dbA, leaseA, { ttlMs: 10000 }), lf.LeaseLost);
      assert.equal(await lf.release(dbA, leaseA), 'not_held');
      assert.deepEqual(await readRow(app, id), { owner: 'B', balance: 111, fence: leaseB.generation });
    } finally {
      assert.equal(await lf.release(dbB, leaseB), 'released');
    }
  }

  it('pg.Client: the stale holder gets StaleGeneration, the new holder\'s write stands', async () => {
    const a = new pg.Client(config);
    const b = new pg.Client(config);
    await Promise.all([a.connect(), b.connect()]);
    try {
      await twoHolders(a, b);
    } finally {
      await Promise.all([a.end(), b.end()]);
    }
  });

  it('pg.Pool: the stale holder gets StaleGeneration, the new holder\'s write stands', async () => {
    const pool = new pg.Pool({ ...config, max: 3 });
    try {
      await warmPool(pool, 3);
      await twoHolders(pool, pool);
    } finally {
      await pool.end();
    }
  });
});

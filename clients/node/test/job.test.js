'use strict';
// lf.job(db, resource, { ttlMs, ... }, fn) — and its deprecated form
// lf.job(db, resource, ttlMs, fn, options), which most tests here use: the
// fenced job — a transaction-scoped lease with BEGIN and the acquire sent as one
// simple-query string (one round trip). Each test pins one outcome: the
// write committed under the lease's generation and the lease released;
// busy (fn never runs, nothing written, the client outside any
// transaction); fn's error (rolled back, released, the same error); a
// stale write (StaleGeneration, rolled back); the lease lost before COMMIT
// (LeaseLostAtCommit); and the messages on the wire.

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const { setTimeout: sleep } = require('node:timers/promises');
const pg = require('pg');
const lf = require('lease-fence');
const { config, resourceName, rejection, newRow, readRow, nextGeneration } = require('./helpers');

const env = process.env;
const REDIS_SOCK = env.LF_REDIS_SOCK || '';
const KEY_PREFIX = env.LF_KEY_PREFIX || 'lease_fence:';
const NOREDIS_USER = env.LF_NOREDIS_USER || 'app_noredis';

function redis(...args) {
  // (LF_REDIS_CLI: valkey-cli when the server is Valkey)
  return execFileSync(env.LF_REDIS_CLI || 'redis-cli', ['-s', REDIS_SOCK, ...args.map(String)],
    { encoding: 'utf8', timeout: 30000 }).trim();
}
const leaseKey = (resource) => `${KEY_PREFIX}{${resource}}`;

// Inside a transaction block? now() is the transaction's start,
// statement_timestamp() this statement's: equal only for the first
// statement of a transaction, that is, outside a block.
async function inTransaction(client) {
  const { rows } = await client.query('SELECT now() <> statement_timestamp() AS in_block');
  return rows[0].in_block;
}

// Another session takes the resource at once (no wait): the job's lease is gone.
async function freeRightAway(client, res) {
  const lease = await lf.acquire(client, res, { ttlMs: 10000 });   // LeaseBusy if still held
  assert.equal(await lf.release(client, lease), 'released');
  return lease.generation;
}

// The frontend messages a client writes (type byte + int32 length), read off
// its socket: [{ type, text }], text for Query (Q) and Parse (P).
function wireSpy(client) {
  const stream = client.connection.stream;
  const write = stream.write;
  let bytes = Buffer.alloc(0);
  stream.write = function spy(chunk, ...rest) {
    bytes = Buffer.concat([bytes, Buffer.from(chunk)]);
    return write.call(this, chunk, ...rest);
  };
  return {
    stop() { stream.write = write; },
    messages() {
      const out = [];
      for (let at = 0; at + 5 <= bytes.length;) {
        const type = String.fromCharCode(bytes[at]);
        const len = bytes.readInt32BE(at + 1);
        const body = bytes.subarray(at + 5, at + 1 + len);
        let text = null;
        if (type === 'Q') text = body.subarray(0, body.indexOf(0)).toString();
        if (type === 'P') {
          const nameEnd = body.indexOf(0);
          text = body.subarray(nameEnd + 1, body.indexOf(0, nameEnd + 1)).toString();
        }
        out.push({ type, text });
        at += 1 + len;
      }
      return out;
    },
  };
}

// Round trips: the messages up to each Sync (S) or simple Query (Q), which
// the server answers with ReadyForQuery.
function roundTrips(messages) {
  const trips = [];
  let pending = [];
  for (const m of messages) {
    pending.push(m);
    if (m.type === 'S' || m.type === 'Q') { trips.push(pending); pending = []; }
  }
  if (pending.length) trips.push(pending);
  return trips;
}

describe('job: the fenced job', () => {
  const clients = [];
  async function connect(extra = {}) {
    const c = new pg.Client({ ...config, ...extra });
    await c.connect();
    clients.push(c);
    return c;
  }
  let app;
  before(async () => { app = await connect(); });
  after(async () => { await Promise.all(clients.map((c) => c.end().catch(() => {}))); });

  it('is exported', () => {
    assert.equal(typeof lf.job, 'function');
  });

  for (const pipeline of [false, true]) {
    it(`commits the write under the lease generation and releases the lease (pipeline: ${pipeline})`, async () => {
      const client = await connect({ pipeline });
      const id = await newRow(app);
      const res = resourceName(`job-commit-${pipeline}`);
      const lease = await lf.job(client, res, 10000, async (l, c) => {
        assert.equal(c, client);
        const { rows } = await c.query('SELECT lease_fence.current_generation() AS g');
        assert.equal(BigInt(rows[0].g), l.generation);
        assert.equal(redis('GET', leaseKey(res)), l.identity);
        await c.query("UPDATE account SET owner = 'job', balance = balance + 1 WHERE id = $1", [id]);
        return l;
      }, { minValidityMs: 500 });
      assert.equal(lease.acquired, true);
      assert.equal(lease.status, 'acquired');
      assert.equal(lease.resource, res);
      assert.equal(typeof lease.generation, 'bigint');
      assert.ok(lease.validityMs >= 500);
      assert.deepEqual(await readRow(app, id), { owner: 'job', balance: 101, fence: lease.generation });
      assert.equal(redis('EXISTS', leaseKey(res)), '0', 'released at COMMIT');
      assert.ok(await freeRightAway(app, res) > lease.generation);
      assert.equal(await inTransaction(client), false);
    });
  }

  it('busy: rejects with LeaseBusy before fn runs, nothing written, the client outside any transaction', async () => {
    const client = await connect();
    const id = await newRow(app);
    const res = resourceName('job-busy');
    const holder = await lf.acquire(app, res, { ttlMs: 10000 });
    let ran = false;
    const err = await rejection(lf.job(client, res, 10000, async (l, c) => {
      ran = true;
      await c.query("UPDATE account SET owner = 'busy' WHERE id = $1", [id]);
    }), lf.LeaseBusy);
    assert.equal(ran, false);
    assert.ok(err instanceof lf.LeaseDenied);
    assert.ok(!(err instanceof lf.LeaseUnknown));
    assert.equal(err.status, 'busy');
    assert.equal(err.lease.acquired, false);
    assert.equal(await inTransaction(client), false);
    assert.deepEqual(await readRow(client, id), { owner: 'nobody', balance: 100, fence: 0n });
    assert.equal(redis('GET', leaseKey(res)), holder.identity);
    assert.equal(await lf.release(app, holder), 'released');
    // the same client runs a job right after
    const lease = await lf.job(client, res, 10000, async (l, c) => {
      await c.query("UPDATE account SET owner = 'after busy' WHERE id = $1", [id]);
      return l;
    });
    assert.deepEqual(await readRow(app, id), { owner: 'after busy', balance: 100, fence: lease.generation });
  });

  it('unavailable: rejects with LeaseUnavailable before fn runs', async () => {
    const client = await connect({ user: NOREDIS_USER });
    let ran = false;
    await rejection(lf.job(client, resourceName('job-unavailable'), 10000, () => { ran = true; }),
      lf.LeaseUnavailable);
    assert.equal(ran, false);
    assert.equal(await inTransaction(client), false);
  });

  it("fn's error rolls back, releases the lease, and rejects unchanged", async () => {
    const client = await connect();
    const id = await newRow(app);
    const res = resourceName('job-throws');
    const boom = new RangeError('the job failed');
    let lease = null;
    const err = await rejection(lf.job(client, res, 10000, async (l, c) => {
      lease = l;
      await c.query("UPDATE account SET owner = 'rolled back' WHERE id = $1", [id]);
      throw boom;
    }), RangeError);
    assert.equal(err, boom);
    assert.deepEqual(await readRow(app, id), { owner: 'nobody', balance: 100, fence: 0n });
    assert.equal(redis('EXISTS', leaseKey(res)), '0');
    assert.ok(await freeRightAway(app, res) > lease.generation);
    assert.equal(await inTransaction(client), false);
  });

  it('a stale write in the job is StaleGeneration (LF001), rolled back', async () => {
    const client = await connect();
    const id = await newRow(app);
    const mine = await newRow(app);
    const res = resourceName('job-stale');
    let newer = null;
    let lease = null;
    const err = await rejection(lf.job(client, res, 10000, async (l, c) => {
      lease = l;
      await c.query("UPDATE account SET owner = 'job' WHERE id = $1", [mine]);
      newer = await nextGeneration(app);
      assert.ok(newer > l.generation);
      await lf.fenced(app, newer, (o) =>                       // rows only
        o.query("UPDATE account SET owner = 'newer' WHERE id = $1", [id]));
      await c.query("UPDATE account SET owner = 'stale' WHERE id = $1", [id]);
    }), lf.StaleGeneration);
    assert.equal(err.sqlstate, 'LF001');
    assert.deepEqual([err.schema, err.table, err.column], ['public', 'account', 'fence']);
    assert.equal(err.cause.code, 'LF001');
    assert.deepEqual(await readRow(app, id), { owner: 'newer', balance: 100, fence: newer });
    assert.deepEqual(await readRow(app, mine), { owner: 'nobody', balance: 100, fence: 0n });
    assert.ok(await freeRightAway(app, res) > lease.generation);
    assert.equal(await inTransaction(client), false);
  });

  // fn catches the refused write and returns: the transaction is aborted, and
  // PostgreSQL answers its COMMIT with ROLLBACK. Nothing was committed, so
  // job and transactionLease must not resolve as if it had been.
  for (const verb of ['job', 'transactionLease']) {
    it(`${verb}: fn catches a refused write and returns; COMMIT answered ROLLBACK rejects with TransactionRolledBack (cause: the StaleGeneration), nothing committed`, async () => {
      const client = await connect();
      const id = await newRow(app);
      const mine = await newRow(app);
      const res = resourceName(`job-caught-${verb}`);
      let caught = null;
      let lease = null;
      const run = (fn) => (verb === 'job' ? lf.job(client, res, 10000, fn)
        : lf.transactionLease(client, res, { ttlMs: 10000 }, fn));
      const err = await rejection(run(async (l, c) => {
        lease = l;
        await c.query("UPDATE account SET owner = 'job' WHERE id = $1", [mine]);
        const newer = await nextGeneration(app);
        await lf.fenced(app, newer, (o) => o.query("UPDATE account SET owner = 'newer' WHERE id = $1", [id]));
        try {
          await c.query("UPDATE account SET owner = 'stale' WHERE id = $1", [id]);
        } catch (e) {
          caught = e;                                  // the job goes on as if nothing happened
        }
        return 'done';
      }), lf.TransactionRolledBack);
      assert.equal(caught.code, 'LF001', 'fn caught the refused write');
      assert.ok(!(err instanceof lf.FenceError), 'not a fence error: the transaction was rolled back');
      assert.ok(err.cause instanceof lf.StaleGeneration, `cause: ${err.cause}`);
      assert.equal(err.cause.cause, caught, 'the very error fn caught');
      assert.match(err.message, /rolled back at COMMIT/);
      assert.deepEqual(await readRow(app, mine), { owner: 'nobody', balance: 100, fence: 0n },
        'nothing of the transaction was committed');
      assert.equal(await inTransaction(client), false);
      assert.ok(await freeRightAway(app, res) > lease.generation, 'the lease was released');
    });
  }

  it('the lease key deleted while fn runs: COMMIT rejects with LeaseLostAtCommit (LF010)', async () => {
    // fn outlives half the TTL before COMMIT, so a server that asks Redis at
    // COMMIT only for an older lease (remaining < minValidity + ttl/2) asks
    const client = await connect();
    const id = await newRow(app);
    const res = resourceName('job-lost');
    const err = await rejection(lf.job(client, res, 2000, async (l, c) => {
      await c.query("UPDATE account SET owner = 'doomed' WHERE id = $1", [id]);
      assert.equal(redis('DEL', leaseKey(res)), '1');
      await sleep(1100);
    }), lf.LeaseLostAtCommit);
    assert.equal(err.sqlstate, 'LF010');
    assert.ok(err instanceof lf.FenceError);
    assert.deepEqual(await readRow(app, id), { owner: 'nobody', balance: 100, fence: 0n });
    assert.equal(await inTransaction(client), false);
  });

  it('stale is retried once, in the same transaction', async () => {
    const client = await connect();
    const id = await newRow(app);
    const res = resourceName('job-stale-acquire');
    const stored = (await nextGeneration(app)) + 1000n;
    redis('SET', `${leaseKey(res)}:gen`, stored);
    const lease = await lf.job(client, res, 10000, async (l, c) => {
      await c.query("UPDATE account SET owner = 'healed' WHERE id = $1", [id]);
      return l;
    });
    assert.ok(lease.generation > stored);
    assert.deepEqual(await readRow(app, id), { owner: 'healed', balance: 100, fence: lease.generation });
    assert.equal(redis('EXISTS', leaseKey(res)), '0');
  });

  it('the resource is sent as a quoted literal: quotes and backslashes survive', async () => {
    const client = await connect();
    const res = resourceName("job-q'uote\\back'); DROP TABLE account; --");
    const lease = await lf.job(client, res, 10000, (l) => l);
    assert.equal(lease.resource, res);
    assert.equal(redis('EXISTS', leaseKey(res)), '0');
    assert.ok(await freeRightAway(app, res) > lease.generation);
  });

  it('bad numbers reject before anything is sent', async () => {
    const client = await connect();
    const spy = wireSpy(client);
    try {
      for (const [ttl, opts] of [[1.5, {}], ['1000', {}], [1000, { waitMs: NaN }],
        [1000, { minValidityMs: '0; DROP TABLE account' }]]) {
        let ran = false;
        await assert.rejects(lf.job(client, resourceName('job-bad'), ttl, () => { ran = true; }, opts),
          TypeError);
        assert.equal(ran, false);
      }
      await assert.rejects(lf.job(client, 42, 1000, () => {}), TypeError);
    } finally {
      spy.stop();
    }
    assert.deepEqual(spy.messages(), []);
  });

  for (const pipeline of [false, true]) {
    it(`one round trip before fn: BEGIN and the acquire in one Query message (pipeline: ${pipeline})`, async () => {
      const client = await connect({ pipeline });
      const id = await newRow(app);
      const res = resourceName(`job-trip-${pipeline}`);
      const spy = wireSpy(client);
      let lease;
      let before;
      try {
        lease = await lf.job(client, res, 10000, async (l, c) => {
          before = spy.messages().length;
          await c.query("UPDATE account SET owner = 'one trip' WHERE id = $1", [id]);
          return l;
        });
      } finally {
        spy.stop();
      }
      const messages = spy.messages();
      const trips = roundTrips(messages);
      // before fn: exactly one message, a simple Query with both statements
      assert.equal(before, 1, JSON.stringify(messages));
      assert.equal(messages[0].type, 'Q');
      assert.match(messages[0].text, /^BEGIN; SELECT .* FROM lease_fence\.acquire\(/);
      assert.match(messages[0].text, /'transaction'/);
      // then fn's UPDATE (Parse/Bind/Describe/Execute/Sync), then COMMIT
      assert.equal(trips.length, 3, JSON.stringify(messages));
      assert.match(trips[1][0].text, /^UPDATE account/);
      assert.deepEqual(trips[2].map((m) => [m.type, m.text]), [['Q', 'COMMIT']]);
      assert.deepEqual(await readRow(app, id), { owner: 'one trip', balance: 100, fence: lease.generation });
    });
  }

  it('job(db, resource, { ttlMs, minValidityMs }, fn): the options object before fn; commits under the lease and releases it', async () => {
    const client = await connect();
    const id = await newRow(app);
    const res = resourceName('job-options');
    const lease = await lf.job(client, res, { ttlMs: 10000, minValidityMs: 500 }, async (l, c) => {
      assert.equal(c, client);
      assert.equal(redis('GET', leaseKey(res)), l.identity);
      await c.query("UPDATE account SET owner = 'options', balance = balance + 1 WHERE id = $1", [id]);
      return l;
    });
    assert.equal(lease.acquired, true);
    assert.equal(lease.resource, res);
    assert.ok(lease.validityMs >= 500);
    assert.deepEqual(await readRow(app, id), { owner: 'options', balance: 101, fence: lease.generation });
    assert.equal(redis('EXISTS', leaseKey(res)), '0', 'released at COMMIT');
    assert.equal(await inTransaction(client), false);
  });

  it('both forms send the same statement: job(db, r, { ttlMs, minValidityMs, waitMs }, fn) and the deprecated job(db, r, ttlMs, fn, { ... })', async () => {
    const client = await connect();
    const res = resourceName('job-forms');
    const sent = [];
    for (const form of ['options', 'positional']) {
      const spy = wireSpy(client);
      try {
        const fn = (l) => l;
        const lease = form === 'options'
          ? await lf.job(client, res, { ttlMs: 9000, minValidityMs: 700, waitMs: 30 }, fn)
          : await lf.job(client, res, 9000, fn, { minValidityMs: 700, waitMs: 30 });
        assert.equal(lease.acquired, true, form);
      } finally {
        spy.stop();
      }
      sent.push(spy.messages()[0].text);
    }
    assert.match(sent[0], /CAST\(9000 AS bigint\), CAST\(700 AS bigint\), 'transaction', CAST\(30 AS bigint\)/);
    assert.equal(sent[1], sent[0]);
    assert.equal(redis('EXISTS', leaseKey(res)), '0');
  });

  it('the options form: bad options reject (TypeError) before anything is sent, fn not run', async () => {
    const client = await connect();
    const spy = wireSpy(client);
    try {
      for (const opts of [{}, { ttlMs: '1000' }, { ttlMs: 1.5 },
        { ttlMs: 1000, waitMs: NaN }, { ttlMs: 1000, minValidityMs: '0; DROP TABLE account' }]) {
        let ran = false;
        await assert.rejects(lf.job(client, resourceName('job-bad-options'), opts, () => { ran = true; }),
          TypeError, JSON.stringify(opts));
        assert.equal(ran, false);
      }
    } finally {
      spy.stop();
    }
    assert.deepEqual(spy.messages(), []);
  });

  it('a third argument neither a number (deprecated) nor an options object, fn missing, or options after fn: TypeError before anything is sent, fn not run', async () => {
    const client = await connect();
    const spy = wireSpy(client);
    try {
      const res = resourceName('job-bad-form');
      for (const third of [undefined, null, '1000', true, 1000n]) {
        let ran = false;
        await assert.rejects(lf.job(client, res, third, () => { ran = true; }), TypeError, String(third));
        assert.equal(ran, false);
      }
      // fn before the options (a form never released) and fn alone
      let ran = false;
      await assert.rejects(lf.job(client, res, () => { ran = true; }, { ttlMs: 1000 }), TypeError);
      await assert.rejects(lf.job(client, res, () => { ran = true; }), TypeError);
      assert.equal(ran, false);
      // the options object with no fn after it, or a second options object after fn
      await assert.rejects(lf.job(client, res, { ttlMs: 1000 }), TypeError);
      await assert.rejects(lf.job(client, res, { ttlMs: 1000 }, { waitMs: 10 }), TypeError);
      await assert.rejects(lf.job(client, res, { ttlMs: 1000 }, () => { ran = true; }, { waitMs: 10 }),
        TypeError);
      assert.equal(ran, false);
    } finally {
      spy.stop();
    }
    assert.deepEqual(spy.messages(), []);
  });

  it('a pool: one client for the job, given back after it (also after busy), destroyed after a failure', async () => {
    const pool = new pg.Pool({ ...config, max: 2 });
    try {
      const id = await newRow(app);
      const res = resourceName('job-pool');
      let pid = null;
      const lease = await lf.job(pool, res, 10000, async (l, client) => {
        assert.equal(typeof client.release, 'function', 'a PoolClient');
        pid = (await client.query('SELECT pg_backend_pid() AS p')).rows[0].p;
        await client.query("UPDATE account SET owner = 'pool job' WHERE id = $1", [id]);
        const again = (await client.query('SELECT pg_backend_pid() AS p')).rows[0].p;
        assert.equal(again, pid, 'one connection for the job');
        return l;
      });
      assert.deepEqual(await readRow(app, id), { owner: 'pool job', balance: 100, fence: lease.generation });
      assert.equal(pool.totalCount, 1);
      assert.equal(pool.idleCount, 1, 'given back');

      const holder = await lf.acquire(app, res, { ttlMs: 10000 });
      await rejection(lf.job(pool, res, 10000, () => assert.fail('must not run')), lf.LeaseBusy);
      assert.equal(pool.totalCount, 1, 'a definite no rolled back: the client was given back');
      assert.equal(await lf.release(app, holder), 'released');

      await rejection(lf.job(pool, res, 10000, () => { throw new Error('boom'); }), Error);
      assert.equal(pool.totalCount, 0, 'a failed job: the client was destroyed');
      assert.equal(redis('EXISTS', leaseKey(res)), '0');
    } finally {
      await pool.end();
    }
  });
});

'use strict';
// lease-fence from node-postgres, against a real PostgreSQL + Redis (and
// PgBouncer), through the installed package. Run by ci.sh as
// `node --test --test-reporter=tap` in an app that installed lease-fence's
// tarball, with PGHOST, PGPORT, PGDATABASE, PGUSER, LF_NOREDIS_USER,
// LF_REDIS_SOCK, LF_BOUNCER_HOST and LF_BOUNCER_PORT from
// test/clients/run.sh. Each test pins an outcome: a wrong status, a
// swallowed unknown or a stale write let through makes it fail.

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const { randomBytes } = require('node:crypto');
const { setTimeout: sleep } = require('node:timers/promises');
const pg = require('pg');
const lf = require('lease-fence');

const env = process.env;
const PGHOST = env.PGHOST || '/var/run/postgresql';
const PGPORT = Number(env.PGPORT || 5432);
const DATABASE = env.PGDATABASE || 'appdb';
const APP_USER = env.PGUSER || 'app';
const NOREDIS_USER = env.LF_NOREDIS_USER || 'app_noredis';
const REDIS_SOCK = env.LF_REDIS_SOCK || '';
const BOUNCER_HOST = env.LF_BOUNCER_HOST || '';
const BOUNCER_PORT = Number(env.LF_BOUNCER_PORT || 6432);
const KEY_PREFIX = env.LF_KEY_PREFIX || 'lease_fence:';

const clients = [];
async function closeAll() {
  await Promise.all(clients.splice(0).map((c) => c.end().catch(() => {})));
}
async function connect({ user = APP_USER, host = PGHOST, port = PGPORT } = {}) {
  const client = new pg.Client({ host, port, database: DATABASE, user });
  await client.connect();
  clients.push(client);
  return client;
}

function redis(...args) {
  // (LF_REDIS_CLI: valkey-cli when the server is Valkey)
  return execFileSync(env.LF_REDIS_CLI || 'redis-cli', ['-s', REDIS_SOCK, ...args.map(String)],
    { encoding: 'utf8', timeout: 30000 }).trim();
}
const leaseKey = (resource) => `${KEY_PREFIX}{${resource}}`;
const resourceName = (tag) => `node:${tag}:${randomBytes(4).toString('hex')}`;

async function newRow(client) {
  const { rows } = await client.query(
    "INSERT INTO account (owner, balance) VALUES ('nobody', 100) RETURNING id");
  return rows[0].id;
}
async function readRow(client, id) {
  const { rows } = await client.query(
    'SELECT owner, balance, fence FROM account WHERE id = $1', [id]);
  return { owner: rows[0].owner, balance: rows[0].balance, fence: BigInt(rows[0].fence) };
}
async function currentGeneration(client) {
  const { rows } = await client.query('SELECT lease_fence.current_generation() AS g');
  return rows[0].g === null ? null : BigInt(rows[0].g);
}

// assert.rejects with a class check that also returns the error
async function rejection(promise, cls) {
  let caught = null;
  await assert.rejects(promise, (err) => { caught = err; return err instanceof cls; });
  return caught;
}

describe('lease_fence from node-postgres', () => {
  let app;
  before(async () => { app = await connect(); });
  after(closeAll);

  it('transaction scope: the write carries the lease generation, COMMIT keeps it and releases', async () => {
    const id = await newRow(app);
    const res = resourceName('tx');
    const lease = await lf.transactionLease(app, res, { ttlMs: 10000, minValidityMs: 1000 },
      async (l, client) => {
        assert.equal(await currentGeneration(client), l.generation);
        assert.equal(redis('GET', leaseKey(res)), l.identity);
        await client.query("UPDATE account SET owner = 'tx', balance = balance + 10 WHERE id = $1", [id]);
        return l;
      });
    assert.equal(lease.acquired, true);
    assert.equal(lease.status, 'acquired');
    assert.match(lease.identity, /^[0-9a-f]{32}$/);
    assert.ok(lease.validityMs >= 1000);
    assert.deepEqual(await readRow(app, id), { owner: 'tx', balance: 110, fence: lease.generation });
    assert.equal(redis('EXISTS', leaseKey(res)), '0', 'released at commit');
    assert.equal(await currentGeneration(app), null);
  });

  it('explicit scope: a writer that stalled past its TTL gets StaleGeneration (LF001)', async () => {
    const id = await newRow(app);
    const res = resourceName('stale');
    const b = await connect();

    const leaseA = await lf.acquire(app, res, { ttlMs: 300 });
    await lf.fenced(app, leaseA.generation, (c) =>
      c.query("UPDATE account SET owner = 'A' WHERE id = $1", [id]));
    await sleep(600);                                // A stalls; its lease expires

    const leaseB = await lf.acquire(b, res, { ttlMs: 10000 });
    assert.ok(leaseB.generation > leaseA.generation);
    await lf.fenced(b, leaseB.generation, (c) =>
      c.query("UPDATE account SET owner = 'B', balance = balance + 1 WHERE id = $1", [id]));

    const err = await rejection(lf.fenced(app, leaseA.generation, (c) =>
      c.query("UPDATE account SET owner = 'A late', balance = 0 WHERE id = $1", [id])),
    lf.StaleGeneration);
    assert.ok(err instanceof lf.FenceError);
    assert.equal(err.sqlstate, 'LF001');
    assert.equal(err.cause.code, 'LF001');
    assert.deepEqual([err.schema, err.table, err.column, err.resource],
      ['public', 'account', 'fence', null]);

    const lost = await rejection(lf.renew(app, leaseA, { ttlMs: 10000 }), lf.LeaseLost);
    assert.equal(lost.status, 'lost');
    assert.equal(await lf.release(app, leaseA), 'not_held');
    assert.equal(redis('GET', leaseKey(res)), leaseB.identity, "B's lease untouched");
    assert.ok(await lf.renew(b, leaseB, { ttlMs: 10000 }) > 0);
    assert.equal(await lf.release(b, leaseB), 'released');
    assert.deepEqual(await readRow(app, id), { owner: 'B', balance: 101, fence: leaseB.generation });
  });

  it('fenced(client, lease) fences the resource: a stale INSERT is refused before it runs', async () => {
    const res = resourceName('resfence');
    const b = await connect();
    const notes = async (suffix) => Number((await app.query(
      'SELECT count(*) AS n FROM ledger WHERE note = $1', [`${res} ${suffix}`])).rows[0].n);

    const leaseA = await lf.acquire(app, res, { ttlMs: 300 });
    await lf.fenced(app, leaseA, (c) =>
      c.query('INSERT INTO ledger (note) VALUES ($1)', [`${res} A`]));
    await sleep(600);                                // A stalls; its lease expires

    const leaseB = await lf.acquire(b, res, { ttlMs: 10000 });
    try {
      await lf.fenced(b, leaseB, async () => {});  // B holds the resource, no row yet
      let ran = false;
      const err = await rejection(lf.fenced(app, leaseA, async (c) => {
        ran = true;
        await c.query('INSERT INTO ledger (note) VALUES ($1)', [`${res} A late`]);
      }), lf.StaleGeneration);
      assert.equal(err.sqlstate, 'LF001');
      assert.deepEqual([err.schema, err.table, err.column, err.resource],
        ['lease_fence', 'resource_generation', null, res]);
      assert.equal(ran, false, 'the function never ran');
      assert.equal(await notes('A late'), 0);

      // rows only: no row fence stops that INSERT
      await lf.fenced(app, leaseA.generation, (c) =>
        c.query('INSERT INTO ledger (note) VALUES ($1)', [`${res} A rows only`]));
      assert.equal(await notes('A rows only'), 1);

      // { resource } names the resource for a bare generation
      const { rows } = await app.query('SELECT lease_fence.next_generation() AS g');
      await lf.fenced(app, rows[0].g, { resource: `${res}:other` }, async () => {});
      const stored = await app.query(
        'SELECT generation FROM lease_fence.resource_fences WHERE resource = $1', [`${res}:other`]);
      assert.equal(BigInt(stored.rows[0].generation), BigInt(rows[0].g));
    } finally {
      await lf.release(b, leaseB);
    }
  });

  it('busy is LeaseBusy (acquired false), never LeaseUnknown, tryAcquire resolves null, and the block does not run', async () => {
    const res = resourceName('busy');
    const holder = await lf.acquire(app, res, { ttlMs: 10000 });
    const other = await connect();
    try {
      assert.equal(await lf.tryAcquire(other, res, { ttlMs: 10000 }), null, 'busy: null, no Lease');
      const raw = await lf.acquireOutcome(other, res, { ttlMs: 10000 });
      assert.deepEqual([raw.acquired, raw.status, raw.identity, raw.generation],
        [false, 'busy', null, null]);
      const err = await rejection(lf.acquire(other, res, { ttlMs: 10000 }), lf.LeaseBusy);
      assert.ok(err instanceof lf.LeaseDenied);
      assert.ok(!(err instanceof lf.LeaseUnknown));
      let ran = false;
      await rejection(lf.transactionLease(other, res, { ttlMs: 10000 }, async () => { ran = true; }),
        lf.LeaseBusy);
      assert.equal(ran, false);
      assert.equal(redis('GET', leaseKey(res)), holder.identity);
    } finally {
      await lf.release(app, holder);
    }
  });

  it('unknown (Redis paused past command_timeout_ms) is LeaseUnknown with acquired null, not busy', async () => {
    // One connection per call: an unknown outcome drops the backend's Redis
    // connection, and the first acquire on a new one first checks that
    // key_prefix is this database's (docs/guides/redis-deployments.md, "One key_prefix per database"),
    // which would time out during the pause ("unavailable"). So each backend
    // takes and releases a lease before the pause.
    const [c, c2, c3, c4] = [await connect(), await connect(), await connect(), await connect()];
    for (const x of [c, c2, c3, c4]) {
      await x.query('SET lease_fence.command_timeout_ms = 150');
      await x.query('SET lease_fence.cleanup_timeout_ms = 150');
      await lf.release(x, await lf.acquire(x, resourceName('unknown-warm'), { ttlMs: 10000 }));
    }
    const id = await newRow(app);
    const res = resourceName('unknown');
    let raw, err, tryErr, ran = false;
    redis('CLIENT', 'PAUSE', 3000, 'ALL');
    try {
      raw = await lf.acquireOutcome(c, res, { ttlMs: 10000 });
      err = await rejection(lf.acquire(c2, res, { ttlMs: 10000 }), lf.LeaseUnknown);
      await rejection(lf.transactionLease(c3, res, { ttlMs: 10000 }, async () => { ran = true; }),
        lf.LeaseUnknown);
      tryErr = await rejection(lf.tryAcquire(c4, res, { ttlMs: 10000 }), lf.LeaseUnknown);
    } finally {
      redis('PING');                         // returns when the pause is over
    }
    assert.equal(raw.acquired, null);
    assert.equal(raw.status, 'unknown');
    assert.match(raw.identity, /^[0-9a-f]{32}$/);
    assert.equal(typeof raw.generation, 'bigint');
    assert.ok(!(err instanceof lf.LeaseDenied));
    assert.equal(err.status, 'unknown');
    assert.equal(err.lease.acquired, null);
    assert.equal(tryErr.status, 'unknown', 'tryAcquire: unknown is never null');
    assert.match(tryErr.lease.identity, /^[0-9a-f]{32}$/);
    assert.equal(ran, false);
    assert.deepEqual(await readRow(app, id), { owner: 'nobody', balance: 100, fence: 0n });
    // not applied (the paused requests' connections were closed), so a new
    // acquire with a new generation gets it
    assert.equal(redis('EXISTS', leaseKey(res)), '0');
    const fresh = await lf.acquire(c, res, { ttlMs: 10000 });
    assert.ok(fresh.generation > err.lease.generation);
    assert.equal(await lf.release(c, fresh), 'released');
  });

  it('unavailable (Redis unreachable) is LeaseUnavailable from acquire and tryAcquire, acquired false', async () => {
    const c = await connect({ user: NOREDIS_USER });
    const res = resourceName('unavailable');
    const raw = await lf.acquireOutcome(c, res, { ttlMs: 10000 });
    assert.deepEqual([raw.acquired, raw.status], [false, 'unavailable']);
    const err = await rejection(lf.acquire(c, res, { ttlMs: 10000 }), lf.LeaseUnavailable);
    assert.ok(err instanceof lf.LeaseDenied);
    const tryErr = await rejection(lf.tryAcquire(c, res, { ttlMs: 10000 }), lf.LeaseUnavailable);
    assert.equal(tryErr.status, 'unavailable', 'unavailable is not busy: never null');
    assert.equal(tryErr.lease.acquired, false);
    assert.equal(await lf.release(c, { resource: res, identity: '0'.repeat(32) }), 'unavailable');
  });

  it('lease key deleted before COMMIT: LeaseLostAtCommit (LF010), write rolled back', async () => {
    const id = await newRow(app);
    const res = resourceName('lf010');
    const err = await rejection(lf.transactionLease(app, res, { ttlMs: 2000 }, async (l, c) => {
      await c.query("UPDATE account SET owner = 'doomed' WHERE id = $1", [id]);
      assert.equal(redis('DEL', leaseKey(res)), '1');
      // past half the TTL: a server that skips asking Redis at COMMIT while
      // the lease is young (more than minValidity + ttl/2 left) asks now
      await sleep(1100);
    }), lf.LeaseLostAtCommit);
    assert.equal(err.sqlstate, 'LF010');
    assert.equal(err.cause.code, 'LF010');
    assert.deepEqual(await readRow(app, id), { owner: 'nobody', balance: 100, fence: 0n });
    assert.equal(await currentGeneration(app), null);
  });

  it('strict table without generation is MissingGeneration (LF002); other fence value is ConflictingGeneration (LF003)', async () => {
    await rejection(lf.inTransaction(app, (c) =>
      c.query("INSERT INTO ledger (note) VALUES ('node unfenced')")), lf.MissingGeneration);
    const { rows } = await app.query('SELECT lease_fence.next_generation() AS g');
    const g = BigInt(rows[0].g);
    await lf.fenced(app, g, (c) => c.query("INSERT INTO ledger (note) VALUES ('node fenced')"));
    const id = await newRow(app);
    await rejection(lf.fenced(app, g, (c) =>
      c.query('UPDATE account SET fence = $1 WHERE id = $2', [(g + 1n).toString(), id])),
    lf.ConflictingGeneration);
    assert.deepEqual(await readRow(app, id), { owner: 'nobody', balance: 100, fence: 0n });
  });

  it('a generation never issued is UnissuedGeneration (LF004)', async () => {
    const { rows } = await app.query('SELECT lease_fence.next_generation() AS g');
    const g = BigInt(rows[0].g);
    const id = await newRow(app);
    const err = await rejection(lf.fenced(app, g + 1000000n, (c) =>
      c.query("UPDATE account SET owner = 'typo' WHERE id = $1", [id])), lf.UnissuedGeneration);
    assert.equal(err.sqlstate, 'LF004');
    assert.ok(err instanceof lf.FenceError);
    assert.deepEqual([err.schema, err.table, err.column], ['public', 'account', 'fence']);
    assert.deepEqual(await readRow(app, id), { owner: 'nobody', balance: 100, fence: 0n });
  });

  it('fence errors name the row (schema, table, column) or the resource, from the error fields', async () => {
    const id = await newRow(app);
    const res = resourceName('fields');
    const gen = async () => BigInt((await app.query('SELECT lease_fence.next_generation() AS g')).rows[0].g);
    const older = await gen();
    const newer = await gen();
    await lf.fenced(app, newer, { resource: res }, (c) =>
      c.query("UPDATE account SET owner = 'new' WHERE id = $1", [id]));

    const row = await rejection(lf.fenced(app, older, (c) =>
      c.query("UPDATE account SET owner = 'old' WHERE id = $1", [id])), lf.StaleGeneration);
    assert.deepEqual([row.schema, row.table, row.column, row.resource],
      ['public', 'account', 'fence', null]);
    assert.deepEqual([row.cause.schema, row.cause.table, row.cause.column, row.cause.constraint],
      ['public', 'account', 'fence', undefined]);
    assert.ok(row.detail, 'DETAIL is still there, for humans');
    assert.ok(!('stored' in row), 'generations are not parsed from DETAIL');

    let ran = false;
    const resErr = await rejection(lf.fenced(app, older, { resource: res }, async () => { ran = true; }),
      lf.StaleGeneration);
    assert.deepEqual([resErr.schema, resErr.table, resErr.column, resErr.resource],
      ['lease_fence', 'resource_generation', null, res]);
    assert.equal(resErr.cause.constraint, res);
    assert.equal(ran, false);

    const missing = await rejection(lf.inTransaction(app, (c) =>
      c.query("INSERT INTO ledger (note) VALUES ('node unfenced, fields')")), lf.MissingGeneration);
    assert.deepEqual([missing.schema, missing.table, missing.column], ['public', 'ledger', 'fence']);
    // translateError on the pg error itself; anything else passes unchanged
    const again = lf.translateError(missing.cause);
    assert.ok(again instanceof lf.MissingGeneration);
    assert.equal(again.table, 'ledger');
    assert.equal(lf.translateError(missing), missing);
    const other = new Error('not a database error');
    assert.equal(lf.translateError(other), other);
    assert.deepEqual(await readRow(app, id), { owner: 'new', balance: 100, fence: newer });
  });

  it('reason says why for unavailable, on the row, the error, renew and releaseOutcome; null when granted', async () => {
    const c = await connect({ user: NOREDIS_USER });
    const res = resourceName('reason');
    const raw = await lf.acquireOutcome(c, res, { ttlMs: 10000 });
    assert.equal(raw.status, 'unavailable');
    assert.match(raw.reason, /\bRedis\b/);
    const err = await rejection(lf.acquire(c, res, { ttlMs: 10000 }), lf.LeaseUnavailable);
    assert.equal(err.reason, err.lease.reason);
    assert.match(err.reason, /\bRedis\b/);
    assert.ok(err.message.includes(err.reason));
    const ghost = { resource: res, identity: '0'.repeat(32) };
    const renewErr = await rejection(lf.renew(c, ghost, { ttlMs: 10000 }), lf.LeaseUnavailable);
    assert.match(renewErr.reason, /\bRedis\b/);
    const out = await lf.releaseOutcome(c, ghost);
    assert.deepEqual([out.released, out.status], [false, 'unavailable']);
    assert.match(out.reason, /\bRedis\b/);

    const lease = await lf.acquire(app, res, { ttlMs: 10000 });
    assert.equal(lease.status, 'acquired');
    assert.equal(lease.reason, null);
    assert.deepEqual(await lf.releaseOutcome(app, lease),
      { released: true, status: 'released', reason: null });
  });

  it('pg.Pool: the explicit flow checks out a client per transaction', async () => {
    const pool = new pg.Pool({ host: PGHOST, port: PGPORT, database: DATABASE, user: APP_USER, max: 2 });
    try {
      const id = await newRow(app);
      const res = resourceName('pool');
      const lease = await lf.acquire(pool, res, { ttlMs: 10000 });
      await lf.fenced(pool, lease.generation, (c) =>
        c.query("UPDATE account SET owner = 'pool' WHERE id = $1", [id]));
      assert.equal(await lf.release(pool, lease), 'released');
      assert.deepEqual(await readRow(app, id), { owner: 'pool', balance: 100, fence: lease.generation });
    } finally {
      await pool.end();
    }
  });
});

// the signal's reason, once it aborts
function abortReason(signal) {
  return new Promise((resolve) => {
    if (signal.aborted) resolve(signal.reason);
    else signal.addEventListener('abort', () => resolve(signal.reason), { once: true });
  });
}

describe('waiting and keep-alive', () => {
  let app;
  let pool;
  before(async () => {
    app = await connect();
    pool = new pg.Pool({ host: PGHOST, port: PGPORT, database: DATABASE, user: APP_USER, max: 3 });
  });
  after(async () => {
    await pool.end();
    await closeAll();
  });

  it('waitMs: a waiting acquire is woken by the release, long before the TTL', async () => {
    const res = resourceName('wait');
    const other = await connect();
    const holder = await lf.acquire(app, res, { ttlMs: 60000 });
    const t0 = performance.now();
    let settled = false;
    const waiting = lf.acquire(other, res, { ttlMs: 10000, waitMs: 30000 })
      .finally(() => { settled = true; });
    await sleep(300);
    assert.equal(settled, false, 'B waits while A holds the lease');
    assert.equal(await lf.release(app, holder), 'released');
    const lease = await waiting;
    assert.ok(performance.now() - t0 >= 300);
    assert.equal(lease.acquired, true);
    assert.equal(lease.status, 'acquired');
    assert.ok(lease.generation > holder.generation);
    assert.equal(redis('GET', leaseKey(res)), lease.identity);
    assert.equal(await lf.release(other, lease), 'released');
  });

  it('waitMs: transactionLease waits for the holder transaction to commit', async () => {
    const res = resourceName('wait-tx');
    const other = await connect();
    const id = await newRow(app);
    let waiting;
    let settled = false;
    const leaseA = await lf.transactionLease(app, res, { ttlMs: 60000 }, async (l, c) => {
      await c.query("UPDATE account SET owner = 'A' WHERE id = $1", [id]);
      waiting = lf.transactionLease(other, res, { ttlMs: 10000, waitMs: 30000 }, async (lb, cb) => {
        await cb.query("UPDATE account SET owner = 'B after A' WHERE id = $1", [id]);
        return lb;
      }).finally(() => { settled = true; });
      waiting.catch(() => {});                   // awaited below
      await sleep(300);
      assert.equal(settled, false, "B waits while A's transaction holds the lease");
      return l;
    });
    const leaseB = await waiting;
    assert.ok(leaseB.generation > leaseA.generation);
    assert.deepEqual(await readRow(app, id), { owner: 'B after A', balance: 100, fence: leaseB.generation });
    assert.equal(redis('EXISTS', leaseKey(res)), '0');
  });

  it('waitMs: the deadline is LeaseBusy after at least waitMs; statement_timeout is 57014', async () => {
    const res = resourceName('wait-deadline');
    const other = await connect();
    const holder = await lf.acquire(app, res, { ttlMs: 60000 });
    try {
      let t0 = performance.now();
      const err = await rejection(lf.acquire(other, res, { ttlMs: 10000, waitMs: 700 }), lf.LeaseBusy);
      assert.ok(performance.now() - t0 >= 700);
      assert.equal(err.lease.acquired, false);
      t0 = performance.now();
      assert.equal(await lf.tryAcquire(other, res, { ttlMs: 10000, waitMs: 300 }), null);
      assert.ok(performance.now() - t0 >= 300);
      const raw = await lf.acquireOutcome(other, res, { ttlMs: 10000, waitMs: 300 });
      assert.deepEqual([raw.acquired, raw.status, raw.identity], [false, 'busy', null]);
      await other.query('SET statement_timeout = 300');
      const cancelled = await rejection(lf.acquire(other, res, { ttlMs: 10000, waitMs: 30000 }), Error);
      assert.equal(cancelled.code, '57014');
      assert.ok(!(cancelled instanceof lf.LeaseError));
      await other.query('RESET statement_timeout');
      assert.equal(redis('GET', leaseKey(res)), holder.identity, "the holder's key is untouched");
    } finally {
      await lf.release(app, holder);
    }
  });

  it('keptAliveLease: a 3 s statement outlives a 1 s TTL, then a fenced write succeeds', async () => {
    const id = await newRow(app);
    const res = resourceName('kept');
    const lease = await lf.keptAliveLease(pool, res, { ttlMs: 1000 }, async (client, l, signal) => {
      assert.equal(l.acquired, true);
      assert.ok(signal instanceof AbortSignal);
      assert.equal(await lf.keepaliveState(app, l), 'active');
      await client.query('SELECT pg_sleep(3)');
      assert.equal(redis('GET', leaseKey(res)), l.identity, 'still held after three TTLs');
      assert.equal(signal.aborted, false, 'the watch saw it active all along');
      await lf.fenced(client, l, (c) =>
        c.query("UPDATE account SET owner = 'kept alive' WHERE id = $1", [id]));
      const { rows } = await client.query(
        'SELECT scope, state FROM lease_fence.leases WHERE identity = $1', [l.identity]);
      assert.deepEqual(rows, [{ scope: 'session', state: 'held' }]);
      return l;
    });
    assert.deepEqual(await readRow(app, id), { owner: 'kept alive', balance: 100, fence: lease.generation });
    assert.equal(redis('EXISTS', leaseKey(res)), '0', 'released at the end');
    assert.equal(await lf.keepaliveState(app, lease), null);
  });

  it('keptAliveLease: the key overwritten aborts the signal with LeaseLost; the next fenced write is LF010', { timeout: 60000 }, async () => {
    const id = await newRow(app);
    const res = resourceName('kept-lost');
    const thief = 'f'.repeat(32);
    let held;
    const err = await rejection(lf.keptAliveLease(pool, res, { ttlMs: 3000 }, async (client, l, signal) => {
      held = l;
      await lf.fenced(client, l, (c) =>
        c.query("UPDATE account SET owner = 'before the loss' WHERE id = $1", [id]));
      redis('SET', leaseKey(res), thief, 'PX', 60000);
      const reason = await abortReason(signal);
      assert.ok(reason instanceof lf.LeaseLost, `aborted with ${reason}`);
      assert.equal(reason.status, 'lost');
      assert.equal(reason.lease.identity, l.identity);
      assert.throws(() => signal.throwIfAborted(), lf.LeaseLost);
      assert.equal(await lf.keepaliveState(app, l), 'lost');
      const lost = await rejection(lf.fenced(client, l, (c) =>
        c.query("UPDATE account SET owner = 'after the loss' WHERE id = $1", [id])), lf.LeaseLostAtCommit);
      assert.equal(lost.sqlstate, 'LF010');
      assert.equal(lost.cause.code, 'LF010');
      // rows only: the row write itself is refused
      await rejection(lf.fenced(client, l.generation, (c) =>
        c.query("UPDATE account SET owner = 'after the loss' WHERE id = $1", [id])), lf.LeaseLostAtCommit);
    }), lf.LeaseLost);
    assert.equal(err.status, 'lost', 'the end: release said not_held');
    assert.deepEqual(await readRow(app, id), { owner: 'before the loss', balance: 100, fence: held.generation });
    assert.equal(redis('GET', leaseKey(res)), thief, "the other identity's key is untouched");
    redis('DEL', leaseKey(res));
    assert.equal(await lf.keepaliveState(app, held), null, 'the release acknowledged the loss');
  });

  it("keptAliveLease: fn's error propagates and the lease is released; it needs a pg.Pool", async () => {
    const res = resourceName('kept-throw');
    const boom = new Error('boom');
    let held;
    const err = await rejection(lf.keptAliveLease(pool, res, { ttlMs: 10000 }, async (client, l) => {
      held = l;
      assert.equal(redis('GET', leaseKey(res)), l.identity);
      await client.query('BEGIN');               // left open: rolled back at the end
      throw boom;
    }), Error);
    assert.equal(err, boom);
    assert.equal(redis('EXISTS', leaseKey(res)), '0');
    assert.equal(await lf.keepaliveState(app, held.identity), null);
    const { rows } = await pool.query('SELECT 1 AS one');
    assert.equal(rows[0].one, 1);
    await assert.rejects(lf.keptAliveLease(app, res, { ttlMs: 1000 }, async () => {}), TypeError);
    assert.equal(redis('EXISTS', leaseKey(res)), '0');
  });

  it('transactionLease keepalive: a 3 s transaction under a 1 s TTL commits', async () => {
    const id = await newRow(app);
    const res = resourceName('tx-keepalive');
    const lease = await lf.transactionLease(app, res, { ttlMs: 1000, keepalive: true }, async (l, c) => {
      await c.query('SELECT pg_sleep(3)');
      assert.equal(redis('GET', leaseKey(res)), l.identity);
      await c.query("UPDATE account SET owner = 'long tx' WHERE id = $1", [id]);
      return l;
    });
    assert.deepEqual(await readRow(app, id), { owner: 'long tx', balance: 100, fence: lease.generation });
    assert.equal(redis('EXISTS', leaseKey(res)), '0', 'released at commit');
  });

  it('tryAcquire resolves to the Lease when free, as acquire; renew and release it', async () => {
    const res = resourceName('try-free');
    const lease = await lf.tryAcquire(app, res, { ttlMs: 10000 });
    assert.notEqual(lease, null);
    assert.deepEqual([lease.acquired, lease.status, typeof lease.generation], [true, 'acquired', 'bigint']);
    assert.equal(redis('GET', leaseKey(res)), lease.identity);
    assert.ok(await lf.renew(app, lease, { ttlMs: 10000 }) > 0);
    assert.equal(await lf.release(app, lease), 'released');
  });

  it('the old names withFence, withTransactionLease, withKeptAliveLease still work (deprecated aliases)', async () => {
    assert.equal(lf.withFence, lf.fenced);
    assert.equal(lf.withTransactionLease, lf.transactionLease);
    assert.equal(lf.withKeptAliveLease, lf.keptAliveLease);
    const id = await newRow(app);
    const res = resourceName('old-names');
    const g = await lf.withTransactionLease(app, res, { ttlMs: 10000 }, async (l, c) => {
      await c.query("UPDATE account SET owner = 'old tx' WHERE id = $1", [id]);
      return l.generation;
    });
    assert.deepEqual(await readRow(app, id), { owner: 'old tx', balance: 100, fence: g });
    const pool = new pg.Pool({ host: PGHOST, port: PGPORT, database: DATABASE, user: APP_USER, max: 2 });
    try {
      const kept = await lf.withKeptAliveLease(pool, res, { ttlMs: 10000 }, async (client, l) => {
        await lf.withFence(client, l, (c) =>
          c.query("UPDATE account SET owner = 'old fence' WHERE id = $1", [id]));
        return l.generation;
      });
      assert.ok(kept > g);
      assert.deepEqual(await readRow(app, id), { owner: 'old fence', balance: 100, fence: kept });
    } finally {
      await pool.end();
    }
  });

  it('keepalive on an explicit lease is ERROR 22023, nothing written', async () => {
    const res = resourceName('keepalive-explicit');
    const err = await rejection(app.query(
      "SELECT * FROM lease_fence.acquire($1::text, 1000, scope => 'explicit', keepalive => true)",
      [res]), Error);
    assert.equal(err.code, '22023');
    assert.match(err.message, /session- or transaction-scoped/);
    assert.equal(redis('EXISTS', leaseKey(res)), '0');
  });
});

describe('behind PgBouncer (transaction pooling)', { skip: !BOUNCER_HOST }, () => {
  after(closeAll);

  it('explicit scope + set_generation: acquire, write, renew, release on different client connections', async () => {
    const direct = await connect();
    const [a1, a2, b] = await Promise.all([1, 2, 3].map(() =>
      connect({ host: BOUNCER_HOST, port: BOUNCER_PORT })));
    const pids = new Set();
    for (const c of [a1, a2, b]) pids.add((await c.query('SELECT pg_backend_pid() AS p')).rows[0].p);
    assert.equal(pids.size, 1, 'precondition: the clients share one server connection');

    const id = await newRow(direct);
    const res = resourceName('pgbouncer');
    const leaseA = await lf.acquire(a1, res, { ttlMs: 10000 });
    await rejection(lf.acquire(b, res, { ttlMs: 10000 }), lf.LeaseBusy);
    await lf.fenced(a2, leaseA.generation, (c) =>
      c.query("UPDATE account SET owner = 'A via pgbouncer' WHERE id = $1", [id]));
    assert.equal(await currentGeneration(b), null, 'the generation ended with the transaction');
    assert.ok(await lf.renew(b, leaseA, { ttlMs: 10000 }) > 0);
    assert.equal(await lf.release(a2, leaseA), 'released');

    const leaseB = await lf.acquire(b, res, { ttlMs: 10000 });
    await lf.fenced(b, leaseB.generation, (c) =>
      c.query("UPDATE account SET owner = 'B via pgbouncer' WHERE id = $1", [id]));
    const err = await rejection(lf.fenced(a1, leaseA.generation, (c) =>
      c.query("UPDATE account SET owner = 'A late' WHERE id = $1", [id])), lf.StaleGeneration);
    assert.deepEqual([err.table, err.column], ['account', 'fence']);
    assert.equal(await lf.release(a1, leaseB), 'released');
    assert.deepEqual(await readRow(direct, id),
      { owner: 'B via pgbouncer', balance: 100, fence: leaseB.generation });
  });
});

'use strict';
/**
 * lease_fence_client — use lease_fence from Node.js with node-postgres (`pg`).
 *
 * Nothing here talks to Redis: the extension does, from inside PostgreSQL.
 * The helper calls lease_fence.acquire / renew / release, sets the
 * generation, and turns the extension's answers into named errors.
 *
 * Fence errors (a write or COMMIT was refused), all `FenceError`:
 *   StaleGeneration        LF001  a newer holder wrote the row or fenced the resource:
 *                                 you lost the lease
 *   MissingGeneration      LF002  strict table written (or resource fenced) without a
 *                                 generation / NULL fence
 *   ConflictingGeneration  LF003  the statement wrote a fence other than the current generation
 *   UnissuedGeneration     LF004  the generation was never issued by this database: fix the caller
 *   LeaseLostAtCommit      LF010  a transaction-scoped lease was gone at COMMIT, or a
 *                                 kept-alive lease was lost: its owner's next fenced write
 *                                 under its generation (and the COMMIT of a transaction
 *                                 that made one) is refused. Rolled back
 * The pg error is `err.cause`; never retry a FenceError with the same generation.
 * Each carries the error's fields as the server set them (never parsed from
 * text): err.sqlstate; for a refused row err.schema, err.table and err.column
 * (the fence column: 'public', 'account', 'fence'); for a refused resource
 * fence err.resource (sent as the error's constraint field), with schema
 * 'lease_fence' and table 'resource_generation'; null where the server sent
 * none (an LF010 at COMMIT names nothing). err.detail is text for humans and
 * logs: the stored and supplied generations (LF001) and the highest issued one
 * (LF004) are there only, and code must not parse it. translateError(err)
 * maps a pg error (Knex rejects with pg's own error) and leaves others alone.
 *
 * Lease outcomes, all `LeaseError` — the split that matters is "no" versus
 * "don't know":
 *   LeaseDenied            a definite no (acquired/renewed false): LeaseBusy,
 *                          LeaseUnavailable (nothing was sent), LeaseLost (renew;
 *                          a kept-alive lease that was lost),
 *                          and LeaseDenied itself for 'stale' / 'insufficient_validity'
 *   LeaseUnknown           acquired IS NULL: Redis may have granted it. NOT a
 *                          LeaseDenied. Do not proceed and do not treat the
 *                          resource as free; err.lease has identity and
 *                          generation, release(client, err.lease) is safe, a
 *                          retry is a new acquire later, never a forced DEL.
 * err.reason (and lease.reason on an acquire's row, and releaseOutcome's
 * reason) says why for 'unavailable', 'unknown' and 'unreplicated' ("could not
 * connect to Redis at ...", "timed out waiting for Redis", ...), null otherwise;
 * the error's message ends with it.
 *
 * Transaction scope (one transaction; COMMIT verifies, else LF010, and releases):
 *
 *   await withTransactionLease(client, 'account:1', { ttlMs: 5000, minValidityMs: 500 },
 *     async (lease) => {
 *       await client.query('UPDATE account SET balance = balance + 1 WHERE id = 1');
 *     });
 *
 * Explicit scope (the one to use behind PgBouncer in transaction pooling):
 *
 *   let lease;
 *   try {
 *     lease = await acquire(pool, 'account:1', { ttlMs: 30000 });
 *   } catch (err) {
 *     if (err instanceof LeaseUnknown) { await release(pool, err.lease); throw err; }
 *     if (err instanceof LeaseDenied) return;        // busy / unavailable / stale
 *     throw err;
 *   }
 *   await withFence(pool, lease, async (client) => {
 *     await client.query("UPDATE account SET owner = 'me' WHERE id = 1");
 *   });                     // BEGIN; SELECT lease_fence.set_generation($1, $2); ...; COMMIT
 *   await renew(pool, lease, { ttlMs: 30000 });        // LeaseLost: stop working
 *   await release(pool, lease);
 *
 * withFence(pool, lease, fn) fences the lease's resource as well as the rows:
 * a stale holder's transaction fails (StaleGeneration) whatever it writes,
 * new rows included. withFence(pool, generation, fn) fences rows only;
 * withFence(pool, generation, { resource }, fn) names the resource.
 *
 * Query builders and ORMs that write every column back (Knex
 * .update({ ...loadedRow, qty }), the fence as loaded) need nothing more:
 * with a current generation a fence written at or below the stored one counts
 * as leaving it alone, so two such updates in one fenced transaction pass and
 * a stale holder's is StaleGeneration (test_orm.js):
 *
 *   await knex.transaction(async (trx) => {
 *     await trx.raw('SELECT lease_fence.set_generation(?, ?)', [String(g), resource]);
 *     await trx('item').where({ id }).update({ ...row, qty: row.qty + 1 });
 *   }).catch((err) => { throw lf.translateError(err); });
 *
 * Waiting for a busy lease: { waitMs } (acquire, tryAcquire,
 * withTransactionLease, withKeptAliveLease). While someone else holds the
 * lease the backend waits, woken by the holder's release (or its TTL's end),
 * for at most waitMs; still busy then is LeaseBusy as before. The wait is one
 * statement: statement_timeout or a cancel rejects with pg's error, code
 * '57014', not a LeaseError. 0 (the default) answers at once.
 *
 * Keep-alive: a background worker in the server renews the lease at a third
 * of its TTL while the owning session is *active* — running a statement, or
 * idle for less than the TTL (awaiting anything but a query on that client
 * counts as idle) — and never past lease_fence.keepalive_max_ms (default 10
 * minutes). It needs shared_preload_libraries = 'lease_fence' (else 55000)
 * and a session or transaction scope:
 *
 *   await withKeptAliveLease(pool, 'report:daily', { ttlMs: 3000 },
 *     async (client, lease, signal) => {
 *       await client.query('SELECT build_report()');   // may run for many TTLs
 *       signal.throwIfAborted();                         // LeaseLost once it was lost
 *       await withFence(client, lease, (c) =>            // LeaseLostAtCommit if lost
 *         c.query("UPDATE report SET done = true WHERE name = 'daily'"));
 *     });
 *
 *   await withTransactionLease(client, 'account:1', { ttlMs: 3000, keepalive: true },
 *     async (lease, c) => { ... });                     // one long transaction
 *
 * A kept-alive lease is lost when a renewal finds the key gone or someone
 * else's (or cannot be confirmed in time), when its session is idle longer
 * than the TTL, or at keepalive_max_ms. Then the owner's next fenced write
 * under its generation, and the COMMIT of a transaction that made one,
 * reject with LeaseLostAtCommit (LF010): the fence, not the signal, keeps a
 * lost holder's writes out. The signal comes from
 * lease_fence.keepalive_state polled on *another* pool connection: a query on
 * the owner's client would make its session look active and keep an idle
 * owner's lease alive.
 *
 * `client` may be a pg.Client (not inside a transaction) or a pg.Pool, from
 * which a client is checked out for the transaction. Generations are BigInt.
 */

const pg = require('pg');

class FenceError extends Error {
  constructor(message, {
    detail = null, cause, schema = null, table = null, column = null, resource = null,
  } = {}) {
    super(detail ? `${message} (${detail})` : message, { cause });
    this.name = this.constructor.name;
    this.sqlstate = this.constructor.sqlstate;
    this.detail = detail;
    this.schema = schema;
    this.table = table;
    this.column = column;
    this.resource = resource;
  }
}
FenceError.sqlstate = 'LF000';

class StaleGeneration extends FenceError {}
StaleGeneration.sqlstate = 'LF001';

class MissingGeneration extends FenceError {}
MissingGeneration.sqlstate = 'LF002';

class ConflictingGeneration extends FenceError {}
ConflictingGeneration.sqlstate = 'LF003';

class UnissuedGeneration extends FenceError {}
UnissuedGeneration.sqlstate = 'LF004';

class LeaseLostAtCommit extends FenceError {}
LeaseLostAtCommit.sqlstate = 'LF010';

const FENCE_ERRORS = new Map(
  [StaleGeneration, MissingGeneration, ConflictingGeneration, UnissuedGeneration, LeaseLostAtCommit]
    .map((cls) => [cls.sqlstate, cls]));

/**
 * The FenceError for a pg error with SQLSTATE LF001/2/3/4/LF010 (its code and
 * fields, never its detail text); any other error as is.
 */
function translateError(err) {
  const cls = err && !(err instanceof FenceError) && FENCE_ERRORS.get(err.code);
  if (!cls) return err;
  return new cls(err.message, {
    detail: err.detail || null,
    cause: err,
    schema: err.schema || null,
    table: err.table || null,
    column: err.column || null,
    resource: err.constraint || null,
  });
}

class LeaseError extends Error {
  constructor(status, lease, message, reason = null) {
    super(reason ? `${message} (${reason})` : message);
    this.name = this.constructor.name;
    this.status = status;
    this.lease = lease;
    this.reason = reason;
  }
}
class LeaseDenied extends LeaseError {}
class LeaseBusy extends LeaseDenied {}
class LeaseUnavailable extends LeaseDenied {}
class LeaseLost extends LeaseDenied {}
class LeaseUnknown extends LeaseError {}

function leaseError(status, lease, what, resource, reason = null) {
  const cls = { busy: LeaseBusy, unavailable: LeaseUnavailable, lost: LeaseLost,
    unknown: LeaseUnknown }[status] || LeaseDenied;
  return new cls(status, lease, `${what} of lease ${JSON.stringify(resource)}: ${status}`, reason);
}

/**
 * A lease_fence.lease row: acquired is true, false or null (unknown); reason
 * says why for unavailable, unknown and unreplicated (null otherwise).
 */
function toLease(row) {
  return {
    acquired: row.acquired,
    status: row.status,
    resource: row.resource,
    identity: row.identity,
    generation: row.generation === null ? null : BigInt(row.generation),
    validityMs: row.validity_ms === null ? null : Number(row.validity_ms),
    reason: row.reason,
  };
}

function generationParam(generation) {
  const g = BigInt(generation);          // throws on anything that is not an integer
  if (g < 0n) throw new RangeError(`a generation is non-negative, got ${g}`);
  return g.toString();
}

/** Run fn(client) with a dedicated client: a pg.Pool lends one. */
async function withClient(clientOrPool, fn) {
  if (clientOrPool instanceof pg.Pool) {
    const client = await clientOrPool.connect();
    try {
      return await fn(client);
    } finally {
      client.release();
    }
  }
  return fn(clientOrPool);
}

/** BEGIN; fn(client); COMMIT — or ROLLBACK; LF errors (COMMIT's too) as FenceError. */
async function inTransaction(clientOrPool, fn) {
  return withClient(clientOrPool, async (client) => {
    await client.query('BEGIN');
    let result;
    try {
      result = await fn(client);
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {});
      throw translateError(err);
    }
    try {
      await client.query('COMMIT');
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {});
      throw translateError(err);
    }
    return result;
  });
}

const ACQUIRE_SQL =
  'SELECT acquired, status, resource, identity, generation, validity_ms, reason ' +
  'FROM lease_fence.acquire($1::text, $2::bigint, $3::bigint, $4::text, $5::bigint, $6::boolean)';

async function acquireRow(client, resource, ttlMs, minValidityMs, scope, waitMs = 0,
  keepalive = false) {
  const { rows } = await client.query(ACQUIRE_SQL,
    [resource, ttlMs, minValidityMs, scope, waitMs, Boolean(keepalive)]);
  return toLease(rows[0]);
}

async function acquireChecked(client, resource, ttlMs, minValidityMs, scope, retryStale,
  waitMs = 0, keepalive = false) {
  let lease = await acquireRow(client, resource, ttlMs, minValidityMs, scope, waitMs, keepalive);
  if (lease.status === 'stale' && retryStale) {
    // stale set nothing and moved next_generation() past the stored one
    lease = await acquireRow(client, resource, ttlMs, minValidityMs, scope, waitMs, keepalive);
  }
  if (lease.acquired !== true) {
    throw leaseError(lease.status, lease, 'acquire', resource, lease.reason);
  }
  return lease;
}

/**
 * Explicit-scope acquire that never throws for an outcome: the row, with
 * acquired true, false (busy, stale, unavailable, insufficient_validity) or
 * null (unknown). waitMs > 0 waits up to that long while the lease is busy.
 */
async function tryAcquire(client, resource, { ttlMs, minValidityMs = 0, waitMs = 0 }) {
  return acquireRow(client, resource, ttlMs, minValidityMs, 'explicit', waitMs);
}

/**
 * Take an explicit-scope lease: resolves to the lease, or rejects with
 * LeaseBusy / LeaseUnavailable / LeaseDenied (definite no) or LeaseUnknown.
 * 'stale' is retried once unless retryStale is false. waitMs > 0: while the
 * lease is busy, wait up to that long (woken by the holder's release or its
 * TTL's end); LeaseBusy if it is still busy then.
 */
async function acquire(client, resource,
  { ttlMs, minValidityMs = 0, retryStale = true, waitMs = 0 }) {
  return acquireChecked(client, resource, ttlMs, minValidityMs, 'explicit', retryStale, waitMs);
}

/**
 * fn(lease, client) in one transaction that holds a transaction-scoped
 * lease: its generation fences every write in it; COMMIT verifies the lease
 * (LeaseLostAtCommit otherwise) and releases it. A failed acquire rejects
 * before fn runs; any error rolls back. waitMs > 0 waits up to that long for
 * a busy lease. keepalive: true has the server's keep-alive worker renew the
 * lease while the transaction runs (so ttlMs need not cover all of it); once
 * lost, the next fenced write or the COMMIT rejects with LeaseLostAtCommit.
 */
async function withTransactionLease(clientOrPool, resource,
  { ttlMs, minValidityMs = 0, retryStale = true, waitMs = 0, keepalive = false }, fn) {
  return inTransaction(clientOrPool, async (client) => {
    const lease = await acquireChecked(client, resource, ttlMs, minValidityMs,
      'transaction', retryStale, waitMs, keepalive);
    return fn(lease, client);
  });
}

/**
 * lease_fence.keepalive_state(identity): 'active', 'lost' or null (no
 * kept-alive lease has it: released, its session ended, never kept alive).
 * Ask on a connection other than the lease owner's. `lease` is a lease or an
 * identity.
 */
async function keepaliveState(clientOrPool, lease) {
  const identity = typeof lease === 'string' ? lease : lease.identity;
  const { rows } = await clientOrPool.query(
    'SELECT lease_fence.keepalive_state($1::text) AS state', [identity]);
  return rows[0].state;
}

/**
 * fn(client, lease, signal) holding a session-scoped lease that the server
 * keeps alive while fn runs.
 *
 * Checks a dedicated client out of `pool` (a pg.Pool with max >= 2), takes
 * acquire(..., scope => 'session', keepalive => true) on it (rejecting as
 * acquire does, before fn runs; waitMs as there), and runs fn with that
 * client. The lease outlives ttlMs while the client's session is active —
 * running a statement, or idle for less than ttlMs — up to
 * lease_fence.keepalive_max_ms. Write under it with withFence(client, lease, ...).
 *
 * `signal` is an AbortSignal that aborts, reason a LeaseLost, when
 * lease_fence.keepalive_state, polled every pollMs (default
 * max(50, ttlMs / 3)) on *another* pool connection, says 'lost' or null;
 * reason a LeaseUnknown (err.cause the pg error) when a poll fails — the
 * lease can no longer be watched. The fence stands either way: once the
 * lease is lost, fenced writes under it reject with LeaseLostAtCommit.
 *
 * At the end, always: polling stops, the lease is released, and the client
 * goes back to the pool (destroyed instead if the release failed or the
 * acquire's outcome is unknown: the session's end releases its lease).
 *   - fn resolved: resolves to its value; but if the release answers
 *     'not_held' the lease was lost before fn ended and it rejects with
 *     LeaseLost (what fn committed before the loss stays committed; fenced
 *     writes after it were refused). 'unavailable' / 'unknown' do not reject:
 *     the lease is no longer kept alive and expires by its TTL.
 *   - fn rejected: ROLLBACK (in case fn left a transaction open), the
 *     release, and fn's error, unchanged.
 * Do not release the lease yourself inside fn. Not for use behind a
 * transaction-pooling proxy: a session lease belongs to the server session.
 */
async function withKeptAliveLease(pool, resource,
  { ttlMs, minValidityMs = 0, waitMs = 0, pollMs, retryStale = true }, fn) {
  if (!(pool instanceof pg.Pool)) {
    throw new TypeError('withKeptAliveLease needs a pg.Pool: the lease is watched on another ' +
      'of its connections');
  }
  if (typeof fn !== 'function') throw new TypeError('withKeptAliveLease needs a function to run');
  if (pool.options.max !== undefined && pool.options.max < 2) {
    throw new RangeError('withKeptAliveLease needs a pg.Pool with max >= 2: one client holds ' +
      'the lease, another watches it');
  }
  const interval = pollMs !== undefined ? pollMs : Math.max(50, Math.floor(ttlMs / 3));
  const client = await pool.connect();
  let lease;
  try {
    lease = await acquireChecked(client, resource, ttlMs, minValidityMs, 'session', retryStale,
      waitMs, true);
  } catch (err) {
    // a definite no leaves nothing behind; anything else (unknown: it may be
    // held by this session) ends the session, which releases its leases
    client.release(err instanceof LeaseDenied ? undefined : true);
    throw err;
  }

  const controller = new AbortController();
  let stopped = false;
  let timer = null;
  let polling = null;
  const poll = async () => {
    let state;
    try {
      state = await keepaliveState(pool, lease);
    } catch (err) {
      if (!stopped) {
        const unknown = new LeaseUnknown('unknown', lease,
          `kept-alive lease ${JSON.stringify(resource)} cannot be watched: ${err.message}`);
        unknown.cause = err;
        controller.abort(unknown);
      }
      return;
    }
    if (!stopped && state !== 'active') {
      controller.abort(new LeaseLost('lost', lease, `kept-alive lease ${JSON.stringify(resource)}: ` +
        (state === null ? 'no longer kept alive' : 'lost')));
    }
  };
  const schedule = () => {
    if (stopped || controller.signal.aborted) return;
    timer = setTimeout(() => {
      polling = poll().finally(() => { polling = null; schedule(); });
    }, interval);
  };
  schedule();

  let result;
  let failure = null;
  try {
    result = await fn(client, lease, controller.signal);
  } catch (err) {
    failure = { err };
  }
  stopped = true;
  clearTimeout(timer);
  if (polling) await polling;

  if (failure) await client.query('ROLLBACK').catch(() => {});
  let status;
  let releaseError = null;
  try {
    status = await release(client, lease);
  } catch (err) {
    releaseError = err;
  }
  client.release(releaseError ? true : undefined);
  if (failure) throw failure.err;
  if (releaseError) throw releaseError;
  if (status === 'not_held') {
    throw new LeaseLost('lost', lease, `kept-alive lease ${JSON.stringify(resource)} was lost ` +
      'before the function ended (release: not_held)');
  }
  return result;
}

/**
 * fn(client) in one transaction whose writes carry a generation, fencing a
 * resource: BEGIN; SELECT lease_fence.set_generation($1, $2) (the generation,
 * and the resource or null: one statement with bind parameters sets the
 * transaction's generation and fences the resource as
 * lease_fence.fence_resource does, which needs EXECUTE on it); fn; COMMIT.
 *   withFence(clientOrPool, lease, fn)                 the lease's generation and resource
 *   withFence(clientOrPool, generation, fn)            rows only
 *   withFence(clientOrPool, generationOrLease, { resource }, fn)
 * The resource fence rejects (StaleGeneration, err.resource) before fn runs
 * when a newer holder fenced the resource, and otherwise holds it to COMMIT,
 * so that a newer holder waits. The generation ends with the transaction:
 * safe behind a transaction pooler.
 */
async function withFence(clientOrPool, generationOrLease, optsOrFn, maybeFn) {
  const fn = typeof optsOrFn === 'function' ? optsOrFn : maybeFn;
  const opts = typeof optsOrFn === 'function' ? {} : (optsOrFn || {});
  if (typeof fn !== 'function') throw new TypeError('withFence needs a function to run');
  const isLease = generationOrLease !== null && typeof generationOrLease === 'object';
  const g = generationParam(isLease ? generationOrLease.generation : generationOrLease);
  const resource = opts.resource !== undefined ? opts.resource
    : isLease ? generationOrLease.resource : null;
  if (resource !== null && typeof resource !== 'string') {
    throw new TypeError(`a resource is a string, got ${typeof resource}`);
  }
  return inTransaction(clientOrPool, async (client) => {
    await client.query('SELECT lease_fence.set_generation($1::bigint, $2::text)', [g, resource]);
    return fn(client);
  });
}

/**
 * Extend an explicit lease; resolves to the validity in ms. Rejects with
 * LeaseLost (never recreated), LeaseDenied (insufficient_validity,
 * unreplicated), LeaseUnavailable or LeaseUnknown; err.reason says why for
 * unavailable, unknown and unreplicated.
 */
async function renew(client, lease, { ttlMs, minValidityMs = 0 }) {
  const { rows } = await client.query(
    'SELECT renewed, status, validity_ms, reason FROM lease_fence.renew($1::text, $2::text, $3::bigint, $4::bigint)',
    [lease.resource, lease.identity, ttlMs, minValidityMs]);
  if (rows[0].renewed !== true) {
    throw leaseError(rows[0].status, lease, 'renew', lease.resource, rows[0].reason);
  }
  return Number(rows[0].validity_ms);
}

/**
 * Release an explicit lease if it still holds lease.identity, and resolve to
 * { released, status, reason }: released true, false or null (unknown);
 * status 'released', 'not_held', 'unavailable' or 'unknown' (it then expires
 * by its TTL; calling again is safe); reason why for the last two, else null.
 * Never rejects for an outcome.
 */
async function releaseOutcome(client, lease) {
  const { rows } = await client.query(
    'SELECT released, status, reason FROM lease_fence.release($1::text, $2::text)',
    [lease.resource, lease.identity]);
  return { released: rows[0].released, status: rows[0].status, reason: rows[0].reason };
}

/**
 * Release an explicit lease if it still holds lease.identity. Resolves to the
 * status: 'released', 'not_held', 'unavailable' or 'unknown' (it then expires
 * by its TTL; calling again is safe). releaseOutcome also says why.
 */
async function release(client, lease) {
  return (await releaseOutcome(client, lease)).status;
}

module.exports = {
  FenceError, StaleGeneration, MissingGeneration, ConflictingGeneration, UnissuedGeneration,
  LeaseLostAtCommit,
  LeaseError, LeaseDenied, LeaseBusy, LeaseUnavailable, LeaseLost, LeaseUnknown,
  translateError, tryAcquire, acquire, withTransactionLease, withKeptAliveLease, keepaliveState,
  withFence, renew, release, releaseOutcome, inTransaction,
};

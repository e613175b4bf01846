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
 *   LeaseLostAtCommit      LF010  a transaction-scoped lease was gone at COMMIT: rolled back
 * The pg error is `err.cause`; never retry a FenceError with the same generation.
 *
 * Lease outcomes, all `LeaseError` — the split that matters is "no" versus
 * "don't know":
 *   LeaseDenied            a definite no (acquired/renewed false): LeaseBusy,
 *                          LeaseUnavailable (nothing was sent), LeaseLost (renew),
 *                          and LeaseDenied itself for 'stale' / 'insufficient_validity'
 *   LeaseUnknown           acquired IS NULL: Redis may have granted it. NOT a
 *                          LeaseDenied. Do not proceed and do not treat the
 *                          resource as free; err.lease has identity and
 *                          generation, release(client, err.lease) is safe, a
 *                          retry is a new acquire later, never a forced DEL.
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
 *   });                     // BEGIN; SET LOCAL ...; SELECT lease_fence.fence_resource(...); COMMIT
 *   await renew(pool, lease, { ttlMs: 30000 });        // LeaseLost: stop working
 *   await release(pool, lease);
 *
 * withFence(pool, lease, fn) fences the lease's resource as well as the rows:
 * a stale holder's transaction fails (StaleGeneration) whatever it writes,
 * new rows included. withFence(pool, generation, fn) fences rows only;
 * withFence(pool, generation, { resource }, fn) names the resource.
 *
 * `client` may be a pg.Client (not inside a transaction) or a pg.Pool, from
 * which a client is checked out for the transaction. Generations are BigInt.
 */

const pg = require('pg');

class FenceError extends Error {
  constructor(message, { detail = null, cause } = {}) {
    super(detail ? `${message} (${detail})` : message, { cause });
    this.name = this.constructor.name;
    this.sqlstate = this.constructor.sqlstate;
    this.detail = detail;
  }
}
FenceError.sqlstate = 'LF000';

class StaleGeneration extends FenceError {
  constructor(message, opts = {}) {
    super(message, opts);
    const detail = opts.detail || '';
    const m = /Table (.+?), column "(.+?)": stored generation (\d+), supplied generation (\d+)/
      .exec(detail);
    const r = m ? null
      : /Resource "(.*)": stored generation (\d+), supplied generation (\d+)/.exec(detail);
    this.table = m ? m[1] : null;
    this.column = m ? m[2] : null;
    this.resource = r ? r[1] : null;
    this.stored = m ? BigInt(m[3]) : r ? BigInt(r[2]) : null;
    this.supplied = m ? BigInt(m[4]) : r ? BigInt(r[3]) : null;
  }
}
StaleGeneration.sqlstate = 'LF001';

class MissingGeneration extends FenceError {}
MissingGeneration.sqlstate = 'LF002';

class ConflictingGeneration extends FenceError {}
ConflictingGeneration.sqlstate = 'LF003';

class UnissuedGeneration extends FenceError {
  constructor(message, opts = {}) {
    super(message, opts);
    const m = /supplied generation (\d+), highest generation issued in this database (\d+)/
      .exec(opts.detail || '');
    this.supplied = m ? BigInt(m[1]) : null;
    this.highest = m ? BigInt(m[2]) : null;
  }
}
UnissuedGeneration.sqlstate = 'LF004';

class LeaseLostAtCommit extends FenceError {}
LeaseLostAtCommit.sqlstate = 'LF010';

const FENCE_ERRORS = new Map(
  [StaleGeneration, MissingGeneration, ConflictingGeneration, UnissuedGeneration, LeaseLostAtCommit]
    .map((cls) => [cls.sqlstate, cls]));

/** The FenceError for a pg error with SQLSTATE LF001/2/3/4/LF010; any other error as is. */
function translateError(err) {
  const cls = err && FENCE_ERRORS.get(err.code);
  return cls ? new cls(err.message, { detail: err.detail || null, cause: err }) : err;
}

class LeaseError extends Error {
  constructor(status, lease, message) {
    super(message);
    this.name = this.constructor.name;
    this.status = status;
    this.lease = lease;
  }
}
class LeaseDenied extends LeaseError {}
class LeaseBusy extends LeaseDenied {}
class LeaseUnavailable extends LeaseDenied {}
class LeaseLost extends LeaseDenied {}
class LeaseUnknown extends LeaseError {}

function leaseError(status, lease, what, resource) {
  const cls = { busy: LeaseBusy, unavailable: LeaseUnavailable, lost: LeaseLost,
    unknown: LeaseUnknown }[status] || LeaseDenied;
  return new cls(status, lease, `${what} of lease ${JSON.stringify(resource)}: ${status}`);
}

/** A lease_fence.lease row: acquired is true, false or null (unknown). */
function toLease(row) {
  return {
    acquired: row.acquired,
    status: row.status,
    resource: row.resource,
    identity: row.identity,
    generation: row.generation === null ? null : BigInt(row.generation),
    validityMs: row.validity_ms === null ? null : Number(row.validity_ms),
  };
}

function generationLiteral(generation) {
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

const ACQUIRE_SQL = 'SELECT acquired, status, resource, identity, generation, validity_ms ' +
  'FROM lease_fence.acquire($1::text, $2::bigint, $3::bigint, $4::text)';

async function acquireRow(client, resource, ttlMs, minValidityMs, scope) {
  const { rows } = await client.query(ACQUIRE_SQL, [resource, ttlMs, minValidityMs, scope]);
  return toLease(rows[0]);
}

async function acquireChecked(client, resource, ttlMs, minValidityMs, scope, retryStale) {
  let lease = await acquireRow(client, resource, ttlMs, minValidityMs, scope);
  if (lease.status === 'stale' && retryStale) {
    // stale set nothing and moved next_generation() past the stored one
    lease = await acquireRow(client, resource, ttlMs, minValidityMs, scope);
  }
  if (lease.acquired !== true) throw leaseError(lease.status, lease, 'acquire', resource);
  return lease;
}

/**
 * Explicit-scope acquire that never throws for an outcome: the row, with
 * acquired true, false (busy, stale, unavailable, insufficient_validity) or
 * null (unknown).
 */
async function tryAcquire(client, resource, { ttlMs, minValidityMs = 0 }) {
  return acquireRow(client, resource, ttlMs, minValidityMs, 'explicit');
}

/**
 * Take an explicit-scope lease: resolves to the lease, or rejects with
 * LeaseBusy / LeaseUnavailable / LeaseDenied (definite no) or LeaseUnknown.
 * 'stale' is retried once unless retryStale is false.
 */
async function acquire(client, resource, { ttlMs, minValidityMs = 0, retryStale = true }) {
  return acquireChecked(client, resource, ttlMs, minValidityMs, 'explicit', retryStale);
}

/**
 * fn(lease, client) in one transaction that holds a transaction-scoped
 * lease: its generation fences every write in it; COMMIT verifies the lease
 * (LeaseLostAtCommit otherwise) and releases it. A failed acquire rejects
 * before fn runs; any error rolls back.
 */
async function withTransactionLease(clientOrPool, resource,
  { ttlMs, minValidityMs = 0, retryStale = true }, fn) {
  return inTransaction(clientOrPool, async (client) => {
    const lease = await acquireChecked(client, resource, ttlMs, minValidityMs,
      'transaction', retryStale);
    return fn(lease, client);
  });
}

/**
 * fn(client) in one transaction whose writes carry a generation, fencing a
 * resource: BEGIN; SET LOCAL lease_fence.generation = <generation>; with a
 * resource, SELECT lease_fence.fence_resource(<resource>); fn; COMMIT.
 *   withFence(clientOrPool, lease, fn)                 the lease's generation and resource
 *   withFence(clientOrPool, generation, fn)            rows only
 *   withFence(clientOrPool, generationOrLease, { resource }, fn)
 * The resource fence rejects (StaleGeneration) before fn runs when a newer
 * holder fenced the resource, and otherwise holds it to COMMIT, so that a
 * newer holder waits. SET LOCAL ends with the transaction: safe behind a
 * transaction pooler.
 */
async function withFence(clientOrPool, generationOrLease, optsOrFn, maybeFn) {
  const fn = typeof optsOrFn === 'function' ? optsOrFn : maybeFn;
  const opts = typeof optsOrFn === 'function' ? {} : (optsOrFn || {});
  if (typeof fn !== 'function') throw new TypeError('withFence needs a function to run');
  const isLease = generationOrLease !== null && typeof generationOrLease === 'object';
  const g = generationLiteral(isLease ? generationOrLease.generation : generationOrLease);
  const resource = opts.resource !== undefined ? opts.resource
    : isLease ? generationOrLease.resource : null;
  if (resource !== null && typeof resource !== 'string') {
    throw new TypeError(`a resource is a string, got ${typeof resource}`);
  }
  return inTransaction(clientOrPool, async (client) => {
    await client.query(`SET LOCAL lease_fence.generation = ${g}`);
    if (resource !== null) {
      await client.query('SELECT lease_fence.fence_resource($1::text)', [resource]);
    }
    return fn(client);
  });
}

/**
 * Extend an explicit lease; resolves to the validity in ms. Rejects with
 * LeaseLost (never recreated), LeaseDenied (insufficient_validity),
 * LeaseUnavailable or LeaseUnknown.
 */
async function renew(client, lease, { ttlMs, minValidityMs = 0 }) {
  const { rows } = await client.query(
    'SELECT renewed, status, validity_ms FROM lease_fence.renew($1::text, $2::text, $3::bigint, $4::bigint)',
    [lease.resource, lease.identity, ttlMs, minValidityMs]);
  if (rows[0].renewed !== true) throw leaseError(rows[0].status, lease, 'renew', lease.resource);
  return Number(rows[0].validity_ms);
}

/**
 * Release an explicit lease if it still holds lease.identity. Resolves to the
 * status: 'released', 'not_held', 'unavailable' or 'unknown' (it then expires
 * by its TTL; calling again is safe).
 */
async function release(client, lease) {
  const { rows } = await client.query(
    'SELECT released, status FROM lease_fence.release($1::text, $2::text)',
    [lease.resource, lease.identity]);
  return rows[0].status;
}

module.exports = {
  FenceError, StaleGeneration, MissingGeneration, ConflictingGeneration, UnissuedGeneration,
  LeaseLostAtCommit,
  LeaseError, LeaseDenied, LeaseBusy, LeaseUnavailable, LeaseLost, LeaseUnknown,
  translateError, tryAcquire, acquire, withTransactionLease, withFence, renew, release,
  inTransaction,
};

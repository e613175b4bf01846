/**
 * lease-fence: use the lease_fence PostgreSQL extension from Node.js with
 * node-postgres (`pg`).
 *
 * Nothing here talks to Redis: the extension does, from inside PostgreSQL —
 * except the client-side mode (RedisLeases, client-side.ts: the lease taken
 * with ioredis, for a database that cannot load the C library). This calls
 * lease_fence.acquire / renew / release, sets the generation in the write's
 * transaction, and turns the extension's answers into named errors (see
 * README.md).
 *
 * Every function takes a pg.Client (not inside a transaction), a client
 * checked out of a pool, or a pg.Pool. Given a pool, a function that runs a
 * transaction checks out one client for the whole of it (BEGIN,
 * set_generation, your callback's statements through that client, COMMIT or
 * ROLLBACK) and gives it back, destroying it if the transaction failed.
 * Generations are BigInt.
 */

import type { ClientBase, Pool, PoolClient, QueryResult } from 'pg';
import {
  LeaseDenied, LeaseLost, LeaseUnknown, TransactionRolledBack, translateError,
} from './errors.js';
import { checkFair } from './options.js';
import { acquireResult, releaseResult, renewResult } from './outcomes.js';
import type {
  AcquireCheckedOptions, AcquireOptions, AcquiredLease, ClientOf, Fence, FenceOptions,
  Generation, JobOptions, KeepaliveState, KeptAliveLeaseOptions, Lease, LeaseRef, Queryable,
  ReleaseOutcome, ReleaseStatus, RenewOptions, TransactionLeaseOptions,
} from './types.js';

export {
  FenceError, StaleGeneration, MissingGeneration, ConflictingGeneration, UnissuedGeneration,
  LeaseLostAtCommit, LeaseError, LeaseDenied, LeaseBusy, LeaseUnavailable, LeaseLost, LeaseUnknown,
  DataCorrupted, LeaseDataCorrupted, TransactionRolledBack, translateError, LeadershipLost,
  TakeOverTimeout,
} from './errors.js';
export type { FenceErrorFields } from './errors.js';
export { leadership, takeOver } from './election.js';
export type { Leadership, LeadershipOptions, TakeOverOptions } from './election.js';
export { RedisLeases, clientSideScripts } from './client-side.js';
export type {
  ClientSideAcquireCheckedOptions, ClientSideAcquireOptions, RedisClientLike, RedisLeasesOptions,
  ShippedScript,
} from './client-side.js';
export type {
  AcquireCheckedOptions, AcquireOptions, AcquiredLease, CleanupStatus, ClientOf, Fence, FenceOptions,
  Generation, JobOptions, KeepaliveState, KeptAliveLeaseOptions, Lease, LeaseRef, LeaseStatus, Queryable,
  ReleaseOutcome, ReleaseStatus, RenewOptions, TransactionLeaseOptions,
} from './types.js';

/**
 * Whether `db` is a pool (pg.Pool, or any pg-pool instance: also one from
 * another copy of pg, which `instanceof pg.Pool` would miss and treat as a
 * client, spreading a transaction over several connections). A client,
 * pooled or not, has no totalCount / idleCount.
 */
export function isPool(db: unknown): db is Pool {
  if (db === null || typeof db !== 'object') return false;
  const p = db as { connect?: unknown; totalCount?: unknown; idleCount?: unknown; release?: unknown };
  return typeof p.connect === 'function' && typeof p.totalCount === 'number'
    && typeof p.idleCount === 'number' && typeof p.release !== 'function';
}

/**
 * fn(client) with one client for all of it: a pool lends one (given back
 * after fn, destroyed instead if fn failed); a client is used as is.
 */
async function withClient<C extends Queryable, T>(db: C,
  fn: (client: ClientOf<C>) => Promise<T>): Promise<T> {
  if (!isPool(db)) return fn(db as unknown as ClientOf<C>);
  const client = await db.connect();
  let ok = false;
  try {
    const result = await fn(client as ClientOf<C>);
    ok = true;
    return result;
  } finally {
    // a failed transaction's connection is not trusted again: destroy it
    client.release(ok ? undefined : true);
  }
}

async function rollbackQuietly(client: ClientBase): Promise<void> {
  await client.query('ROLLBACK').catch(() => {});
}

/** The errors the server sends on one connection, watched while a transaction's function runs. */
interface ErrorWatch {
  /** The first error the server sent since the watch began (undefined: none seen). */
  first(): unknown;
  stop(): void;
}

/**
 * Watch the server's errors on client's connection: node-postgres' Connection
 * emits each ErrorResponse as 'errorMessage' (the very DatabaseError the
 * failed query rejects with). A client without one (pg-native) is not watched.
 */
function watchErrors(client: ClientBase): ErrorWatch {
  const con = (client as unknown as { connection?: unknown }).connection as {
    on?: (event: string, fn: (msg: unknown) => void) => unknown;
    removeListener?: (event: string, fn: (msg: unknown) => void) => unknown;
  } | undefined;
  if (!con || typeof con.on !== 'function' || typeof con.removeListener !== 'function') {
    return { first: () => undefined, stop: () => {} };
  }
  let first: unknown;
  const listener = (msg: unknown): void => { if (first === undefined) first = msg; };
  con.on('errorMessage', listener);
  return { first: () => first, stop: () => { con.removeListener?.('errorMessage', listener); } };
}

/**
 * COMMIT, and a TransactionRolledBack when PostgreSQL answered it with
 * ROLLBACK (a statement of the transaction failed and the function went on):
 * the transaction has then ended, nothing of it committed.
 */
async function commit(client: ClientBase, watch: ErrorWatch): Promise<void> {
  const done = await client.query('COMMIT');
  if (done && done.command === 'ROLLBACK') {
    const cause = watch.first();
    throw new TransactionRolledBack('lease_fence: the transaction was rolled back at COMMIT: a ' +
      'statement in it failed and its error was caught; nothing of it was committed' +
      (cause instanceof Error ? ` (${cause.message})` : ''),
    cause === undefined ? undefined : translateError(cause));
  }
}

/**
 * One transaction on one client: BEGIN and, queued right behind it without
 * waiting for BEGIN's answer (node-postgres sends queued queries in order;
 * a client made with `pipeline: true` sends them in one round trip),
 * `first(client)`; then body(client, firstResult); COMMIT, or ROLLBACK on any
 * error. LF errors (COMMIT's too) reject as FenceError; a COMMIT that
 * PostgreSQL answers with ROLLBACK (body caught a statement's error) rejects
 * with TransactionRolledBack.
 */
async function transaction<C extends Queryable, S, T>(db: C,
  first: ((client: ClientOf<C>) => Promise<S>) | null,
  body: (client: ClientOf<C>, started: S) => Promise<T> | T): Promise<T> {
  return withClient(db, async (client) => {
    const begin = client.query('BEGIN');
    const started = first ? first(client) : Promise.resolve(undefined as S);
    const [b, s] = await Promise.allSettled([begin, started]);
    let result: T;
    const watch = watchErrors(client);
    try {
      try {
        if (b.status === 'rejected') throw b.reason;
        if (s.status === 'rejected') throw s.reason;
        result = await body(client, s.value);
      } catch (err) {
        await rollbackQuietly(client);
        throw translateError(err);
      }
      try {
        await commit(client, watch);
      } catch (err) {
        if (err instanceof TransactionRolledBack) throw err;   // ended: nothing to roll back
        await rollbackQuietly(client);
        throw translateError(err);
      }
    } finally {
      watch.stop();
    }
    return result;
  });
}

/**
 * BEGIN; fn(client); COMMIT — or ROLLBACK on any error; LF errors (COMMIT's
 * too) reject as FenceError, a COMMIT rolled back (fn caught a failed
 * statement's error) as TransactionRolledBack. Given a pool, fn gets the
 * client checked out for the transaction. No generation is set: see fenced.
 */
export async function inTransaction<C extends Queryable, T>(db: C,
  fn: (client: ClientOf<C>) => Promise<T> | T): Promise<T> {
  return transaction(db, null, (client) => fn(client));
}

interface LeaseRow {
  acquired: boolean | null;
  status: string;
  resource: string;
  identity: string | null;
  generation: string | number | null;
  validity_ms: string | number | null;
  reason: string | null;
}

function toLease(row: LeaseRow): Lease {
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

function generationParam(generation: Generation | null | undefined): string {
  if (generation === null || generation === undefined) {
    throw new TypeError(`a generation is an integer, got ${generation}`);
  }
  const g = BigInt(generation);          // throws on anything that is not an integer
  if (g < 0n) throw new RangeError(`a generation is non-negative, got ${g}`);
  return g.toString();
}

const ACQUIRE_SQL =
  'SELECT acquired, status, resource, identity, generation, validity_ms, reason ' +
  'FROM lease_fence.acquire($1::text, $2::bigint, $3::bigint, $4::text, $5::bigint, $6::boolean, ' +
  '$7::boolean)';

type Scope = 'explicit' | 'session' | 'transaction';

async function acquireRow(db: Queryable, resource: string, ttlMs: number, minValidityMs: number,
  scope: Scope, waitMs = 0, keepalive = false, fair = false): Promise<Lease> {
  const { rows } = await (db as ClientBase).query<LeaseRow>(ACQUIRE_SQL,
    [resource, ttlMs, minValidityMs, scope, waitMs, Boolean(keepalive), fair]);
  return toLease(rows[0]);
}

/**
 * The first row's outcome checked: stale retried once (if asked); then the
 * lease, or (tryAcquire) null when busy, or the outcome's LeaseError thrown.
 */
async function checkAcquired(db: Queryable, first: Lease, resource: string, ttlMs: number,
  minValidityMs: number, scope: Scope, retryStale: boolean, waitMs: number,
  keepalive: boolean, fair: boolean, call: 'acquire'): Promise<AcquiredLease>;
async function checkAcquired(db: Queryable, first: Lease, resource: string, ttlMs: number,
  minValidityMs: number, scope: Scope, retryStale: boolean, waitMs: number,
  keepalive: boolean, fair: boolean, call: 'tryAcquire'): Promise<AcquiredLease | null>;
async function checkAcquired(db: Queryable, first: Lease, resource: string, ttlMs: number,
  minValidityMs: number, scope: Scope, retryStale: boolean, waitMs: number,
  keepalive: boolean, fair: boolean, call: 'acquire' | 'tryAcquire'): Promise<AcquiredLease | null> {
  let lease = first;
  if (lease.status === 'stale' && retryStale) {
    // stale set nothing and moved next_generation() past the stored one
    lease = await acquireRow(db, resource, ttlMs, minValidityMs, scope, waitMs, keepalive, fair);
  }
  return acquireResult(lease, call);
}

async function acquireChecked(db: Queryable, resource: string, ttlMs: number,
  minValidityMs: number, scope: Scope, retryStale: boolean, waitMs = 0,
  keepalive = false, fair = false): Promise<AcquiredLease> {
  const first = await acquireRow(db, resource, ttlMs, minValidityMs, scope, waitMs, keepalive, fair);
  return checkAcquired(db, first, resource, ttlMs, minValidityMs, scope, retryStale, waitMs,
    keepalive, fair, 'acquire');
}

/**
 * Explicit-scope acquire that never rejects for an outcome: the row, with
 * acquired true, false (busy, stale, unavailable, insufficient_validity,
 * unreplicated) or null (unknown). waitMs > 0 waits up to that long while the
 * lease is busy (fair: true, in the resource's queue, as acquire). No retry
 * of 'stale'.
 */
export async function acquireOutcome(db: Queryable, resource: string,
  { ttlMs, minValidityMs = 0, waitMs = 0, fair }: AcquireOptions): Promise<Lease> {
  return acquireRow(db, resource, ttlMs, minValidityMs, 'explicit', waitMs, false, checkFair(fair));
}

/**
 * Take an explicit-scope lease if it is free: resolves to the lease, or to
 * null when another identity holds it (after waitMs, if given). Every other
 * outcome rejects as acquire does: LeaseUnavailable, LeaseDenied (stale
 * after its retry, insufficient_validity, unreplicated), LeaseUnknown (maybe
 * granted: release(db, err.lease) is safe). Busy is the only "no" that
 * resolves: unavailable is not busy, and unknown is never "not acquired".
 */
export async function tryAcquire(db: Queryable, resource: string,
  { ttlMs, minValidityMs = 0, retryStale = true, waitMs = 0, fair }: AcquireCheckedOptions,
): Promise<AcquiredLease | null> {
  const isFair = checkFair(fair);
  const first = await acquireRow(db, resource, ttlMs, minValidityMs, 'explicit', waitMs, false,
    isFair);
  return checkAcquired(db, first, resource, ttlMs, minValidityMs, 'explicit', retryStale, waitMs,
    false, isFair, 'tryAcquire');
}

/**
 * Take an explicit-scope lease: resolves to the lease, or rejects with
 * LeaseBusy / LeaseUnavailable / LeaseDenied (a definite no) or LeaseUnknown
 * (maybe granted: release(db, err.lease) is safe). 'stale' is retried once
 * unless retryStale is false. waitMs > 0: while the lease is busy, wait up to
 * that long (woken by the holder's release or its TTL's end); LeaseBusy if it
 * is still busy then. The wait is one statement: statement_timeout or a
 * cancel rejects with pg's error (code 57014), not a LeaseError. fair: true
 * joins the resource's queue: waiters are granted in the order they came
 * (waitMs 0: busy while anyone is queued).
 */
export async function acquire(db: Queryable, resource: string,
  { ttlMs, minValidityMs = 0, retryStale = true, waitMs = 0, fair }: AcquireCheckedOptions,
): Promise<AcquiredLease> {
  return acquireChecked(db, resource, ttlMs, minValidityMs, 'explicit', retryStale, waitMs, false,
    checkFair(fair));
}

/**
 * fn(lease, client) in one transaction that holds a transaction-scoped
 * lease: its generation fences every write in it; COMMIT verifies the lease
 * (LeaseLostAtCommit otherwise) and releases it. BEGIN and the acquire are
 * sent without waiting in between. A failed acquire rejects before fn runs;
 * any error rolls back; a COMMIT that PostgreSQL answers with ROLLBACK (fn
 * caught a failed statement's error) rejects with TransactionRolledBack.
 * waitMs > 0 waits up to that long for a busy lease (fair: as acquire).
 * keepalive: true has the server's keep-alive worker renew the lease while
 * the transaction runs (so ttlMs need not cover all of it); once lost, the
 * next fenced write or the COMMIT rejects with LeaseLostAtCommit. Given a
 * pool, fn gets the client checked out for the transaction: run every
 * statement of the transaction on it.
 */
export async function transactionLease<C extends Queryable, T>(db: C, resource: string,
  { ttlMs, minValidityMs = 0, retryStale = true, waitMs = 0, keepalive = false, fair }:
    TransactionLeaseOptions,
  fn: (lease: AcquiredLease, client: ClientOf<C>) => Promise<T> | T): Promise<T> {
  if (typeof fn !== 'function') throw new TypeError('transactionLease needs a function to run');
  const isFair = checkFair(fair);
  return transaction(db,
    (client) => acquireRow(client, resource, ttlMs, minValidityMs, 'transaction', waitMs, keepalive,
      isFair),
    async (client, first) => {
      const lease = await checkAcquired(client, first, resource, ttlMs, minValidityMs,
        'transaction', retryStale, waitMs, keepalive, isFair, 'acquire');
      return fn(lease, client);
    });
}

/**
 * The old name of transactionLease (the same function).
 * @deprecated Use transactionLease; withTransactionLease goes in the next release.
 */
export const withTransactionLease = transactionLease;

/** A number that can be written into SQL text as it is: a safe integer. */
function sqlInteger(name: string, value: unknown): string {
  if (typeof value !== 'number' || !Number.isSafeInteger(value)) {
    throw new TypeError(`${name} is an integer (ms), got ${String(value)}`);
  }
  return String(value);
}

/** A string literal for SQL text (pg's escapeLiteral: E'...' when it has a backslash). */
function sqlLiteral(client: ClientBase, value: string): string {
  const esc = (client as { escapeLiteral?: (s: string) => string }).escapeLiteral;
  if (typeof esc === 'function') return esc.call(client, value);
  const hasBackslash = value.includes('\\');
  const body = value.replace(/'/g, "''").replace(/\\/g, '\\\\');
  return `${hasBackslash ? ' E' : ''}'${body}'`;
}

/**
 * The job's first message: BEGIN and the transaction-scoped acquire in one
 * simple-query string (no bind parameters there: the resource is a quoted
 * literal, the numbers validated integers). One Query message, one round trip.
 */
function jobStartSql(client: ClientBase, resource: string, ttlMs: number, minValidityMs: number,
  waitMs: number, fair: boolean): string {
  return 'BEGIN; SELECT acquired, status, resource, identity, generation, validity_ms, reason ' +
    `FROM lease_fence.acquire(CAST(${sqlLiteral(client, resource)} AS text), ` +
    `CAST(${sqlInteger('ttlMs', ttlMs)} AS bigint), ` +
    `CAST(${sqlInteger('minValidityMs', minValidityMs)} AS bigint), 'transaction', ` +
    `CAST(${sqlInteger('waitMs', waitMs)} AS bigint), false, CAST(${fair ? 'true' : 'false'} AS boolean))`;
}

/** The work of a job: fn(lease, client). */
export type JobFn<C extends Queryable, T> = (lease: AcquiredLease, client: ClientOf<C>) => Promise<T> | T;

/**
 * A fenced job: transactionLease's guarantees in the fewest round trips.
 *
 *   job(db, resource, { ttlMs, minValidityMs = 0, waitMs = 0, fair = false }, fn)
 *
 * fn(lease, client) runs in one transaction holding a transaction-scoped
 * lease on `resource`: its generation fences every write fn makes through
 * `client`, and COMMIT verifies the lease and releases it. BEGIN and
 * lease_fence.acquire(..., scope => 'transaction') go out as one
 * simple-query string, `BEGIN; SELECT ... FROM lease_fence.acquire(...)`
 * (the resource as a literal made by client.escapeLiteral, the numbers
 * checked to be integers): one round trip before fn, on any pg client,
 * pipelined or not; then fn's statements; then COMMIT.
 *
 * Outcomes, as transactionLease: a failed acquire rejects with
 * LeaseBusy / LeaseUnavailable / LeaseDenied / LeaseUnknown before fn runs,
 * after a ROLLBACK ('stale' is retried once, in the same transaction); fn's
 * error rolls back (the lease is released) and rejects unchanged, SQLSTATE
 * LF001-LF004 as FenceError subclasses; a lease lost before COMMIT rejects
 * with LeaseLostAtCommit (LF010), rolled back; and when fn caught the error
 * of a failed statement and went on (a refused write, say), PostgreSQL
 * answers COMMIT with ROLLBACK and job rejects with TransactionRolledBack
 * (err.cause: that error, when seen): it never resolves for a transaction
 * that did not commit. waitMs > 0 waits up to that long for a busy lease
 * (fair: true, in the resource's queue, as acquire).
 *
 * Given a pool, one client is checked out for the job and given back after
 * it; it is destroyed instead when the job failed otherwise than by a
 * definite no (LeaseDenied) that rolled back cleanly.
 */
export function job<C extends Queryable, T>(db: C, resource: string, options: AcquireOptions,
  fn: JobFn<C, T>): Promise<T>;
/**
 * job with ttlMs by position, the options after fn.
 * @deprecated Use job(db, resource, { ttlMs, ... }, fn); this form goes in the next release.
 */
export function job<C extends Queryable, T>(db: C, resource: string, ttlMs: number,
  fn: JobFn<C, T>, options?: JobOptions): Promise<T>;
export async function job<C extends Queryable, T>(db: C, resource: string,
  optionsOrTtlMs: AcquireOptions | number, fn: JobFn<C, T>, oldOptions?: JobOptions): Promise<T> {
  if (typeof resource !== 'string') throw new TypeError(`a resource is a string, got ${typeof resource}`);
  let ttlMs: unknown;
  let minValidityMs: unknown;
  let waitMs: unknown;
  let fair: unknown;
  if (typeof optionsOrTtlMs === 'number') {
    // the deprecated form: job(db, resource, ttlMs, fn, { minValidityMs, waitMs, fair })
    ttlMs = optionsOrTtlMs;
    ({ minValidityMs = 0, waitMs = 0, fair } = oldOptions || {});
  } else if (optionsOrTtlMs !== null && typeof optionsOrTtlMs === 'object') {
    if (oldOptions !== undefined) {
      throw new TypeError('job(db, resource, options, fn) takes every option in its options object');
    }
    ({ ttlMs, minValidityMs = 0, waitMs = 0, fair } = optionsOrTtlMs);
  } else {
    throw new TypeError('job takes its options as an object before the function: ' +
      `job(db, resource, { ttlMs, minValidityMs, waitMs }, fn); got ${typeof optionsOrTtlMs}`);
  }
  if (typeof fn !== 'function') throw new TypeError('job needs a function to run');
  // validated before a client is checked out: nothing is sent for bad input
  sqlInteger('ttlMs', ttlMs);
  sqlInteger('minValidityMs', minValidityMs);
  sqlInteger('waitMs', waitMs);
  const isFair = checkFair(fair);
  return runJob(db, resource, ttlMs as number, minValidityMs as number, waitMs as number, isFair,
    fn);
}

/** job, its arguments checked. */
async function runJob<C extends Queryable, T>(db: C, resource: string, ttlMs: number,
  minValidityMs: number, waitMs: number, fair: boolean, fn: JobFn<C, T>): Promise<T> {
  const pooled = isPool(db);
  const client = (pooled ? await (db as Pool).connect() : db) as unknown as ClientOf<C>;
  const c = client as unknown as ClientBase;
  let clean = false;       // the connection is outside any transaction, fit for reuse
  try {
    let lease: AcquiredLease;
    try {
      const answer = await c.query(jobStartSql(c, resource, ttlMs, minValidityMs, waitMs, fair)) as
        unknown as QueryResult<LeaseRow> | QueryResult<LeaseRow>[];
      const selected = Array.isArray(answer) ? answer[answer.length - 1] : answer;
      // stale: the transaction is fine (the acquire answered a row); the retry runs in it
      lease = await checkAcquired(c, toLease(selected.rows[0]), resource, ttlMs, minValidityMs,
        'transaction', true, waitMs, false, fair, 'acquire');
    } catch (err) {
      const rolledBack = await c.query('ROLLBACK').then(() => true, () => false);
      clean = rolledBack && err instanceof LeaseDenied;
      throw translateError(err);
    }
    let result: T;
    const watch = watchErrors(c);
    try {
      try {
        result = await fn(lease, client);
      } catch (err) {
        await rollbackQuietly(c);
        throw translateError(err);
      }
      try {
        await commit(c, watch);
      } catch (err) {
        // rolled back at COMMIT: the transaction has ended, the connection is fit for reuse
        if (err instanceof TransactionRolledBack) { clean = true; throw err; }
        await rollbackQuietly(c);
        throw translateError(err);
      }
    } finally {
      watch.stop();
    }
    clean = true;
    return result;
  } finally {
    if (pooled) (client as unknown as PoolClient).release(clean ? undefined : true);
  }
}

/**
 * lease_fence.keepalive_state(identity): 'active', 'lost' or null (no
 * kept-alive lease has it: released, its session ended, never kept alive).
 * Ask on a connection other than the lease owner's. `lease` is a lease or an
 * identity.
 */
export async function keepaliveState(db: Queryable,
  lease: string | { identity: string | null }): Promise<KeepaliveState> {
  const identity = typeof lease === 'string' ? lease : lease.identity;
  const { rows } = await (db as ClientBase).query<{ state: KeepaliveState }>(
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
 * lease_fence.keepalive_max_ms. Write under it with fenced(client, lease, ...).
 *
 * `signal` aborts, reason a LeaseLost, when lease_fence.keepalive_state,
 * polled every pollMs (default max(50, ttlMs / 3)) on *another* pool
 * connection, says 'lost' or null; reason a LeaseUnknown (err.cause the pg
 * error) when a poll fails. The fence stands either way: once the lease is
 * lost, fenced writes under it reject with LeaseLostAtCommit.
 *
 * At the end, always: polling stops, the lease is released, and the client
 * goes back to the pool (destroyed instead if the release failed or the
 * acquire's outcome is unknown: the session's end releases its lease).
 *   - fn resolved: resolves to its value; but if the release answers
 *     'not_held' the lease was lost before fn ended and it rejects with
 *     LeaseLost. 'unavailable' / 'unknown' do not reject: the lease is no
 *     longer kept alive and expires by its TTL.
 *   - fn rejected: ROLLBACK (in case fn left a transaction open), the
 *     release, and fn's error, unchanged.
 * Do not release the lease yourself inside fn. Not for use behind a
 * transaction-pooling proxy: a session lease belongs to the server session.
 */
export async function keptAliveLease<T>(pool: Pool, resource: string,
  { ttlMs, minValidityMs = 0, waitMs = 0, pollMs, retryStale = true, fair }: KeptAliveLeaseOptions,
  fn: (client: PoolClient, lease: AcquiredLease, signal: AbortSignal) => Promise<T> | T,
): Promise<T> {
  if (!isPool(pool)) {
    throw new TypeError('keptAliveLease needs a pg.Pool: the lease is watched on another ' +
      'of its connections');
  }
  if (typeof fn !== 'function') throw new TypeError('keptAliveLease needs a function to run');
  const isFair = checkFair(fair);
  const max = (pool as Pool & { options?: { max?: number } }).options?.max;
  if (max !== undefined && max < 2) {
    throw new RangeError('keptAliveLease needs a pg.Pool with max >= 2: one client holds ' +
      'the lease, another watches it');
  }
  const interval = pollMs !== undefined ? pollMs : Math.max(50, Math.floor(ttlMs / 3));
  const client = await pool.connect();
  let lease: AcquiredLease;
  try {
    lease = await acquireChecked(client, resource, ttlMs, minValidityMs, 'session', retryStale,
      waitMs, true, isFair);
  } catch (err) {
    // a definite no leaves nothing behind; anything else (unknown: it may be
    // held by this session) ends the session, which releases its leases
    client.release(err instanceof LeaseDenied ? undefined : true);
    throw err;
  }

  const controller = new AbortController();
  let stopped = false;
  let timer: ReturnType<typeof setTimeout> | null = null;
  let polling: Promise<void> | null = null;
  const poll = async (): Promise<void> => {
    let state: KeepaliveState;
    try {
      state = await keepaliveState(pool, lease);
    } catch (err) {
      if (!stopped) {
        const unknown = new LeaseUnknown('unknown', lease,
          `kept-alive lease ${JSON.stringify(resource)} cannot be watched: ${(err as Error).message}`);
        (unknown as { cause?: unknown }).cause = err;
        controller.abort(unknown);
      }
      return;
    }
    if (!stopped && state !== 'active') {
      controller.abort(new LeaseLost('lost', lease, `kept-alive lease ${JSON.stringify(resource)}: ` +
        (state === null ? 'no longer kept alive' : 'lost')));
    }
  };
  const schedule = (): void => {
    if (stopped || controller.signal.aborted) return;
    timer = setTimeout(() => {
      polling = poll().finally(() => { polling = null; schedule(); });
    }, interval);
  };
  schedule();

  let result: T | undefined;
  let failure: { err: unknown } | null = null;
  try {
    result = await fn(client, lease, controller.signal);
  } catch (err) {
    failure = { err };
  }
  stopped = true;
  if (timer !== null) clearTimeout(timer);
  if (polling) await polling;

  if (failure) await rollbackQuietly(client);
  let status: ReleaseStatus | undefined;
  let releaseError: { err: unknown } | null = null;
  try {
    status = await release(client, lease);
  } catch (err) {
    releaseError = { err };
  }
  client.release(releaseError ? true : undefined);
  if (failure) throw failure.err;
  if (releaseError) throw releaseError.err;
  if (status === 'not_held') {
    throw new LeaseLost('lost', lease, `kept-alive lease ${JSON.stringify(resource)} was lost ` +
      'before the function ended (release: not_held)');
  }
  return result as T;
}

/**
 * The old name of keptAliveLease (the same function).
 * @deprecated Use keptAliveLease; withKeptAliveLease goes in the next release.
 */
export const withKeptAliveLease = keptAliveLease;

const SET_GENERATION_SQL = 'SELECT lease_fence.set_generation($1::bigint, $2::text)';

/**
 * fn(client) in one transaction whose writes carry a generation, fencing a
 * resource: BEGIN and SELECT lease_fence.set_generation($1, $2) (the
 * generation, and the resource or null), sent together without waiting in
 * between; fn(client); COMMIT.
 *   fenced(db, lease, fn)                      the lease's generation and resource
 *   fenced(db, generation, fn)                 rows only
 *   fenced(db, generationOrLease, { resource }, fn)
 * The resource fence rejects (StaleGeneration, err.resource) before fn runs
 * when a newer holder fenced the resource, and otherwise holds it to COMMIT,
 * so that a newer holder waits. The generation ends with the transaction:
 * safe behind a transaction pooler. Given a pool, fn gets the PoolClient
 * checked out for the transaction: the generation is set on that connection
 * only, so run the writes on it.
 */
export function fenced<C extends Queryable, T>(db: C, fence: Fence,
  fn: (client: ClientOf<C>) => Promise<T> | T): Promise<T>;
export function fenced<C extends Queryable, T>(db: C, fence: Fence, options: FenceOptions,
  fn: (client: ClientOf<C>) => Promise<T> | T): Promise<T>;
export async function fenced<C extends Queryable, T>(db: C, fence: Fence,
  optsOrFn: FenceOptions | ((client: ClientOf<C>) => Promise<T> | T),
  maybeFn?: (client: ClientOf<C>) => Promise<T> | T): Promise<T> {
  const fn = typeof optsOrFn === 'function' ? optsOrFn : maybeFn;
  const opts: FenceOptions = typeof optsOrFn === 'function' ? {} : (optsOrFn || {});
  if (typeof fn !== 'function') throw new TypeError('fenced needs a function to run');
  const isLease = fence !== null && typeof fence === 'object';
  const g = generationParam(isLease ? fence.generation : fence);
  const resource = opts.resource !== undefined ? opts.resource
    : isLease ? (fence.resource ?? null) : null;
  if (resource !== null && typeof resource !== 'string') {
    throw new TypeError(`a resource is a string, got ${typeof resource}`);
  }
  return transaction(db,
    (client) => (client as ClientBase).query(SET_GENERATION_SQL, [g, resource]) as Promise<QueryResult>,
    (client) => fn(client));
}

/**
 * The old name of fenced (the same function).
 * @deprecated Use fenced; withFence goes in the next release.
 */
export const withFence = fenced;

interface RenewRow {
  renewed: boolean | null;
  status: string;
  validity_ms: string | number | null;
  reason: string | null;
}

/**
 * Extend an explicit lease; resolves to the validity in ms. Rejects with
 * LeaseLost (never recreated), LeaseDenied (insufficient_validity,
 * unreplicated), LeaseUnavailable or LeaseUnknown; err.reason says why for
 * unavailable, unknown and unreplicated; err.lease is the lease given.
 */
export async function renew(db: Queryable, lease: LeaseRef,
  { ttlMs, minValidityMs = 0 }: RenewOptions): Promise<number> {
  const { rows } = await (db as ClientBase).query<RenewRow>(
    'SELECT renewed, status, validity_ms, reason FROM lease_fence.renew($1::text, $2::text, $3::bigint, $4::bigint)',
    [lease.resource, lease.identity, ttlMs, minValidityMs]);
  const row = rows[0];
  return renewResult({
    renewed: row.renewed, status: row.status,
    validityMs: row.validity_ms === null ? null : Number(row.validity_ms), reason: row.reason,
  }, lease);
}

/**
 * Release an explicit lease if it still holds lease.identity, and resolve to
 * { released, status, reason }: released true, false or null (unknown);
 * status 'released', 'not_held', 'unavailable' or 'unknown' (it then expires
 * by its TTL; calling again is safe); reason why for the last two, else null.
 * Never rejects for an outcome.
 */
export async function releaseOutcome(db: Queryable, lease: LeaseRef): Promise<ReleaseOutcome> {
  const { rows } = await (db as ClientBase).query<ReleaseOutcome>(
    'SELECT released, status, reason FROM lease_fence.release($1::text, $2::text)',
    [lease.resource, lease.identity]);
  return releaseResult(rows[0]);
}

/**
 * Release an explicit lease if it still holds lease.identity. Resolves to the
 * status: 'released', 'not_held', 'unavailable' or 'unknown' (it then expires
 * by its TTL; calling again is safe). releaseOutcome also says why.
 */
export async function release(db: Queryable, lease: LeaseRef): Promise<ReleaseStatus> {
  return (await releaseOutcome(db, lease)).status;
}

// ---------------------------------------------------------------------------
// resumableJob: a long job that checkpoints its progress under its lease

interface CheckpointRow {
  state: unknown;
  generation: string | number | null;
  written_at: Date | null;
}

/**
 * BEGIN and the resource fence at `generation` as one simple-query string
 * (the resource a literal made by escapeLiteral, the generation a BigInt).
 */
function fenceSql(client: ClientBase, generation: bigint, resource: string): string {
  return `BEGIN; SELECT lease_fence.set_generation(CAST(${BigInt(generation).toString()} AS bigint), ` +
    `CAST(${sqlLiteral(client, resource)} AS text))`;
}

/** What resumableJob takes after fn. */
export interface ResumableJobOptions {
  /** While the lease is busy, wait up to this long (ms) for its release; default 0. */
  waitMs?: number;
  /** Wait in the resource's queue: granted in arrival order; default false. */
  fair?: boolean;
}

/**
 * The job resumableJob hands its function: the connection (inside the open,
 * fenced transaction), the lease, where the last holder got to
 * (resumeFrom), and checkpoint(state) to commit progress.
 */
export class ResumableJob<C = ClientBase> {
  /** The job's connection: every statement of the work goes on it (inside the open transaction). */
  readonly client: C;
  /** The explicit lease the job holds. */
  readonly lease: AcquiredLease;
  readonly resource: string;
  /** The lease's generation: the transaction's writes are fenced at it. */
  readonly generation: bigint;
  readonly identity: string;
  /** The lease's TTL (ms): each checkpoint renews the lease for this long. */
  readonly ttlMs: number;
  /**
   * The newest committed checkpoint's state (decoded JSON) when the job
   * started, read after the resource was fenced; null when there is none.
   */
  readonly resumeFrom: unknown;
  /** The generation that wrote resumeFrom; null when there is none. */
  readonly resumedGeneration: bigint | null;
  /** When resumeFrom was written; null when there is none. */
  readonly resumedWrittenAt: Date | null;
  /** @internal the error that ended the job's transaction early (a refused checkpoint), if any */
  failure: unknown = undefined;
  /** @internal set while a checkpoint runs */
  busy = false;
  readonly #watch: () => ErrorWatch;

  /** @internal made by resumableJob */
  constructor(client: C, lease: AcquiredLease, ttlMs: number, row: CheckpointRow | undefined,
    watch: () => ErrorWatch) {
    this.client = client;
    this.lease = lease;
    this.resource = lease.resource;
    this.generation = lease.generation;
    this.identity = lease.identity;
    this.ttlMs = ttlMs;
    this.resumeFrom = row ? row.state : null;
    this.resumedGeneration = row && row.generation !== null ? BigInt(row.generation) : null;
    this.resumedWrittenAt = row ? row.written_at : null;
    this.#watch = watch;
  }

  /**
   * Commit the work done since the job started or since the last checkpoint,
   * with `state` (any JSON value but undefined; BigInt is not JSON) as the
   * resource's checkpoint: renews the lease (LeaseLost, LeaseUnknown,
   * LeaseUnavailable, LeaseDenied before anything is written), then
   * lease_fence.checkpoint(resource, state) and COMMIT, then a new
   * transaction fenced at the same generation. Resolves to the generation.
   * Refused (a newer holder fenced the resource: StaleGeneration; the lease
   * lost: LeaseLostAtCommit) rejects with the FenceError and nothing of the
   * transaction commits. After any rejection the job is over: its
   * transaction was rolled back, further checkpoints reject with the same
   * error, and resumableJob rejects with it even if fn resolves (do not
   * catch the error and go on writing: the connection is then outside any
   * transaction, unfenced).
   */
  async checkpoint(state: unknown): Promise<bigint> {
    if (this.failure !== undefined) throw this.failure;
    if (this.busy) throw new Error('resumableJob: checkpoint() called while another one runs');
    if (state === undefined) throw new TypeError('a checkpoint state is a JSON value, got undefined');
    const text = JSON.stringify(state);           // a BigInt or a cycle throws here, before anything is sent
    if (text === undefined) throw new TypeError(`a checkpoint state is a JSON value, got ${typeof state}`);
    const c = this.client as ClientBase;
    this.busy = true;
    try {
      try {
        await renew(c, this.lease, { ttlMs: this.ttlMs });
        await c.query('SELECT lease_fence.checkpoint($1::text, $2::jsonb)', [this.resource, text]);
        const watch = this.#watch();
        try {
          await commit(c, watch);
        } finally {
          watch.stop();
        }
      } catch (err) {
        this.failure = translateError(err);
        await rollbackQuietly(c);
        throw this.failure;
      }
      // the next stretch of work: a new transaction, fenced at the same generation
      try {
        await c.query(fenceSql(c, this.generation, this.resource));
      } catch (err) {
        this.failure = translateError(err);
        throw this.failure;
      }
      return this.generation;
    } finally {
      this.busy = false;
    }
  }

  /**
   * After a failure: ROLLBACK, then leave the connection in a transaction
   * that was fenced at the job's generation — aborted if a newer holder
   * fenced the resource — so that a function that caught the error and
   * went on writes nothing outside a fenced transaction.
   */
}

/** The work of a resumable job. */
export type ResumableJobFn<C, T> = (job: ResumableJob<C>) => Promise<T> | T;

/** The client of a resumable job given `db`: a PoolClient for a pool. */
export type ResumableClientOf<C extends Queryable> = C extends Pool ? PoolClient :
  C extends ClientBase ? C : never;

/**
 * A long job whose effects happen at most once and that resumes where the
 * last holder's committed checkpoint left off. On one connection (given a
 * pool, one client checked out for the whole job):
 *
 *  1. lease_fence.acquire(resource, ttlMs, scope => 'explicit', waitMs, fair)
 *     on its own; not granted → LeaseBusy / LeaseUnavailable / LeaseDenied /
 *     LeaseUnknown before anything else ('stale' retried once);
 *  2. BEGIN; set_generation(generation, resource); last_checkpoint(resource)
 *     (one simple-query string, one round trip): job.resumeFrom /
 *     job.resumedGeneration;
 *  3. fn(job): its statements go on job.client, in the open transaction;
 *     job.checkpoint(state) renews the lease, writes the checkpoint and
 *     commits (see ResumableJob.checkpoint);
 *  4. fn resolved → COMMIT, then release (its answer does not change the
 *     result); fn rejected → ROLLBACK, release, its error (LF SQLSTATEs as
 *     FenceError subclasses).
 *
 * A holder frozen inside its open transaction past the lease is ended by
 * the server (FATAL 25P03): the job then rejects with that error. ttlMs
 * must exceed the longest stretch between two checkpoints.
 */
export async function resumableJob<C extends Queryable, T>(db: C, resource: string, ttlMs: number,
  fn: ResumableJobFn<ResumableClientOf<C>, T>, options: ResumableJobOptions = {}): Promise<T> {
  if (typeof resource !== 'string') throw new TypeError(`a resource is a string, got ${typeof resource}`);
  sqlInteger('ttlMs', ttlMs);
  if (typeof fn !== 'function') throw new TypeError('resumableJob needs a function to run');
  if (options === null || typeof options !== 'object') {
    throw new TypeError('resumableJob takes its options as an object: { waitMs, fair }');
  }
  const { waitMs = 0, fair } = options;
  sqlInteger('waitMs', waitMs);
  const isFair = checkFair(fair);
  const pooled = isPool(db);
  const client = (pooled ? await (db as Pool).connect() : db) as unknown as ResumableClientOf<C>;
  const c = client as unknown as ClientBase;
  let clean = false;       // the connection is outside any transaction, fit for reuse
  // the server may end the session while the job waits (FATAL 25P03 when its
  // lease ran out inside the transaction): pg emits that as 'error' on the
  // client, which would crash the process without a listener
  let ended: unknown;
  const onError = (err: unknown): void => { if (ended === undefined) ended = err; };
  c.on('error', onError);
  try {
    let lease: AcquiredLease;
    try {
      lease = await acquireChecked(c, resource, ttlMs, 0, 'explicit', true, waitMs, false, isFair);
    } catch (err) {
      // a definite no leaves nothing behind; unknown may leave a lease (it
      // expires by its TTL, or the session's cleanup releases it)
      clean = err instanceof LeaseDenied && ended === undefined;
      throw err;
    }
    let result: T;
    try {
      // one simple-query string, one round trip
      const answer = await c.query(fenceSql(c, lease.generation, resource) +
        '; SELECT state, generation, written_at FROM lease_fence.last_checkpoint(' +
        `CAST(${sqlLiteral(c, resource)} AS text))`) as unknown as QueryResult<CheckpointRow>[];
      const found = answer[answer.length - 1];
      const job = new ResumableJob<ResumableClientOf<C>>(client, lease, ttlMs, found.rows[0],
        () => watchErrors(c));
      result = await fn(job);
      if (job.busy) throw new Error('resumableJob: fn returned while a checkpoint was running');
      if (job.failure !== undefined) throw job.failure;
      const watch = watchErrors(c);
      try {
        await commit(c, watch);
      } finally {
        watch.stop();
      }
    } catch (err) {
      const failure = ended !== undefined ? ended : translateError(err);
      const rolledBack = ended === undefined
        && await c.query('ROLLBACK').then(() => true, () => false);
      if (ended === undefined) await releaseOutcome(c, lease).catch(() => {});
      clean = rolledBack && ended === undefined;
      throw failure;
    }
    // the work committed: the release's answer does not change the result
    clean = await releaseOutcome(c, lease).then(() => true, () => false);
    return result;
  } finally {
    c.removeListener('error', onError);
    if (pooled) (client as unknown as PoolClient).release(clean ? undefined : true);
  }
}

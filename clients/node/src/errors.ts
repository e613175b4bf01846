/**
 * The errors of lease-fence: fence errors (a write or COMMIT was refused,
 * SQLSTATE LF001-LF004, LF010) and lease outcomes (acquire / renew that did
 * not grant, split into "a definite no" and "don't know").
 */

import type { Lease } from './types.js';

/** The fields of a fence error, as the server set them. */
export interface FenceErrorFields {
  detail?: string | null;
  cause?: unknown;
  schema?: string | null;
  table?: string | null;
  column?: string | null;
  resource?: string | null;
}

/**
 * A write or COMMIT was refused by the fence. Never retry a FenceError with
 * the same generation. `cause` is the driver's error.
 *
 * The fields come from the error's fields as the server set them, never from
 * its text: for a refused row `schema`, `table` and `column` (the fence
 * column); for a refused resource fence `resource` (sent as the error's
 * constraint field), with schema 'lease_fence' and table
 * 'resource_generation'; null where the server sent none. `detail` is text
 * for humans and logs only.
 */
export class FenceError extends Error {
  /** The SQLSTATE this class stands for. */
  static readonly sqlstate: string = 'LF000';

  /** The SQLSTATE of this error (the class's). */
  readonly sqlstate: string;
  /** DETAIL, for humans and logs: do not parse it. */
  readonly detail: string | null;
  readonly schema: string | null;
  readonly table: string | null;
  readonly column: string | null;
  /** The fenced resource (the error's constraint field), or null. */
  readonly resource: string | null;

  constructor(message: string, {
    detail = null, cause, schema = null, table = null, column = null, resource = null,
  }: FenceErrorFields = {}) {
    super(detail ? `${message} (${detail})` : message, { cause });
    this.name = new.target.name;
    this.sqlstate = (new.target as typeof FenceError).sqlstate;
    this.detail = detail;
    this.schema = schema;
    this.table = table;
    this.column = column;
    this.resource = resource;
  }
}

/** LF001: a newer holder wrote the row or fenced the resource: you lost the lease. */
export class StaleGeneration extends FenceError {
  static override readonly sqlstate: string = 'LF001';
}

/** LF002: a strict table written (or a resource fenced) without a generation / with a NULL fence. */
export class MissingGeneration extends FenceError {
  static override readonly sqlstate: string = 'LF002';
}

/** LF003: the statement wrote a fence other than the current generation. */
export class ConflictingGeneration extends FenceError {
  static override readonly sqlstate: string = 'LF003';
}

/** LF004: the generation was never issued by this database: fix the caller. */
export class UnissuedGeneration extends FenceError {
  static override readonly sqlstate: string = 'LF004';
}

/**
 * LF010: a transaction-scoped lease was gone at COMMIT, or a kept-alive lease
 * was lost (its owner's next fenced write under its generation, and the
 * COMMIT of a transaction that made one, are refused). Rolled back.
 */
export class LeaseLostAtCommit extends FenceError {
  static override readonly sqlstate: string = 'LF010';
}

type FenceErrorClass = new (message: string, fields?: FenceErrorFields) => FenceError;

const FENCE_ERRORS: ReadonlyMap<string, FenceErrorClass> = new Map<string, FenceErrorClass>([
  ['LF001', StaleGeneration],
  ['LF002', MissingGeneration],
  ['LF003', ConflictingGeneration],
  ['LF004', UnissuedGeneration],
  ['LF010', LeaseLostAtCommit],
]);

/** What translateError reads of a driver error (node-postgres' DatabaseError). */
interface DriverErrorLike {
  message?: string;
  code?: string;
  detail?: string;
  schema?: string;
  table?: string;
  column?: string;
  constraint?: string;
}

/**
 * The FenceError for a pg error with SQLSTATE LF001/2/3/4/LF010 (from its
 * code and fields, never from its text); any other value as is. Knex rejects
 * with node-postgres' own error, so this works there too.
 */
export function translateError<E>(err: E): E | FenceError {
  if (err === null || typeof err !== 'object' || err instanceof FenceError) return err;
  const e = err as DriverErrorLike;
  const cls = typeof e.code === 'string' ? FENCE_ERRORS.get(e.code) : undefined;
  if (!cls) return err;
  return new cls(String(e.message ?? ''), {
    detail: e.detail || null,
    cause: err,
    schema: e.schema || null,
    table: e.table || null,
    column: e.column || null,
    resource: e.constraint || null,
  });
}

/**
 * COMMIT answered ROLLBACK: a statement of the transaction failed, the
 * function caught its error and went on, and PostgreSQL rolled the whole
 * transaction back at COMMIT. Nothing of it was committed (a
 * transaction-scoped lease was released with it): never treat the work as
 * done. `cause` is the error that failed the transaction, as the function
 * got it (a FenceError for SQLSTATE LF001-LF004 / LF010), when the library
 * saw it go by on the connection; undefined otherwise.
 */
export class TransactionRolledBack extends Error {
  constructor(message: string, cause?: unknown) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = new.target.name;
  }
}

/**
 * A lease outcome other than granted. `status` is the extension's status,
 * `lease` the row (identity and generation for 'unknown'), `reason` why for
 * 'unavailable', 'unknown' and 'unreplicated' (null otherwise); the message
 * ends with it.
 */
export class LeaseError extends Error {
  readonly status: string;
  readonly lease: Lease;
  readonly reason: string | null;

  constructor(status: string, lease: Lease, message: string, reason: string | null = null) {
    super(reason ? `${message} (${reason})` : message);
    this.name = new.target.name;
    this.status = status;
    this.lease = lease;
    this.reason = reason;
  }
}

/**
 * A definite no (acquired / renewed false): LeaseBusy, LeaseUnavailable,
 * LeaseLost, and LeaseDenied itself for 'stale', 'insufficient_validity' and
 * 'unreplicated'.
 */
export class LeaseDenied extends LeaseError {}
/** Someone else holds the lease. */
export class LeaseBusy extends LeaseDenied {}
/** Redis could not be reached: nothing was sent, definitely not applied. */
export class LeaseUnavailable extends LeaseDenied {}
/** renew: the key is gone or someone else's; a kept-alive lease that was lost. */
export class LeaseLost extends LeaseDenied {}
/**
 * The leadership of leadership() is lost: stop acting as the leader. Set as
 * lead.signal's reason, and thrown by lead.check(), by lead.fenced() and at
 * the end of leadership() when it was lost while the function ran: a renew
 * answered 'lost' (another candidate won, or a takeOver took the election)
 * or 'insufficient_validity', or no renew was confirmed before the lease's
 * validity ran out (a frozen process, Redis unreachable). No SQLSTATE: the
 * library decides it. `lease` is the election's lease (generation: the
 * term). Campaign again to lead again.
 */
export class LeadershipLost extends LeaseLost {}
/**
 * takeOver: a transaction that fenced the resource (the holder's job, or its
 * fence_resource) did not end within timeoutMs (SQLSTATE 55P03, `code`).
 * Nothing was taken: the holder keeps its lease. `status` is 'timeout',
 * `cause` the pg error.
 */
export class TakeOverTimeout extends LeaseDenied {
  readonly code: string = '55P03';
}
/**
 * acquired IS NULL: Redis may have granted it. NOT a LeaseDenied: do not
 * proceed and do not treat the resource as free. `lease` has the identity
 * and generation; release(db, err.lease) is safe; a retry is a new acquire
 * later, never a forced DEL.
 */
export class LeaseUnknown extends LeaseError {}

/**
 * Client-side mode: a Redis key holds data lease_fence never wrote (a
 * generation key that holds no generation). `code` is 'XX001'
 * (data_corrupted), as the C edition's error; the same name as in the other
 * libraries. Not a LeaseError: no outcome, no retry; a person must look at
 * the key and delete it.
 */
export class DataCorrupted extends Error {
  readonly code: string = 'XX001';

  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/**
 * The old name of DataCorrupted (the same class).
 * @deprecated Use DataCorrupted; LeaseDataCorrupted goes in the next release.
 */
export const LeaseDataCorrupted = DataCorrupted;
/** @deprecated Use DataCorrupted. */
export type LeaseDataCorrupted = DataCorrupted;

const LEASE_ERRORS: Readonly<Record<string, new (
  status: string, lease: Lease, message: string, reason?: string | null) => LeaseError>> = {
  busy: LeaseBusy,
  unavailable: LeaseUnavailable,
  lost: LeaseLost,
  unknown: LeaseUnknown,
};

/** @internal */
export function leaseError(status: string, lease: Lease, what: string, resource: string,
  reason: string | null = null): LeaseError {
  const cls = Object.prototype.hasOwnProperty.call(LEASE_ERRORS, status)
    ? LEASE_ERRORS[status] : LeaseDenied;
  return new cls(status, lease, `${what} of lease ${JSON.stringify(resource)}: ${status}`, reason);
}

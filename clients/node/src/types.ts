import type { ClientBase, Pool, PoolClient } from 'pg';

/** The statuses of lease_fence.acquire / renew / release (docs/guides/leases.md, "Statuses"). */
export type LeaseStatus =
  | 'acquired' | 'busy' | 'stale' | 'insufficient_validity' | 'unreplicated'
  | 'unavailable' | 'unknown'
  | (string & {});

/** A lease_fence.lease row, as acquire / tryAcquire return it. */
export interface Lease {
  /** true (granted), false (a definite no) or null (unknown: it may be granted). */
  acquired: boolean | null;
  status: LeaseStatus;
  resource: string;
  /** 32 hex digits; null for busy, stale, unavailable, insufficient_validity. */
  identity: string | null;
  /** The lease's generation, a BigInt; null where no generation was drawn. */
  generation: bigint | null;
  validityMs: number | null;
  /** Why, for unavailable, unknown and unreplicated; null otherwise. */
  reason: string | null;
  /**
   * Client-side mode (RedisLeases) only, for 'unknown' and
   * 'insufficient_validity': whether the conditional release that followed
   * was confirmed ('confirmed': Redis answered it) or not ('unconfirmed': the
   * lease may be held until its TTL ends). Absent otherwise.
   */
  cleanup?: CleanupStatus;
}

/** Whether the bounded release after an unknown or insufficient acquire was answered. */
export type CleanupStatus = 'confirmed' | 'unconfirmed';

/** A granted lease (what acquire resolves to). */
export interface AcquiredLease extends Lease {
  acquired: true;
  status: 'acquired';
  identity: string;
  generation: bigint;
  validityMs: number;
}

/** What renew and release need of a lease. */
export interface LeaseRef {
  resource: string;
  /** A lease's identity (a LeaseUnknown's err.lease has one too). */
  identity: string | null;
}

/** A generation: a BigInt, or a non-negative integer as number or decimal string. */
export type Generation = bigint | number | string;

/** What fenced fences with: a lease (its generation and resource) or a bare generation. */
export type Fence = Generation | { generation: Generation | null; resource?: string | null };

/** A connection to run statements on: a pg.Client (or a client checked out of a pool) or a pg.Pool. */
export type Queryable = ClientBase | Pool;

/**
 * The client a callback gets for `db`: given a pg.Pool, the PoolClient
 * checked out for the whole transaction; given a client, that client.
 */
export type ClientOf<C extends Queryable> = C extends Pool ? PoolClient : C;

export interface AcquireOptions {
  /** The lease's TTL in milliseconds. */
  ttlMs: number;
  /** Deny (insufficient_validity) when less than this is left once granted. Default 0. */
  minValidityMs?: number;
  /** While the lease is busy, wait up to this long (ms) for its release; default 0. */
  waitMs?: number;
  /** Wait in the resource's queue: granted in arrival order (lease_fence.acquire(..., fair => true)); default false. */
  fair?: boolean;
}

export interface AcquireCheckedOptions extends AcquireOptions {
  /** Retry a 'stale' outcome once (default true): stale moved next_generation() on. */
  retryStale?: boolean;
}

export interface TransactionLeaseOptions extends AcquireCheckedOptions {
  /** Have the server's keep-alive worker renew the lease while the transaction runs. */
  keepalive?: boolean;
}

/**
 * The options after fn of the deprecated job(db, resource, ttlMs, fn, options);
 * job(db, resource, options, fn) takes AcquireOptions (ttlMs among them).
 */
export interface JobOptions {
  /** Deny (insufficient_validity) when less than this is left once granted. Default 0. */
  minValidityMs?: number;
  /** While the lease is busy, wait up to this long (ms) for its release; default 0. */
  waitMs?: number;
  /** Wait in the resource's queue, granted in arrival order; default false. */
  fair?: boolean;
}

export interface KeptAliveLeaseOptions extends AcquireCheckedOptions {
  /** How often (ms) keepalive_state is polled on another pool connection; default max(50, ttlMs / 3). */
  pollMs?: number;
}

export interface FenceOptions {
  /** The resource to fence (null: rows only); default the lease's resource, or null for a bare generation. */
  resource?: string | null;
}

export interface RenewOptions {
  ttlMs: number;
  minValidityMs?: number;
}

/** The status of lease_fence.release. */
export type ReleaseStatus = 'released' | 'not_held' | 'unavailable' | 'unknown'
  | (string & {});

export interface ReleaseOutcome {
  /** true, false or null (unknown). */
  released: boolean | null;
  status: ReleaseStatus;
  /** Why, for unavailable and unknown; null otherwise. */
  reason: string | null;
}

/** lease_fence.keepalive_state: 'active', 'lost', or null (no kept-alive lease has the identity). */
export type KeepaliveState = 'active' | 'lost' | null;

/**
 * Leader election (lease_fence.campaign / renew / resign) and takeOver.
 *
 * leadership(db, election, { ttlMs, value, waitMs }, async (lead) => ...)
 * campaigns on one connection (it waits until it wins), renews the
 * election's lease on that same connection every ttlMs / 3 — the process's
 * heartbeat: the server never renews it on its own, so a frozen process
 * loses the election once the lease runs out — and resigns at the end. The
 * connection is dedicated to the election while fn runs; fn's work runs on
 * other connections, through lead.fenced(client, fn).
 */

import { performance } from 'node:perf_hooks';
import type { ClientBase, Pool, PoolClient } from 'pg';
import {
  LeadershipLost, LeaseDenied, LeaseUnavailable, LeaseUnknown, TakeOverTimeout,
} from './errors.js';
import { fenced, isPool } from './index.js';
import { checkFair } from './options.js';
import { acquireResult } from './outcomes.js';
import type { AcquiredLease, ClientOf, Lease, Queryable } from './types.js';

// the C edition's limits: LF_MAX_RESOURCE, a campaign's value, the acquire's TTL bound
const MAX_RESOURCE_BYTES = 1024;
const MAX_VALUE_BYTES = 1024;
const MAX_TTL_MS = 1000 * 60 * 60 * 24 * 365 * 100;

const CAMPAIGN_SQL = 'SELECT status, identity, term, validity_ms, reason FROM ' +
  'lease_fence.campaign($1::text, $2::bigint, $3::bigint, $4::text, $5::text, $6::boolean)';
const RENEW_SQL = 'SELECT renewed, status, validity_ms, reason FROM ' +
  'lease_fence.renew($1::text, $2::text, $3::bigint, 0)';
const RESIGN_SQL = 'SELECT released, status, reason FROM lease_fence.resign($1::text, $2::text)';
const TAKE_OVER_SQL = 'SELECT acquired, status, resource, identity, generation, validity_ms, ' +
  'reason FROM lease_fence.take_over($1::text, $2::bigint, $3::bigint, $4::text)';

export interface LeadershipOptions {
  /** The election's lease TTL (ms): renewed every ttlMs / 3; lost this long after the last renew. */
  ttlMs: number;
  /** What leader() shows while this candidate leads: at most 1024 bytes (UTF-8); default null. */
  value?: string | null;
  /** Wait at most this long (ms) to win, then reject with LeaseBusy; default: until it wins. */
  waitMs?: number | null;
  /** 'session' (default: the lease also ends with the server session) or 'explicit' (poolers). */
  scope?: 'session' | 'explicit';
  /** Wait in the election's queue: candidates win in the order they came; default false. */
  fair?: boolean;
}

export interface TakeOverOptions {
  /** The lease's TTL (ms). */
  ttlMs: number;
  /** How long (ms) to wait for a transaction that fenced the resource; default 5000. */
  timeoutMs?: number;
  /** 'explicit' (default) or 'session'. */
  scope?: 'explicit' | 'session';
}

/** The leadership leadership() won, for fn. */
export interface Leadership {
  readonly election: string;
  readonly identity: string;
  /** The generation of the election's lease: this leader's term (fences its writes). */
  readonly term: bigint;
  readonly value: string | null;
  readonly ttlMs: number;
  /** Aborted once the leadership is lost; its reason a LeadershipLost. */
  readonly signal: AbortSignal;
  /** Why the leadership was lost; null while it is not. */
  readonly lostReason: string | null;
  /** Throws LeadershipLost if the leadership is lost (or its lease's validity ran out unrenewed). */
  check(): void;
  /**
   * fenced(db, { generation: term, resource: election }, fn), checked: rejects
   * with LeadershipLost before BEGIN if the leadership is lost, and before
   * COMMIT if it was lost while fn ran (rolled back); with StaleGeneration
   * (LF001) when a newer leader's term is in the election's resource fence.
   * `db` must not be the election's connection.
   */
  fenced<C extends Queryable, T>(db: C, fn: (client: ClientOf<C>) => Promise<T> | T): Promise<T>;
}

function checkName(what: string, name: unknown): string {
  if (typeof name !== 'string') {
    throw new TypeError(`${what} is a string, got ${name === null ? 'null' : typeof name}`);
  }
  if (name.length === 0) throw new RangeError(`${what} must not be empty`);
  if (name.includes('\0')) throw new RangeError(`${what} must not contain a NUL character`);
  const n = Buffer.byteLength(name, 'utf8');
  if (n > MAX_RESOURCE_BYTES) {
    throw new RangeError(`${what} is too long: it has ${n} bytes; the limit is ${MAX_RESOURCE_BYTES}`);
  }
  return name;
}

function checkInteger(name: string, value: unknown, min: number, max: number): number {
  if (typeof value !== 'number') {
    throw new TypeError(`${name} must be a number, got ${value === null ? 'null' : typeof value}`);
  }
  if (!Number.isSafeInteger(value)) throw new RangeError(`${name} must be an integer, got ${value}`);
  if (value < min || value > max) {
    throw new RangeError(`${name} must be between ${min} and ${max}, got ${value}`);
  }
  return value;
}

function checkScope(scope: unknown, allowed: readonly string[]): string {
  if (typeof scope !== 'string' || !allowed.includes(scope)) {
    throw new RangeError(`scope is ${allowed.map((s) => `'${s}'`).join(' or ')}, got ${String(scope)}`);
  }
  return scope;
}

interface CampaignRow {
  status: string;
  identity: string | null;
  term: string | number | null;
  validity_ms: string | number | null;
  reason: string | null;
}

interface RenewRow {
  renewed: boolean | null;
  status: string;
  validity_ms: string | number | null;
  reason: string | null;
}

function campaignLease(election: string, row: CampaignRow): Lease {
  return {
    acquired: row.status === 'acquired' ? true : row.status === 'unknown' ? null : false,
    status: row.status,
    resource: election,
    identity: row.identity,
    generation: row.term === null ? null : BigInt(row.term),
    validityMs: row.validity_ms === null ? null : Number(row.validity_ms),
    reason: row.reason,
  };
}

class LeadershipState implements Leadership {
  readonly election: string;
  readonly identity: string;
  readonly term: bigint;
  readonly value: string | null;
  readonly ttlMs: number;
  lostReason: string | null = null;
  /** performance.now() when the lease runs out unless a renew is confirmed before. */
  deadline: number;
  private readonly controller = new AbortController();
  private readonly conn: ClientBase;

  constructor(won: AcquiredLease, value: string | null, ttlMs: number, conn: ClientBase) {
    this.election = won.resource;
    this.identity = won.identity;
    this.term = won.generation;
    this.value = value;
    this.ttlMs = ttlMs;
    this.conn = conn;
    // counted from the answer's arrival (a campaign waits: its send time says
    // nothing); the first renew, sent at once, bounds it by its send time
    this.deadline = performance.now() + won.validityMs;
  }

  get signal(): AbortSignal { return this.controller.signal; }

  lease(): Lease {
    return {
      acquired: true, status: 'acquired', resource: this.election, identity: this.identity,
      generation: this.term, validityMs: null, reason: null,
    };
  }

  error(): LeadershipLost {
    return new LeadershipLost('lost', this.lease(), `leadership of ${JSON.stringify(this.election)} ` +
      `(term ${this.term}) is lost: ${this.lostReason ?? 'lost'}`);
  }

  lose(reason: string): void {
    if (this.controller.signal.aborted) return;
    this.lostReason = reason;
    this.controller.abort(this.error());
  }

  check(): void {
    if (!this.controller.signal.aborted && performance.now() >= this.deadline) {
      this.lose('no renew was confirmed before the lease ran out');
    }
    if (this.controller.signal.aborted) throw this.error();
  }

  fenced<C extends Queryable, T>(db: C, fn: (client: ClientOf<C>) => Promise<T> | T): Promise<T> {
    if ((db as unknown) === this.conn) {
      return Promise.reject(new TypeError('lead.fenced needs another connection than the ' +
        "election's: that one is dedicated to the election (its heartbeat)"));
    }
    if (typeof fn !== 'function') return Promise.reject(new TypeError('lead.fenced needs a function to run'));
    try {
      this.check();
    } catch (err) {
      return Promise.reject(err);
    }
    return fenced(db, { generation: this.term, resource: this.election }, async (client) => {
      const result = await fn(client);
      this.check();          // lost meanwhile: roll back rather than commit
      return result;
    });
  }
}

/** The heartbeat: renew at once, then every ttlMs / 3, on the election's connection; the loss at the deadline. */
class Heartbeat {
  private timer: ReturnType<typeof setTimeout> | null = null;
  private watch: ReturnType<typeof setTimeout> | null = null;
  private inflight: Promise<void> | null = null;
  private stopped = false;

  constructor(private readonly lead: LeadershipState, private readonly conn: ClientBase) {}

  start(): void {
    this.beat();
    this.arm();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer !== null) clearTimeout(this.timer);
    if (this.watch !== null) clearTimeout(this.watch);
    if (this.inflight) await this.inflight;
  }

  /** The deadline's timer, set again after each confirmed renew. */
  private arm(): void {
    if (this.watch !== null) clearTimeout(this.watch);
    if (this.stopped || this.lead.signal.aborted) return;
    const left = Math.max(0, this.lead.deadline - performance.now());
    this.watch = setTimeout(() => {
      this.watch = null;
      if (this.stopped) return;
      if (performance.now() >= this.lead.deadline) {
        this.lead.lose('no renew was confirmed before the lease ran out');
      } else {
        this.arm();
      }
    }, Math.ceil(left));
  }

  private beat(): void {
    if (this.stopped || this.lead.signal.aborted) return;
    this.inflight = this.renewOnce().finally(() => {
      this.inflight = null;
      if (this.stopped || this.lead.signal.aborted) return;
      this.timer = setTimeout(() => { this.timer = null; this.beat(); },
        Math.max(1, Math.floor(this.lead.ttlMs / 3)));
    });
  }

  private async renewOnce(): Promise<void> {
    const sent = performance.now();
    let row: RenewRow | null = null;
    let failure: unknown = null;
    try {
      const { rows } = await this.conn.query<RenewRow>(RENEW_SQL,
        [this.lead.election, this.lead.identity, this.lead.ttlMs]);
      row = rows[0];
    } catch (err) {
      failure = err;       // not confirmed: tried again until the deadline
    }
    if (this.stopped) return;
    if (row !== null && row.renewed === true && row.status === 'renewed') {
      this.lead.deadline = sent + Number(row.validity_ms);
      this.arm();
      return;
    }
    if (row !== null && (row.status === 'lost' || row.status === 'insufficient_validity')) {
      this.lead.lose(`renew answered ${row.status}`);
      return;
    }
    if (performance.now() >= this.lead.deadline) {
      const why = row !== null ? `renew answered ${row.status}` : `renew failed: ${String(failure)}`;
      this.lead.lose(`no renew was confirmed before the lease ran out (${why})`);
    }
  }
}

function campaignArgs(election: unknown, options: unknown, fn: unknown):
  [string, number, string | null, number | null, string, boolean] {
  checkName('election', election);
  if (options === null || typeof options !== 'object') {
    throw new TypeError('leadership takes its options as an object: ' +
      'leadership(db, election, { ttlMs, value, waitMs }, fn)');
  }
  const { ttlMs, value = null, waitMs = null, scope = 'session', fair } = options as LeadershipOptions;
  checkInteger('ttlMs', ttlMs, 1, MAX_TTL_MS);
  if (value !== null) {
    if (typeof value !== 'string') throw new TypeError(`value is a string or null, got ${typeof value}`);
    if (value.includes('\0')) throw new RangeError('value must not contain a NUL character');
    const n = Buffer.byteLength(value, 'utf8');
    if (n > MAX_VALUE_BYTES) {
      throw new RangeError(`value is too long: it has ${n} bytes; the limit is ${MAX_VALUE_BYTES}`);
    }
  }
  if (waitMs !== null) checkInteger('waitMs', waitMs, 0, Number.MAX_SAFE_INTEGER);
  checkScope(scope, ['session', 'explicit']);
  const isFair = checkFair(fair);
  if (typeof fn !== 'function') throw new TypeError('leadership needs a function to run');
  return [election as string, ttlMs, value, waitMs, scope, isFair];
}

/**
 * Lead `election` while fn runs: campaign, heartbeat, resign.
 *
 *   await leadership(db, 'scheduler', { ttlMs: 3000, value: 'host-a' }, async (lead) => {
 *     while (!lead.signal.aborted) await lead.fenced(pool, (c) => c.query(...));
 *   });
 *
 * `db` is a pg.Client dedicated to the election while fn runs (as etcd's
 * election session), or a pg.Pool: then one client is checked out for the
 * whole leadership. lease_fence.campaign runs on it and waits until this
 * candidate wins (waitMs: at most that long, then LeaseBusy; default:
 * until it wins or the statement is cancelled); 'unavailable', 'unknown'
 * and 'unreplicated' reject as acquire does (LeaseUnavailable,
 * LeaseUnknown, LeaseDenied), 'stale' is retried once. Then the election's
 * lease is renewed on that connection at once and every ttlMs / 3: the
 * leadership lives while this process runs its timers; a frozen process
 * stops renewing and loses it once the TTL runs out. fair: true waits in
 * the election's queue (candidates win in the order they came). Run fn's work on
 * other connections, through lead.fenced(client, fn).
 *
 * lead.signal aborts (reason a LeadershipLost) once the leadership is
 * lost: a renew answered 'lost' / 'insufficient_validity', or no renew was
 * confirmed before the lease's validity ran out; the heartbeat stops then.
 * At the end the heartbeat stops and lease_fence.resign hands the election
 * on at once; fn's error rejects unchanged; if fn resolved but the
 * leadership was lost (or resign found it no longer held), it rejects with
 * LeadershipLost. Arguments are checked before anything is sent
 * (TypeError, RangeError).
 */
export async function leadership<T>(db: Queryable, election: string, options: LeadershipOptions,
  fn: (lead: Leadership) => Promise<T> | T): Promise<T> {
  const [name, ttlMs, value, waitMs, scope, fair] = campaignArgs(election, options, fn);
  const pooled = isPool(db);
  const conn = (pooled ? await (db as Pool).connect() : db) as ClientBase;
  let clean = false;
  try {
    let won: AcquiredLease;
    try {
      const campaign = async (): Promise<Lease> => {
        const { rows } = await conn.query<CampaignRow>(CAMPAIGN_SQL,
          [name, ttlMs, waitMs, value, scope, fair]);
        return campaignLease(name, rows[0]);
      };
      let first = await campaign();
      if (first.status === 'stale') first = await campaign();
      won = acquireResult(first, 'acquire') as AcquiredLease;
    } catch (err) {
      clean = err instanceof LeaseDenied;    // unknown: the session's end releases it
      throw err;
    }
    const lead = new LeadershipState(won, value, ttlMs, conn);
    const heartbeat = new Heartbeat(lead, conn);
    heartbeat.start();
    let result: T;
    try {
      result = await fn(lead);
    } catch (err) {
      await heartbeat.stop();
      await conn.query(RESIGN_SQL, [name, lead.identity]).then(() => { clean = true; }, () => {});
      throw err;
    }
    await heartbeat.stop();
    const { rows } = await conn.query<{ status: string }>(RESIGN_SQL, [name, lead.identity]);
    clean = true;
    if (rows[0].status === 'not_held') lead.lose('resign found the election no longer held');
    lead.check();
    return result;
  } finally {
    if (pooled) (conn as PoolClient).release(clean ? undefined : true);
  }
}

/**
 * Take `resource`'s lease whether or not someone holds it (operators,
 * supervisors): lease_fence.take_over, a new generation above every one
 * granted for the resource, the resource's fence raised to it; the holder's
 * renew then answers 'lost' and its later fenced writes are refused.
 * Resolves to the lease (release it yourself). Rejects with TakeOverTimeout
 * (55P03: a transaction that fenced the resource did not end within
 * timeoutMs; nothing taken), LeaseUnavailable (08006), LeaseUnknown (08007:
 * the server releases what it may have taken); a role without EXECUTE gets
 * pg's error (42501). Arguments are checked before anything is sent.
 */
export async function takeOver(db: Queryable, resource: string,
  { ttlMs, timeoutMs = 5000, scope = 'explicit' }: TakeOverOptions): Promise<AcquiredLease> {
  checkName('resource', resource);
  checkInteger('ttlMs', ttlMs, 1, MAX_TTL_MS);
  checkInteger('timeoutMs', timeoutMs, 0, Number.MAX_SAFE_INTEGER);
  checkScope(scope, ['explicit', 'session']);
  let rows: Array<{
    acquired: boolean | null; status: string; resource: string; identity: string | null;
    generation: string | number | null; validity_ms: string | number | null; reason: string | null;
  }>;
  try {
    ({ rows } = await (db as ClientBase).query(TAKE_OVER_SQL, [resource, ttlMs, timeoutMs, scope]));
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    const why = err instanceof Error ? err.message : String(err);
    const row: Lease = {
      acquired: code === '08007' ? null : false, status: 'timeout', resource, identity: null,
      generation: null, validityMs: null, reason: why,
    };
    let mapped: Error | null = null;
    if (code === '55P03') {
      mapped = new TakeOverTimeout('timeout', row, `takeOver of ${JSON.stringify(resource)}: a ` +
        'transaction that fenced it did not end in time; nothing taken', why);
    } else if (code === '08006') {
      mapped = new LeaseUnavailable('unavailable', { ...row, status: 'unavailable' },
        `takeOver of ${JSON.stringify(resource)}: unavailable`, why);
    } else if (code === '08007') {
      mapped = new LeaseUnknown('unknown', { ...row, status: 'unknown' },
        `takeOver of ${JSON.stringify(resource)}: unknown`, why);
    }
    if (mapped === null) throw err;
    (mapped as { cause?: unknown }).cause = err;
    throw mapped;
  }
  const r = rows[0];
  return acquireResult({
    acquired: r.acquired, status: r.status, resource: r.resource, identity: r.identity,
    generation: r.generation === null ? null : BigInt(r.generation),
    validityMs: r.validity_ms === null ? null : Number(r.validity_ms), reason: r.reason,
  }, 'acquire') as AcquiredLease;
}

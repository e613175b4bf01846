// Compiled with `tsc --noEmit` against the installed package (CommonJS
// resolution: the "require" condition): the API as a TypeScript user sees
// it, and misuse the types must refuse (@ts-expect-error).
import pg = require('pg');
import {
  acquire, tryAcquire, acquireOutcome, fenced, transactionLease, job, keptAliveLease, renew, release,
  releaseOutcome, withFence, withTransactionLease, withKeptAliveLease, keepaliveState, inTransaction, translateError, isPool,
  FenceError, StaleGeneration, LeaseError, LeaseDenied, LeaseBusy, LeaseUnknown, LeaseLostAtCommit,
  TransactionRolledBack, DataCorrupted, LeaseDataCorrupted, leadership, takeOver, LeadershipLost,
  TakeOverTimeout, LeaseLost, resumableJob, ResumableJob,
} from 'lease-fence';
import { fencedProcessor, defaultResource } from 'lease-fence/bullmq';
import type { Job } from 'bullmq';
import type { AcquiredLease, Lease, ReleaseOutcome, ClientOf, JobOptions, AcquireOptions, Leadership } from 'lease-fence';

export async function main(pool: pg.Pool, client: pg.Client): Promise<void> {
  let lease: AcquiredLease;
  try {
    lease = await acquire(pool, 'account:1', { ttlMs: 30000, waitMs: 100 });
  } catch (err) {
    if (err instanceof LeaseUnknown) {
      const maybe: Lease = err.lease;
      await release(pool, maybe);
    }
    if (err instanceof LeaseDenied) return;
    throw err;
  }
  const generation: bigint = lease.generation;
  const identity: string = lease.identity;
  void identity;

  // given a pool, the callback gets the PoolClient of the transaction
  const n: number = await fenced(pool, lease, async (c) => {
    const pc: pg.PoolClient = c;
    const r = await pc.query<{ n: number }>('SELECT 1 AS n');
    return r.rows[0].n;
  });
  void n;
  await fenced(pool, generation, { resource: null }, (c) => c.query('SELECT 1'));
  await fenced(pool, '42', { resource: 'r' }, async () => 'done');

  // given a client, that client
  await fenced(client, lease, async (c) => {
    const same: pg.Client = c;
    void same;
    // @ts-expect-error a pg.Client has no release(): the callback did not get a PoolClient
    c.release();
  });

  // @ts-expect-error the callback's client is never the pool
  await fenced(pool, lease, async (p: pg.Pool) => p.query('SELECT 1'));
  // @ts-expect-error a pool has no transaction of its own to write in
  await transactionLease(pool, 'x', { ttlMs: 1000 }, async (l, p: pg.Pool) => p.totalCount);
  // @ts-expect-error ttlMs is required
  await acquire(pool, 'x', {});
  // @ts-expect-error keptAliveLease needs a pool
  await keptAliveLease(client, 'x', { ttlMs: 1000 }, async () => 1);

  const total: number = await transactionLease(pool, 'account:2', { ttlMs: 5000, keepalive: true },
    async (l, c) => {
      const g: bigint = l.generation;
      await c.query('UPDATE account SET balance = balance + 1 WHERE id = $1', [1]);
      return Number(g);
    });
  void total;

  // job: the options (ttlMs among them), then fn, as transactionLease and
  // keptAliveLease; given a pool, fn gets the PoolClient
  const jobOpts: AcquireOptions = { ttlMs: 5000, minValidityMs: 500, waitMs: 100, fair: true };
  const done: bigint = await job(pool, 'invoice:44', jobOpts, async (l, c) => {
    const pc: pg.PoolClient = c;
    await pc.query('SELECT 1');
    return l.generation;
  });
  void done;
  await job(client, 'invoice:45', { ttlMs: 5000 }, (l, c) => {
    const same: pg.Client = c;
    void same;
  });
  // @ts-expect-error the options object needs ttlMs
  await job(pool, 'x', { waitMs: 10 }, async () => 1);
  // @ts-expect-error keepalive is transactionLease's, not the job's
  await job(pool, 'x', { ttlMs: 1000, keepalive: true }, async () => 1);
  // @ts-expect-error the function comes after the options, not before them
  await job(pool, 'x', async () => 1, { ttlMs: 1000 });
  // @ts-expect-error the function is needed
  await job(pool, 'x', { ttlMs: 1000 });
  // @ts-expect-error every option goes in the options object
  await job(pool, 'x', { ttlMs: 1000 }, async () => 1, { waitMs: 10 });
  // @ts-expect-error ttlMs is a number or the options object, never a string
  await job(pool, 'x', '1000', async () => 1);

  // the deprecated form: ttlMs an argument, the options last
  const jobOptions: JobOptions = { minValidityMs: 500, waitMs: 100 };
  const sent: bigint = await job(pool, 'invoice:42', 5000, async (l, c) => {
    const pc: pg.PoolClient = c;
    await pc.query("UPDATE invoice SET state = 'sent' WHERE id = 42");
    return l.generation;
  }, jobOptions);
  void sent;
  await job(client, 'invoice:43', 5000, (l, c) => {
    const same: pg.Client = c;
    void same;
  });
  // @ts-expect-error the deprecated form has the function after ttlMs
  await job(pool, 'x', 1000, { waitMs: 10 }, async () => 1);
  // @ts-expect-error keepalive is transactionLease's, not the job's
  await job(pool, 'x', 1000, async () => 1, { keepalive: true });

  const kept: string = await keptAliveLease(pool, 'report', { ttlMs: 3000, pollMs: 500 },
    async (c, l, signal) => {
      signal.throwIfAborted();
      await fenced(c, l, (cc) => cc.query('SELECT 1'));
      return l.resource;
    });
  void kept;

  // tryAcquire: the Lease, or null when busy (other outcomes reject)
  const maybe: AcquiredLease | null = await tryAcquire(client, 'x', { ttlMs: 1000, retryStale: false });
  if (maybe !== null) {
    const g: bigint = maybe.generation;
    void g;
  }
  // @ts-expect-error tryAcquire may resolve null: not a Lease without a check
  const notChecked: AcquiredLease = await tryAcquire(client, 'x', { ttlMs: 1000 });
  void notChecked;
  const raw: Lease = await acquireOutcome(client, 'x', { ttlMs: 1000 });
  const acquired: boolean | null = raw.acquired;
  void acquired;
  // the old names (deprecated) keep their types
  await withFence(pool, lease, (c) => c.query('SELECT 1'));
  await withTransactionLease(pool, 'x', { ttlMs: 1000 }, async (l, c) => c.query('SELECT $1', [l.resource]));
  await withKeptAliveLease(pool, 'x', { ttlMs: 1000 }, async (c, l) => l.generation);
  const validity: number = await renew(client, lease, { ttlMs: 30000, minValidityMs: 1000 });
  void validity;
  const out: ReleaseOutcome = await releaseOutcome(pool, lease);
  const reason: string | null = out.reason;
  void reason;
  const state: 'active' | 'lost' | null = await keepaliveState(pool, lease);
  void state;
  await inTransaction(pool, async (c) => c.release);
  const isp: boolean = isPool(pool);
  void isp;

  try {
    await fenced(pool, lease, (c) => c.query('UPDATE account SET owner = $1', ['me']));
  } catch (e) {
    const err = translateError(e);
    if (err instanceof StaleGeneration) {
      const fields: [string, string | null, string | null, string | null, string | null] =
        [err.sqlstate, err.schema, err.table, err.column, err.resource];
      void fields;
    } else if (err instanceof LeaseLostAtCommit || err instanceof FenceError) {
      const detail: string | null = err.detail;
      void detail;
    } else if (err instanceof LeaseBusy || err instanceof LeaseError) {
      const s: string = err.status;
      void s;
    } else if (err instanceof TransactionRolledBack) {
      const cause: unknown = err.cause;      // what failed the transaction, when seen
      void cause;
    }
  }
  const sq: string = StaleGeneration.sqlstate;
  void sq;
}

type Check<A, B> = A extends B ? (B extends A ? true : false) : false;
export const poolGetsPoolClient: Check<ClientOf<pg.Pool>, pg.PoolClient> = true;
export const clientGetsClient: Check<ClientOf<pg.Client>, pg.Client> = true;

// The client-side mode with a real ioredis client (its own types).
import Redis from 'ioredis';
import { RedisLeases, clientSideScripts, LeaseUnavailable } from 'lease-fence';
import type { CleanupStatus, RedisLeasesOptions } from 'lease-fence';

export async function clientSide(pool: pg.Pool): Promise<void> {
  const options: RedisLeasesOptions = { keyPrefix: 'lease_fence:', timeoutMs: 500, cleanupTimeoutMs: 500 };
  const leases = new RedisLeases(new Redis({ path: '/tmp/redis.sock', enableOfflineQueue: false,
    autoResendUnfulfilledCommands: false }), options);
  const raw: Lease = await leases.acquireOutcome(pool, 'x', { ttlMs: 1000, minValidityMs: 10 });
  const cleanup: CleanupStatus | undefined = raw.cleanup;
  const free: AcquiredLease | null = await leases.tryAcquire(pool, 'x', { ttlMs: 1000 });
  void free;
  void cleanup;
  let lease: AcquiredLease;
  try {
    lease = await leases.acquire(pool, 'x', { ttlMs: 1000, waitMs: 100, retryStale: true });
  } catch (err) {
    if (err instanceof LeaseUnknown) {
      await leases.release(err.lease);
      return;
    }
    if (err instanceof LeaseUnavailable || err instanceof LeaseDenied) return;
    throw err;
  }
  await fenced(pool, lease, (c) => c.query('UPDATE account SET owner = $1', ['me']));
  const validity: number = await leases.renew(lease, { ttlMs: 1000 });
  void validity;
  const out: ReleaseOutcome = await leases.releaseOutcome(lease);
  void out;
  const key: string = leases.leaseKey('x') + leases.generationKey('x');
  void key;
  const sha: string = clientSideScripts().acquire.sha1;
  void sha;
  // @ts-expect-error a RedisLeases needs a Redis client, not a pool
  new RedisLeases(pool);
  // @ts-expect-error ttlMs is required
  await leases.acquire(pool, 'x', {});
  // @ts-expect-error publish is PUBLISH or SPUBLISH
  new RedisLeases(new Redis(), { publish: 'DEL' });
}

// DataCorrupted (XX001), the one name in every library; LeaseDataCorrupted,
// its deprecated alias, is the same class
export function corruptCode(err: unknown): string | null {
  const same: typeof DataCorrupted = LeaseDataCorrupted;
  void same;
  if (err instanceof DataCorrupted) return err.code;
  if (err instanceof LeaseDataCorrupted) {
    const e: DataCorrupted = err;
    return e.code;
  }
  return null;
}

// leadership and takeOver (1.5): the leadership's fields and its lost signal
export async function lead(pool: pg.Pool, client: pg.Client): Promise<bigint> {
  const term: bigint = await leadership(client, 'scheduler', { ttlMs: 3000, value: 'host-a', fair: false },
    async (l: Leadership) => {
      const signal: AbortSignal = l.signal;
      const why: string | null = l.lostReason;
      void signal; void why;
      l.check();
      await l.fenced(pool, (c) => c.query('UPDATE account SET owner = $1', ['leader']));
      return l.term;
    });
  const taken: AcquiredLease = await takeOver(pool, 'scheduler', { ttlMs: 1000, timeoutMs: 500 });
  void taken;
  // @ts-expect-error ttlMs is required
  await leadership(client, 'scheduler', {}, () => 1);
  // @ts-expect-error scope is 'session' or 'explicit'
  await takeOver(pool, 'x', { ttlMs: 1, scope: 'transaction' });
  // @ts-expect-error fair is a boolean
  await leadership(client, 'scheduler', { ttlMs: 3000, fair: 'yes' }, () => 1);
  return term;
}

export function lostName(err: unknown): string | null {
  if (err instanceof LeadershipLost) {
    const e: LeaseLost = err;
    return e.name;
  }
  if (err instanceof TakeOverTimeout) return err.code;
  return null;
}

// resumableJob and lease-fence/bullmq (1.5, issue 54): the job's fields, a
// pool's job gets a PoolClient, the processor BullMQ's Worker takes
export async function resume(pool: pg.Pool, client: pg.Client): Promise<bigint> {
  const g: bigint = await resumableJob(pool, 'report:1', 30000, async (job) => {
    const c: pg.PoolClient = job.client;
    const from: unknown = job.resumeFrom;
    const by: bigint | null = job.resumedGeneration;
    const id: string = job.identity;
    void from; void by; void id;
    await c.query('UPDATE account SET balance = 0');
    return job.checkpoint({ step: 1 });
  }, { waitMs: 0, fair: false });
  await resumableJob(client, 'report:1', 30000, (job: ResumableJob<pg.Client>) => job.generation);
  // @ts-expect-error ttlMs is a number
  await resumableJob(client, 'report:1', '30000', () => 1);
  const processor: (job: Job<{ n: number }>) => Promise<string | undefined> =
    fencedProcessor<{ n: number }, string>(pool, async (bullJob, job) => `${bullJob.data.n} ${job.generation}`,
      { ttlMs: 60000, onBusy: 'retry', resource: (j) => `n:${j.data.n}` });
  void processor;
  // @ts-expect-error onBusy is 'skip' or 'retry'
  fencedProcessor(pool, async () => 1, { onBusy: 'never' });
  const r: string = defaultResource({ queueName: 'q', name: 'n', data: {} });
  void r;
  return g;
}

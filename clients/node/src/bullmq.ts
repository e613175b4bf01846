/**
 * lease-fence/bullmq: BullMQ jobs whose effects happen at most once.
 *
 *   const { fencedProcessor } = require('lease-fence/bullmq');
 *   new Worker('mail', fencedProcessor(pool, async (bullJob, job) => { ... }), { connection });
 *
 * Each BullMQ job runs as lease-fence's resumableJob on a client checked out
 * of `pool` for it: an explicit lease on the job's resource, then its work in
 * transactions fenced at the lease's generation, job.checkpoint(state) to
 * commit progress, job.resumeFrom where an earlier run got to. bullmq is an
 * optional peer dependency: only this module needs it, the package's main
 * entry point never loads it.
 */

import { createHash } from 'node:crypto';
import type { Job } from 'bullmq';
import type { Pool, PoolClient } from 'pg';
import {
  LeaseBusy, LeaseLost, LeaseLostAtCommit, LeaseUnavailable, StaleGeneration,
  isPool, resumableJob,
} from './index.js';
import type { ResumableJob } from './index.js';

/** What fencedProcessor does when the job's lease is held elsewhere. */
export type OnBusy = 'skip' | 'retry';

export interface FencedProcessorOptions<D = unknown> {
  /** The lease's TTL (ms): longer than the longest stretch between two checkpoints. Default 60000. */
  ttlMs?: number;
  /**
   * Busy (the same job runs elsewhere): 'skip' (default) completes the job
   * without running fn (its effect happens there) and logs a line; 'retry'
   * fails this attempt with the LeaseBusy, so that BullMQ's attempts and
   * backoff retry it.
   */
  onBusy?: OnBusy;
  /** The job's resource; default `bullmq:<queue>:<job name>:<sha256 of job.data as canonical JSON>`. */
  resource?: (job: Job<D>) => string;
  /** While the lease is busy, wait up to this long (ms) before answering busy; default 0. */
  waitMs?: number;
  /** Wait in the resource's queue, in arrival order; default false. */
  fair?: boolean;
  /** Where the skip line goes; default console.log. */
  log?: (line: string) => void;
}

/** The work: BullMQ's job and the fenced job (its client, checkpoint, resumeFrom). */
export type FencedWork<D, R> = (bullJob: Job<D>, job: ResumableJob<PoolClient>) => Promise<R> | R;

/**
 * JSON with object keys sorted and no spaces (JSON.stringify's escapes),
 * the form the default resource digests: equal data, equal resource.
 */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(sortKeys(value)) ?? 'null';
}

function sortKeys(value: unknown): unknown {
  if (value === null || typeof value !== 'object') return value;
  const withJson = value as { toJSON?: () => unknown };
  if (typeof withJson.toJSON === 'function') return sortKeys(withJson.toJSON());
  if (Array.isArray(value)) return value.map(sortKeys);
  const out: Record<string, unknown> = {};
  for (const k of Object.keys(value).sort()) out[k] = sortKeys((value as Record<string, unknown>)[k]);
  return out;
}

/** The default resource of a BullMQ job: `bullmq:<queue name>:<job name>:<sha256 hex of canonicalJson(job.data)>`. */
export function defaultResource(job: Pick<Job, 'queueName' | 'name' | 'data'>): string {
  const digest = createHash('sha256').update(canonicalJson(job.data), 'utf8').digest('hex');
  return `bullmq:${job.queueName}:${job.name}:${digest}`;
}

/** bullmq's UnrecoverableError, loaded when first needed (bullmq is an optional peer). */
function unrecoverable(err: Error): Error {
  const { UnrecoverableError } = require('bullmq') as typeof import('bullmq');
  const u = new UnrecoverableError(`${err.name}: ${err.message}`);
  (u as { cause?: unknown }).cause = err;
  return u;
}

/**
 * A BullMQ processor that runs fn(bullJob, job) as resumableJob on a client
 * of `pool` (checked out for the job, given back after it):
 *
 *  - granted: fn runs with the fenced job; its result is the job's result;
 *  - busy: onBusy 'skip' (default) → the job completes, result undefined,
 *    fn not run, a line logged; 'retry' → this attempt fails with the
 *    LeaseBusy and BullMQ's attempts/backoff retry it;
 *  - unknown (LeaseUnknown: Redis may have granted it) → this attempt fails
 *    with it and BullMQ's attempts/backoff retry it: never run unfenced;
 *  - unavailable (Redis down), and a lease lost or fenced off during fn
 *    (LeaseLost, StaleGeneration, LeaseLostAtCommit) → the job fails at once
 *    with BullMQ's UnrecoverableError (no further attempts), its message
 *    "<error name>: <message>", `cause` the lease-fence error;
 *  - any other error of fn: as from any processor (attempts/backoff apply).
 *
 * Retries need the job added with `attempts` (> 1) and `backoff`; an
 * attempt that finds the work done sees it in job.resumeFrom.
 */
export function fencedProcessor<D = unknown, R = unknown>(pool: Pool, fn: FencedWork<D, R>,
  options: FencedProcessorOptions<D> = {}): (bullJob: Job<D>, token?: string) => Promise<R | undefined> {
  if (!isPool(pool)) throw new TypeError('fencedProcessor needs a pg.Pool: a client is checked out per job');
  if (typeof fn !== 'function') throw new TypeError('fencedProcessor needs a function to run');
  const {
    ttlMs = 60000, onBusy = 'skip', resource, waitMs = 0, fair = false,
    log = (line: string) => console.log(line),
  } = options;
  if (onBusy !== 'skip' && onBusy !== 'retry') {
    throw new TypeError(`onBusy is 'skip' or 'retry', got ${String(onBusy)}`);
  }
  if (resource !== undefined && typeof resource !== 'function') {
    throw new TypeError('resource is a function of the job returning its resource');
  }
  if (!Number.isSafeInteger(ttlMs) || ttlMs <= 0) {
    throw new TypeError(`ttlMs is a positive integer (ms), got ${String(ttlMs)}`);
  }
  return async (bullJob: Job<D>): Promise<R | undefined> => {
    const res = resource ? resource(bullJob) : defaultResource(bullJob);
    try {
      return await resumableJob(pool, res, ttlMs, (job) => fn(bullJob, job), { waitMs, fair });
    } catch (err) {
      if (err instanceof LeaseBusy && onBusy === 'skip') {
        log(`lease-fence: job ${bullJob.id} (${bullJob.queueName}/${bullJob.name}) skipped: ` +
          `lease ${JSON.stringify(res)} is busy, the same job runs elsewhere`);
        return undefined;
      }
      if (err instanceof LeaseUnavailable || err instanceof LeaseLost
        || err instanceof StaleGeneration || err instanceof LeaseLostAtCommit) {
        throw unrecoverable(err);
      }
      // LeaseBusy (onBusy 'retry'), LeaseUnknown, LeaseDenied (stale twice,
      // insufficient_validity), fn's own errors: BullMQ's attempts and backoff
      throw err;
    }
  };
}

/**
 * What each library call does with the status a lease operation answered
 * (lease_fence.acquire / renew / release, or a client-side lease): return,
 * null, or which LeaseError. One place for the SQL and the client-side
 * mode, checked row by row against the "statuses" of the repository's
 * scripts/answers.json (test/unit/outcomes.test.js).
 */

import { leaseError } from './errors.js';
import type { AcquiredLease, Lease, LeaseRef, ReleaseOutcome } from './types.js';

/** The calls that take a lease: acquire rejects for every no; tryAcquire resolves null for busy. */
export type AcquireCall = 'acquire' | 'tryAcquire';

/**
 * An acquire's outcome as `call` answers it: the lease when granted; null
 * from tryAcquire when busy; otherwise the LeaseError of its status
 * (LeaseBusy, LeaseUnavailable, LeaseUnknown, LeaseDenied for stale,
 * insufficient_validity, unreplicated), thrown.
 */
export function acquireResult(lease: Lease, call: AcquireCall): AcquiredLease | null {
  if (lease.acquired === true) return lease as AcquiredLease;
  if (call === 'tryAcquire' && lease.acquired === false && lease.status === 'busy') return null;
  throw leaseError(lease.status, lease, 'acquire', lease.resource, lease.reason);
}

/** What renew answered, as a row: renewed true / false / null, its status, validity and reason. */
export interface RenewAnswer {
  renewed: boolean | null;
  status: string;
  validityMs: number | null;
  reason: string | null;
}

/** A renew's outcome: the validity (ms) when renewed; otherwise its LeaseError, thrown. */
export function renewResult(answer: RenewAnswer, lease: LeaseRef): number {
  if (answer.renewed === true) return Number(answer.validityMs);
  throw leaseError(answer.status, lease as Lease, 'renew', lease.resource, answer.reason);
}

/** A release's outcome, returned whatever it is: a release never rejects for an outcome. */
export function releaseResult(answer: ReleaseOutcome): ReleaseOutcome {
  return { released: answer.released, status: answer.status, reason: answer.reason };
}

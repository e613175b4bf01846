/**
 * The fair option, checked the same way by every verb that takes it (the
 * SQL verbs and leadership: index.ts, election.ts; the client-side mode,
 * which refuses it: client-side.ts). Internal: not exported by the package.
 */

/** fair: a boolean (default false); a TypeError before anything is sent. */
export function checkFair(fair: unknown): boolean {
  if (fair === undefined) return false;
  if (typeof fair !== 'boolean') {
    throw new TypeError(`fair is a boolean, got ${fair === null ? 'null' : typeof fair}`);
  }
  return fair;
}

/**
 * The client-side mode runs acquire.lua, which has no queue: fair true is
 * refused (RangeError), a non-boolean is a TypeError, before anything is
 * drawn or sent.
 */
export function checkNotFair(fair: unknown): void {
  if (checkFair(fair)) {
    throw new RangeError('fair: true is not offered by the client-side mode (it runs ' +
      'acquire.lua, which has no queue): take fair leases with the C edition ' +
      '(lease_fence.acquire(..., fair => true))');
  }
}

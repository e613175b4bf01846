/**
 * The lease protocol's answers: what a reply of one of the repository's Lua
 * scripts (scripts/*.lua) means, decoded in this one place for the
 * client-side mode (client-side.ts). It follows the repository's answer
 * table, scripts/answers.json, row by row (test/unit/protocol.test.js reads
 * that file and checks every row against this decoder, from the RESP bytes
 * through ioredis' own parser):
 *
 *   - decode(script, reply): a reply as ioredis hands it over (integers as
 *     numbers, bulk strings as strings, nil as null, arrays as arrays);
 *     every reply the table does not list is 'unknown';
 *   - decodeError(err): an error reply, by its code (the first word, matched
 *     exactly): NOSCRIPT → 'noscript' (send EVAL), the codes Redis raises
 *     before running any of a script → 'unavailable', anything else →
 *     'unknown' (a script that raised may have written before it);
 *   - decodeTransport(request): a request that got no reply: 'not_sent' →
 *     'unavailable', 'no_reply' and 'interrupted' → 'unknown'.
 */

/** The scripts of scripts/*.lua whose replies decode() knows. */
export type ScriptName = 'acquire' | 'renew' | 'release' | 'check' | 'claim' | 'takeover';

/** What a request that got no reply was: answers.json's "transport" rows. */
export type TransportFailure = 'not_sent' | 'no_reply' | 'interrupted';

/** One script's reply, decoded: the outcome and the fields it names. */
export type Answer =
  | { outcome: 'acquired'; generation: bigint }
  | { outcome: 'busy'; pttlMs: number | null }
  | { outcome: 'stale'; stored: bigint }
  | { outcome: 'corrupt'; value?: string; reason?: string }
  | { outcome: 'renewed' }
  | { outcome: 'lost' }
  | { outcome: 'released' }
  | { outcome: 'not_held' }
  | { outcome: 'held'; pttlMs: number | null }
  | { outcome: 'claimed' | 'ours' | 'others'; value: string }
  | { outcome: 'taken_over'; value: string | null }
  | { outcome: 'noscript'; reason: string }
  | { outcome: 'unavailable'; reason: string }
  | { outcome: 'unknown'; reason: string };

export type Outcome = Answer['outcome'];

const INT64_MAX = 9223372036854775807n;

/**
 * Error codes Redis answers before running any of a script: nothing was
 * applied. NOSCRIPT is one of them, with its own outcome (send EVAL).
 */
export const NOT_APPLIED_CODES: readonly string[] = ['LOADING', 'BUSY', 'NOAUTH', 'NOPERM',
  'WRONGPASS', 'READONLY', 'MASTERDOWN', 'OOM', 'MISCONF', 'CLUSTERDOWN', 'MOVED', 'ASK',
  'TRYAGAIN', 'CROSSSLOT', 'NOREPLICAS'];

/** A generation as the scripts write it: decimal digits, no leading zero, at most 2^63-1; else null. */
export function parseGeneration(s: unknown): bigint | null {
  if (typeof s !== 'string' || !/^(0|[1-9][0-9]{0,18})$/.test(s)) return null;
  const g = BigInt(s);
  return g <= INT64_MAX ? g : null;
}

/** A PTTL the acquire script sends as a string: a non-negative safe integer, else null (no hint). */
function parsePttl(s: string): number | null {
  if (!/^(0|[1-9][0-9]*)$/.test(s)) return null;
  const n = Number(s);
  return Number.isSafeInteger(n) ? n : null;
}

function describe(reply: unknown): string {
  if (reply === null) return 'nil';
  if (Array.isArray(reply)) return `an array of ${reply.length}`;
  if (typeof reply === 'string') return `the string ${JSON.stringify(reply.slice(0, 64))}`;
  if (typeof reply === 'number') return `the integer ${reply}`;
  if (reply instanceof Error) return `an error (${reply.message})`;
  return `a ${typeof reply}`;
}

function unknown(script: ScriptName, reply: unknown): Answer {
  return { outcome: 'unknown', reason: `unexpected reply to the ${script} script: ${describe(reply)}` };
}

/** [integer code, string value]: the pair the acquire and claim scripts answer; null otherwise. */
function pair(reply: unknown): [number, string] | null {
  if (!Array.isArray(reply) || reply.length !== 2) return null;
  const [code, value] = reply as unknown[];
  if (typeof code !== 'number' || !Number.isInteger(code) || typeof value !== 'string') return null;
  return [code, value];
}

/** What a reply (not an error) of `script` means: the answer table's "replies" rows. */
export function decode(script: ScriptName, reply: unknown): Answer {
  switch (script) {
    case 'acquire': {
      const p = pair(reply);
      if (p === null) break;
      const [code, value] = p;
      if (code === 1) {
        // the script echoes the generation it was sent: anything else is no grant we know
        const generation = parseGeneration(value);
        return generation === null ? unknown(script, reply) : { outcome: 'acquired', generation };
      }
      if (code === 0) return { outcome: 'busy', pttlMs: parsePttl(value) };
      if (code === 2) {
        const stored = parseGeneration(value);
        return stored === null ? { outcome: 'corrupt', value } : { outcome: 'stale', stored };
      }
      break;
    }
    case 'renew':
      if (reply === 1) return { outcome: 'renewed' };
      if (reply === 0) return { outcome: 'lost' };
      break;
    case 'release':
      if (reply === 1) return { outcome: 'released' };
      if (reply === 0) return { outcome: 'not_held' };
      break;
    case 'check':
      if (typeof reply === 'number' && Number.isSafeInteger(reply)) {
        if (reply >= 0) return { outcome: 'held', pttlMs: reply };
        if (reply === -1) return { outcome: 'held', pttlMs: null };
        if (reply === -2 || reply === -3) return { outcome: 'not_held' };
      }
      break;
    case 'claim': {
      const p = pair(reply);
      if (p === null) break;
      const [code, value] = p;
      if (code === 2) return { outcome: 'claimed', value };
      if (code === 1) return { outcome: 'ours', value };
      if (code === 0) return { outcome: 'others', value };
      break;
    }
    case 'takeover':
      if (reply === null || typeof reply === 'string') return { outcome: 'taken_over', value: reply };
      break;
    default:
      throw new RangeError(`no such script: ${JSON.stringify(script)}`);
  }
  return unknown(script, reply);
}

/**
 * What an error reply means (its message, as Redis sent it): the answer
 * table's "errors" rows, the same for every script.
 */
export function decodeError(message: string): Answer {
  const code = message.split(' ', 1)[0];
  const reason = `Redis answered: ${message}`;
  if (code === 'NOSCRIPT') return { outcome: 'noscript', reason };
  if (NOT_APPLIED_CODES.includes(code)) return { outcome: 'unavailable', reason };
  // a script refused to return a stored value longer than lease_fence ever
  // writes: nothing was written, a person must look at the key
  if (code === 'LFOVERSIZED') return { outcome: 'corrupt', reason };
  return { outcome: 'unknown', reason };
}

/**
 * What a request without a reply means: the answer table's "transport"
 * rows; reason says what happened, for people.
 */
export function decodeTransport(request: TransportFailure, reason: string): Answer {
  switch (request) {
    case 'not_sent': return { outcome: 'unavailable', reason };
    case 'no_reply': return { outcome: 'unknown', reason };
    case 'interrupted': return { outcome: 'unknown', reason };
    default: throw new RangeError(`no such transport failure: ${JSON.stringify(request)}`);
  }
}

/**
 * Which transport failure an error of ioredis that is not a reply of Redis
 * is: only "Stream isn't writeable" (enableOfflineQueue: false, no
 * connection) is refused before a byte is written. "Connection is closed.",
 * "Command timed out", MaxRetriesPerRequestError (a written command is sent
 * again after a reconnect) and anything else may have been written.
 */
export function transportFailureOf(err: unknown): TransportFailure {
  const msg = err instanceof Error ? err.message : String(err);
  return /^Stream isn't writeable/.test(msg) ? 'not_sent' : 'no_reply';
}

/** An error reply from Redis itself (ioredis' ReplyError), not one of the client's. */
export function isReplyError(err: unknown): err is Error {
  return err instanceof Error && err.name === 'ReplyError';
}

/** What a rejection of an ioredis command means: an error reply, or a transport failure. */
export function decodeRejection(err: unknown): Answer {
  if (isReplyError(err)) return decodeError(err.message);
  const msg = err instanceof Error ? err.message : String(err);
  const failure = transportFailureOf(err);
  return decodeTransport(failure, failure === 'not_sent' ? `not sent: ${msg}` : `no answer: ${msg}`);
}

/**
 * Client-side mode: the application takes the Redis lease itself, with an
 * ioredis client and the very Lua scripts the C library runs (the
 * repository's scripts/*.lua, copied into dist/lua/ by the build), while the
 * generation is drawn from the database (lease_fence.next_generation(), the
 * portable edition's or the C edition's). For a PostgreSQL that cannot load
 * the C library (managed services): the fence itself (set_generation,
 * fenced, StaleGeneration) is the same in both modes.
 *
 * What a script's reply means is decoded in one place, protocol.ts (after
 * the repository's answer table, scripts/answers.json). The rules kept
 * here, as in the C library:
 *   - a request that may have been sent but got no answer (timeout, the
 *     connection lost after the write), and any reply the table does not
 *     list, is 'unknown', never a "no": Redis may have applied it. An
 *     unknown acquire is followed by one bounded, conditional release
 *     (release.lua with its identity, never a DEL); lease.cleanup says
 *     whether it was confirmed.
 *   - a request that was certainly not applied (not sent: no connection;
 *     or an error Redis raises before running a script) is 'unavailable'.
 *   - renew and release compare the identity atomically (the scripts);
 *     renew never recreates a lost key.
 */

import { createHash, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import type { ClientBase } from 'pg';
import { DataCorrupted } from './errors.js';
import { checkNotFair } from './options.js';
import { acquireResult, releaseResult, renewResult } from './outcomes.js';
import { decode, decodeRejection, decodeTransport } from './protocol.js';
import type { Answer, ScriptName as ProtocolScript } from './protocol.js';
import type {
  AcquiredLease, CleanupStatus, Lease, LeaseRef, Queryable, ReleaseOutcome, ReleaseStatus,
  RenewOptions,
} from './types.js';

/**
 * What the client-side mode needs of a Redis client: an ioredis `Redis`
 * (version 5 or later) fits. Any client with ioredis' `status`, `evalsha`,
 * `eval`, `connect` and events does.
 */
export interface RedisClientLike {
  /** ioredis' connection state: 'wait', 'connecting', 'connect', 'ready', 'close', 'reconnecting', 'end'. */
  readonly status: string;
  /**
   * ioredis' options. RedisLeases takes only a client that never sends a
   * command again by itself: autoResendUnfulfilledCommands false, and no
   * reconnectOnError.
   */
  readonly options?: {
    autoResendUnfulfilledCommands?: boolean;
    reconnectOnError?: unknown;
  };
  evalsha(...args: any[]): Promise<unknown>;
  eval(...args: any[]): Promise<unknown>;
  connect(...args: any[]): Promise<unknown>;
  once(event: string, listener: (...args: any[]) => void): unknown;
  removeListener(event: string, listener: (...args: any[]) => void): unknown;
}

export interface RedisLeasesOptions {
  /** The keys' prefix: the C edition's lease_fence.key_prefix (default 'lease_fence:'); no '{' or '}'. */
  keyPrefix?: string;
  /** TTL in seconds of a resource's generation key (lease_fence.gen_key_ttl_s; default 604800, 0: none). */
  genKeyTtlS?: number;
  /** How long one request waits for Redis' answer (ms, default 1000); then its outcome is unknown. */
  timeoutMs?: number;
  /** How long a request waits for a client that is connecting (ms, default 1000); then unavailable, nothing sent. */
  connectTimeoutMs?: number;
  /** How long the release that follows an unknown acquire waits for its answer (ms, default 1000). */
  cleanupTimeoutMs?: number;
  /** How release.lua wakes waiting acquires: 'PUBLISH' (default) or 'SPUBLISH' (sharded pub/sub). */
  publish?: 'PUBLISH' | 'SPUBLISH';
}

export interface ClientSideAcquireOptions {
  /** The lease's TTL in milliseconds. */
  ttlMs: number;
  /** Deny (insufficient_validity, the lease released again) when less than this is left once granted. Default 0. */
  minValidityMs?: number;
  /** While the lease is busy, try again (polling) for up to this long (ms); default 0. */
  waitMs?: number;
  /** Not offered client-side: true is refused (RangeError, nothing sent); fair leases need the C edition. */
  fair?: boolean;
}

export interface ClientSideAcquireCheckedOptions extends ClientSideAcquireOptions {
  /** Heal a 'stale' answer and try again, up to 3 times (default true); false: heal, and LeaseDenied. */
  retryStale?: boolean;
}

/** One of the scripts the package ships (dist/lua/), as the client sends it. */
export interface ShippedScript {
  /** The file in the installed package. */
  file: string;
  /** SHA1 of the file's bytes: the script's name for EVALSHA. */
  sha1: string;
}

const SCRIPT_NAMES = ['acquire', 'renew', 'release', 'check'] as const;
type ScriptName = typeof SCRIPT_NAMES[number] & ProtocolScript;
interface Script extends ShippedScript { body: Buffer }

let loaded: Record<ScriptName, Script> | null = null;

function scripts(): Record<ScriptName, Script> {
  if (loaded) return loaded;
  const dir = path.join(__dirname, '..', 'lua');
  const out = {} as Record<ScriptName, Script>;
  for (const name of SCRIPT_NAMES) {
    const file = path.join(dir, `${name}.lua`);
    let body: Buffer;
    try {
      body = readFileSync(file);
    } catch (err) {
      throw new Error(`lease-fence: the client-side mode needs ${file} (built from the ` +
        `repository's scripts/${name}.lua): ${(err as Error).message}`);
    }
    out[name] = { file, body, sha1: createHash('sha1').update(body).digest('hex') };
  }
  loaded = out;
  return out;
}

/** The Lua scripts the client-side mode runs, with the SHA1 it names them by (EVALSHA). */
export function clientSideScripts(): Record<ScriptName, ShippedScript> {
  const s = scripts();
  const out = {} as Record<ScriptName, ShippedScript>;
  for (const name of SCRIPT_NAMES) out[name] = { file: s[name].file, sha1: s[name].sha1 };
  return out;
}

// the C edition's limits: LF_MAX_RESOURCE, the acquire's TTL bound, INT_MAX, LF_WAIT_MAX_STALE
const MAX_RESOURCE_BYTES = 1024;
const MAX_TTL_MS = 1000 * 60 * 60 * 24 * 365 * 100;
const MAX_WAIT_MS = 2147483647;
const MAX_STALE = 3;

/** Validity left after a request that took elapsed ms: ttl - elapsed - drift (the C edition's lf_validity_after). */
function validityAfter(ttl: number, elapsed: number): number {
  return ttl - elapsed - (Math.floor(ttl / 100) + 2);
}

function checkResource(resource: unknown): string {
  if (typeof resource !== 'string') {
    throw new TypeError(`a resource is a string, got ${resource === null ? 'null' : typeof resource}`);
  }
  if (resource.length === 0) throw new RangeError('resource must not be empty');
  if (resource.includes('\0')) throw new RangeError('resource must not contain a NUL character');
  const n = Buffer.byteLength(resource, 'utf8');
  if (n > MAX_RESOURCE_BYTES) {
    throw new RangeError(`resource is too long: it has ${n} bytes; the limit is ${MAX_RESOURCE_BYTES}`);
  }
  return resource;
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

function checkTtl(ttlMs: unknown): number {
  if (typeof ttlMs === 'number' && Number.isSafeInteger(ttlMs) && ttlMs <= 0) {
    throw new RangeError(`ttlMs must be positive, got ${ttlMs}`);
  }
  return checkInteger('ttlMs', ttlMs, 1, MAX_TTL_MS);
}

function checkMinValidity(minValidityMs: unknown, ttl: number): number {
  if (typeof minValidityMs === 'number' && Number.isSafeInteger(minValidityMs)
    && (minValidityMs < 0 || minValidityMs > ttl)) {
    throw new RangeError(`minValidityMs must be between 0 and ttlMs (${ttl}), got ${minValidityMs}`);
  }
  return checkInteger('minValidityMs', minValidityMs, 0, ttl);
}

function checkIdentity(identity: unknown): string {
  if (typeof identity !== 'string' || !/^[0-9a-f]{32}$/.test(identity)) {
    throw new TypeError('identity is not one an acquire returned: 32 lower-case hexadecimal digits, ' +
      `got ${identity === null ? 'null' : typeof identity === 'string' ? JSON.stringify(identity) : typeof identity}`);
  }
  return identity;
}

function checkLeaseRef(lease: unknown): LeaseRef {
  if (lease === null || typeof lease !== 'object') {
    throw new TypeError('a lease is an object with resource and identity');
  }
  const l = lease as LeaseRef;
  checkResource(l.resource);
  checkIdentity(l.identity);
  return l;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
/** ms in [ms/2, ms]: pollers do not stay in step. */
const jittered = (ms: number) => (ms < 2 ? ms : Math.floor(ms / 2) + Math.floor(Math.random() * (ms / 2 + 1)));

type Sent =
  | { kind: 'reply'; value: unknown }
  | { kind: 'error'; err: unknown }
  | { kind: 'timeout' };

/**
 * Leases taken by the application in Redis (ioredis), with generations drawn
 * from the database:
 *
 *   const leases = new RedisLeases(new Redis(), { keyPrefix: 'lease_fence:' });
 *   const lease = await leases.acquire(pool, 'account:1', { ttlMs: 30000 });
 *   await fenced(pool, lease, (client) => client.query('UPDATE ...'));
 *   await leases.release(lease);
 *
 * The same Lease, statuses and errors as acquire / renew / release of the
 * in-database mode. `db` (a pg.Client outside a transaction, or a pg.Pool)
 * is used only to draw generations: SELECT lease_fence.next_generation(),
 * and next_generation(above) to heal a stale answer (portable edition).
 */
export class RedisLeases {
  readonly redis: RedisClientLike;
  readonly keyPrefix: string;
  readonly genKeyTtlS: number;
  readonly timeoutMs: number;
  readonly connectTimeoutMs: number;
  readonly cleanupTimeoutMs: number;
  readonly publish: 'PUBLISH' | 'SPUBLISH';
  readonly #scripts: Record<ScriptName, Script>;

  constructor(redis: RedisClientLike, options: RedisLeasesOptions = {}) {
    if (redis === null || typeof redis !== 'object' || typeof redis.evalsha !== 'function'
      || typeof redis.eval !== 'function' || typeof redis.status !== 'string') {
      throw new TypeError('RedisLeases needs an ioredis client (new Redis(...))');
    }
    if (options === null || typeof options !== 'object') {
      throw new TypeError('RedisLeases options are an object');
    }
    // a client that follows a Sentinel or Cluster topology switches servers
    // by itself: after a failover a reply may come from a demoted master, and
    // a grant or release there is not the named master's. This mode talks to
    // one server and cannot tell; the C edition checks the role after every
    // switch and waits for replicas.
    if ((redis as { isCluster?: unknown }).isCluster === true) {
      throw new TypeError('RedisLeases does not support an ioredis Cluster client: take leases with ' +
        'the C edition (lease_fence.redis_cluster), or give a client of one Redis server');
    }
    const sentinels = (redis as { options?: { sentinels?: unknown } }).options?.sentinels;
    if (Array.isArray(sentinels) && sentinels.length > 0) {
      throw new TypeError('RedisLeases does not support a Sentinel-managed ioredis client ' +
        '(options.sentinels): after a failover it may answer from a demoted master; take leases ' +
        'with the C edition (lease_fence.redis_sentinels), or give a client of one Redis server');
    }
    // ioredis sends a command again by itself after a reconnect (an
    // unanswered one: autoResendUnfulfilledCommands, on by default) and after
    // an error reply (reconnectOnError answering 2). An acquire that Redis ran
    // and whose reply was lost would run a second time behind this library's
    // back, answer busy, and leave the key holding this client's identity for
    // the TTL while the caller hears "no". Such a client is refused, not
    // reconfigured: changing a shared client's options would change what
    // happens to the application's own commands on a reconnect.
    const clientOptions = (redis as { options?: { autoResendUnfulfilledCommands?: unknown;
      reconnectOnError?: unknown } }).options;
    if (clientOptions?.autoResendUnfulfilledCommands !== false) {
      throw new RangeError('RedisLeases needs an ioredis client that never sends a command twice: ' +
        'this one sends unanswered commands again after a reconnect (autoResendUnfulfilledCommands ' +
        'is on, the default), so an acquire Redis ran could run a second time; make the client ' +
        'with { autoResendUnfulfilledCommands: false }');
    }
    if (clientOptions.reconnectOnError !== undefined && clientOptions.reconnectOnError !== null) {
      throw new RangeError('RedisLeases needs an ioredis client that never sends a command twice: ' +
        'this one has reconnectOnError, which may send a command again after an error reply; ' +
        'make the client without it');
    }
    // ioredis' own keyPrefix would prepend itself to the scripts' KEYS: the
    // keys would no longer be the ones the C library names
    const own = (redis as { options?: { keyPrefix?: unknown } }).options?.keyPrefix;
    if (typeof own === 'string' && own !== '') {
      throw new RangeError(`the ioredis client has its own keyPrefix (${JSON.stringify(own)}): ` +
        'give RedisLeases the keyPrefix instead, and the client none');
    }
    const {
      keyPrefix = 'lease_fence:', genKeyTtlS = 604800, timeoutMs = 1000, connectTimeoutMs = 1000,
      cleanupTimeoutMs = 1000, publish = 'PUBLISH',
    } = options;
    if (typeof keyPrefix !== 'string') throw new TypeError(`keyPrefix must be a string, got ${typeof keyPrefix}`);
    if (/[{}]/.test(keyPrefix)) {
      throw new RangeError(`keyPrefix must not contain '{' or '}' (the resource in braces is the ` +
        `keys' hash tag), got ${JSON.stringify(keyPrefix)}`);
    }
    if (publish !== 'PUBLISH' && publish !== 'SPUBLISH') {
      throw new RangeError(`publish must be 'PUBLISH' or 'SPUBLISH', got ${JSON.stringify(publish)}`);
    }
    this.redis = redis;
    this.keyPrefix = keyPrefix;
    this.genKeyTtlS = checkInteger('genKeyTtlS', genKeyTtlS, 0, 2147483647);
    this.timeoutMs = checkInteger('timeoutMs', timeoutMs, 1, 600000);
    this.connectTimeoutMs = checkInteger('connectTimeoutMs', connectTimeoutMs, 0, 600000);
    this.cleanupTimeoutMs = checkInteger('cleanupTimeoutMs', cleanupTimeoutMs, 1, 600000);
    this.publish = publish;
    this.#scripts = scripts();
  }

  /** The lease key of a resource: <keyPrefix>{<resource>} (or <keyPrefix>{<hex>}#lease for one starting with '}'). */
  leaseKey(resource: string): string {
    checkResource(resource);
    if (resource[0] !== '}') return `${this.keyPrefix}{${resource}}`;
    return `${this.keyPrefix}{${Buffer.from(resource, 'utf8').toString('hex')}}#lease`;
  }

  /** The generation key of a resource: <keyPrefix>{<resource>}:gen (or <keyPrefix>{<hex>}#gen). */
  generationKey(resource: string): string {
    checkResource(resource);
    if (resource[0] !== '}') return `${this.keyPrefix}{${resource}}:gen`;
    return `${this.keyPrefix}{${Buffer.from(resource, 'utf8').toString('hex')}}#gen`;
  }

  /**
   * null once the client is ready to send; else why not (nothing sent).
   * A lazyConnect client is connected; one that is connecting is waited for,
   * up to connectTimeoutMs; one that has ended is not reopened.
   */
  async #ready(): Promise<string | null> {
    const redis = this.redis;
    if (redis.status === 'ready') return null;
    if (redis.status === 'end') return 'the Redis client has ended (quit or disconnect); nothing was sent';
    if (redis.status === 'wait') redis.connect().catch(() => {});
    if (redis.status !== 'ready' && this.connectTimeoutMs > 0) {
      await new Promise<void>((resolve) => {
        const done = (): void => {
          clearTimeout(timer);
          redis.removeListener('ready', done);
          redis.removeListener('end', done);
          resolve();
        };
        const timer = setTimeout(done, this.connectTimeoutMs);
        redis.once('ready', done);
        redis.once('end', done);
      });
    }
    return redis.status === 'ready' ? null
      : `Redis is not connected (client status ${redis.status}); nothing was sent`;
  }

  /** Send one command now (sync), and wait for its answer up to ms. */
  #send(method: 'evalsha' | 'eval', first: string | Buffer, keys: string[], args: string[],
    ms: number): Promise<Sent> {
    let p: Promise<unknown>;
    try {
      p = method === 'evalsha'
        ? this.redis.evalsha(first, keys.length, ...keys, ...args)
        : this.redis.eval(first, keys.length, ...keys, ...args);
    } catch (err) {
      return Promise.resolve({ kind: 'error', err });
    }
    return new Promise<Sent>((resolve) => {
      const timer = setTimeout(() => resolve({ kind: 'timeout' }), ms);
      Promise.resolve(p).then(
        (value) => { clearTimeout(timer); resolve({ kind: 'reply', value }); },
        (err) => { clearTimeout(timer); resolve({ kind: 'error', err }); });
    });
  }

  /**
   * Run a script: EVALSHA, and EVAL of the same bytes on NOSCRIPT, both
   * within timeoutMs. checkReady: false sends even when the client is not
   * connected (ioredis' offline queue, if enabled, sends it after what is
   * queued already): for the cleanup of an unknown acquire.
   */
  async #run(name: ScriptName, keys: string[], args: string[], timeoutMs: number,
    checkReady = true): Promise<Answer> {
    if (checkReady) {
      const why = await this.#ready();
      if (why !== null) return decodeTransport('not_sent', why);
    }
    const script = this.#scripts[name];
    const start = Date.now();
    const answer = this.#answer(name, await this.#send('evalsha', script.sha1, keys, args, timeoutMs),
      timeoutMs);
    if (answer.outcome !== 'noscript') return answer;
    // nothing ran: the same request again, with the script's text
    const left = timeoutMs - (Date.now() - start);
    if (left <= 0) return { outcome: 'unavailable', reason: 'timed out before the script could be loaded' };
    const again = this.#answer(name, await this.#send('eval', script.body, keys, args, left), timeoutMs);
    if (again.outcome === 'noscript') {
      return { outcome: 'unavailable', reason: `EVAL answered NOSCRIPT: ${again.reason}` };
    }
    return again;
  }

  /** What one sent command's reply, error or silence means (protocol.ts). */
  #answer(name: ScriptName, sent: Sent, timeoutMs: number): Answer {
    if (sent.kind === 'reply') return decode(name, sent.value);
    if (sent.kind === 'timeout') {
      return decodeTransport('no_reply', `no answer within ${timeoutMs} ms: Redis may apply it yet`);
    }
    return decodeRejection(sent.err);
  }

  /** One bounded conditional release (release.lua with that identity): confirmed or not. */
  async #cleanup(resource: string, identity: string): Promise<CleanupStatus> {
    const r = await this.#run('release', [this.leaseKey(resource)], [identity, this.publish],
      this.cleanupTimeoutMs, false);
    return r.outcome === 'released' || r.outcome === 'not_held' ? 'confirmed' : 'unconfirmed';
  }

  async #draw(db: Queryable, above: bigint | null): Promise<bigint> {
    const { rows } = above === null
      ? await (db as ClientBase).query<{ g: string }>('SELECT lease_fence.next_generation()::text AS g')
      : await (db as ClientBase).query<{ g: string }>(
        'SELECT lease_fence.next_generation($1::bigint)::text AS g', [above.toString()]);
    return BigInt(rows[0].g);
  }

  async #acquire(db: Queryable, resource: string, options: ClientSideAcquireOptions,
    maxStale: number): Promise<Lease> {
    if (options === null || typeof options !== 'object') {
      throw new TypeError('acquire needs options: { ttlMs }');
    }
    checkNotFair(options.fair);
    checkResource(resource);
    const ttl = checkTtl(options.ttlMs);
    const minv = checkMinValidity(options.minValidityMs ?? 0, ttl);
    const waitMs = checkInteger('waitMs', options.waitMs ?? 0, 0, MAX_WAIT_MS);
    if (db === null || typeof db !== 'object' || typeof (db as ClientBase).query !== 'function') {
      throw new TypeError('acquire needs a pg.Client or pg.Pool to draw generations from');
    }
    const keys = [this.leaseKey(resource), this.generationKey(resource)];
    const deadline = Date.now() + waitMs;
    const none = (status: string, reason: string | null = null, validityMs: number | null = null,
      extra: Partial<Lease> = {}): Lease => ({
      acquired: false, status, resource, identity: null, generation: null, validityMs, reason, ...extra,
    });
    let spare: bigint | null = null;    // a generation a busy answer left unused
    let stale = 0;
    let poll = 10;
    for (;;) {
      // validity is measured from before the request is sent (connecting included)
      const start = Date.now();
      // not connected: unavailable before a generation is drawn
      const notReady = await this.#ready();
      let r: Answer;
      let generation: bigint = 0n;
      let identity = '';
      if (notReady !== null) {
        r = decodeTransport('not_sent', notReady);
      } else {
        generation = spare ?? await this.#draw(db, null);
        spare = null;
        identity = randomBytes(16).toString('hex');
        r = await this.#run('acquire', keys,
          [identity, String(ttl), generation.toString(), String(this.genKeyTtlS)], this.timeoutMs);
      }
      if (r.outcome === 'busy') {
        // The key may hold this very request's identity: an acquire that ran
        // twice (sent again after its reply was lost, by a client or a proxy)
        // answers busy the second time, while the first run's grant stands.
        // check.lua tells: held by this identity is a grant under this
        // generation (only this request carried that identity, and its run
        // stored the generation). Not knowing is unknown, never busy.
        const mine = await this.#run('check', [keys[0]], [identity], this.timeoutMs);
        if (mine.outcome === 'held') {
          r = { outcome: 'acquired', generation };
        } else if (mine.outcome !== 'not_held') {
          r = {
            outcome: 'unknown',
            reason: 'the acquire answered busy, and whether the key holds this request\'s identity is ' +
              `unknown: ${mine.outcome === 'unknown' || mine.outcome === 'unavailable'
                ? mine.reason : `unexpected answer to the check script: ${mine.outcome}`}`,
          };
        }
      }
      const elapsed = Date.now() - start;

      if (r.outcome === 'unavailable') {
        // nothing held: while waiting, try again after a backoff
        if (Date.now() < deadline) {
          await sleep(Math.max(1, Math.min(deadline - Date.now(), jittered(poll))));
          poll = Math.min(poll * 2, 250);
          continue;
        }
        return none('unavailable', r.reason);
      }
      if (r.outcome === 'acquired' && r.generation === generation) {
        const validity = validityAfter(ttl, elapsed);
        if (validity < minv) {
          const cleanup = await this.#cleanup(resource, identity);
          return none('insufficient_validity', null, validity, { cleanup });
        }
        return {
          acquired: true, status: 'acquired', resource, identity, generation, validityMs: validity,
          reason: null,
        };
      }
      if (r.outcome === 'busy') {
        // busy: nothing stored, so the same generation may be tried again
        const now = Date.now();
        if (now >= deadline) return none('busy');
        let wake = Math.min(deadline, now + jittered(poll));
        if (r.pttlMs !== null) wake = Math.min(wake, now + r.pttlMs + 1);
        poll = Math.min(poll * 2, 250);
        spare = generation;
        await sleep(Math.max(1, wake - now));
        continue;
      }
      if (r.outcome === 'stale') {
        // heal: a generation above the stored one (the database's error, e.g.
        // XX001 beyond its bound, surfaces as is)
        const healed = await this.#draw(db, r.stored);
        if (++stale > maxStale) return none('stale');
        spare = healed;
        continue;
      }
      if (r.outcome === 'corrupt') {
        throw new DataCorrupted(`lease_fence: data corrupted: the generation key of resource ` +
          `${JSON.stringify(resource)} (${this.generationKey(resource)}) ` +
          (r.value !== undefined ? `does not hold a generation (${JSON.stringify(r.value)})`
            : `holds more than 256 bytes (${r.reason})`) +
          `: something other than lease_fence wrote that key; delete it`);
      }
      // unknown, or an answer that is no answer to this request (another
      // generation than the one sent): it may be held; release it, conditionally
      const reason = r.outcome === 'unknown' ? r.reason
        : r.outcome === 'acquired' ? `the acquire script answered generation ${r.generation}, ` +
          `not the ${generation} it was sent`
          : `unexpected answer to the acquire script: ${r.outcome}`;
      const cleanup = await this.#cleanup(resource, identity);
      return {
        acquired: null, status: 'unknown', resource, identity, generation, validityMs: null,
        reason, cleanup,
      };
    }
  }

  /**
   * Take a lease, whatever the outcome: never rejects for one. acquired
   * true (granted), false (busy, stale, unavailable, insufficient_validity:
   * a definite no) or null (unknown: it may be granted; lease.cleanup says
   * whether the release that followed was confirmed). A stale answer is
   * healed and tried again, up to 3 times. Rejects for bad arguments
   * (before anything is drawn or sent), with the database's error when a
   * generation cannot be drawn, and with DataCorrupted (code XX001)
   * when the generation key holds something lease_fence never wrote.
   */
  async acquireOutcome(db: Queryable, resource: string,
    options: ClientSideAcquireOptions): Promise<Lease> {
    return this.#acquire(db, resource, options, MAX_STALE);
  }

  /**
   * Take a lease if it is free: resolves to it, or to null when another
   * identity holds it (busy, after waitMs). Rejects as acquire does for
   * every other outcome: LeaseUnavailable, LeaseDenied (stale,
   * insufficient_validity), LeaseUnknown (maybe granted: err.lease has its
   * identity and err.lease.cleanup).
   */
  async tryAcquire(db: Queryable, resource: string,
    options: ClientSideAcquireCheckedOptions): Promise<AcquiredLease | null> {
    const retryStale = options?.retryStale ?? true;
    return acquireResult(await this.#acquire(db, resource, options, retryStale ? MAX_STALE : 0),
      'tryAcquire');
  }

  /**
   * Take a lease: resolves to it, or rejects with LeaseBusy /
   * LeaseUnavailable / LeaseDenied (stale, insufficient_validity: a definite
   * no) or LeaseUnknown (maybe granted: do not proceed; err.lease has its
   * identity and err.lease.cleanup).
   */
  async acquire(db: Queryable, resource: string,
    options: ClientSideAcquireCheckedOptions): Promise<AcquiredLease> {
    const retryStale = options?.retryStale ?? true;
    return acquireResult(await this.#acquire(db, resource, options, retryStale ? MAX_STALE : 0),
      'acquire') as AcquiredLease;
  }

  /**
   * Extend a lease if it still holds lease.identity (never recreated);
   * resolves to the validity in ms. Rejects with LeaseLost, LeaseDenied
   * (insufficient_validity), LeaseUnavailable or LeaseUnknown.
   */
  async renew(lease: LeaseRef, options: RenewOptions): Promise<number> {
    checkLeaseRef(lease);
    if (options === null || typeof options !== 'object') throw new TypeError('renew needs options: { ttlMs }');
    const ttl = checkTtl(options.ttlMs);
    const minv = checkMinValidity(options.minValidityMs ?? 0, ttl);
    const start = Date.now();
    const r = await this.#run('renew', [this.leaseKey(lease.resource)],
      [lease.identity as string, String(ttl)], this.timeoutMs);
    const validity = validityAfter(ttl, Date.now() - start);
    switch (r.outcome) {
      case 'renewed':
        return renewResult(validity >= minv
          ? { renewed: true, status: 'renewed', validityMs: validity, reason: null }
          : { renewed: false, status: 'insufficient_validity', validityMs: validity, reason: null },
        lease);
      case 'lost':
        return renewResult({ renewed: false, status: 'lost', validityMs: null, reason: null }, lease);
      case 'unavailable':
        return renewResult({ renewed: false, status: 'unavailable', validityMs: null, reason: r.reason },
          lease);
      default:
        return renewResult({
          renewed: null, status: 'unknown', validityMs: null,
          reason: r.outcome === 'unknown' ? r.reason : `unexpected answer to the renew script: ${r.outcome}`,
        }, lease);
    }
  }

  /**
   * Release a lease if it still holds lease.identity: { released, status,
   * reason }, status 'released', 'not_held', 'unavailable' (nothing sent or
   * applied) or 'unknown' (no answer: it then expires by its TTL, calling
   * again is safe). Never rejects for an outcome.
   */
  async releaseOutcome(lease: LeaseRef): Promise<ReleaseOutcome> {
    checkLeaseRef(lease);
    const r = await this.#run('release', [this.leaseKey(lease.resource)],
      [lease.identity as string, this.publish], this.timeoutMs);
    switch (r.outcome) {
      case 'released': return releaseResult({ released: true, status: 'released', reason: null });
      case 'not_held': return releaseResult({ released: false, status: 'not_held', reason: null });
      case 'unavailable': return releaseResult({ released: false, status: 'unavailable', reason: r.reason });
      default:
        return releaseResult({
          released: null, status: 'unknown',
          reason: r.outcome === 'unknown' ? r.reason : `unexpected answer to the release script: ${r.outcome}`,
        });
    }
  }

  /** releaseOutcome's status: 'released', 'not_held', 'unavailable' or 'unknown'. */
  async release(lease: LeaseRef): Promise<ReleaseStatus> {
    return (await this.releaseOutcome(lease)).status;
  }
}

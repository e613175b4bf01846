'use strict';
// The client-side mode (RedisLeases): the application takes the Redis lease
// with ioredis and the repository's Lua scripts, the generation comes from
// the portable edition's database (server 2 of test/clients/run.sh:
// LF_PORTABLE_PGPORT, LF_PORTABLE_DB, without the C library), and the fence
// refuses the stale writer exactly as in the C mode. Needs LF_PORTABLE_PGPORT,
// LF_REDIS_SOCK and LF_SRC: without them every test fails (never skips).
// Each test uses its own key prefix, so its Redis keys are its own.

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { createHash, randomBytes } = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');
const { setTimeout: sleep } = require('node:timers/promises');
const pg = require('pg');
const Redis = require('ioredis');
const lf = require('lease-fence');
const { config, rejection } = require('./helpers');
const { startProxy } = require('./redis-proxy');

const env = process.env;
const installed = env.LF_EXPECT_INSTALLED === '1';
const portable = {
  host: config.host,
  port: Number(env.LF_PORTABLE_PGPORT),
  database: env.LF_PORTABLE_DB || 'portabledb',
  user: config.user,
};
const REDIS_SOCK = env.LF_REDIS_SOCK || '';

const prefixOf = (tag) => `lf_node_cs:${tag}:${randomBytes(4).toString('hex')}:`;
const resourceName = (tag) => `node-cs:${tag}:${randomBytes(4).toString('hex')}`;

const closers = [];
// RedisLeases takes only a client that never sends a command twice by itself
function redisClient(options = {}) {
  const r = new Redis({ path: REDIS_SOCK, autoResendUnfulfilledCommands: false, ...options });
  r.on('error', () => {});        // refused connections in the unavailable tests: expected
  closers.push(() => r.disconnect());
  return r;
}

async function newRow(db) {
  const { rows } = await db.query(
    "INSERT INTO account (owner, balance) VALUES ('nobody', 100) RETURNING id");
  return rows[0].id;
}
async function readRow(db, id) {
  const { rows } = await db.query('SELECT owner, balance, fence FROM account WHERE id = $1', [id]);
  return { owner: rows[0].owner, balance: rows[0].balance, fence: BigInt(rows[0].fence) };
}
async function highestIssued(db) {
  const { rows } = await db.query('SELECT lease_fence.highest_issued()::text AS g');
  return BigInt(rows[0].g);
}
// every key under a prefix
async function keysUnder(redis, prefix) {
  return (await redis.keys(`${prefix}*`)).sort();
}

describe('client-side mode: ioredis leases, generations from the portable edition', () => {
  let pool;        // portabledb
  let admin;       // a plain ioredis connection for looking at keys and pausing

  before(async () => {
    for (const v of ['LF_PORTABLE_PGPORT', 'LF_REDIS_SOCK', 'LF_SRC']) {
      if (!env[v]) throw new Error(`${v} is not set: run through test/clients/run.sh`);
    }
    pool = new pg.Pool({ ...portable, max: 4 });
    admin = redisClient();
    await admin.ping();
    // really the portable edition: no C library there
    const { rows } = await pool.query(
      "SELECT count(*)::int AS n FROM pg_extension WHERE extname = 'lease_fence'");
    assert.equal(rows[0].n, 0, 'portabledb has no lease_fence extension (the portable edition)');
  });
  after(async () => {
    closers.splice(0).forEach((close) => close());
    if (pool) await pool.end();
  });

  it('two holders: A expires, B takes over with a higher generation; A\'s fenced write is StaleGeneration (LF001), B\'s stands', async () => {
    const leases = new lf.RedisLeases(redisClient(), { keyPrefix: prefixOf('two') });
    const res = resourceName('two');
    const id = await newRow(pool);

    const a = await leases.acquire(pool, res, { ttlMs: 300 });
    assert.equal(a.acquired, true);
    assert.equal(a.status, 'acquired');
    assert.match(a.identity, /^[0-9a-f]{32}$/);
    assert.equal(typeof a.generation, 'bigint');
    assert.ok(a.validityMs > 0 && a.validityMs <= 300);
    assert.equal(await admin.get(leases.leaseKey(res)), a.identity);
    assert.equal(await admin.get(leases.generationKey(res)), a.generation.toString());
    await lf.fenced(pool, a, (c) => c.query("UPDATE account SET owner = 'A' WHERE id = $1", [id]));
    await sleep(700);                                 // A stalls; its lease expires
    assert.equal(await admin.exists(leases.leaseKey(res)), 0);

    const b = await leases.acquire(pool, res, { ttlMs: 10000 });
    assert.ok(b.generation > a.generation, `${b.generation} > ${a.generation}`);
    await lf.fenced(pool, b, (c) =>
      c.query("UPDATE account SET owner = 'B', balance = balance + 1 WHERE id = $1", [id]));

    let ran = false;
    const err = await rejection(lf.fenced(pool, a, async (c) => {
      ran = true;
      await c.query("UPDATE account SET owner = 'A late', balance = 0 WHERE id = $1", [id]);
    }), lf.StaleGeneration);
    assert.equal(err.sqlstate, 'LF001');
    assert.equal(err.cause.code, 'LF001');
    assert.equal(err.resource, res, 'refused at the resource fence');
    assert.equal(ran, false);
    // rows only: the row fence refuses it too
    const rowErr = await rejection(lf.fenced(pool, a.generation, (c) =>
      c.query("UPDATE account SET owner = 'A late' WHERE id = $1", [id])), lf.StaleGeneration);
    assert.deepEqual([rowErr.table, rowErr.column], ['account', 'fence']);

    assert.deepEqual(await readRow(pool, id), { owner: 'B', balance: 101, fence: b.generation });
    assert.equal(await leases.release(b), 'released');
  });

  it('an unknown outcome stays unknown: CLIENT PAUSE + a short timeout → unknown (LeaseUnknown, not LeaseDenied), bounded cleanup, then the key is absent or that identity', async () => {
    const prefix = prefixOf('unknown');
    const redis = redisClient();
    await redis.ping();
    const leases = new lf.RedisLeases(redis, { keyPrefix: prefix, timeoutMs: 200, cleanupTimeoutMs: 200 });
    const res1 = resourceName('unknown1');
    const res2 = resourceName('unknown2');
    const before = await highestIssued(pool);

    await admin.call('CLIENT', 'PAUSE', '2500', 'ALL');
    const lease = await leases.acquireOutcome(pool, res1, { ttlMs: 60000 });
    const err = await rejection(leases.acquire(pool, res2, { ttlMs: 60000 }), lf.LeaseUnknown);

    assert.equal(lease.acquired, null, 'unknown, never a "no"');
    assert.equal(lease.status, 'unknown');
    assert.match(lease.identity, /^[0-9a-f]{32}$/);
    assert.equal(typeof lease.generation, 'bigint');
    assert.ok(lease.generation > before);
    assert.equal(lease.validityMs, null);
    assert.match(lease.reason, /no answer/);
    assert.equal(lease.cleanup, 'unconfirmed', 'the cleanup waited only cleanupTimeoutMs');

    assert.ok(!(err instanceof lf.LeaseDenied), 'LeaseUnknown is not a LeaseDenied');
    assert.ok(err instanceof lf.LeaseError);
    assert.equal(err.status, 'unknown');
    assert.equal(err.lease.acquired, null);
    assert.match(err.lease.identity, /^[0-9a-f]{32}$/);
    assert.equal(err.lease.cleanup, 'unconfirmed');

    // after the pause: what was queued on that connection ran in order
    await redis.ping();
    for (const [res, identity] of [[res1, lease.identity], [res2, err.lease.identity]]) {
      const held = await admin.get(leases.leaseKey(res));
      assert.ok(held === null || held === identity, `${res}: absent or ${identity}, got ${held}`);
      // the conditional release: safe to call again
      assert.ok(['released', 'not_held'].includes(await leases.release({ resource: res, identity })));
      assert.equal(await admin.exists(leases.leaseKey(res)), 0);
    }
  });

  it('a rejection of ioredis\' commandTimeout is unknown too, its cleanup confirmed once Redis answers', async () => {
    const prefix = prefixOf('cmdtimeout');
    const redis = redisClient({ commandTimeout: 150 });
    await redis.ping();
    const leases = new lf.RedisLeases(redis, { keyPrefix: prefix, timeoutMs: 5000, cleanupTimeoutMs: 5000 });
    const res = resourceName('cmdtimeout');
    await admin.call('CLIENT', 'PAUSE', '800', 'ALL');
    const lease = await leases.acquireOutcome(pool, res, { ttlMs: 60000 });
    assert.equal(lease.status, 'unknown');
    assert.equal(lease.acquired, null);
    assert.match(lease.reason, /timed out/i);
    // the cleanup (same connection, queued behind the acquire) rejected by
    // commandTimeout too, or answered after the pause
    assert.ok(['confirmed', 'unconfirmed'].includes(lease.cleanup));
    await redis.ping().catch(() => {});
    await sleep(1000);
    await admin.ping();
    const held = await admin.get(leases.leaseKey(res));
    assert.ok(held === null || held === lease.identity, `absent or ${lease.identity}, got ${held}`);
    await leases.release(lease);
  });

  it('stale healed: a :gen key above the sequence (within 2^24) → acquired with a higher generation', async () => {
    const leases = new lf.RedisLeases(redisClient(), { keyPrefix: prefixOf('stale') });
    const res = resourceName('stale');
    const above = (await highestIssued(pool)) + 5000n;
    await admin.set(leases.generationKey(res), above.toString());

    const lease = await leases.acquire(pool, res, { ttlMs: 10000 });
    assert.equal(lease.status, 'acquired');
    assert.ok(lease.generation > above, `${lease.generation} > ${above}`);
    assert.equal(await admin.get(leases.generationKey(res)), lease.generation.toString());
    assert.ok(await highestIssued(pool) >= lease.generation);
    // and the generation is one the database issued: the fence takes it
    const id = await newRow(pool);
    await lf.fenced(pool, lease, (c) => c.query("UPDATE account SET owner = 'healed' WHERE id = $1", [id]));
    assert.equal((await readRow(pool, id)).fence, lease.generation);
    assert.equal(await leases.release(lease), 'released');

    // retryStale: false heals but does not try again: a definite no
    const res2 = resourceName('stale2');
    const above2 = (await highestIssued(pool)) + 100n;
    await admin.set(leases.generationKey(res2), above2.toString());
    const denied = await rejection(leases.acquire(pool, res2, { ttlMs: 10000, retryStale: false }),
      lf.LeaseDenied);
    assert.equal(denied.status, 'stale');
    assert.ok(!(denied instanceof lf.LeaseBusy));
    assert.equal(await admin.exists(leases.leaseKey(res2)), 0);
    assert.ok(await highestIssued(pool) > above2, 'the heal moved the sequence past the stored one');
    const next = await leases.acquire(pool, res2, { ttlMs: 10000 });
    assert.ok(next.generation > above2);
    await leases.release(next);
  });

  it('stale far above (2^40): the database\'s XX001 surfaces, nothing acquired, the sequence unmoved', async () => {
    const leases = new lf.RedisLeases(redisClient(), { keyPrefix: prefixOf('far') });
    const res = resourceName('far');
    const far = 2n ** 40n;
    await admin.set(leases.generationKey(res), far.toString());
    const before = await highestIssued(pool);

    for (const call of [() => leases.acquire(pool, res, { ttlMs: 10000 }),
      () => leases.tryAcquire(pool, res, { ttlMs: 10000 })]) {
      let caught = null;
      await assert.rejects(call(), (err) => { caught = err; return true; });
      assert.equal(caught.code, 'XX001', `the database's error: ${caught.message}`);
      assert.ok(!(caught instanceof lf.LeaseError));
    }
    assert.equal(await admin.exists(leases.leaseKey(res)), 0, 'nothing acquired');
    assert.equal(await admin.get(leases.generationKey(res)), far.toString());
    // one generation per attempt was drawn for the first try; the heal moved nothing
    assert.equal(await highestIssued(pool), before + 2n);
  });

  it('stale against a database without next_generation(above) (the C edition\'s appdb): its error 42883 surfaces', async () => {
    const appdb = new pg.Client(config);
    await appdb.connect();
    try {
      const leases = new lf.RedisLeases(redisClient(), { keyPrefix: prefixOf('noheal') });
      const res = resourceName('noheal');
      await admin.set(leases.generationKey(res), '1000000000000');
      let caught = null;
      await assert.rejects(leases.tryAcquire(appdb, res, { ttlMs: 10000 }),
        (err) => { caught = err; return true; });
      assert.equal(caught.code, '42883', caught.message);
      assert.equal(await admin.exists(leases.leaseKey(res)), 0);
    } finally {
      await appdb.end();
    }
  });

  it('busy: a held lease answers busy (acquired false, LeaseBusy, tryAcquire null); waitMs waits for its end', async () => {
    const leases = new lf.RedisLeases(redisClient(), { keyPrefix: prefixOf('busy') });
    const res = resourceName('busy');
    const a = await leases.acquire(pool, res, { ttlMs: 400 });

    assert.equal(await leases.tryAcquire(pool, res, { ttlMs: 10000 }), null, 'busy: null, no Lease');
    const busy = await leases.acquireOutcome(pool, res, { ttlMs: 10000 });
    assert.deepEqual(busy, {
      acquired: false, status: 'busy', resource: res, identity: null, generation: null,
      validityMs: null, reason: null,
    });
    const err = await rejection(leases.acquire(pool, res, { ttlMs: 10000 }), lf.LeaseBusy);
    assert.ok(err instanceof lf.LeaseDenied);
    assert.equal(err.status, 'busy');
    assert.equal(await admin.get(leases.leaseKey(res)), a.identity, "A's lease untouched");

    const b = await leases.acquire(pool, res, { ttlMs: 10000, waitMs: 10000 });
    assert.ok(b.generation > a.generation);
    assert.equal(await admin.get(leases.leaseKey(res)), b.identity);
    assert.equal(await leases.release(a), 'not_held');
    assert.equal(await leases.release(b), 'released');
  });

  it('unavailable: no Redis at that socket → a definite no, nothing drawn; renew and release unavailable', async () => {
    const nowhere = path.join(path.dirname(REDIS_SOCK), `no-redis-${randomBytes(4).toString('hex')}.sock`);
    const before = await highestIssued(pool);
    const fake = { resource: 'x', identity: 'a'.repeat(32) };
    for (const options of [{ enableOfflineQueue: false }, { lazyConnect: true }, {}]) {
      const redis = redisClient({ path: nowhere, retryStrategy: () => 50, ...options });
      const leases = new lf.RedisLeases(redis, { keyPrefix: prefixOf('unavail'), connectTimeoutMs: 200 });
      const res = resourceName('unavail');
      const lease = await leases.acquireOutcome(pool, res, { ttlMs: 10000 });
      assert.equal(lease.acquired, false, JSON.stringify(options));
      assert.equal(lease.status, 'unavailable');
      assert.equal(lease.identity, null);
      assert.equal(lease.generation, null);
      assert.match(lease.reason, /nothing was sent/);
      const err = await rejection(leases.acquire(pool, res, { ttlMs: 10000 }), lf.LeaseUnavailable);
      assert.ok(err instanceof lf.LeaseDenied);
      const tryErr = await rejection(leases.tryAcquire(pool, res, { ttlMs: 10000 }), lf.LeaseUnavailable);
      assert.equal(tryErr.status, 'unavailable', 'unavailable is not busy: never null');
      const renewErr = await rejection(leases.renew(fake, { ttlMs: 1000 }), lf.LeaseUnavailable);
      assert.equal(renewErr.status, 'unavailable');
      const out = await leases.releaseOutcome(fake);
      assert.equal(out.released, false);
      assert.equal(out.status, 'unavailable');
      assert.match(out.reason, /nothing was sent/);
    }
    // an ended client is not reopened
    const ended = redisClient();
    await ended.ping();
    const end = new Promise((resolve) => ended.once('end', resolve));
    await ended.quit();
    await end;
    assert.equal(ended.status, 'end');
    const leases = new lf.RedisLeases(ended, { keyPrefix: prefixOf('ended') });
    const lease = await leases.acquireOutcome(pool, resourceName('ended'), { ttlMs: 1000 });
    assert.equal(lease.status, 'unavailable');
    assert.equal(await highestIssued(pool), before, 'no generation drawn');
  });

  it('renew: a held lease is extended (validity); a lost one is LeaseLost and never recreated', async () => {
    const leases = new lf.RedisLeases(redisClient(), { keyPrefix: prefixOf('renew') });
    const res = resourceName('renew');
    const lease = await leases.acquire(pool, res, { ttlMs: 2000 });
    const validity = await leases.renew(lease, { ttlMs: 60000, minValidityMs: 1000 });
    assert.ok(validity >= 1000 && validity <= 60000, String(validity));
    assert.ok(await admin.pttl(leases.leaseKey(res)) > 2000, 'the key was extended');

    // another identity: lost, the holder's key untouched
    const other = { resource: res, identity: randomBytes(16).toString('hex') };
    const lostOther = await rejection(leases.renew(other, { ttlMs: 60000 }), lf.LeaseLost);
    assert.equal(lostOther.status, 'lost');
    assert.ok(lostOther instanceof lf.LeaseDenied);
    assert.equal(await admin.get(leases.leaseKey(res)), lease.identity);

    // minValidityMs = ttlMs can never be met: insufficient_validity (the lease stays held)
    const insufficient = await rejection(leases.renew(lease, { ttlMs: 5000, minValidityMs: 5000 }),
      lf.LeaseDenied);
    assert.equal(insufficient.status, 'insufficient_validity');

    // the key gone: lost, and not recreated
    await admin.del(leases.leaseKey(res));
    const lost = await rejection(leases.renew(lease, { ttlMs: 60000 }), lf.LeaseLost);
    assert.equal(lost.lease, lease);
    assert.equal(await admin.exists(leases.leaseKey(res)), 0, 'renew never recreates a lost key');
  });

  it('release: released (DEL, a message on <lease key>:released), then not_held; another identity leaves the key alone', async () => {
    const leases = new lf.RedisLeases(redisClient(), { keyPrefix: prefixOf('release') });
    const res = resourceName('release');
    const lease = await leases.acquire(pool, res, { ttlMs: 60000 });

    const stranger = { resource: res, identity: randomBytes(16).toString('hex') };
    assert.deepEqual(await leases.releaseOutcome(stranger),
      { released: false, status: 'not_held', reason: null });
    assert.equal(await admin.get(leases.leaseKey(res)), lease.identity);

    const sub = redisClient();
    const channel = `${leases.leaseKey(res)}:released`;
    await sub.subscribe(channel);
    const message = new Promise((resolve) => sub.once('message', (ch) => resolve(ch)));
    assert.deepEqual(await leases.releaseOutcome(lease), { released: true, status: 'released', reason: null });
    assert.equal(await message, channel, 'waiting acquires are woken');
    assert.equal(await admin.exists(leases.leaseKey(res)), 0);
    assert.equal(await leases.release(lease), 'not_held');
  });

  it('insufficient_validity: released again at once (cleanup confirmed), a definite no', async () => {
    const leases = new lf.RedisLeases(redisClient(), { keyPrefix: prefixOf('insuff') });
    const res = resourceName('insuff');
    const lease = await leases.acquireOutcome(pool, res, { ttlMs: 5000, minValidityMs: 5000 });
    assert.equal(lease.acquired, false);
    assert.equal(lease.status, 'insufficient_validity');
    assert.equal(lease.identity, null);
    assert.ok(lease.validityMs < 5000);
    assert.equal(lease.cleanup, 'confirmed');
    assert.equal(await admin.exists(leases.leaseKey(res)), 0);
    const err = await rejection(leases.acquire(pool, res, { ttlMs: 5000, minValidityMs: 5000 }), lf.LeaseDenied);
    assert.equal(err.status, 'insufficient_validity');
    const tryErr = await rejection(leases.tryAcquire(pool, res, { ttlMs: 5000, minValidityMs: 5000 }), lf.LeaseDenied);
    assert.equal(tryErr.status, 'insufficient_validity');
  });

  it('keys as the C library names them, also for a resource starting with \'}\' (hex)', async () => {
    const prefix = prefixOf('keys');
    const leases = new lf.RedisLeases(redisClient(), { keyPrefix: prefix });
    assert.equal(leases.leaseKey('a:1'), `${prefix}{a:1}`);
    assert.equal(leases.generationKey('a:1'), `${prefix}{a:1}:gen`);
    const res = `}é${randomBytes(2).toString('hex')}`;
    const hex = Buffer.from(res, 'utf8').toString('hex');
    const lease = await leases.acquire(pool, res, { ttlMs: 10000 });
    assert.deepEqual(await keysUnder(admin, prefix), [`${prefix}{${hex}}#gen`, `${prefix}{${hex}}#lease`]);
    assert.equal(await admin.get(`${prefix}{${hex}}#lease`), lease.identity);
    assert.equal(await admin.get(`${prefix}{${hex}}#gen`), lease.generation.toString());
    assert.ok(await admin.ttl(`${prefix}{${hex}}#gen`) > 600000, 'gen key TTL: 604800 s by default');
    assert.equal(await leases.release(lease), 'released');
    assert.equal(new lf.RedisLeases(admin).keyPrefix, 'lease_fence:');
  });

  it('the scripts the package ships are byte-identical to the repository\'s scripts/*.lua, and run by those SHA1s', async () => {
    const shipped = lf.clientSideScripts();
    assert.deepEqual(Object.keys(shipped).sort(), ['acquire', 'check', 'release', 'renew']);
    const sha1 = (file) => createHash('sha1').update(fs.readFileSync(file)).digest('hex');
    for (const [name, s] of Object.entries(shipped)) {
      if (installed) {
        assert.ok(s.file.includes(`${path.sep}node_modules${path.sep}lease-fence${path.sep}dist${path.sep}lua${path.sep}`), s.file);
      }
      const repo = path.join(env.LF_SRC, 'scripts', `${name}.lua`);
      assert.equal(sha1(s.file), sha1(repo), `${name}.lua`);
      assert.equal(s.sha1, sha1(repo));
      assert.ok(fs.readFileSync(s.file).equals(fs.readFileSync(repo)), `${name}.lua byte for byte`);
    }
    // no copy of them anywhere in the package but dist/lua
    const pkgRoot = path.dirname(require.resolve('lease-fence/package.json'));
    const walk = (dir) => fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
      e.isDirectory() ? (e.name === 'node_modules' ? [] : walk(path.join(dir, e.name)))
        : [path.join(dir, e.name)]);
    const luas = walk(pkgRoot).filter((f) => f.endsWith('.lua'))
      .map((f) => path.relative(pkgRoot, f).split(path.sep).join('/'));
    assert.ok(luas.every((f) => f.startsWith('dist/lua/')), luas.join(' '));

    // after a SCRIPT FLUSH the first call loads them (EVALSHA, NOSCRIPT, EVAL): Redis names them the same
    await admin.script('FLUSH');
    const leases = new lf.RedisLeases(redisClient(), { keyPrefix: prefixOf('sha') });
    const lease = await leases.acquire(pool, resourceName('sha'), { ttlMs: 10000 });
    await leases.renew(lease, { ttlMs: 10000 });
    assert.equal(await leases.release(lease), 'released');
    assert.deepEqual(await admin.script('EXISTS', shipped.acquire.sha1, shipped.renew.sha1, shipped.release.sha1),
      [1, 1, 1]);
  });

  it('argument errors: TypeError / RangeError before anything is drawn or sent', async () => {
    const prefix = prefixOf('args');
    const redis = redisClient();
    const leases = new lf.RedisLeases(redis, { keyPrefix: prefix });
    let queries = 0;
    const db = { query: async (...args) => { queries += 1; return pool.query(...args); } };
    const good = { resource: 'r', identity: 'a'.repeat(32) };

    const cases = [
      [() => leases.tryAcquire(db, '', { ttlMs: 1000 }), RangeError, /resource must not be empty/],
      [() => leases.tryAcquire(db, 42, { ttlMs: 1000 }), TypeError, /resource is a string/],
      [() => leases.tryAcquire(db, 'r\0x', { ttlMs: 1000 }), RangeError, /NUL/],
      [() => leases.tryAcquire(db, 'x'.repeat(1025), { ttlMs: 1000 }), RangeError, /too long/],
      [() => leases.tryAcquire(db, 'r', { ttlMs: 0 }), RangeError, /ttlMs must be positive/],
      [() => leases.tryAcquire(db, 'r', { ttlMs: -5 }), RangeError, /ttlMs must be positive/],
      [() => leases.tryAcquire(db, 'r', { ttlMs: 1.5 }), RangeError, /ttlMs must be an integer/],
      [() => leases.tryAcquire(db, 'r', { ttlMs: '1000' }), TypeError, /ttlMs must be a number/],
      [() => leases.tryAcquire(db, 'r', {}), TypeError, /ttlMs must be a number/],
      [() => leases.tryAcquire(db, 'r', { ttlMs: 1e13 }), RangeError, /ttlMs must be between/],
      [() => leases.acquire(db, 'r', { ttlMs: 1000, minValidityMs: 1001 }), RangeError, /minValidityMs/],
      [() => leases.acquire(db, 'r', { ttlMs: 1000, minValidityMs: -1 }), RangeError, /minValidityMs/],
      [() => leases.acquire(db, 'r', { ttlMs: 1000, waitMs: -1 }), RangeError, /waitMs/],
      [() => leases.acquire(null, 'r', { ttlMs: 1000 }), TypeError, /pg.Client or pg.Pool/],
      [() => leases.renew({ resource: 'r', identity: 'XYZ' }, { ttlMs: 1000 }), TypeError, /identity/],
      [() => leases.renew(good, { ttlMs: 0 }), RangeError, /ttlMs must be positive/],
      [() => leases.renew({ resource: '', identity: good.identity }, { ttlMs: 1000 }), RangeError, /empty/],
      [() => leases.release({ resource: 'r', identity: null }), TypeError, /identity/],
      [() => leases.releaseOutcome(null), TypeError, /a lease is an object/],
    ];
    for (const [call, cls, re] of cases) {
      await assert.rejects(call(), (err) => err instanceof cls && re.test(err.message),
        `${call}`);
    }
    assert.throws(() => new lf.RedisLeases(redis, { keyPrefix: 'a{b' }), RangeError);
    assert.throws(() => new lf.RedisLeases(redis, { keyPrefix: 'a}' }), RangeError);
    assert.throws(() => new lf.RedisLeases(redis, { keyPrefix: 7 }), TypeError);
    assert.throws(() => new lf.RedisLeases(redis, { timeoutMs: 0 }), RangeError);
    assert.throws(() => new lf.RedisLeases(redis, { publish: 'DEL' }), RangeError);
    assert.throws(() => new lf.RedisLeases(null), TypeError);
    assert.throws(() => new lf.RedisLeases(redisClient({ keyPrefix: 'app:' })), /its own keyPrefix/);
    assert.throws(() => new lf.RedisLeases({ get() {} }), TypeError);
    assert.equal(queries, 0, 'no generation drawn');
    assert.deepEqual(await keysUnder(admin, prefix), [], 'nothing sent');
  });

  it('fair: true is refused (RangeError), a fair that is not a boolean is a TypeError, before anything is drawn or sent', async () => {
    const prefix = prefixOf('fair');
    const nowhere = path.join(path.dirname(REDIS_SOCK), `no-redis-${randomBytes(4).toString('hex')}.sock`);
    let queries = 0;
    const db = { query: async (...args) => { queries += 1; return pool.query(...args); } };
    const res = resourceName('fair');
    // a client of a socket that does not exist: a request there would answer unavailable
    const absent = new lf.RedisLeases(redisClient({ path: nowhere, retryStrategy: () => 50 }),
      { keyPrefix: prefix, connectTimeoutMs: 200 });
    for (const leases of [new lf.RedisLeases(redisClient(), { keyPrefix: prefix }), absent]) {
      for (const verb of ['acquire', 'tryAcquire', 'acquireOutcome']) {
        for (const waitMs of [0, 1000]) {
          await assert.rejects(leases[verb](db, res, { ttlMs: 1000, waitMs, fair: true }),
            (err) => err instanceof RangeError && /^fair: true is not offered by the client-side mode/.test(err.message),
            `${verb} waitMs ${waitMs}`);
        }
        for (const bad of ['yes', 1, null]) {
          await assert.rejects(leases[verb](db, res, { ttlMs: 1000, fair: bad }),
            (err) => err instanceof TypeError && /^fair is a boolean/.test(err.message), `${verb} ${bad}`);
        }
      }
    }
    assert.equal(queries, 0, 'no generation drawn');
    assert.deepEqual(await keysUnder(admin, prefix), [], 'nothing sent');
    const lost = await absent.acquireOutcome(pool, res, { ttlMs: 1000, fair: false });
    assert.equal(lost.status, 'unavailable', 'what a request there would have answered');
    const leases = new lf.RedisLeases(redisClient(), { keyPrefix: prefix });
    const lease = await leases.acquire(pool, res, { ttlMs: 1000, fair: false });
    assert.equal(lease.acquired, true);
    assert.equal(await leases.release(lease), 'released');
  });

  // ioredis keeps a command whose reply did not come before its connection
  // closed and, by default (autoResendUnfulfilledCommands), sends it again
  // once it has reconnected: an acquire Redis already ran runs a second time
  // and answers busy, the key holding the identity the library sent.
  it('a default ioredis client sends an acquire whose reply was lost again after reconnecting (busy, the key its own): RedisLeases refuses that client', async () => {
    const proxy = await startProxy(REDIS_SOCK);
    closers.push(() => proxy.close());
    const prefix = prefixOf('resent');
    const raw = new Redis({ path: proxy.path });    // ioredis' defaults
    raw.on('error', () => {});
    closers.push(() => raw.disconnect());
    assert.equal(raw.options.autoResendUnfulfilledCommands, true, 'the default');
    assert.throws(() => new lf.RedisLeases(raw, { keyPrefix: prefix }),
      (err) => err instanceof RangeError && /autoResendUnfulfilledCommands/.test(err.message));

    // what RedisLeases would have been told by it: acquire.lua, its reply lost
    const keys = [`${prefix}{r}`, `${prefix}{r}:gen`];
    const identity = randomBytes(16).toString('hex');
    await raw.ping();
    const lost = proxy.arm('drop', keys[0]);
    const reply = raw.eval(fs.readFileSync(lf.clientSideScripts().acquire.file), 2, ...keys,
      identity, '60000', '7', '0');
    assert.match((await lost).toString(), /^\*2\r\n:1\r\n/, 'Redis ran it and granted it; the reply never came');
    const answer = await reply;
    assert.equal(answer[0], 0, `sent again, it answered busy: ${JSON.stringify(answer)}`);
    assert.equal(await admin.get(keys[0]), identity, 'while the key holds the identity it sent');
    assert.equal(await admin.get(keys[1]), '7');
    await admin.del(...keys);
  });

  it('an acquire whose reply was lost, on a client that does not send it again, is unknown (never busy); it ran, and is released with its identity', async () => {
    const proxy = await startProxy(REDIS_SOCK);
    closers.push(() => proxy.close());
    const redis = new Redis({ path: proxy.path, autoResendUnfulfilledCommands: false });
    redis.on('error', () => {});
    closers.push(() => redis.disconnect());
    const leases = new lf.RedisLeases(redis, { keyPrefix: prefixOf('lost'), timeoutMs: 500 });
    const res = resourceName('lost');
    await leases.release(await leases.acquire(pool, resourceName('warm'), { ttlMs: 60000 }));  // scripts loaded
    const lost = proxy.arm('drop', leases.leaseKey(res));
    const lease = await leases.acquireOutcome(pool, res, { ttlMs: 60000 });
    assert.match((await lost).toString(), /^\*2\r\n:1\r\n/, 'Redis granted it; the reply was lost');
    assert.equal(lease.status, 'unknown', lease.reason);
    assert.equal(lease.acquired, null);
    assert.equal(await admin.get(leases.generationKey(res)), lease.generation.toString(),
      'the acquire ran: its generation is stored');
    const held = await admin.get(leases.leaseKey(res));
    if (lease.cleanup === 'confirmed') assert.equal(held, null, 'released by the cleanup');
    else assert.ok(held === null || held === lease.identity, `absent or ${lease.identity}, got ${held}`);
    assert.ok(['released', 'not_held'].includes(await leases.release(lease)));
    assert.equal(await admin.exists(leases.leaseKey(res)), 0);
  });

  it('an acquire that ran twice (sent again after its reply was lost) finds its own identity: acquired under its generation, not busy', async () => {
    const proxy = await startProxy(REDIS_SOCK);
    closers.push(() => proxy.close());
    const leases = new lf.RedisLeases(redisClient({ path: proxy.path }), { keyPrefix: prefixOf('twice') });
    const res = resourceName('twice');
    await leases.release(await leases.acquire(pool, resourceName('warm'), { ttlMs: 60000 }));  // scripts loaded
    const ran = proxy.arm('twice', leases.leaseKey(res));
    const lease = await leases.acquireOutcome(pool, res, { ttlMs: 60000 });
    assert.match((await ran).toString(), /^\*2\r\n:1\r\n/, 'the first run granted it; its reply was lost');
    assert.equal(lease.status, 'acquired', lease.reason);
    assert.equal(lease.acquired, true);
    assert.equal(await admin.get(leases.leaseKey(res)), lease.identity, 'the key holds its identity');
    assert.equal(await admin.get(leases.generationKey(res)), lease.generation.toString());
    assert.ok(lease.validityMs > 0 && lease.validityMs <= 60000);
    // it is a lease like any other: fenced writes under it, released with it
    const id = await newRow(pool);
    await lf.fenced(pool, lease, (c) => c.query("UPDATE account SET owner = 'twice' WHERE id = $1", [id]));
    assert.equal((await readRow(pool, id)).fence, lease.generation);
    assert.equal(await leases.release(lease), 'released');
    // someone else's key is still busy
    const other = await leases.acquire(pool, res, { ttlMs: 60000 });
    const twice = proxy.arm('twice', leases.leaseKey(res));
    assert.equal(await leases.tryAcquire(pool, res, { ttlMs: 60000 }), null, 'held by another: busy');
    await twice;
    assert.equal(await admin.get(leases.leaseKey(res)), other.identity);
    assert.equal(await leases.release(other), 'released');
  });

  it('refuses Sentinel-managed and Cluster ioredis clients: a demoted master could answer', () => {
    // lazyConnect: the clients are made, never connected; the refusal comes first
    const sentinel = new Redis({ sentinels: [{ host: '127.0.0.1', port: 1 }], name: 'mymaster', lazyConnect: true });
    const cluster = new Redis.Cluster([{ host: '127.0.0.1', port: 1 }], { lazyConnect: true });
    try {
      assert.throws(() => new lf.RedisLeases(sentinel), (err) => err instanceof TypeError
        && /Sentinel-managed ioredis client/.test(err.message));
      assert.throws(() => new lf.RedisLeases(cluster), (err) => err instanceof TypeError
        && /Cluster client/.test(err.message));
      assert.ok(new lf.RedisLeases(redisClient()), 'a client of one server is taken');
    } finally {
      sentinel.disconnect();
      cluster.disconnect();
    }
  });
});

'use strict';
// The client-side mode (RedisLeases) meets every acquire / renew / release
// row of the answer table, and every error row, with no server: a stand-in
// for ioredis answers each EVALSHA with what ioredis' own parser hands over
// for the row's RESP bytes, and a stand-in for pg draws the generations. The
// Lease status, the error class and the cleanup after an unknown acquire
// must follow the row's outcome.

const { test } = require('node:test');
const assert = require('node:assert/strict');
const { loadAnswers, built, resp, throughIoredis, label } = require('./helpers');

const table = loadAnswers();
const lf = built('index');

/**
 * A stand-in for an ioredis client: answers[i] (a { value } or { error } of
 * throughIoredis) is the i-th EVALSHA / EVAL's answer; afterwards every
 * call answers 1. Every call is kept: [command, keys, args].
 */
function redisAnswering(...answers) {
  const calls = [];
  const answer = (command, nkeys, rest) => {
    calls.push([command, rest.slice(0, nkeys), rest.slice(nkeys)]);
    const a = answers.shift() || { value: 1 };
    return 'error' in a ? Promise.reject(a.error) : Promise.resolve(a.value);
  };
  return {
    calls,
    status: 'ready',
    options: { autoResendUnfulfilledCommands: false },
    evalsha: (sha, nkeys, ...rest) => answer('evalsha', nkeys, rest),
    eval: (body, nkeys, ...rest) => answer('eval', nkeys, rest),
    connect: async () => {},
    once: () => {},
    removeListener: () => {},
  };
}

/** A stand-in for pg that draws `generation` every time. */
function drawing(generation) {
  return { query: async () => ({ rows: [{ g: generation }] }) };
}

const IDENTITY = 'cd'.repeat(16);
// check.lua's answer after a busy acquire: the key does not hold the identity sent
const NOT_HELD = { value: -3 };
const statusOf = { acquired: 'acquired', busy: 'busy', stale: 'stale', unknown: 'unknown', unavailable: 'unavailable' };

async function acquireWith(reply, generation, ...more) {
  const redis = redisAnswering(reply, ...more);
  const leases = new lf.RedisLeases(redis, { keyPrefix: 'unit:' });
  let lease = null;
  let error = null;
  try {
    lease = await leases.acquireOutcome(drawing(generation), 'r', { ttlMs: 60000 });
  } catch (err) {
    error = err;
  }
  return { redis, lease, error };
}

function checkAcquire(row, { redis, lease, error }, sentGeneration) {
  if (row.outcome === 'corrupt') {
    assert.ok(error instanceof lf.LeaseDataCorrupted, String(error));
    assert.ok(error instanceof lf.DataCorrupted, String(error));
    assert.equal(error.name, 'DataCorrupted');
    assert.equal(error.code, 'XX001');
    assert.match(error.message, /data corrupted/);
    return;
  }
  assert.equal(error, null, String(error));
  assert.equal(lease.status, statusOf[row.outcome], `${row.outcome}: ${lease.reason}`);
  const acquires = redis.calls.filter(([, , args]) => args.length === 4);
  const releases = redis.calls.filter(([, , args]) => args.length === 2);
  if (row.outcome === 'unknown') {
    assert.equal(lease.acquired, null);
    assert.match(lease.identity, /^[0-9a-f]{32}$/);
    assert.equal(lease.generation, BigInt(sentGeneration));
    // the conditional cleanup: release.lua with the same identity, answered
    assert.deepEqual(releases.map(([, keys, args]) => [keys, args[0]]),
      [[['unit:{r}'], lease.identity]]);
    assert.equal(lease.cleanup, 'confirmed');
  } else {
    assert.equal(releases.length, 0, 'no release');
  }
  if (row.outcome === 'acquired') assert.equal(lease.generation, BigInt(row.generation));
  if (row.outcome === 'stale') assert.equal(acquires.length, 4, 'healed and tried again 3 times');
}

for (const row of table.replies.filter((r) => r.script === 'acquire')) {
  test(`client-side acquire: ${label(row.reply)} → ${row.outcome}`, async () => {
    const generation = row.outcome === 'acquired' ? row.generation : '42';
    const reply = await throughIoredis(resp(row.reply));
    // a stale answer is healed and tried again: the same answer each time
    const result = row.outcome === 'stale'
      ? await (async () => {
        const redis = redisAnswering(reply, reply, reply, reply);
        const leases = new lf.RedisLeases(redis, { keyPrefix: 'unit:' });
        return { redis, lease: await leases.acquireOutcome(drawing(generation), 'r', { ttlMs: 60000 }), error: null };
      })()
      : row.outcome === 'busy' ? await acquireWith(reply, generation, NOT_HELD)
        : await acquireWith(reply, generation);
    checkAcquire(row, result, generation);
  });
}

for (const row of table.errors) {
  test(`client-side acquire, error reply: ${label(row.reply)} → ${row.outcome}`, async () => {
    const reply = await throughIoredis(resp(row.reply));
    if (row.outcome === 'noscript') {
      // nothing ran: the same request again with EVAL, whose answer counts
      const granted = await throughIoredis(resp({ array: [{ integer: 1 }, { bulk: '42' }] }));
      const redis = redisAnswering(reply, granted);
      const leases = new lf.RedisLeases(redis, { keyPrefix: 'unit:' });
      const lease = await leases.acquireOutcome(drawing('42'), 'r', { ttlMs: 60000 });
      assert.deepEqual(redis.calls.map(([c]) => c), ['evalsha', 'eval']);
      assert.deepEqual(redis.calls[0].slice(1), redis.calls[1].slice(1), 'the same keys and arguments');
      assert.equal(lease.status, 'acquired');
      // EVAL answering NOSCRIPT: unavailable, nothing ran
      const twice = redisAnswering(reply, reply);
      const out = await new lf.RedisLeases(twice, { keyPrefix: 'unit:' })
        .acquireOutcome(drawing('42'), 'r', { ttlMs: 60000 });
      assert.equal(out.status, 'unavailable');
      assert.equal(out.acquired, false);
      assert.equal(twice.calls.length, 2, 'no cleanup: nothing ran');
      return;
    }
    checkAcquire(row, await acquireWith(reply, '42'), '42');
  });
}

for (const row of table.replies.filter((r) => r.script === 'renew')) {
  test(`client-side renew: ${label(row.reply)} → ${row.outcome}`, async () => {
    const redis = redisAnswering(await throughIoredis(resp(row.reply)));
    const leases = new lf.RedisLeases(redis, { keyPrefix: 'unit:' });
    const want = { renewed: 'return', lost: 'LeaseLost', unknown: 'LeaseUnknown' }[row.outcome];
    assert.ok(want, `an outcome renew answers: ${row.outcome}`);
    let got;
    try {
      got = ['return', await leases.renew({ resource: 'r', identity: IDENTITY }, { ttlMs: 60000 })];
    } catch (err) {
      got = [err.constructor.name, err];
    }
    assert.equal(got[0], want, String(got[1]));
    if (want === 'return') assert.ok(got[1] > 0);
    assert.equal(redis.calls.length, 1);
  });
}

for (const row of table.replies.filter((r) => r.script === 'release')) {
  test(`client-side release: ${label(row.reply)} → ${row.outcome}`, async () => {
    const redis = redisAnswering(await throughIoredis(resp(row.reply)));
    const leases = new lf.RedisLeases(redis, { keyPrefix: 'unit:' });
    const out = await leases.releaseOutcome({ resource: 'r', identity: IDENTITY });
    assert.equal(out.status, row.outcome);
    assert.equal(out.released, { released: true, not_held: false, unknown: null }[row.outcome]);
  });
}

// The statuses rows in the client-side mode: a reply that makes each status
// (unreplicated is the C edition's alone: Redis topologies), then what
// acquire / tryAcquire / renew / release do with it, as in the SQL mode.
const MAKES = {
  acquire: {
    acquired: [{ array: [{ integer: 1 }, { bulk: '42' }] }],
    busy: [{ array: [{ integer: 0 }, { bulk: '100' }] }, { integer: -3 }],
    stale: Array(4).fill({ array: [{ integer: 2 }, { bulk: '77' }] }),
    unknown: [{ array: [{ integer: 3 }, { bulk: '42' }] }],
    unavailable: [{ error: 'LOADING Redis is loading the dataset in memory' }],
    insufficient_validity: [{ array: [{ integer: 1 }, { bulk: '42' }] }],
  },
  renew: {
    renewed: [{ integer: 1 }],
    lost: [{ integer: 0 }],
    insufficient_validity: [{ integer: 1 }],
    unavailable: [{ error: 'READONLY You can\'t write against a read only replica.' }],
    unknown: [{ integer: 2 }],
  },
  release: {
    released: [{ integer: 1 }],
    not_held: [{ integer: 0 }],
    unavailable: [{ error: 'NOAUTH Authentication required.' }],
    unknown: [{ nil: true }],
  },
};

async function callOutcome(promise) {
  try {
    const value = await promise;
    return value === null ? ['none', null] : ['return', value];
  } catch (err) {
    return [err.constructor.name, err];
  }
}

for (const row of table.statuses) {
  const replies = MAKES[row.operation] && MAKES[row.operation][row.status];
  const calls = Object.keys(row).filter((k) => !['operation', 'status', 'acquired', 'renewed', 'released'].includes(k));
  for (const call of calls) {
    const want = row[call];
    const title = `client-side status: ${row.operation} ${row.status} → ${call}: ${want}`;
    if (!replies) continue;         // unreplicated: no reply of one server makes it
    test(title, async () => {
      const answers = await Promise.all(replies.map((r) => throughIoredis(resp(r))));
      const leases = new lf.RedisLeases(redisAnswering(...answers), { keyPrefix: 'unit:' });
      // minValidityMs = ttlMs can never be met once granted: insufficient_validity
      const minValidityMs = row.status === 'insufficient_validity' ? 60000 : 0;
      const ref = { resource: 'r', identity: IDENTITY };
      let got;
      if (row.operation === 'acquire') {
        const fn = { acquire: 'acquire', try_acquire: 'tryAcquire' }[call];
        assert.ok(fn, `a call this library has: ${call}`);
        got = await callOutcome(leases[fn](drawing('42'), 'r', { ttlMs: 60000, minValidityMs }));
        if (got[0] === 'return') assert.equal(got[1].generation, 42n);
      } else if (row.operation === 'renew') {
        got = await callOutcome(leases.renew(ref, { ttlMs: 60000, minValidityMs }));
      } else {
        got = await callOutcome(leases.release(ref));
        if (got[0] === 'return') assert.equal(got[1], row.status);
      }
      assert.equal(got[0], want, got[1] instanceof Error ? got[1].message : String(got[1]));
      if (got[1] instanceof lf.LeaseError) assert.equal(got[1].status, row.status);
    });
  }
}

// An acquire that Redis ran twice (sent again after its reply was lost)
// answers busy the second time, while the key holds the identity this very
// request carried: check.lua with that identity says so, and the lease is
// this request's, under the generation it sent; never busy.
test('client-side acquire: busy, but the key holds this request\'s own identity → acquired', async () => {
  const busy = await throughIoredis(resp({ array: [{ integer: 0 }, { bulk: '59990' }] }));
  const held = await throughIoredis(resp({ integer: 59990 }));
  const { redis, lease, error } = await acquireWith(busy, '42', held);
  assert.equal(error, null, String(error));
  assert.equal(lease.status, 'acquired', lease.reason);
  assert.equal(lease.acquired, true);
  assert.equal(lease.generation, 42n);
  const [acquireCall, checkCall, ...rest] = redis.calls;
  assert.equal(acquireCall[2].length, 4, 'the acquire');
  assert.deepEqual(checkCall.slice(1), [['unit:{r}'], [lease.identity]],
    'check.lua on the lease key, with the identity the acquire carried');
  assert.equal(acquireCall[2][0], lease.identity);
  assert.deepEqual(rest, [], 'nothing released, nothing tried again');
  assert.ok(lease.validityMs > 0 && lease.validityMs <= 60000);
});

test('client-side acquire: busy, and the check cannot tell whose the key is → unknown (cleaned up), never busy', async () => {
  const busy = await throughIoredis(resp({ array: [{ integer: 0 }, { bulk: '100' }] }));
  for (const answer of [{ nil: true }, { error: 'ERR Error running script' }, { integer: -4 }]) {
    const checked = await throughIoredis(resp(answer));
    const { redis, lease, error } = await acquireWith(busy, '42', checked);
    assert.equal(error, null, String(error));
    assert.equal(lease.status, 'unknown', JSON.stringify(answer));
    assert.equal(lease.acquired, null);
    assert.match(lease.reason, /answered busy/);
    const releases = redis.calls.filter(([, , args]) => args.length === 2);
    assert.deepEqual(releases.map(([, keys, args]) => [keys, args[0]]), [[['unit:{r}'], lease.identity]],
      'the conditional cleanup');
  }
});

// ioredis sends a command again by itself after a reconnect
// (autoResendUnfulfilledCommands, on by default) or an error reply
// (reconnectOnError): such a client is refused before anything is sent.
test('client-side: an ioredis client that may send a command twice is refused (RangeError)', () => {
  const Redis = require('ioredis');
  const made = [];
  const client = (options) => {
    const r = new Redis({ lazyConnect: true, path: '/nonexistent/redis.sock', ...options });
    made.push(r);
    return r;
  };
  try {
    assert.throws(() => new lf.RedisLeases(client({})),
      (err) => err instanceof RangeError && /autoResendUnfulfilledCommands/.test(err.message));
    assert.throws(() => new lf.RedisLeases(client({ autoResendUnfulfilledCommands: true })), RangeError);
    assert.throws(() => new lf.RedisLeases(client({ autoResendUnfulfilledCommands: false,
      reconnectOnError: () => 2 })), (err) => err instanceof RangeError && /reconnectOnError/.test(err.message));
    const ok = client({ autoResendUnfulfilledCommands: false });
    assert.equal(new lf.RedisLeases(ok).redis, ok);
    assert.equal(ok.options.autoResendUnfulfilledCommands, false, 'the client is not changed');
    // a stand-in that does not say it never re-sends is refused too
    const { options, ...silent } = redisAnswering();
    assert.deepEqual(options, { autoResendUnfulfilledCommands: false });
    assert.throws(() => new lf.RedisLeases(silent), RangeError);
    for (const r of made) assert.equal(r.status, 'wait', 'nothing connected, nothing sent');
  } finally {
    made.forEach((r) => r.disconnect());
  }
});

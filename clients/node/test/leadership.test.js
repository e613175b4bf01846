'use strict';
// lf.leadership(db, election, { ttlMs, value, waitMs }, fn) and lf.takeOver,
// against a real PostgreSQL + Redis.
//
// The story: two candidates; the leader (a process of its own,
// leader-candidate.js, forked) is frozen with a real SIGSTOP; the other,
// waiting in campaign, wins once the frozen one's lease runs out (nobody
// renews it); the frozen one is thawed and its writes are refused, the row
// stands as the new leader wrote it. Then: resign hands the election on
// before the TTL; the value is what leader() shows; a takeOver aborts
// lead.signal; a takeOver that finds the holder's fencing transaction open
// times out and takes nothing; bad arguments are refused before anything is
// sent.

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync, fork } = require('node:child_process');
const path = require('node:path');
const { performance } = require('node:perf_hooks');
const { setTimeout: sleep } = require('node:timers/promises');
const pg = require('pg');
const lf = require('lease-fence');
const { config, resourceName, rejection, newRow, readRow } = require('./helpers');

const env = process.env;
const REDIS_SOCK = env.LF_REDIS_SOCK || '';
const KEY_PREFIX = env.LF_KEY_PREFIX || 'lease_fence:';
const NOREDIS_USER = env.LF_NOREDIS_USER || 'app_noredis';

function redis(...args) {
  return execFileSync(env.LF_REDIS_CLI || 'redis-cli', ['-s', REDIS_SOCK, ...args.map(String)],
    { encoding: 'utf8', timeout: 30000 }).trim();
}
const leaseKey = (resource) => `${KEY_PREFIX}{${resource}}`;

async function leader(db, election) {
  const { rows } = await db.query('SELECT held, term, value, ttl_ms, identity, pid, database ' +
    'FROM lease_fence.leader($1)', [election]);
  const r = rows[0];
  return { ...r, term: r.term === null ? null : BigInt(r.term) };
}

// a safety net against a hang, not a bound the test asserts
async function waitUntil(what, predicate, limitMs = 30000) {
  const deadline = Date.now() + limitMs;
  while (!(await predicate())) {
    if (Date.now() > deadline) throw new Error(`gave up waiting for ${what}`);
    await sleep(50);
  }
}

async function campaigning(check, pid) {
  const { rows } = await check.query('SELECT state, query FROM pg_stat_activity WHERE pid = $1', [pid]);
  return rows.length === 1 && rows[0].state === 'active' && rows[0].query.includes('lease_fence.campaign');
}

function aborted(signal) {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
}

function nextMessage(child) {
  return new Promise((resolve, reject) => {
    const onExit = (code) => reject(new Error(`the candidate exited (${code}) before its message`));
    child.once('message', (m) => { child.off('exit', onExit); resolve(m); });
    child.once('exit', onExit);
  });
}

describe('leadership', () => {
  const clients = [];
  let check;
  async function client(user) {
    const c = new pg.Client({ ...config, ...(user ? { user } : {}) });
    await c.connect();
    clients.push(c);
    return c;
  }
  before(async () => { check = await client(); });
  after(async () => { for (const c of clients) await c.end().catch(() => {}); });

  it('story: the frozen leader loses, its writes are refused, the new leader\'s stand', async () => {
    // A leads (a process of its own) and writes; SIGSTOP freezes it; B, waiting in
    // campaign, wins once A's lease runs out, with a higher term, and writes. A is
    // thawed: its write through lead.fenced rejects with LeadershipLost — A's own
    // check, before anything is sent: no renew was confirmed before the lease's
    // validity ran out, which A reads off its monotonic clock on waking (lead.check()
    // itself, and the deadline timer that aborts lead.signal; the heartbeat's renew,
    // answered 'lost', would say so one round trip later) — and the same
    // write through the bare fenced(client, { generation: term, resource: election })
    // reaches the server and is refused there: StaleGeneration (LF001) on the
    // election's resource fence, which B's win raised to B's term. lead.signal aborts
    // (reason a LeadershipLost); leadership() rejects with LeadershipLost at its end.
    const election = resourceName('story');
    const rowId = await newRow(check);
    const a = fork(path.join(__dirname, 'leader-candidate.js'), [election, '1500', String(rowId)],
      { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    const aExit = new Promise((resolve) => a.once('exit', (code, sig) => resolve([code, sig])));
    try {
      const first = await nextMessage(a);
      assert.equal(first.step, 'leader');
      const aTerm = BigInt(first.term);
      assert.deepEqual(await readRow(check, rowId), { owner: 'a', balance: 100, fence: aTerm });
      assert.equal((await leader(check, election)).term, aTerm);

      process.kill(a.pid, 'SIGSTOP');
      const bConn = await client();
      const bWork = await client();
      await bConn.query("SET statement_timeout = '120s'");    // a safety net, not a bound
      await lf.leadership(bConn, election, { ttlMs: 10000, value: 'b' }, async (b) => {
        assert.ok(b.term > aTerm);
        const seen = await leader(check, election);
        assert.deepEqual([seen.held, seen.term, seen.value], [true, b.term, 'b']);
        await b.fenced(bWork, (c) => c.query("UPDATE account SET owner = 'b' WHERE id = $1", [rowId]));

        process.kill(a.pid, 'SIGCONT');
        const tried = nextMessage(a);
        a.send('go');
        const { step, report } = await tried;
        assert.equal(step, 'tried');
        assert.deepEqual(report.fenced, { name: 'LeadershipLost', resource: null });
        assert.deepEqual(report.bare, { name: 'StaleGeneration', resource: election });
        assert.equal(report.lost.aborted, true);
        assert.equal(report.lost.reason, 'LeadershipLost');
        const end = await nextMessage(a);
        assert.deepEqual([end.step, end.error], ['exit', 'LeadershipLost'], end.message);

        // B still leads: its writes stand, A's did not land
        assert.equal(b.signal.aborted, false);
        b.check();
        assert.deepEqual(await readRow(check, rowId), { owner: 'b', balance: 100, fence: b.term });
        await b.fenced(bWork, (c) => c.query('UPDATE account SET balance = balance + 1 WHERE id = $1', [rowId]));
        assert.deepEqual(await readRow(check, rowId), { owner: 'b', balance: 101, fence: b.term });
      });
      assert.deepEqual(await aExit, [0, null]);
    } finally {
      if (a.exitCode === null && a.signalCode === null) {
        try { process.kill(a.pid, 'SIGCONT'); a.kill('SIGKILL'); } catch { /* gone */ }
      }
    }
  });

  it('resign hands the election on before the TTL', async () => {
    // B waits in campaign while A leads with a TTL of ten minutes; A's function
    // resolves (resign) and B wins at once: its campaign returned while A's lease had
    // most of its TTL left (the monotonic time since A won is below A's TTL), with a
    // higher term, and leader() shows B; after B's end nobody leads.
    const election = resourceName('resign');
    const aConn = await client();
    const bConn = await client();
    const ttlMs = 600000;
    let aWon;
    let aTerm;
    let b = null;
    let bWon;
    let bDone;
    await lf.leadership(aConn, election, { ttlMs, value: 'a' }, async (a) => {
      aWon = performance.now();
      aTerm = a.term;
      bDone = lf.leadership(bConn, election, { ttlMs: 10000, value: 'b' }, async (lead) => {
        bWon = performance.now();
        b = { term: lead.term, seen: await leader(check, election) };
      });
      await waitUntil('B to campaign', () => campaigning(check, bConn.processID));
      assert.equal(b, null);                 // A leads: B waits
    });
    await bDone;
    assert.ok(bWon - aWon < ttlMs);
    assert.ok(b.term > aTerm);
    assert.deepEqual([b.seen.held, b.seen.term, b.seen.value], [true, b.term, 'b']);
    const afterB = await leader(check, election);
    assert.deepEqual([afterB.held, afterB.term, afterB.value], [false, b.term, null]);
  });

  it('value is what leader() shows; a pool lends the election one client', async () => {
    // value (newlines, quotes, multibyte) is leader()'s value with the term and
    // identity while this identity leads; given a pool, the election holds one of its
    // clients and lead.fenced(pool, fn) writes through another; afterwards nobody
    // leads and the last term is kept.
    const election = resourceName('value');
    const value = "host-a\n'quoted' \"x\" \u00e9\u6f22 \\";
    const pool = new pg.Pool({ ...config, max: 2 });
    const rowId = await newRow(check);
    try {
      let term;
      await lf.leadership(pool, election, { ttlMs: 10000, value }, async (lead) => {
        term = lead.term;
        assert.deepEqual([lead.election, lead.value, lead.ttlMs], [election, value, 10000]);
        assert.match(lead.identity, /^[0-9a-f]{32}$/);
        const seen = await leader(check, election);
        assert.deepEqual([seen.held, seen.term, seen.value, seen.identity],
          [true, lead.term, value, lead.identity]);
        assert.equal(redis('GET', leaseKey(election)), lead.identity);
        assert.equal(pool.totalCount - pool.idleCount, 1);
        await lead.fenced(pool, (c) => c.query("UPDATE account SET owner = 'pool' WHERE id = $1", [rowId]));
      });
      assert.deepEqual(await readRow(check, rowId), { owner: 'pool', balance: 100, fence: term });
      const seen = await leader(check, election);
      assert.deepEqual([seen.held, seen.term, seen.value], [false, term, null]);
      assert.equal(pool.totalCount - pool.idleCount, 0);
    } finally {
      await pool.end();
    }
  });

  it('an idle leader keeps leading past its TTL; another candidate with waitMs 0 gets LeaseBusy', async () => {
    const election = resourceName('idle');
    const conn = await client();
    const other = await client();
    const ttlMs = 600;
    await lf.leadership(conn, election, { ttlMs }, async (lead) => {
      const start = performance.now();
      await waitUntil('three TTLs', () => performance.now() - start > 3 * ttlMs);
      assert.equal(lead.signal.aborted, false, lead.lostReason);
      assert.equal((await leader(check, election)).term, lead.term);
      await rejection(lf.leadership(other, election, { ttlMs, waitMs: 0 }, () => {}), lf.LeaseBusy);
    });
  });

  it('takeOver aborts lead.signal', async () => {
    // Another session's takeOver of the election: the leader's next renew answers
    // lost, lead.signal aborts (reason a LeadershipLost), check() and lead.fenced
    // throw LeadershipLost, the bare fenced write StaleGeneration (the takeOver's
    // generation is in the resource fence), and leadership() rejects with
    // LeadershipLost.
    const election = resourceName('taken');
    const conn = await client();
    const work = await client();
    const operator = await client();
    let taken;
    const err = await rejection(lf.leadership(conn, election, { ttlMs: 1500 }, async (lead) => {
      taken = await lf.takeOver(operator, election, { ttlMs: 10000 });
      assert.ok(taken.generation > lead.term);
      assert.equal(redis('GET', leaseKey(election)), taken.identity);
      await aborted(lead.signal);
      assert.ok(lead.signal.reason instanceof lf.LeadershipLost);
      assert.equal(lead.signal.reason.name, 'LeadershipLost');
      assert.equal(lead.lostReason, 'renew answered lost');
      assert.throws(() => lead.check(), lf.LeadershipLost);
      await rejection(lead.fenced(work, () => assert.fail('fn ran')), lf.LeadershipLost);
      const refused = await rejection(lf.fenced(work, { generation: lead.term, resource: election },
        () => assert.fail('fn ran')), lf.StaleGeneration);
      assert.equal(refused.resource, election);
    }), lf.LeadershipLost);
    assert.ok(err instanceof lf.LeaseLost);
    assert.equal(err.status, 'lost');
    assert.equal(await lf.release(operator, taken), 'released');
  });

  it('takeOver times out (TakeOverTimeout) while the holder\'s fencing transaction is open', async () => {
    // The holder's transaction that fenced the resource stays open: a takeOver with
    // timeoutMs waits for it, then rejects with TakeOverTimeout and takes nothing (the
    // holder's lease is still in Redis, its write commits). Once the transaction ended
    // the takeOver succeeds above the holder's generation; the holder's renew: lost.
    const res = resourceName('timeout');
    const holder = await client();
    const other = await client();
    const rowId = await newRow(check);
    const lease = await lf.acquire(holder, res, { ttlMs: 60000 });
    await lf.fenced(holder, lease, async (c) => {
      await c.query("UPDATE account SET owner = 'holder' WHERE id = $1", [rowId]);
      const err = await rejection(lf.takeOver(other, res, { ttlMs: 10000, timeoutMs: 200 }),
        lf.TakeOverTimeout);
      assert.equal(err.code, '55P03');
      assert.equal(err.status, 'timeout');
      assert.equal(err.cause.code, '55P03');
      assert.ok(err instanceof lf.LeaseDenied);
      assert.equal(redis('GET', leaseKey(res)), lease.identity);
    });
    assert.deepEqual(await readRow(check, rowId), { owner: 'holder', balance: 100, fence: lease.generation });
    const taken = await lf.takeOver(other, res, { ttlMs: 10000 });
    assert.deepEqual([taken.acquired, taken.status, taken.resource], [true, 'acquired', res]);
    assert.ok(taken.generation > lease.generation);
    await rejection(lf.renew(holder, lease, { ttlMs: 10000 }), lf.LeaseLost);
    assert.equal(await lf.release(other, taken), 'released');
  });

  it('Redis unreachable: leadership and takeOver reject with LeaseUnavailable', async () => {
    // a campaign whose wait ran out: the server tries again while it may wait, so
    // waitMs 0 answers at once
    const conn = await client(NOREDIS_USER);
    const election = resourceName('unavailable');
    const err = await rejection(lf.leadership(conn, election, { ttlMs: 1000, waitMs: 0 },
      () => assert.fail('fn ran')), lf.LeaseUnavailable);
    assert.equal(err.status, 'unavailable');
    await rejection(lf.takeOver(conn, election, { ttlMs: 1000 }), lf.LeaseUnavailable);
  });

  it('bad arguments reject before anything is sent', async () => {
    // on an ended client, where any statement rejects with pg's own error
    const ended = new pg.Client(config);
    await ended.connect();
    await ended.end();
    const fn = () => assert.fail('fn ran');
    const bad = [
      [TypeError, [null, { ttlMs: 1000 }, fn]], [RangeError, ['', { ttlMs: 1000 }, fn]],
      [RangeError, ['e'.repeat(1025), { ttlMs: 1000 }, fn]], [RangeError, ['a\0b', { ttlMs: 1000 }, fn]],
      [TypeError, ['e', { ttlMs: '1000' }, fn]], [RangeError, ['e', { ttlMs: 0 }, fn]],
      [RangeError, ['e', { ttlMs: 1.5 }, fn]], [TypeError, ['e', 1000, fn]],
      [TypeError, ['e', { ttlMs: 1000, value: 5 }, fn]],
      [RangeError, ['e', { ttlMs: 1000, value: '\u00e9'.repeat(513) }, fn]],
      [RangeError, ['e', { ttlMs: 1000, waitMs: -1 }, fn]],
      [RangeError, ['e', { ttlMs: 1000, scope: 'transaction' }, fn]],
      [TypeError, ['e', { ttlMs: 1000 }, undefined]],
    ];
    for (const [cls, args] of bad) {
      await assert.rejects(lf.leadership(ended, ...args), (err) => err.constructor === cls,
        JSON.stringify(args));
    }
    const badTakeOver = [
      [TypeError, [null, { ttlMs: 1000 }]], [RangeError, ['', { ttlMs: 1000 }]],
      [RangeError, ['r', { ttlMs: 0 }]], [TypeError, ['r', { ttlMs: 1000, timeoutMs: null }]],
      [RangeError, ['r', { ttlMs: 1000, timeoutMs: -1 }]],
      [RangeError, ['r', { ttlMs: 1000, scope: 'transaction' }]],
    ];
    for (const [cls, args] of badTakeOver) {
      await assert.rejects(lf.takeOver(ended, ...args), (err) => err.constructor === cls,
        JSON.stringify(args));
    }
    // a value of exactly 1024 bytes is no bad argument: it wins, leader() shows it
    const election = resourceName('limit');
    await lf.leadership(await client(), election, { ttlMs: 5000, value: '\u00e9'.repeat(512) }, async (lead) => {
      assert.equal(lead.value, '\u00e9'.repeat(512));
      assert.equal((await leader(check, election)).value, '\u00e9'.repeat(512));
    });
  });

  it('lead.fenced refuses the election\'s own client', async () => {
    const conn = await client();
    await lf.leadership(conn, resourceName('own'), { ttlMs: 5000 }, async (lead) => {
      await rejection(lead.fenced(conn, () => assert.fail('fn ran')), TypeError);
    });
  });
});

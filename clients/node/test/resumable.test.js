'use strict';
// lf.resumableJob(db, resource, ttlMs, fn, { waitMs, fair }): an explicit
// lease, then one fenced transaction after another on one connection, each
// ended by job.checkpoint(state) (lease_fence.checkpoint), the next holder
// resuming from the last committed checkpoint (job.resumeFrom). Each test
// pins one promise: the first run has nothing to resume from and its
// checkpoints commit the work with them; the next run resumes from the last
// one; fn's error rolls back what came after the last checkpoint; busy and
// unavailable reject before fn runs; a holder frozen inside its transaction
// past its lease is ended by the server and its successor resumes from its
// last checkpoint, the frozen one writing nothing more; a holder whose lease
// was lost cannot move the checkpoint (LeaseLost before writing, rolled
// back), nor one frozen between two transactions while a newer generation
// fenced the resource (StaleGeneration).

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const { setTimeout: sleep } = require('node:timers/promises');
const pg = require('pg');
const lf = require('lease-fence');
const { config, resourceName, rejection, newRow, readRow, nextGeneration } = require('./helpers');

const env = process.env;
const REDIS_SOCK = env.LF_REDIS_SOCK || '';
const KEY_PREFIX = env.LF_KEY_PREFIX || 'lease_fence:';
const NOREDIS_USER = env.LF_NOREDIS_USER || 'app_noredis';

function redis(...args) {
  return execFileSync(env.LF_REDIS_CLI || 'redis-cli', ['-s', REDIS_SOCK, ...args.map(String)],
    { encoding: 'utf8', timeout: 30000 }).trim();
}
const leaseKey = (resource) => `${KEY_PREFIX}{${resource}}`;

// Poll a logical condition (no time bound here: the runner's guard is the bound).
async function until(what, cond) {
  for (;;) {
    if (await cond()) return;
    await sleep(20);
  }
}

async function lastCheckpoint(db, resource) {
  const { rows } = await db.query(
    'SELECT state, generation, written_at FROM lease_fence.last_checkpoint($1)', [resource]);
  return rows.length === 0 ? null : { state: rows[0].state, generation: BigInt(rows[0].generation) };
}

// A promise the test resolves: where a job waits, frozen inside its transaction.
function gate() {
  let open;
  const p = new Promise((resolve) => { open = resolve; });
  return { wait: () => p, open: () => open() };
}

describe('resumableJob: a job that checkpoints and resumes', () => {
  const clients = [];
  async function connect(extra = {}) {
    const c = new pg.Client({ ...config, ...extra });
    await c.connect();
    c.on('error', () => {});           // a session the server ends (25P03) must not crash the test
    clients.push(c);
    return c;
  }
  let app;
  before(async () => { app = await connect(); });
  after(async () => { await Promise.all(clients.map((c) => c.end().catch(() => {}))); });

  it('is exported with its job class', () => {
    assert.equal(typeof lf.resumableJob, 'function');
    assert.equal(typeof lf.ResumableJob, 'function');
  });

  it('first run: nothing to resume from; each checkpoint commits the work with it; the next run resumes from the last; released', async () => {
    const client = await connect();
    const id = await newRow(app);
    const res = resourceName('rj-resume');
    const seen = [];
    const first = await lf.resumableJob(client, res, 10000, async (job) => {
      assert.equal(job.client, client);
      assert.equal(job.resource, res);
      assert.equal(job.resumeFrom, null);
      assert.equal(job.resumedGeneration, null);
      assert.equal(typeof job.generation, 'bigint');
      assert.equal(job.lease.generation, job.generation);
      assert.equal(redis('GET', leaseKey(res)), job.identity);
      const { rows } = await job.client.query('SELECT lease_fence.current_generation() AS g');
      assert.equal(BigInt(rows[0].g), job.generation);
      await job.client.query('UPDATE account SET balance = balance + 1 WHERE id = $1', [id]);
      assert.equal(await job.checkpoint({ step: 1, items: ['a'] }), job.generation);
      // committed with the checkpoint: another session sees both
      assert.equal((await readRow(app, id)).balance, 101);
      seen.push(await lastCheckpoint(app, res));
      await job.client.query('UPDATE account SET balance = balance + 1 WHERE id = $1', [id]);
      await job.checkpoint({ step: 2, items: ['a', 'b'] });
      await job.client.query("UPDATE account SET owner = 'first' WHERE id = $1", [id]);
      return job.generation;
    });
    assert.deepEqual(seen, [{ state: { step: 1, items: ['a'] }, generation: first }]);
    assert.deepEqual(await readRow(app, id), { owner: 'first', balance: 102, fence: first });
    assert.deepEqual(await lastCheckpoint(app, res), { state: { step: 2, items: ['a', 'b'] }, generation: first });
    assert.equal(redis('EXISTS', leaseKey(res)), '0', 'released');

    const pool = new pg.Pool({ ...config, max: 1 });
    try {
      const second = await lf.resumableJob(pool, res, 10000, async (job) => {
        assert.deepEqual(job.resumeFrom, { step: 2, items: ['a', 'b'] });
        assert.equal(job.resumedGeneration, first);
        assert.ok(job.generation > first);
        await job.client.query("UPDATE account SET owner = 'second' WHERE id = $1", [id]);
        return job.generation;
      });
      assert.deepEqual(await readRow(app, id), { owner: 'second', balance: 102, fence: second });
      assert.equal(pool.totalCount, 1, 'the pooled client went back, not destroyed');
    } finally {
      await pool.end();
    }
  });

  it("fn's error rolls back what came after the last checkpoint, releases, and rejects unchanged", async () => {
    const client = await connect();
    const id = await newRow(app);
    const res = resourceName('rj-throws');
    const boom = new RangeError('the job failed');
    let g;
    const err = await rejection(lf.resumableJob(client, res, 10000, async (job) => {
      g = job.generation;
      await job.client.query('UPDATE account SET balance = 1 WHERE id = $1', [id]);
      await job.checkpoint('one');
      await job.client.query('UPDATE account SET balance = 2 WHERE id = $1', [id]);
      throw boom;
    }), RangeError);
    assert.equal(err, boom);
    assert.deepEqual(await readRow(app, id), { owner: 'nobody', balance: 1, fence: g });
    assert.deepEqual(await lastCheckpoint(app, res), { state: 'one', generation: g });
    assert.equal(redis('EXISTS', leaseKey(res)), '0', 'released');
    const { rows } = await client.query('SELECT now() <> statement_timestamp() AS in_block');
    assert.equal(rows[0].in_block, false, 'rolled back: outside any transaction');
  });

  it('busy and unavailable reject before fn runs; bad input before anything is sent', async () => {
    const res = resourceName('rj-busy');
    const holder = await lf.acquire(app, res, { ttlMs: 10000 });
    let ran = false;
    try {
      await rejection(lf.resumableJob(await connect(), res, 10000, () => { ran = true; }), lf.LeaseBusy);
    } finally {
      await lf.release(app, holder);
    }
    await rejection(lf.resumableJob(await connect({ user: NOREDIS_USER }), resourceName('rj-down'), 10000,
      () => { ran = true; }), lf.LeaseUnavailable);
    await rejection(lf.resumableJob(app, res, 1.5, () => { ran = true; }), TypeError);
    assert.equal(ran, false);
    // a state that is not JSON: TypeError before the renew
    const id = await newRow(app);
    await rejection(lf.resumableJob(app, res, 10000, async (job) => {
      await job.client.query('UPDATE account SET balance = 7 WHERE id = $1', [id]);
      await job.checkpoint({ n: 1n });
    }), TypeError);
    assert.equal((await readRow(app, id)).balance, 100);
    assert.equal(await lastCheckpoint(app, res), null);
  });

  it('a holder frozen inside its transaction past its lease is ended by the server; the next run resumes from its last checkpoint and its writes stand', async () => {
    const [c1, c2] = [await connect(), await connect()];
    const id = await newRow(app);
    const res = resourceName('rj-stall');
    const frozen = gate();
    const checkpointed = gate();
    let g1;
    let afterThaw = 'not reached';
    const run1 = lf.resumableJob(c1, res, 1500, async (job) => {
      g1 = job.generation;
      await job.client.query("UPDATE account SET owner = 'run1', balance = 1 WHERE id = $1", [id]);
      await job.checkpoint({ done: 1 });
      await job.client.query("UPDATE account SET owner = 'run1 late', balance = 2 WHERE id = $1", [id]);
      checkpointed.open();
      await frozen.wait();               // frozen inside the open transaction
      afterThaw = 'reached';
      await job.client.query("UPDATE account SET owner = 'run1 thawed', balance = 3 WHERE id = $1", [id]);
      await job.checkpoint({ done: 'run1 thawed' });
    });
    const run1Settled = run1.then(() => null, (err) => err);
    await checkpointed.wait();
    // the lease ran out (the key is gone), not a timed race
    await until('the lease key is gone', () => redis('EXISTS', leaseKey(res)) === '0');
    const g2 = await lf.resumableJob(c2, res, 10000, async (job) => {
      assert.deepEqual(job.resumeFrom, { done: 1 });
      assert.equal(job.resumedGeneration, g1);
      assert.ok(job.generation > g1);
      // run 1's uncommitted write is gone with its ended session
      assert.deepEqual(await readRow(job.client, id), { owner: 'run1', balance: 1, fence: g1 });
      await job.client.query("UPDATE account SET owner = 'run2', balance = 20 WHERE id = $1", [id]);
      await job.checkpoint({ done: 2 });
      return job.generation;
    });
    frozen.open();
    const err = await run1Settled;
    assert.ok(err instanceof Error, 'run 1 cannot succeed');
    assert.equal(err.code, '25P03', `run 1 was ended by the server: ${err.message}`);
    assert.equal(afterThaw, 'reached');
    assert.deepEqual(await readRow(app, id), { owner: 'run2', balance: 20, fence: g2 });
    assert.deepEqual(await lastCheckpoint(app, res), { state: { done: 2 }, generation: g2 });
  });

  it('a holder whose lease was lost cannot move the checkpoint: LeaseLost before writing, its work rolled back', async () => {
    const id = await newRow(app);
    const res = resourceName('rj-lost');
    let g;
    const err = await rejection(lf.resumableJob(await connect(), res, 10000, async (job) => {
      g = job.generation;
      await job.checkpoint({ done: 1 });
      await job.client.query('UPDATE account SET balance = 5 WHERE id = $1', [id]);
      redis('DEL', leaseKey(res));       // the lease is gone (expired, Redis lost it)
      await job.checkpoint({ done: 2 });
    }), lf.LeaseLost);
    assert.equal(err.status, 'lost');
    assert.equal((await readRow(app, id)).balance, 100);
    assert.deepEqual(await lastCheckpoint(app, res), { state: { done: 1 }, generation: g });
  });

  it('a holder frozen between two transactions while a newer generation fenced the resource: its checkpoint rejects with StaleGeneration (LF001), the job too, and the checkpoint is the newer one', async () => {
    const [c1, op] = [await connect(), await connect()];
    const id = await newRow(app);
    const res = resourceName('rj-stale');
    let g1;
    let newer;
    let second = 'not reached';
    // run 1 freezes between the COMMIT of its checkpoint and its next fence
    // (the statement is held back, as a paused process would): meanwhile a
    // newer generation fences the resource, writes and commits
    const query = c1.query;
    let fences = 0;
    c1.query = function frozenBetween(text, ...rest) {
      if (typeof text === 'string' && text.startsWith('BEGIN; SELECT lease_fence.set_generation(')
        && ++fences === 2) {
        return (async () => {
          newer = await nextGeneration(app);
          await lf.fenced(op, newer, { resource: res }, async (c) => {
            await c.query('UPDATE account SET balance = 50 WHERE id = $1', [id]);
            await c.query('SELECT lease_fence.checkpoint($1, $2)', [res, JSON.stringify('newer')]);
          });
          return query.call(this, text, ...rest);
        })();
      }
      return query.call(this, text, ...rest);
    };
    const err = await rejection(lf.resumableJob(c1, res, 10000, async (job) => {
      g1 = job.generation;
      await job.client.query('UPDATE account SET balance = 1 WHERE id = $1', [id]);
      await job.checkpoint({ done: 1 });   // commits, then the next transaction's fence is refused
      second = 'reached';
      await job.client.query('UPDATE account SET balance = 2 WHERE id = $1', [id]);
    }), lf.StaleGeneration);
    assert.equal(fences, 2);
    assert.equal(err.sqlstate, 'LF001');
    assert.equal(err.resource, res);
    assert.equal(second, 'not reached');
    assert.ok(g1 < newer);
    assert.deepEqual(await readRow(app, id), { owner: 'nobody', balance: 50, fence: newer });
    assert.deepEqual(await lastCheckpoint(app, res), { state: 'newer', generation: newer });
  });
});

'use strict';
// lease-fence/bullmq: fencedProcessor(pool, fn, options) under a real BullMQ
// Worker and Queue, in the harness's Redis (a key prefix of this run's own).
// One Queue and one Worker for the file (concurrency 4); the processor
// dispatches on the job's name to a fencedProcessor per case. Each test pins
// one rule: a job frozen inside its transaction past its lease cannot write
// nor move the checkpoint, and the next run of the same job resumes from its
// last checkpoint; the same job twice at once has one effect (the other
// skipped); busy with onBusy 'retry' and unknown are retried by BullMQ's
// attempts/backoff and then run once; Redis down fails the job at once
// (BullMQ's UnrecoverableError: its other attempts unused) with fn never
// run; a job frozen between two transactions while a newer generation
// fenced gets StaleGeneration (LF001), failed at once; a holder whose lease
// was lost has its checkpoint refused, its writes rolled back, not retried.

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const { randomBytes } = require('node:crypto');
const { setTimeout: sleep } = require('node:timers/promises');
const pg = require('pg');
const { Queue, Worker } = require('bullmq');
const lf = require('lease-fence');
const { fencedProcessor, defaultResource } = require('lease-fence/bullmq');
const { config, newRow, readRow } = require('./helpers');

const env = process.env;
const REDIS_SOCK = env.LF_REDIS_SOCK || '';
const KEY_PREFIX = env.LF_KEY_PREFIX || 'lease_fence:';
const NOREDIS_USER = env.LF_NOREDIS_USER || 'app_noredis';

function redis(...args) {
  return execFileSync(env.LF_REDIS_CLI || 'redis-cli', ['-s', REDIS_SOCK, ...args.map(String)],
    { encoding: 'utf8', timeout: 30000 }).trim();
}
const leaseKey = (resource) => `${KEY_PREFIX}{${resource}}`;

async function until(cond) {
  for (;;) {
    if (await cond()) return;
    await sleep(20);
  }
}

function gate() {
  let open;
  const p = new Promise((resolve) => { open = resolve; });
  return { wait: () => p, open: () => open() };
}

async function lastCheckpoint(db, resource) {
  const { rows } = await db.query(
    'SELECT state, generation FROM lease_fence.last_checkpoint($1)', [resource]);
  return rows.length === 0 ? null : { state: rows[0].state, generation: BigInt(rows[0].generation) };
}

describe('lease-fence/bullmq: fencedProcessor under a real BullMQ worker', () => {
  const connection = { path: REDIS_SOCK, maxRetriesPerRequest: null };
  const prefix = `lfbull${randomBytes(4).toString('hex')}`;
  const queueName = 'fenced';
  const pools = [];
  const newPool = (extra = {}) => {
    const p = new pg.Pool({ ...config, ...extra });
    p.on('error', () => {});             // a session the server ended (25P03)
    pools.push(p);
    return p;
  };
  const pool = newPool({ max: 6 });
  const processors = new Map();         // job name → its fencedProcessor
  const logged = [];
  const failures = [];                  // [job id, error] of every failed attempt
  let queue;
  let worker;
  let app;

  async function finished(job) {
    let state;
    await until(async () => {
      state = await job.getState();
      return state === 'completed' || state === 'failed';
    });
    return queue.getJob(job.id).then((j) => ({ state, job: j }));
  }

  before(async () => {
    app = new pg.Client(config);
    await app.connect();
    queue = new Queue(queueName, { connection, prefix });
    worker = new Worker(queueName, async (job, token) => {
      const p = processors.get(job.name);
      if (!p) throw new Error(`no processor for ${job.name}`);
      return p(job, token);
    }, { connection, prefix, concurrency: 4 });
    worker.on('failed', (job, err) => { failures.push([job.id, err]); });
    worker.on('error', () => {});
    await worker.waitUntilReady();
  });
  after(async () => {
    await worker.close();
    await queue.obliterate({ force: true }).catch(() => {});
    await queue.close();
    await app.end();
    await Promise.all(pools.map((p) => p.end().catch(() => {})));
  });

  it('the default resource is bullmq:<queue>:<name>:<sha256 of job.data as canonical JSON>', () => {
    const a = defaultResource({ queueName: 'q', name: 'n', data: { b: 1, a: [1, { d: 2, c: 3 }] } });
    const b = defaultResource({ queueName: 'q', name: 'n', data: { a: [1, { c: 3, d: 2 }], b: 1 } });
    assert.equal(a, b);
    assert.equal(a, 'bullmq:q:n:' + require('node:crypto').createHash('sha256')
      .update('{"a":[1,{"c":3,"d":2}],"b":1}').digest('hex'));
    assert.notEqual(a, defaultResource({ queueName: 'q', name: 'n', data: { b: 2, a: [1, { d: 2, c: 3 }] } }));
  });

  it('a job frozen inside its transaction past its lease cannot write nor move the checkpoint; the next run resumes from its last checkpoint and its writes stand', async () => {
    const id = await newRow(app);
    const data = { id, tag: randomBytes(4).toString('hex') };
    const res = defaultResource({ queueName, name: 'stall', data });
    const frozen = gate();
    const checkpointed = gate();
    const runs = [];
    processors.set('stall', fencedProcessor(pool, async (bullJob, job) => {
      runs.push({ resumeFrom: job.resumeFrom, resumedGeneration: job.resumedGeneration, generation: job.generation });
      if (job.resumeFrom === null) {       // run 1
        await job.client.query("UPDATE account SET owner = 'run1', balance = 1 WHERE id = $1", [id]);
        await job.checkpoint({ done: 1 });
        await job.client.query("UPDATE account SET owner = 'run1 late', balance = 2 WHERE id = $1", [id]);
        checkpointed.open();
        await frozen.wait();
        await job.client.query("UPDATE account SET owner = 'run1 thawed', balance = 3 WHERE id = $1", [id]);
        await job.checkpoint({ done: 'run1 thawed' });
        return 'run1';
      }
      await job.client.query("UPDATE account SET owner = 'run2', balance = 20 WHERE id = $1", [id]);
      await job.checkpoint({ done: 2 });
      return 'run2';
    }, { ttlMs: 1500 }));
    const job1 = await queue.add('stall', data);
    await checkpointed.wait();
    await until(() => redis('EXISTS', leaseKey(res)) === '0');    // the lease ran out
    const job2 = await queue.add('stall', data);
    const two = await finished(job2);
    assert.equal(two.state, 'completed', two.job.failedReason);
    assert.equal(two.job.returnvalue, 'run2');
    assert.deepEqual(runs[1].resumeFrom, { done: 1 });
    assert.equal(runs[1].resumedGeneration, runs[0].generation);
    frozen.open();
    const one = await finished(job1);
    assert.equal(one.state, 'failed');
    const [, err] = failures.find(([jid]) => jid === job1.id);
    assert.equal(err.code, '25P03', `run 1 was ended by the server: ${err.message}`);
    assert.equal(runs.length, 2);
    assert.deepEqual(await readRow(app, id), { owner: 'run2', balance: 20, fence: runs[1].generation });
    assert.deepEqual(await lastCheckpoint(app, res), { state: { done: 2 }, generation: runs[1].generation });
  });

  it('the same job given twice at once: one effect, the other skipped (onBusy skip, the default) with a line logged', async () => {
    const id = await newRow(app);
    const data = { id, tag: randomBytes(4).toString('hex') };
    const holding = gate();
    const go = gate();
    let ran = 0;
    processors.set('twice', fencedProcessor(pool, async (bullJob, job) => {
      ran += 1;
      holding.open();
      await go.wait();
      await job.client.query('UPDATE account SET balance = balance + 1 WHERE id = $1', [id]);
      return 'done';
    }, { ttlMs: 10000, log: (line) => logged.push(line) }));
    const a = await queue.add('twice', data);
    await holding.wait();
    const b = await queue.add('twice', data);
    const second = await finished(b);
    go.open();
    const first = await finished(a);
    assert.deepEqual([first.state, first.job.returnvalue], ['completed', 'done']);
    assert.equal(second.state, 'completed');
    assert.equal(second.job.returnvalue, null, 'skipped: no result');
    assert.equal(ran, 1);
    assert.equal((await readRow(app, id)).balance, 101, 'one effect');
    assert.ok(logged.some((l) => l.includes(`job ${b.id} `) && l.includes('skipped')), logged.join('\n'));
  });

  it("busy with onBusy 'retry': BullMQ's attempts/backoff retry it, and it runs once the lease is free", async () => {
    const id = await newRow(app);
    const data = { id, tag: randomBytes(4).toString('hex') };
    const res = defaultResource({ queueName, name: 'retry', data });
    let ran = 0;
    processors.set('retry', fencedProcessor(pool, async (bullJob, job) => {
      ran += 1;
      await job.client.query('UPDATE account SET balance = balance + 1 WHERE id = $1', [id]);
      return bullJob.attemptsMade;
    }, { ttlMs: 10000, onBusy: 'retry' }));
    const holder = await lf.acquire(app, res, { ttlMs: 30000 });
    let job;
    try {
      job = await queue.add('retry', data, { attempts: 50, backoff: { type: 'fixed', delay: 50 } });
      await until(() => failures.some(([jid]) => jid === job.id));
    } finally {
      await lf.release(app, holder);
    }
    const done = await finished(job);
    assert.equal(done.state, 'completed', done.job.failedReason);
    assert.ok(done.job.returnvalue >= 1, 'ran on a retry');
    assert.equal(ran, 1);
    const [, err] = failures.find(([jid]) => jid === job.id);
    assert.ok(err instanceof lf.LeaseBusy, String(err));
    assert.equal((await readRow(app, id)).balance, 101);
  });

  it("unknown (Redis paused past command_timeout_ms) is retried by BullMQ's attempts/backoff, never run unfenced", async () => {
    // the backend must have its Redis connection before the pause (see
    // client.test.js): one warmed connection, short timeouts
    const warm = newPool({ max: 1 });
    const c = await warm.connect();
    await c.query('SET lease_fence.command_timeout_ms = 150');
    await c.query('SET lease_fence.cleanup_timeout_ms = 150');
    await lf.release(c, await lf.acquire(c, `node:bullmq-warm:${randomBytes(4).toString('hex')}`, { ttlMs: 10000 }));
    c.release();
    const id = await newRow(app);
    const data = { id, tag: randomBytes(4).toString('hex') };
    let ran = 0;
    let paused = false;
    processors.set('unknown', fencedProcessor(warm, async (bullJob, job) => {
      ran += 1;
      await job.client.query('UPDATE account SET balance = balance + 1 WHERE id = $1', [id]);
      return bullJob.attemptsMade;
    }, {
      ttlMs: 10000,
      resource: (bullJob) => {
        if (!paused) {                   // the first attempt's acquire meets a paused Redis
          paused = true;
          redis('CLIENT', 'PAUSE', 1000, 'ALL');
        }
        return defaultResource(bullJob);
      },
    }));
    const job = await queue.add('unknown', data, { attempts: 5, backoff: { type: 'fixed', delay: 50 } });
    const done = await finished(job);
    assert.equal(done.state, 'completed', done.job.failedReason);
    assert.ok(done.job.returnvalue >= 1, 'ran on a retry');
    assert.equal(ran, 1);
    const [, err] = failures.find(([jid]) => jid === job.id);
    assert.ok(err instanceof lf.LeaseUnknown, String(err));
    assert.equal((await readRow(app, id)).balance, 101);
  });

  it('Redis down (unavailable): the job fails at once (UnrecoverableError, attempts left unused), fn never ran', async () => {
    const down = newPool({ max: 1, user: NOREDIS_USER });
    let ran = false;
    processors.set('down', fencedProcessor(down, async () => { ran = true; }, { ttlMs: 10000 }));
    const job = await queue.add('down', { tag: randomBytes(4).toString('hex') },
      { attempts: 5, backoff: { type: 'fixed', delay: 50 } });
    const done = await finished(job);
    assert.equal(done.state, 'failed');
    assert.equal(done.job.attemptsMade, 1, 'not retried');
    assert.match(done.job.failedReason, /^LeaseUnavailable: /);
    const [, err] = failures.find(([jid]) => jid === job.id);
    assert.equal(err.name, 'UnrecoverableError');
    assert.ok(err.cause instanceof lf.LeaseUnavailable);
    assert.equal(ran, false);
  });

  it('a job frozen between two transactions while a newer generation fenced the resource: StaleGeneration (LF001), the job failed and not retried, the checkpoint the newer one', async () => {
    const id = await newRow(app);
    const data = { id, tag: randomBytes(4).toString('hex') };
    const res = defaultResource({ queueName, name: 'lf001', data });
    const frozenPool = newPool({ max: 1 });
    const op = newPool({ max: 1 });
    let newer;
    // the job's connection holds back its next fence after a checkpoint's
    // COMMIT (a paused process), while a newer generation fences and writes
    frozenPool.on('acquire', (client) => {
      if (client.frozenBetween) return;
      const query = client.query;
      let fences = 0;
      client.frozenBetween = true;
      client.query = function frozenBetween(text, ...rest) {
        if (typeof text === 'string' && text.startsWith('BEGIN; SELECT lease_fence.set_generation(')
          && ++fences === 2) {
          return (async () => {
            newer = await lf.fenced(op, (await op.query('SELECT lease_fence.next_generation() AS g')).rows[0].g,
              { resource: res }, async (c) => {
                await c.query('UPDATE account SET balance = 50 WHERE id = $1', [id]);
                await c.query('SELECT lease_fence.checkpoint($1, $2)', [res, JSON.stringify('newer')]);
                return BigInt((await c.query('SELECT lease_fence.current_generation() AS g')).rows[0].g);
              });
            return query.call(this, text, ...rest);
          })();
        }
        return query.call(this, text, ...rest);
      };
    });
    let after = 'not reached';
    processors.set('lf001', fencedProcessor(frozenPool, async (bullJob, job) => {
      await job.client.query('UPDATE account SET balance = 1 WHERE id = $1', [id]);
      await job.checkpoint({ done: 1 });
      after = 'reached';
    }, { ttlMs: 10000 }));
    const job = await queue.add('lf001', data, { attempts: 5, backoff: { type: 'fixed', delay: 50 } });
    const done = await finished(job);
    assert.equal(done.state, 'failed');
    assert.equal(done.job.attemptsMade, 1, 'not retried');
    assert.match(done.job.failedReason, /^StaleGeneration: /);
    const [, err] = failures.find(([jid]) => jid === job.id);
    assert.equal(err.name, 'UnrecoverableError');
    assert.ok(err.cause instanceof lf.StaleGeneration);
    assert.equal(err.cause.sqlstate, 'LF001');
    assert.equal(after, 'not reached');
    assert.deepEqual(await readRow(app, id), { owner: 'nobody', balance: 50, fence: newer });
    assert.deepEqual(await lastCheckpoint(app, res), { state: 'newer', generation: newer });
  });

  it("a stale holder's checkpoint is refused (its lease lost to the next run), its writes rolled back, the job failed and not retried; the next run resumes from its last checkpoint", async () => {
    const id = await newRow(app);
    const data = { id, tag: randomBytes(4).toString('hex') };
    const res = defaultResource({ queueName, name: 'stale', data });
    const wrote = gate();
    const go = gate();
    const runs = [];
    processors.set('stale', fencedProcessor(pool, async (bullJob, job) => {
      runs.push(job);
      if (job.resumeFrom === null) {       // run 1
        await job.checkpoint({ done: 1 });
        await job.client.query('UPDATE account SET balance = 1 WHERE id = $1', [id]);
        wrote.open();
        await go.wait();
        await job.checkpoint({ done: 'run1 late' });
        return 'run1';
      }
      await job.client.query('UPDATE account SET balance = 20 WHERE id = $1', [id]);
      await job.checkpoint({ done: 2 });
      return 'run2';
    }, { ttlMs: 10000 }));
    const job1 = await queue.add('stale', data, { attempts: 5, backoff: { type: 'fixed', delay: 50 } });
    await wrote.wait();
    redis('DEL', leaseKey(res));        // run 1's lease is gone (Redis lost it)
    const job2 = await queue.add('stale', data);
    // run 2 holds the lease and waits on run 1's transaction (its fence)
    await until(() => redis('EXISTS', leaseKey(res)) === '1');
    go.open();
    const one = await finished(job1);
    assert.equal(one.state, 'failed');
    assert.equal(one.job.attemptsMade, 1, 'not retried');
    assert.match(one.job.failedReason, /^LeaseLost: /);
    const two = await finished(job2);
    assert.equal(two.state, 'completed', two.job.failedReason);
    assert.equal(runs.length, 2);
    assert.deepEqual(runs[1].resumeFrom, { done: 1 });
    assert.deepEqual(await readRow(app, id), { owner: 'nobody', balance: 20, fence: runs[1].generation });
    assert.deepEqual(await lastCheckpoint(app, res), { state: { done: 2 }, generation: runs[1].generation });
  });
});

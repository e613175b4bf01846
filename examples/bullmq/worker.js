'use strict';
// A BullMQ job whose effects happen at most once, with lease-fence.
//
// The queue "invoices" gets the same job twice (same name, same data: the
// same lease). The worker runs each through fencedProcessor: an explicit
// lease on bullmq:invoices:bill:<digest of the data>, then the work in
// transactions fenced at the lease's generation, job.checkpoint() after each
// line (the line's write commits with it). Whichever copy comes second is
// either skipped (the lease is busy: the first runs it) or, once the first
// is done, resumes from its last checkpoint and finds nothing left to do.
// Either way the account is billed once per line.
//
//   node worker.js   (PGHOST, PGPORT, PGDATABASE, PGUSER as for psql; a table
//                     account protected with lease_fence.protect; REDIS_URL:
//                     BullMQ's Redis, a redis:// URL or a unix socket path,
//                     default redis://127.0.0.1:6379)
//
// Exits 0 when the account was billed once per line. BullMQ 6 needs ioredis
// installed beside it (an optional peer of bullmq).

const { randomBytes } = require('node:crypto');
const pg = require('pg');
const { Queue, QueueEvents, Worker } = require('bullmq');
const { fencedProcessor, defaultResource } = require('lease-fence/bullmq');

const LINES = [30, 20, 50];

function redisConnection() {
  const url = process.env.REDIS_URL || 'redis://127.0.0.1:6379';
  if (url.startsWith('/')) return { path: url, maxRetriesPerRequest: null };
  const u = new URL(url);
  return { host: u.hostname, port: Number(u.port || 6379), maxRetriesPerRequest: null };
}

async function main() {
  const connection = redisConnection();
  const prefix = `example${randomBytes(4).toString('hex')}`;   // this run's own keys
  const pool = new pg.Pool({ max: 4 });                        // PG* environment variables
  const queue = new Queue('invoices', { connection, prefix });
  const events = new QueueEvents('invoices', { connection, prefix });

  const bill = fencedProcessor(pool, async (bullJob, job) => {
    const { account } = bullJob.data;
    let next = job.resumeFrom === null ? 0 : job.resumeFrom.next;
    console.log(`job ${bullJob.id}: generation ${job.generation}, resuming at line ${next}`);
    for (; next < LINES.length; next += 1) {
      await job.client.query('UPDATE account SET balance = balance + $1 WHERE id = $2',
        [LINES[next], account]);
      await job.checkpoint({ next: next + 1 });    // this line's write commits with it
    }
    return `billed up to line ${next}`;
  }, { ttlMs: 10000 });
  const worker = new Worker('invoices', bill, { connection, prefix, concurrency: 2 });

  try {
    await events.waitUntilReady();
    const { rows } = await pool.query(
      "INSERT INTO account (owner, balance) VALUES ('example bullmq', 0) RETURNING id");
    const data = { account: rows[0].id };
    const jobs = await queue.addBulk([{ name: 'bill', data }, { name: 'bill', data }]);
    for (const j of jobs) {
      const result = await j.waitUntilFinished(events);
      console.log(`job ${j.id}: ${result === undefined || result === null ? 'skipped (busy)' : result}`);
    }
    const balance = (await pool.query('SELECT balance FROM account WHERE id = $1', [data.account])).rows[0].balance;
    const resource = defaultResource({ queueName: 'invoices', name: 'bill', data });
    const cp = (await pool.query('SELECT state FROM lease_fence.last_checkpoint($1)', [resource])).rows[0];
    const expected = LINES.reduce((a, b) => a + b, 0);
    console.log(`balance ${balance} (expected ${expected}), checkpoint ${JSON.stringify(cp && cp.state)}`);
    if (balance !== expected || !cp || cp.state.next !== LINES.length) {
      throw new Error('the account was not billed once per line');
    }
    console.log('ok: the job billed each line once');
  } finally {
    await worker.close();
    await queue.obliterate({ force: true }).catch(() => {});
    await queue.close();
    await events.close();
    await pool.end();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});

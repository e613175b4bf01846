'use strict';
// lease-fence under Knex, writing whole rows back, against a real PostgreSQL
// + Redis, through the installed package (knex installed beside it). Run by
// ci.sh as `node --test --test-reporter=tap`, with the variables of
// test/clients/run.sh. The table knex_item (id, name, qty,
// fence) is owned by postgres, protected with lease_fence.protect and granted
// to the app role.
//
// An application that updates with the row it loaded —
// knex('knex_item').where({ id }).update({ ...row, qty }) — writes the fence
// back as it was loaded. With a current generation G a fence written at or
// below the stored one counts as left alone: the row is checked against G
// (LF001 when G is lower than the stored fence), else the fence becomes G.
// So two such updates in one fenced transaction commit with fence G, and a
// stale worker's update is LF001: err.code, err.table and err.column from
// node-postgres, mapped by lease-fence's translateError to StaleGeneration.

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { randomBytes } = require('node:crypto');
const { setTimeout: sleep } = require('node:timers/promises');
const pg = require('pg');
const Knex = require('knex');
const lf = require('lease-fence');

const env = process.env;
const PGHOST = env.PGHOST || '/var/run/postgresql';
const PGPORT = Number(env.PGPORT || 5432);
const DATABASE = env.PGDATABASE || 'appdb';
const APP_USER = env.PGUSER || 'app';

const resourceName = (tag) => `knex:${tag}:${randomBytes(4).toString('hex')}`;
const SET_GENERATION = 'select lease_fence.set_generation(?, ?)';

// assert.rejects with a class check that also returns the error
async function rejection(promise, cls) {
  let caught = null;
  await assert.rejects(promise, (err) => { caught = err; return err instanceof cls; });
  return caught;
}

describe('lease_fence with Knex: full-row updates', () => {
  let knex;
  let app;                       // pg.Client: leases, and rows read back
  const updates = [];
  before(async () => {
    knex = Knex({
      client: 'pg',
      connection: { host: PGHOST, port: PGPORT, database: DATABASE, user: APP_USER },
      pool: { min: 0, max: 2 },
    });
    knex.on('query', (q) => { if (/^update /i.test(q.sql)) updates.push(q.sql); });
    app = new pg.Client({ host: PGHOST, port: PGPORT, database: DATABASE, user: APP_USER });
    await app.connect();
  });
  after(async () => {
    await knex.destroy();
    await app.end();
  });

  async function readItem(id) {
    const { rows } = await app.query('SELECT name, qty, fence FROM knex_item WHERE id = $1', [id]);
    return { name: rows[0].name, qty: rows[0].qty, fence: BigInt(rows[0].fence) };
  }
  async function resourceFence(resource) {
    const { rows } = await app.query(
      'SELECT generation FROM lease_fence.resource_fences WHERE resource = $1', [resource]);
    return BigInt(rows[0].generation);
  }
  async function newItem(name) {
    const [{ id }] = await knex('knex_item').insert({ name }).returning('id');
    return id;
  }

  it('two updates of the loaded row in one fenced transaction commit with fence = the generation', async () => {
    const id = await newItem('new');          // no generation: lenient table, fence 0
    const res = resourceName('twice');
    const lease = await lf.acquire(app, res, { ttlMs: 10000 });
    try {
      updates.length = 0;
      await knex.transaction(async (trx) => {
        await trx.raw(SET_GENERATION, [lease.generation.toString(), lease.resource]);
        const row = await trx('knex_item').where({ id }).first();
        assert.equal(row.fence, '0');
        await trx('knex_item').where({ id }).update({ ...row, name: 'updated once' });
        await trx('knex_item').where({ id }).update({ ...row, name: 'updated twice', qty: row.qty + 2 });
      });
      assert.equal(updates.length, 2);
      for (const sql of updates) assert.match(sql, /"fence" = \$\d+/, 'the loaded fence is written back');
      assert.deepEqual(await readItem(id), { name: 'updated twice', qty: 2, fence: lease.generation });
      assert.equal(await resourceFence(res), lease.generation);
    } finally {
      await lf.release(app, lease);
    }
  });

  it("a stale worker's update of the row it loaded is LF001 (StaleGeneration, knex_item.fence); nothing commits", async () => {
    const id = await newItem('start');
    const res = resourceName('stale');
    const leaseA = await lf.acquire(app, res, { ttlMs: 300 });
    const loaded = await knex('knex_item').where({ id }).first();    // A loads the row
    await sleep(600);                                                 // A stalls; its lease expires
    const leaseB = await lf.acquire(app, res, { ttlMs: 10000 });
    try {
      assert.ok(leaseB.generation > leaseA.generation);
      await knex.transaction(async (trx) => {
        await trx.raw(SET_GENERATION, [leaseB.generation.toString(), res]);
        const row = await trx('knex_item').where({ id }).first();
        await trx('knex_item').where({ id }).update({ ...row, name: 'B' });
      });

      const err = await rejection(knex.transaction(async (trx) => {
        await trx.raw(SET_GENERATION, [leaseA.generation.toString(), null]);     // rows only
        await trx('knex_item').where({ id }).update({ ...loaded, name: 'A late', qty: 99 });
      }), Error);
      assert.equal(err.code, 'LF001');
      assert.deepEqual([err.schema, err.table, err.column], ['public', 'knex_item', 'fence']);
      const stale = lf.translateError(err);
      assert.ok(stale instanceof lf.StaleGeneration);
      assert.deepEqual([stale.table, stale.column, stale.resource], ['knex_item', 'fence', null]);
      assert.equal(stale.cause, err);

      // fencing the resource too, A is refused before its update runs
      let ran = false;
      const resErr = await rejection(knex.transaction(async (trx) => {
        await trx.raw(SET_GENERATION, [leaseA.generation.toString(), res]);
        ran = true;
        await trx('knex_item').where({ id }).update({ ...loaded, name: 'A later' });
      }), Error);
      assert.equal(resErr.code, 'LF001');
      assert.equal(resErr.constraint, res);
      assert.equal(lf.translateError(resErr).resource, res);
      assert.equal(ran, false);

      assert.deepEqual(await readItem(id), { name: 'B', qty: 0, fence: leaseB.generation });
    } finally {
      await lf.release(app, leaseB);
    }
  });
});

'use strict';
// Shared by the tests: the servers test/clients/run.sh started, as its
// variables say.

const assert = require('node:assert/strict');
const { randomBytes } = require('node:crypto');

const env = process.env;
const config = {
  host: env.PGHOST || '/var/run/postgresql',
  port: Number(env.PGPORT || 5432),
  database: env.PGDATABASE || 'appdb',
  user: env.PGUSER || 'app',
};

const resourceName = (tag) => `node:${tag}:${randomBytes(4).toString('hex')}`;

// assert.rejects with a class check that also returns the error
async function rejection(promise, cls) {
  let caught = null;
  await assert.rejects(promise, (err) => { caught = err; return err instanceof cls; });
  return caught;
}

async function newRow(db, owner = 'nobody') {
  const { rows } = await db.query(
    'INSERT INTO account (owner, balance) VALUES ($1, 100) RETURNING id', [owner]);
  return rows[0].id;
}

async function readRow(db, id) {
  const { rows } = await db.query('SELECT owner, balance, fence FROM account WHERE id = $1', [id]);
  return { owner: rows[0].owner, balance: rows[0].balance, fence: BigInt(rows[0].fence) };
}

async function nextGeneration(db) {
  const { rows } = await db.query('SELECT lease_fence.next_generation() AS g');
  return BigInt(rows[0].g);
}

module.exports = { config, resourceName, rejection, newRow, readRow, nextGeneration };

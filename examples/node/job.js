'use strict';
// The fenced job, with lease-fence and node-postgres.
//
// A job that is one transaction: lf.job takes a transaction-scoped lease
// (BEGIN and the acquire in one message), fn writes under its generation,
// COMMIT checks the lease and releases it. While worker A's job runs, worker
// B's job on the same resource is refused (LeaseBusy) before its fn runs;
// once A committed, B's job runs.
//
//   node job.js     (PGHOST, PGPORT, PGDATABASE, PGUSER as for psql; a table
//                    account protected with lease_fence.protect)
//
// Exits 0 when both jobs behaved.

const { randomBytes } = require('node:crypto');
const pg = require('pg');
const lf = require('lease-fence');

async function main() {
  const pool = new pg.Pool({ max: 4 });        // PG* environment variables
  const resource = `example:job:${randomBytes(4).toString('hex')}`;
  try {
    const { rows } = await pool.query(
      "INSERT INTO account (owner, balance) VALUES ('nobody', 0) RETURNING id");
    const id = rows[0].id;
    let bRefused = false;
    const leaseA = await lf.job(pool, resource, { ttlMs: 5000 }, async (lease, client) => {
      await client.query("UPDATE account SET owner = 'A' WHERE id = $1", [id]);
      try {
        await lf.job(pool, resource, { ttlMs: 5000 },
          () => console.log("B's job ran while A held the lease"));
      } catch (err) {
        if (!(err instanceof lf.LeaseBusy)) throw err;
        bRefused = true;
        console.log(`B's job refused while A holds ${resource}: LeaseBusy`);
      }
      return lease;
    });
    console.log(`A's job committed under generation ${leaseA.generation}`);

    const leaseB = await lf.job(pool, resource, { ttlMs: 5000 }, async (lease, client) => {  // released by A's COMMIT
      await client.query("UPDATE account SET owner = 'B' WHERE id = $1", [id]);
      return lease;
    });
    const row = (await pool.query('SELECT owner, fence FROM account WHERE id = $1', [id])).rows[0];
    console.log(`B's job committed: row ${id} owner ${row.owner}, fence ${row.fence}`);
    if (bRefused && row.owner === 'B' && BigInt(row.fence) === leaseB.generation &&
        leaseB.generation > leaseA.generation) {
      console.log('ok: the jobs excluded each other');
      return 0;
    }
    console.log('NOT ok');
    return 1;
  } finally {
    await pool.end();
  }
}

main().then((code) => { process.exitCode = code; }, (err) => { console.error(err); process.exitCode = 1; });

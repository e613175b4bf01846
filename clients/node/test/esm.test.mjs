// The installed package as an ES module and as CommonJS: both entry points
// resolve (to node_modules/lease-fence when LF_EXPECT_INSTALLED=1, as ci.sh
// sets it), export the whole API, and share one set of classes.

import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { sep } from 'node:path';
import pg from 'pg';
import lfDefault, {
  acquire, release, fenced, StaleGeneration, FenceError, LeaseUnknown, LeaseDenied, translateError,
} from 'lease-fence';
import * as lfNamespace from 'lease-fence';

const require = createRequire(import.meta.url);
const installed = process.env.LF_EXPECT_INSTALLED === '1';
const API = [
  'acquire', 'tryAcquire', 'transactionLease', 'job', 'keptAliveLease', 'fenced', 'inTransaction',
  'renew', 'release', 'releaseOutcome', 'keepaliveState', 'translateError', 'isPool',
  'FenceError', 'StaleGeneration', 'MissingGeneration', 'ConflictingGeneration', 'UnissuedGeneration',
  'LeaseLostAtCommit', 'LeaseError', 'LeaseDenied', 'LeaseBusy', 'LeaseUnavailable', 'LeaseLost',
  'LeaseUnknown', 'RedisLeases', 'clientSideScripts', 'acquireOutcome', 'DataCorrupted',
  'TransactionRolledBack', 'resumableJob', 'ResumableJob',
  // the old names, deprecated aliases for one release
  'withFence', 'withTransactionLease', 'withKeptAliveLease', 'LeaseDataCorrupted',
];

describe('package entry points', () => {
  it('require(\'lease-fence\') (CommonJS) loads the installed dist/cjs build with the whole API', () => {
    const path = require.resolve('lease-fence');
    if (installed) {
      assert.ok(path.includes(`${sep}node_modules${sep}lease-fence${sep}dist${sep}cjs${sep}`), path);
    }
    const lf = require('lease-fence');
    for (const name of API) assert.equal(typeof lf[name], 'function', name);
    assert.equal(lf.StaleGeneration.sqlstate, 'LF001');
    assert.equal(require('lease-fence/package.json').version, '1.5.0');
  });

  it('import from \'lease-fence\' (ESM) has the same API and the same classes as require', async () => {
    if (installed) {
      const url = import.meta.resolve ? import.meta.resolve('lease-fence') : null;
      if (typeof url === 'string') assert.match(url, /\/node_modules\/lease-fence\/dist\/esm\/index\.mjs$/);
    }
    const cjs = require('lease-fence');
    for (const name of API) {
      assert.equal(typeof lfNamespace[name], 'function', name);
      assert.equal(lfNamespace[name], cjs[name], `${name}: one copy for import and require`);
    }
    assert.equal(lfDefault.acquire, acquire);
    assert.ok(new StaleGeneration('x') instanceof FenceError);
    assert.ok(!(new LeaseUnknown('unknown', null, 'x') instanceof LeaseDenied));
    const pgErr = Object.assign(new Error('stale'), { code: 'LF001', table: 'account', column: 'fence' });
    const err = translateError(pgErr);
    assert.ok(err instanceof cjs.StaleGeneration);
    assert.deepEqual([err.table, err.column, err.resource, err.cause], ['account', 'fence', null, pgErr]);
  });

  it("lease-fence/bullmq: both import and require, the same classes; the main entry point never loads bullmq", async () => {
    const esm = await import('lease-fence/bullmq');
    const cjs = require('lease-fence/bullmq');
    assert.equal(typeof esm.fencedProcessor, 'function');
    assert.equal(esm.fencedProcessor, cjs.fencedProcessor);
    assert.equal(esm.defaultResource, cjs.defaultResource);
    const { execFileSync } = await import('node:child_process');
    const loaded = execFileSync(process.execPath, ['-e',
      "require('lease-fence'); process.stdout.write(String(Object.keys(require.cache)" +
      ".filter((k) => /[\\/]node_modules[\\/]bullmq[\\/]/.test(k)).length))"],
    { encoding: 'utf8', cwd: process.cwd() });
    assert.equal(loaded, '0');
  });

  it('ESM import against the server: acquire, fenced write, release', async () => {
    const env = process.env;
    const client = new pg.Client({
      host: env.PGHOST || '/var/run/postgresql', port: Number(env.PGPORT || 5432),
      database: env.PGDATABASE || 'appdb', user: env.PGUSER || 'app',
    });
    await client.connect();
    try {
      const res = `esm:${Math.random().toString(16).slice(2)}`;
      const lease = await acquire(client, res, { ttlMs: 10000 });
      assert.equal(typeof lease.generation, 'bigint');
      const g = await fenced(client, lease, async (c) => {
        const { rows } = await c.query('SELECT lease_fence.current_generation() AS g');
        return BigInt(rows[0].g);
      });
      assert.equal(g, lease.generation);
      assert.equal(await release(client, lease), 'released');
    } finally {
      await client.end();
    }
  });
});

// The same package through ESM resolution (the "import" condition).
import pg from 'pg';
import lf, { acquire, fenced, StaleGeneration, type AcquiredLease } from 'lease-fence';

export async function run(pool: pg.Pool): Promise<bigint> {
  const lease: AcquiredLease = await acquire(pool, 'esm', { ttlMs: 1000 });
  try {
    return await fenced(pool, lease, async (client: pg.PoolClient) => {
      await client.query('SELECT 1');
      return lease.generation;
    });
  } catch (err) {
    if (err instanceof StaleGeneration && err.resource !== null) return -1n;
    throw err;
  } finally {
    await lf.release(pool, lease);
  }
}

import { Redis } from 'ioredis';
import { RedisLeases } from 'lease-fence';

export async function clientSide(pool: pg.Pool): Promise<bigint> {
  const leases = new lf.RedisLeases(new Redis({ autoResendUnfulfilledCommands: false }), { keyPrefix: 'app:' });
  const same: RedisLeases = leases;
  const lease: AcquiredLease = await same.acquire(pool, 'esm', { ttlMs: 1000 });
  await same.release(lease);
  return lease.generation;
}

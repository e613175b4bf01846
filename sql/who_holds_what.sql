-- who_holds_what: lease_fence.all_leases, holder() and latency without
-- shared_preload_libraries and without a Redis server — their columns, who
-- may read and call them, bad input before anything is sent, and a Redis
-- that is not there.  With a Redis server and the library preloaded:
-- test/t/ops_who_holds_what.pl.

\set ECHO none
\i sql/include/try.sql

LOAD 'lease_fence';
SET lease_fence.redis_socket = '/nonexistent/lease_fence_test.sock';
SET lease_fence.connect_timeout_ms = 200;

-- the columns of the views
SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod), ', ' ORDER BY attnum) AS all_leases
FROM pg_attribute WHERE attrelid = 'lease_fence.all_leases'::regclass AND attnum > 0;
SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod), ', ' ORDER BY attnum) AS latency
FROM pg_attribute WHERE attrelid = 'lease_fence.latency'::regclass AND attnum > 0;
SELECT pg_get_function_arguments('lease_fence.holder(text)'::regprocedure) AS holder;

-- not preloaded: the session's own leases (none here), the backend's own
-- histograms, empty
SELECT count(*) AS leases FROM lease_fence.all_leases;
SELECT operation, count(*) AS buckets, max(count) AS count, max(sum_ms) AS sum_ms,
       string_agg(le::text, ' ' ORDER BY le) AS le, max(scope) AS scope
FROM lease_fence.latency GROUP BY operation ORDER BY operation;

-- max_tracked_leases exists only when lease_fence is preloaded (it sizes
-- shared memory), as pg_stat_statements.max does
SELECT count(*) AS max_tracked_leases FROM pg_settings WHERE name = 'lease_fence.max_tracked_leases';

-- every role reads the views; holder() asks Redis: granted, not PUBLIC's
CREATE ROLE lf_who_nobody;
SELECT has_table_privilege('lf_who_nobody', 'lease_fence.all_leases', 'SELECT') AS all_leases,
       has_table_privilege('lf_who_nobody', 'lease_fence.latency', 'SELECT') AS latency,
       has_function_privilege('lf_who_nobody', 'lease_fence.holder(text)', 'EXECUTE') AS holder;
SET ROLE lf_who_nobody;
SELECT count(*) AS leases FROM lease_fence.all_leases;
SELECT count(*) AS latency_rows FROM lease_fence.latency;
SELECT pg_temp.try($$SELECT lease_fence.holder('job:42')$$);
RESET ROLE;
DROP ROLE lf_who_nobody;

-- bad input: 22023 before anything is sent
SELECT pg_temp.try($$SELECT lease_fence.holder(NULL)$$);
SELECT pg_temp.try($$SELECT lease_fence.holder('')$$);
SELECT pg_temp.try($$SELECT lease_fence.holder(repeat('x', 1025))$$);

-- no Redis: an error that says so, with no path in it
SELECT pg_temp.try($$SELECT lease_fence.holder('job:42')$$);

-- a request that got no reply is no latency sample
SELECT status FROM lease_fence.acquire('job:42', 1000);
SELECT sum(count) AS samples FROM lease_fence.latency;


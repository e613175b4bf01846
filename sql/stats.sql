-- stats: lease_fence.stats without shared_preload_libraries counts per
-- backend (scope 'backend', with a NOTICE saying so); rejected writes count
-- although their transaction rolls back.  The cluster-wide counters, and the
-- statuses that need a Redis server, are in test/t/ops_stats.pl.

-- The generations below are small numbers: draw them first, so that they
-- were issued (a generation this database never issued is LF004: see
-- unissued.sql).
SELECT max(g) >= 20 AS issued_through_20
FROM (SELECT lease_fence.next_generation() AS g FROM generate_series(1, 20)) s;

\set ECHO none
\i sql/include/try.sql

SELECT lease_fence.stats_reset();
SELECT operation, outcome, count, scope FROM lease_fence.stats ORDER BY operation, outcome;

CREATE TABLE counted (id int PRIMARY KEY, v int);
SELECT lease_fence.protect('counted');

BEGIN;
SET LOCAL lease_fence.generation = 10;
INSERT INTO counted VALUES (1, 1), (2, 2), (3, 3);
UPDATE counted SET v = v + 1 WHERE id = 1;
DELETE FROM counted WHERE id = 3;
-- the open transaction's own accepted writes are included
SELECT count FROM lease_fence.stats WHERE operation = 'fence' AND outcome = 'accepted';
COMMIT;

-- rejections: LF001, LF002 (a NULL fence), LF003 — each rolled back
BEGIN;
SET LOCAL lease_fence.generation = 9;
UPDATE counted SET v = 0 WHERE id = 1;
ROLLBACK;
UPDATE counted SET fence = NULL WHERE id = 1;
BEGIN;
SET LOCAL lease_fence.generation = 10;
UPDATE counted SET fence = 11 WHERE id = 1;
ROLLBACK;
-- a TRUNCATE without a generation is an LF002 too
TRUNCATE counted;
-- an accepted write inside a transaction that rolls back still passed the fence
BEGIN;
SET LOCAL lease_fence.generation = 10;
UPDATE counted SET v = 5 WHERE id = 2;
ROLLBACK;

SET client_min_messages = warning;
SELECT operation, outcome, count FROM lease_fence.stats
WHERE operation = 'fence' ORDER BY outcome;

-- the helper's outcomes without a server: unavailable, three times
SET lease_fence.redis_socket = '/nonexistent/lease_fence_test.sock';
SELECT status FROM lease_fence.acquire('s', 1000);
SELECT status FROM lease_fence.renew('s', repeat('a', 32), 1000);
SELECT status FROM lease_fence.release('s', repeat('a', 32));
RESET lease_fence.redis_socket;
SELECT operation, outcome, count FROM lease_fence.stats
WHERE count > 0 AND operation <> 'fence' ORDER BY operation, outcome;
RESET client_min_messages;

-- reading is for everyone, resetting is not
CREATE ROLE regress_lf_reader;
SET ROLE regress_lf_reader;
SELECT count(*) AS counters FROM lease_fence.stats;
SELECT pg_temp.try($$SELECT lease_fence.stats_reset()$$);
RESET ROLE;
DROP ROLE regress_lf_reader;

SELECT lease_fence.stats_reset();
SELECT sum(count) AS total_after_reset FROM lease_fence.stats;
SELECT lease_fence.unprotect('counted');
DROP TABLE counted;

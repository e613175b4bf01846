-- partition: a fence on a partitioned table reaches every partition —
-- existing, created later, attached later — and a row moved between
-- partitions (a DELETE plus an INSERT) is fenced too.

-- The generations below are small numbers: draw them first, so that they
-- were issued (a generation this database never issued is LF004: see
-- unissued.sql).
SELECT max(g) >= 20 AS issued_through_20
FROM (SELECT lease_fence.next_generation() AS g FROM generate_series(1, 20)) s;

\set ECHO none
\i sql/include/try.sql

CREATE TABLE jobs (id int, shard int, state text) PARTITION BY LIST (shard);
CREATE TABLE jobs_1 PARTITION OF jobs FOR VALUES IN (1);
INSERT INTO jobs VALUES (1, 1, 'new');
SELECT lease_fence.protect('jobs');

-- created after protect
CREATE TABLE jobs_2 PARTITION OF jobs FOR VALUES IN (2);
-- attached after protect (a table of its own, columns in another order)
CREATE TABLE jobs_3 (fence bigint NOT NULL DEFAULT 0, state text, shard int, id int);
ALTER TABLE jobs ATTACH PARTITION jobs_3 FOR VALUES IN (3);
-- a sub-partitioned partition
CREATE TABLE jobs_4 PARTITION OF jobs FOR VALUES IN (4, 5) PARTITION BY LIST (shard);
CREATE TABLE jobs_4a PARTITION OF jobs_4 FOR VALUES IN (4);

-- every partition has the fence trigger, firing always
SELECT tgrelid::regclass AS partition, tgenabled FROM pg_trigger
WHERE tgname = 'zz_lease_fence' AND tgrelid::regclass::text LIKE 'jobs%' ORDER BY tgrelid::regclass::text;

BEGIN;
SET LOCAL lease_fence.generation = 10;
INSERT INTO jobs VALUES (2, 2, 'new'), (3, 3, 'new'), (4, 4, 'new');
UPDATE jobs SET state = 'run' WHERE id = 1;
COMMIT;
SELECT tableoid::regclass, * FROM jobs ORDER BY id;

-- a stale generation is rejected in every partition
BEGIN;
SET LOCAL lease_fence.generation = 9;
SELECT pg_temp.try(format('UPDATE jobs SET state = %L WHERE id = %s', 'stale', i)) FROM generate_series(1, 4) i;
SELECT pg_temp.try($$DELETE FROM jobs WHERE id = 3$$);
COMMIT;

-- also with session_replication_role = replica, in a partition created later
SET session_replication_role = replica;
BEGIN;
SET LOCAL lease_fence.generation = 9;
SELECT pg_temp.try($$UPDATE jobs SET state = 'stale' WHERE id = 2$$);
SELECT pg_temp.try($$UPDATE jobs_4a SET state = 'stale' WHERE id = 4$$);
COMMIT;
RESET session_replication_role;

------------------------------------------------------------------------------
-- a row moved between partitions: BEFORE UPDATE and BEFORE DELETE fire on
-- the source, BEFORE INSERT on the destination
------------------------------------------------------------------------------
-- stale: rejected, the row stays where it was
BEGIN;
SET LOCAL lease_fence.generation = 9;
SELECT pg_temp.try($$UPDATE jobs SET shard = 2 WHERE id = 1$$);
COMMIT;
-- equal: passes, and the moved row keeps the generation
BEGIN;
SET LOCAL lease_fence.generation = 10;
UPDATE jobs SET shard = 2 WHERE id = 1 RETURNING tableoid::regclass, *;
COMMIT;
-- higher: passes, the moved row carries the new generation
BEGIN;
SET LOCAL lease_fence.generation = 11;
UPDATE jobs SET shard = 3 WHERE id = 1 RETURNING tableoid::regclass, *;
COMMIT;
-- an explicit conflicting value on the move
BEGIN;
SET LOCAL lease_fence.generation = 12;
SELECT pg_temp.try($$UPDATE jobs SET shard = 1, fence = 13 WHERE id = 1$$);
COMMIT;
-- without a generation, lenient: the written fence is supplied
SELECT pg_temp.try($$UPDATE jobs SET shard = 1, fence = 10 WHERE id = 1$$);
UPDATE jobs SET shard = 1, fence = 11 WHERE id = 1 RETURNING tableoid::regclass, *;
SELECT tableoid::regclass, * FROM jobs ORDER BY id;

------------------------------------------------------------------------------
-- strict on a partitioned table: the mode reaches the partitions
------------------------------------------------------------------------------
SELECT lease_fence.protect('jobs', strict => true);
SELECT pg_temp.try($$UPDATE jobs SET shard = 2 WHERE id = 1$$);
SELECT pg_temp.try($$INSERT INTO jobs VALUES (9, 4, 'x')$$);
BEGIN;
SET LOCAL lease_fence.generation = 12;
UPDATE jobs SET shard = 2 WHERE id = 1 RETURNING tableoid::regclass, *;
COMMIT;

------------------------------------------------------------------------------
-- TRUNCATE: the guard is on every member that existed when protect ran;
-- protected_tables names the ones added since, and protect() again fixes it
------------------------------------------------------------------------------
SELECT lease_fence.unprotect('jobs');
SELECT count(*) AS fence_triggers_left FROM pg_trigger
WHERE tgname LIKE 'zz_lease_fence%' AND tgrelid::regclass::text LIKE 'jobs%';
SELECT lease_fence.protect('jobs');
CREATE TABLE jobs_6 PARTITION OF jobs FOR VALUES IN (6);
SELECT ok, problems FROM lease_fence.protected_tables WHERE table_name = 'jobs'::regclass;
SELECT lease_fence.protect('jobs');
SELECT ok, problems FROM lease_fence.protected_tables WHERE table_name = 'jobs'::regclass;
-- through the parent and on one partition directly
SELECT pg_temp.try($$TRUNCATE jobs$$);
SELECT pg_temp.try($$TRUNCATE jobs_2$$);
BEGIN;
SET LOCAL lease_fence.generation = 11;
SELECT pg_temp.try($$TRUNCATE jobs_2$$);
COMMIT;
BEGIN;
SET LOCAL lease_fence.generation = 12;
TRUNCATE jobs_3;
TRUNCATE jobs;
SELECT count(*) AS rows_left FROM jobs;
COMMIT;

-- a partition whose own clone of the trigger was disabled is flagged
ALTER TABLE jobs_2 DISABLE TRIGGER zz_lease_fence;
SELECT ok, problems FROM lease_fence.protected_tables WHERE table_name = 'jobs'::regclass;
ALTER TABLE jobs_2 ENABLE ALWAYS TRIGGER zz_lease_fence;

DROP TABLE jobs;
SELECT count(*) AS listed FROM lease_fence.protected_tables;

-- truncate_guard: the TRUNCATE guard reads the highest fence with a table
-- scan in C, under no other identity than the caller's: no user code runs
-- because of it (it once ran SELECT max(fence) as the bootstrap superuser,
-- and planning that query ran the owner's index expressions with superuser
-- rights).  It reads every leaf of a partitioned table, including one that
-- has no guard of its own.

-- generations up to 100 are issued in this database
SELECT max(g) >= 100 AS issued FROM (SELECT lease_fence.next_generation() AS g FROM generate_series(1, 100)) s;

\set ECHO none
\i sql/include/try.sql

------------------------------------------------------------------------------
-- a plain role's index expression does not run as anyone else
------------------------------------------------------------------------------
CREATE ROLE regress_lf_plain LOGIN;
GRANT CREATE ON SCHEMA public TO regress_lf_plain;
SET ROLE regress_lf_plain;
-- what the index expression would do if it ran: record who it ran as, and
-- try to make its author a superuser
CREATE TABLE ran_as (who name);
CREATE FUNCTION esc() RETURNS int LANGUAGE plpgsql VOLATILE AS $$
BEGIN
	INSERT INTO public.ran_as VALUES (current_user);
	BEGIN
		EXECUTE 'ALTER ROLE regress_lf_plain SUPERUSER';
	EXCEPTION WHEN others THEN
		NULL;
	END;
	RETURN 1;
END $$;
CREATE FUNCTION k() RETURNS int LANGUAGE plpgsql IMMUTABLE AS $$ BEGIN RETURN (SELECT public.esc()); END $$;
CREATE TABLE t (id int, fence bigint NOT NULL DEFAULT 0);
SELECT lease_fence.protect('t');
INSERT INTO t (id) VALUES (1), (2);
CREATE INDEX t_expr_idx ON t ((id + k()));
ALTER INDEX t_expr_idx SET (fillfactor = 90);
-- building the index ran k() as regress_lf_plain, its owner: the probe
-- records who it runs as
SELECT who, count(*) > 0 AS ran FROM ran_as GROUP BY who;
TRUNCATE ran_as;
BEGIN;
SET LOCAL lease_fence.generation = 1;
TRUNCATE t;
COMMIT;
-- the guard ran nothing of regress_lf_plain's as another role
SELECT rolsuper FROM pg_roles WHERE rolname = 'regress_lf_plain';
SELECT who, count(*) FROM ran_as WHERE who <> 'regress_lf_plain' GROUP BY who;
-- (the index goes before anyone else writes to the table: an index
-- expression runs as whoever writes, which is PostgreSQL's rule, not ours)
DROP INDEX t_expr_idx;
-- and still refuses a stale TRUNCATE of that table
INSERT INTO t VALUES (1, 50);
BEGIN;
SET LOCAL lease_fence.generation = 49;
SELECT pg_temp.try($$TRUNCATE t$$);
ROLLBACK;
RESET ROLE;
SELECT rolsuper FROM pg_roles WHERE rolname = 'regress_lf_plain';
SELECT count(*) AS rows_left FROM t;
SELECT lease_fence.unprotect('t');
DROP TABLE t, ran_as;
DROP FUNCTION k(), esc();
REVOKE CREATE ON SCHEMA public FROM regress_lf_plain;
DROP ROLE regress_lf_plain;

------------------------------------------------------------------------------
-- rows hidden by row level security, even from the table's owner (FORCE)
------------------------------------------------------------------------------
CREATE TABLE secret (id int, fence bigint NOT NULL DEFAULT 0);
SELECT lease_fence.protect('secret');
INSERT INTO secret VALUES (1, 5), (2, 70);
ALTER TABLE secret ENABLE ROW LEVEL SECURITY;
ALTER TABLE secret FORCE ROW LEVEL SECURITY;
CREATE POLICY low_only ON secret USING (fence < 10);
CREATE ROLE regress_lf_rls;
ALTER TABLE secret OWNER TO regress_lf_rls;
SET ROLE regress_lf_rls;
SELECT max(fence) AS max_fence_owner_can_see FROM secret;
BEGIN;
SET LOCAL lease_fence.generation = 10;
SELECT pg_temp.try($$TRUNCATE secret$$);
ROLLBACK;
BEGIN;
SET LOCAL lease_fence.generation = 70;
SELECT pg_temp.try($$TRUNCATE secret$$);
ROLLBACK;
RESET ROLE;
SELECT lease_fence.unprotect('secret');
DROP TABLE secret;
DROP ROLE regress_lf_rls;

------------------------------------------------------------------------------
-- a partitioned table: every leaf is read, also one without a guard (a
-- partition attached after protect(), whose guard protect() adds only when
-- run again), and the guard of a partition truncated alone reads that one
------------------------------------------------------------------------------
CREATE TABLE jobs (id int, shard int, fence bigint NOT NULL DEFAULT 0) PARTITION BY LIST (shard);
CREATE TABLE jobs_1 PARTITION OF jobs FOR VALUES IN (1);
SELECT lease_fence.protect('jobs');
CREATE TABLE jobs_2 (fence bigint NOT NULL DEFAULT 0, shard int, id int);  -- other column order
ALTER TABLE jobs ATTACH PARTITION jobs_2 FOR VALUES IN (2);
SELECT ok, problems FROM lease_fence.protected_tables WHERE table_name = 'jobs'::regclass;
INSERT INTO jobs VALUES (1, 1, 20), (2, 2, 90);
BEGIN;
SET LOCAL lease_fence.generation = 30;
SELECT pg_temp.try($$TRUNCATE jobs$$);
ROLLBACK;
BEGIN;
SET LOCAL lease_fence.generation = 30;
SELECT pg_temp.try($$TRUNCATE jobs_1$$);
SELECT count(*) AS rows_left FROM jobs;
ROLLBACK;
BEGIN;
SET LOCAL lease_fence.generation = 90;
SELECT pg_temp.try($$TRUNCATE jobs$$);
SELECT count(*) AS rows_left FROM jobs;
ROLLBACK;
-- an empty table, and rows whose fence is NULL (a table fenced by a trigger
-- on a nullable column): nothing to compare, the generation is enough
SELECT lease_fence.unprotect('jobs');
DROP TABLE jobs;
CREATE TABLE nullable (id int, fence bigint);
CREATE TRIGGER zz_guard BEFORE TRUNCATE ON nullable
	FOR EACH STATEMENT EXECUTE FUNCTION lease_fence.truncate_guard();
BEGIN;
SET LOCAL lease_fence.generation = 1;
SELECT pg_temp.try($$TRUNCATE nullable$$);
ROLLBACK;
INSERT INTO nullable VALUES (1, NULL), (2, 3);
BEGIN;
SET LOCAL lease_fence.generation = 2;
SELECT pg_temp.try($$TRUNCATE nullable$$);
ROLLBACK;
DROP TABLE nullable;

-- full_row_save: ORMs (Django's save(), Hibernate without dynamic-update,
-- SQLAlchemy with the fence mapped) write every column back, the fence as
-- they loaded it.  With a current generation, a fence written at or below
-- the stored one counts as leaving the fence alone: the current generation
-- is checked (LF001 when stale) and becomes the fence.  A fence above the
-- stored one that is not the current generation stays LF003.  Without a
-- current generation nothing changes.  INSERT ... ON CONFLICT DO UPDATE and
-- MERGE follow the same rule.  Then the error fields drivers read.
-- Concurrent full-row saves are in test/specs/full_row_save.spec.

SET client_min_messages = warning;

-- the generations below (up to 70) must have been issued, or the fence
-- refuses them (LF004)
SELECT max(g) >= 70 AS issued_through_70
FROM (SELECT lease_fence.next_generation() AS g FROM generate_series(1, 70)) s;

\set ECHO none
\i sql/include/try.sql

-- fields(stmt): the SQLSTATE and the error fields a driver reads
CREATE FUNCTION pg_temp.fields(stmt text,
	OUT code text, OUT schema_name text, OUT table_name text,
	OUT column_name text, OUT constraint_name text)
LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE stmt;
	code := '00000';
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE,
		schema_name = SCHEMA_NAME, table_name = TABLE_NAME,
		column_name = COLUMN_NAME, constraint_name = CONSTRAINT_NAME;
END $$;

CREATE TABLE o (id int PRIMARY KEY, v int NOT NULL, fence bigint NOT NULL DEFAULT 0);
SELECT lease_fence.protect('o');
-- a row written before anyone held a lease: fence 0
INSERT INTO o VALUES (1, 0, 0);

------------------------------------------------------------------------------
-- two saves of the same object in one fenced transaction: both write the
-- fence the object was loaded with (0); the row ends at the generation
------------------------------------------------------------------------------
BEGIN;
SET LOCAL lease_fence.generation = 20;
UPDATE o SET v = 1, fence = 0 WHERE id = 1 RETURNING *;
UPDATE o SET v = 2, fence = 0 WHERE id = 1 RETURNING *;
COMMIT;
SELECT * FROM o ORDER BY id;

------------------------------------------------------------------------------
-- a stale holder (10) saves the object it loaded before the new holder
-- (20) wrote: LF001, whatever fence at or below the stored one it writes
------------------------------------------------------------------------------
BEGIN;
SET LOCAL lease_fence.generation = 10;
SELECT pg_temp.try($$UPDATE o SET v = 3, fence = 0 WHERE id = 1$$) AS loaded_0;
COMMIT;
BEGIN;
SET LOCAL lease_fence.generation = 10;
SELECT pg_temp.try($$UPDATE o SET v = 3, fence = 15 WHERE id = 1$$) AS loaded_15;
COMMIT;
BEGIN;
SET LOCAL lease_fence.generation = 10;
SELECT pg_temp.try($$UPDATE o SET v = 3, fence = 20 WHERE id = 1$$) AS reloaded_20;
COMMIT;
-- a stale holder writing its own generation explicitly: LF001 as before
BEGIN;
SET LOCAL lease_fence.generation = 10;
SELECT pg_temp.try($$UPDATE o SET v = 3, fence = 10 WHERE id = 1$$) AS own_10;
COMMIT;
SELECT * FROM o ORDER BY id;

------------------------------------------------------------------------------
-- above the stored fence: only the current generation may be written
------------------------------------------------------------------------------
BEGIN;
SET LOCAL lease_fence.generation = 30;
SELECT pg_temp.try($$UPDATE o SET v = 4, fence = 25 WHERE id = 1$$) AS between;
SELECT pg_temp.try($$UPDATE o SET v = 4, fence = 35 WHERE id = 1$$) AS above_current;
COMMIT;
BEGIN;
SET LOCAL lease_fence.generation = 30;
UPDATE o SET v = 4, fence = 30 WHERE id = 1 RETURNING *;
-- now stored is 30: a save with the fence loaded at the start (0) passes
UPDATE o SET v = 5, fence = 0 WHERE id = 1 RETURNING *;
COMMIT;

------------------------------------------------------------------------------
-- without a current generation nothing changes: a written fence below the
-- stored one is that statement's generation, and stale
------------------------------------------------------------------------------
SELECT pg_temp.try($$UPDATE o SET v = 6, fence = 0 WHERE id = 1$$) AS no_generation_0;
SELECT pg_temp.try($$UPDATE o SET v = 6, fence = 29 WHERE id = 1$$) AS no_generation_29;
UPDATE o SET v = 6, fence = 30 WHERE id = 1 RETURNING *;
UPDATE o SET v = 7, fence = 40 WHERE id = 1 RETURNING *;

------------------------------------------------------------------------------
-- strict mode: the same rule with a generation; none is still LF002
------------------------------------------------------------------------------
CREATE TABLE s (id int PRIMARY KEY, v int NOT NULL, fence bigint NOT NULL DEFAULT 0);
SELECT lease_fence.protect('s', strict => true);
BEGIN;
SET LOCAL lease_fence.generation = 40;
INSERT INTO s VALUES (1, 0, 0) RETURNING *;
COMMIT;
BEGIN;
SET LOCAL lease_fence.generation = 45;
UPDATE s SET v = 1, fence = 40 WHERE id = 1 RETURNING *;
UPDATE s SET v = 2, fence = 40 WHERE id = 1 RETURNING *;
COMMIT;
BEGIN;
SET LOCAL lease_fence.generation = 41;
SELECT pg_temp.try($$UPDATE s SET v = 3, fence = 40 WHERE id = 1$$) AS stale;
COMMIT;
SELECT pg_temp.try($$UPDATE s SET v = 3, fence = 45 WHERE id = 1$$) AS no_generation;
SELECT * FROM s ORDER BY id;

------------------------------------------------------------------------------
-- INSERT ... ON CONFLICT DO UPDATE: an ORM's upsert writes the fence it
-- loaded, or the proposed row's (which the fence already set to the
-- current generation)
------------------------------------------------------------------------------
BEGIN;
SET LOCAL lease_fence.generation = 50;
INSERT INTO o VALUES (1, 8, 0) ON CONFLICT (id) DO UPDATE SET v = excluded.v, fence = 0 RETURNING *;
INSERT INTO o VALUES (1, 9, 0) ON CONFLICT (id) DO UPDATE SET v = excluded.v, fence = excluded.fence RETURNING *;
INSERT INTO o VALUES (2, 1, 0) ON CONFLICT (id) DO UPDATE SET v = excluded.v, fence = excluded.fence RETURNING *;
COMMIT;
BEGIN;
SET LOCAL lease_fence.generation = 45;
SELECT pg_temp.try($$INSERT INTO o VALUES (1, 10, 0) ON CONFLICT (id) DO UPDATE SET v = excluded.v, fence = 0$$) AS stale_literal;
SELECT pg_temp.try($$INSERT INTO o VALUES (1, 10, 0) ON CONFLICT (id) DO UPDATE SET v = excluded.v, fence = excluded.fence$$) AS stale_excluded;
COMMIT;
BEGIN;
SET LOCAL lease_fence.generation = 55;
SELECT pg_temp.try($$INSERT INTO o VALUES (1, 10, 0) ON CONFLICT (id) DO UPDATE SET v = excluded.v, fence = 52$$) AS above_stored;
COMMIT;
SELECT * FROM o ORDER BY id;

------------------------------------------------------------------------------
-- MERGE: matched rows updated with the loaded fence, unmatched inserted
------------------------------------------------------------------------------
BEGIN;
SET LOCAL lease_fence.generation = 60;
MERGE INTO o USING (VALUES (1, 11, 0::bigint), (3, 1, 0::bigint)) AS src (id, v, fence) ON o.id = src.id
	WHEN MATCHED THEN UPDATE SET v = src.v, fence = src.fence
	WHEN NOT MATCHED THEN INSERT VALUES (src.id, src.v, src.fence);
COMMIT;
SELECT * FROM o ORDER BY id;
BEGIN;
SET LOCAL lease_fence.generation = 55;
SELECT pg_temp.try($$MERGE INTO o USING (VALUES (1, 12, 0::bigint)) AS src (id, v, fence) ON o.id = src.id
	WHEN MATCHED THEN UPDATE SET v = src.v, fence = src.fence$$) AS stale_merge;
COMMIT;
BEGIN;
SET LOCAL lease_fence.generation = 65;
SELECT pg_temp.try($$MERGE INTO o USING (VALUES (1, 12, 62::bigint)) AS src (id, v, fence) ON o.id = src.id
	WHEN MATCHED THEN UPDATE SET v = src.v, fence = src.fence$$) AS above_stored_merge;
COMMIT;
SELECT * FROM o ORDER BY id;

------------------------------------------------------------------------------
-- error fields: schema, table and column of the fence (driver fields
-- schema_name / table_name / column_name) on every row rejection
------------------------------------------------------------------------------
BEGIN;
SET LOCAL lease_fence.generation = 50;
SELECT * FROM pg_temp.fields($$UPDATE o SET v = 13 WHERE id = 1$$);	-- LF001
SELECT * FROM pg_temp.fields($$DELETE FROM o WHERE id = 1$$);	-- LF001
SELECT * FROM pg_temp.fields($$UPDATE o SET v = 13, fence = 66 WHERE id = 1$$);	-- LF003
SELECT * FROM pg_temp.fields($$UPDATE o SET v = 13, fence = NULL WHERE id = 1$$);	-- LF002
COMMIT;
SELECT * FROM pg_temp.fields($$UPDATE s SET v = 13 WHERE id = 1$$);	-- LF002, strict
SELECT * FROM pg_temp.fields($$TRUNCATE s$$);	-- LF002, TRUNCATE
BEGIN;
SET LOCAL lease_fence.generation = 9000000000000;
SELECT * FROM pg_temp.fields($$UPDATE o SET v = 13 WHERE id = 1$$);	-- LF004
COMMIT;
-- a fence column with a name that needs quoting is named as it is
CREATE TABLE "Odd Table" (id int PRIMARY KEY, "My Fence" bigint NOT NULL DEFAULT 0);
SELECT lease_fence.protect('"Odd Table"', fence_column => 'My Fence');
INSERT INTO "Odd Table" VALUES (1, 40);
BEGIN;
SET LOCAL lease_fence.generation = 30;
SELECT * FROM pg_temp.fields($$UPDATE "Odd Table" SET id = 1$$);
COMMIT;

DROP TABLE o, s, "Odd Table";

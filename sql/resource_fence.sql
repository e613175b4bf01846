-- resource_fence: lease_fence.fence_resource(resource) fences a resource,
-- not rows.  One rule per block: no current generation is LF002; a lower
-- generation than the stored one is LF001 (and a stale holder's INSERT,
-- which no row fence sees, goes nowhere); an equal or higher one becomes the
-- stored one; the fence is part of the transaction; bad input is 22023; the
-- table behind it cannot be written by anyone but fence_resource().
-- Concurrent holders are in test/specs/resource_fence.spec.
-- Assumes only that the extension is installed.

SET client_min_messages = warning;

\set ECHO none
\i sql/include/try.sql

CREATE FUNCTION pg_temp.fences() RETURNS TABLE (resource text, generation bigint)
LANGUAGE sql AS $$
	SELECT resource, generation FROM lease_fence.resource_fences
	WHERE resource LIKE 'rf:%' ORDER BY resource
$$;

CREATE FUNCTION pg_temp.rf_count(outcome text) RETURNS bigint
LANGUAGE sql AS $$
	SELECT count FROM lease_fence.stats WHERE operation = 'resource_fence' AND outcome = $1
$$;

-- The generations below are small numbers: draw them first, so that they
-- were issued (a generation this database never issued is LF004: see
-- unissued.sql).
SELECT max(g) >= 80 AS issued_through_80
FROM (SELECT lease_fence.next_generation() AS g FROM generate_series(1, 80)) s;

SELECT lease_fence.stats_reset();

------------------------------------------------------------------------------
-- no current generation: LF002, nothing stored
------------------------------------------------------------------------------
SELECT pg_temp.try($$SELECT lease_fence.fence_resource('rf:account:1')$$);
BEGIN;
RESET lease_fence.generation;
SELECT pg_temp.try($$SELECT lease_fence.fence_resource('rf:account:1')$$);
COMMIT;
SELECT * FROM pg_temp.fences();

------------------------------------------------------------------------------
-- the first fence stores the current generation and returns it
------------------------------------------------------------------------------
BEGIN;
SET LOCAL lease_fence.generation = 10;
SELECT lease_fence.fence_resource('rf:account:1');
COMMIT;
SELECT * FROM pg_temp.fences();
SELECT updated_at IS NOT NULL AS has_updated_at
FROM lease_fence.resource_fences WHERE resource = 'rf:account:1';

------------------------------------------------------------------------------
-- an equal generation passes; a higher one passes and is stored
------------------------------------------------------------------------------
BEGIN;
SELECT lease_fence.set_generation(10);
SELECT lease_fence.fence_resource('rf:account:1') AS equal_passes;
COMMIT;
BEGIN;
SELECT lease_fence.set_generation(12);
SELECT lease_fence.fence_resource('rf:account:1') AS higher_passes;
COMMIT;
SELECT * FROM pg_temp.fences();

------------------------------------------------------------------------------
-- a lower generation is LF001 with resource, stored and supplied; nothing
-- changes
------------------------------------------------------------------------------
BEGIN;
SET LOCAL lease_fence.generation = 11;
SELECT pg_temp.try($$SELECT lease_fence.fence_resource('rf:account:1')$$);
COMMIT;
SELECT * FROM pg_temp.fences();

------------------------------------------------------------------------------
-- the stale holder's INSERT: the newer holder (12) fenced the resource and
-- wrote nothing yet; the row fence has no row to compare with, the resource
-- fence stops the transaction before it writes
------------------------------------------------------------------------------
CREATE TABLE pg_temp.ledger (account int, entry text, fence bigint NOT NULL DEFAULT 0);
BEGIN;
SET LOCAL lease_fence.generation = 11;
SELECT lease_fence.fence_resource('rf:account:1');
INSERT INTO pg_temp.ledger (account, entry) VALUES (1, 'by the stale holder');
COMMIT;
SELECT count(*) AS stale_rows FROM pg_temp.ledger;

------------------------------------------------------------------------------
-- the fence is part of the transaction: rolled back, or rolled back to a
-- savepoint, it never happened
------------------------------------------------------------------------------
BEGIN;
SET LOCAL lease_fence.generation = 20;
SELECT lease_fence.fence_resource('rf:account:1');
SELECT lease_fence.fence_resource('rf:account:2');
ROLLBACK;
BEGIN;
SET LOCAL lease_fence.generation = 21;
SAVEPOINT s;
SELECT lease_fence.fence_resource('rf:account:1');
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT * FROM pg_temp.fences();

------------------------------------------------------------------------------
-- several fences in one transaction: each sees the ones before
------------------------------------------------------------------------------
BEGIN;
SET LOCAL lease_fence.generation = 30;
SELECT lease_fence.fence_resource('rf:account:2') AS first, lease_fence.fence_resource('rf:account:2') AS again;
SET LOCAL lease_fence.generation = 29;
SELECT pg_temp.try($$SELECT lease_fence.fence_resource('rf:account:2')$$) AS lower_after_own_fence;
ROLLBACK;
BEGIN;
SET LOCAL lease_fence.generation = 30;
SELECT lease_fence.fence_resource(r) FROM (VALUES ('rf:account:2'), ('rf:account:3'), ('rf:account:2')) v(r);
COMMIT;
SELECT * FROM pg_temp.fences();

------------------------------------------------------------------------------
-- many first fences in one transaction: no lock is kept per resource (the
-- row lock is in the row), so they do not fill the lock table
------------------------------------------------------------------------------
BEGIN;
SET LOCAL lease_fence.generation = 35;
SELECT count(lease_fence.fence_resource('rf:bulk:' || i)) AS fenced FROM generate_series(1, 10000) i;
SELECT count(*) AS object_locks_kept FROM pg_locks
WHERE locktype = 'object' AND classid = 'lease_fence.resource_generation'::regclass
  AND pid = pg_backend_pid();
ROLLBACK;

------------------------------------------------------------------------------
-- bad input: 22023, before anything is read or written
------------------------------------------------------------------------------
BEGIN;
SET LOCAL lease_fence.generation = 40;
SELECT pg_temp.try($$SELECT lease_fence.fence_resource(NULL)$$);
SELECT pg_temp.try($$SELECT lease_fence.fence_resource('')$$);
SELECT pg_temp.try($$SELECT lease_fence.fence_resource(repeat('x', 1025))$$);
SELECT length(lease_fence.fence_resource('rf:' || repeat('x', 1021))::text) > 0 AS limit_is_1024_bytes;
ROLLBACK;

------------------------------------------------------------------------------
-- resources are compared byte for byte
------------------------------------------------------------------------------
BEGIN;
SET LOCAL lease_fence.generation = 50;
SELECT lease_fence.fence_resource('rf:Case'), lease_fence.fence_resource('rf:case'),
       lease_fence.fence_resource('rf:ünï');
COMMIT;
SELECT * FROM pg_temp.fences();

------------------------------------------------------------------------------
-- it writes: refused in a read-only transaction
------------------------------------------------------------------------------
BEGIN READ ONLY;
SET LOCAL lease_fence.generation = 60;
SELECT pg_temp.try($$SELECT lease_fence.fence_resource('rf:account:1')$$);
ROLLBACK;

------------------------------------------------------------------------------
-- privileges: fencing is for the roles granted EXECUTE (a role that may
-- fence could block every holder of any resource), reading the fences is
-- everybody's; nobody may write the table behind them, or add what would
-- run code or miss its writes
------------------------------------------------------------------------------
CREATE ROLE regress_lf_rf_app;
SET ROLE regress_lf_rf_app;
BEGIN;
SET LOCAL lease_fence.generation = 70;
SELECT pg_temp.try($$SELECT lease_fence.fence_resource('rf:account:4')$$) AS without_grant;
ROLLBACK;
RESET ROLE;
-- nothing was written for it
SELECT count(*) AS rows_for_account_4 FROM lease_fence.resource_fences WHERE resource = 'rf:account:4';
GRANT EXECUTE ON FUNCTION lease_fence.fence_resource(text) TO regress_lf_rf_app;
SET ROLE regress_lf_rf_app;
BEGIN;
SET LOCAL lease_fence.generation = 70;
SELECT lease_fence.fence_resource('rf:account:4') AS app_fences;
COMMIT;
SELECT * FROM pg_temp.fences();
SELECT pg_temp.try($$UPDATE lease_fence.resource_generation SET generation = 0$$);
SELECT pg_temp.try($$INSERT INTO lease_fence.resource_generation VALUES ('rf:x', 1, now())$$);
SELECT pg_temp.try($$DELETE FROM lease_fence.resource_generation$$);
SELECT pg_temp.try($$TRUNCATE lease_fence.resource_generation$$);
SELECT pg_temp.try($$SELECT * FROM lease_fence.resource_generation$$);
SELECT pg_temp.try($$UPDATE lease_fence.resource_fences SET generation = 0$$);
SELECT pg_temp.try($$SELECT * FROM lease_fence.resource_fences FOR UPDATE$$);
SELECT pg_temp.try($$CREATE TRIGGER t BEFORE UPDATE ON lease_fence.resource_generation FOR EACH ROW EXECUTE FUNCTION lease_fence.fence_trigger()$$);
SELECT pg_temp.try($$CREATE INDEX ON lease_fence.resource_generation (generation)$$);
SELECT pg_temp.try($$CREATE POLICY p ON lease_fence.resource_generation USING (true)$$);
SELECT pg_temp.try($$ALTER TABLE lease_fence.resource_generation DISABLE TRIGGER ALL$$);
RESET ROLE;
SELECT has_function_privilege('public', 'lease_fence.fence_resource(text)', 'EXECUTE') AS public_may_fence,
       has_table_privilege('public', 'lease_fence.resource_fences', 'SELECT') AS public_may_read,
       (SELECT count(*) FROM information_schema.role_table_grants
        WHERE table_schema = 'lease_fence' AND table_name = 'resource_generation'
          AND grantee <> (SELECT tableowner FROM pg_tables
                          WHERE schemaname = 'lease_fence' AND tablename = 'resource_generation')) AS grants_on_table;
REVOKE EXECUTE ON FUNCTION lease_fence.fence_resource(text) FROM regress_lf_rf_app;
DROP ROLE regress_lf_rf_app;

------------------------------------------------------------------------------
-- an index the extension did not create (a superuser's) is refused before
-- anything is written: fence_resource() maintains only the primary key
------------------------------------------------------------------------------
CREATE INDEX rf_extra ON lease_fence.resource_generation (generation);
BEGIN;
SET LOCAL lease_fence.generation = 80;
SELECT pg_temp.try($$SELECT lease_fence.fence_resource('rf:account:1')$$);
ROLLBACK;
DROP INDEX lease_fence.rf_extra;

------------------------------------------------------------------------------
-- counted: accepted fences, LF001 and LF002
------------------------------------------------------------------------------
SELECT pg_temp.rf_count('accepted') AS accepted, pg_temp.rf_count('LF001') AS lf001,
       pg_temp.rf_count('LF002') AS lf002;

------------------------------------------------------------------------------
-- set_generation(generation, resource): the generation and the resource
-- fence in one call, exactly as fence_resource() makes it
------------------------------------------------------------------------------
BEGIN;
SELECT lease_fence.set_generation(50, 'rf:job:1') AS set_and_fenced;
SELECT lease_fence.current_generation();
COMMIT;
SELECT lease_fence.current_generation() IS NULL AS transaction_scoped;
SELECT * FROM pg_temp.fences() WHERE resource = 'rf:job:1';
-- outside a transaction block the resource form still works, in its own
-- one-statement transaction: the fence is made and kept (the generation
-- alone is refused there: sql/generation.sql)
SELECT lease_fence.set_generation(50, 'rf:job:5') AS autocommit_fenced;
SELECT lease_fence.current_generation() IS NULL AS transaction_scoped;
SELECT * FROM pg_temp.fences() WHERE resource = 'rf:job:5';
-- a later call with a lower generation is LF001, and nothing changes
BEGIN;
SELECT pg_temp.try($$SELECT lease_fence.set_generation(45, 'rf:job:1')$$);
COMMIT;
SELECT * FROM pg_temp.fences() WHERE resource = 'rf:job:1';
-- held to the end of the transaction: a stale holder waits for the newer
-- one (test/specs/resource_fence.spec); here, one transaction sees its own
BEGIN;
SELECT lease_fence.set_generation(52, 'rf:job:1');
SELECT lease_fence.set_generation(52, 'rf:job:1') AS again;
SELECT pg_temp.try($$SELECT lease_fence.set_generation(51, 'rf:job:1')$$) AS lower_after_own;
ROLLBACK;
SELECT * FROM pg_temp.fences() WHERE resource = 'rf:job:1';
-- bad input: 22004 / 22023 / LF004, and nothing is fenced
SELECT pg_temp.try($$SELECT lease_fence.set_generation(NULL, 'rf:job:2')$$);
SELECT pg_temp.try($$SELECT lease_fence.set_generation(-1, 'rf:job:2')$$);
SELECT pg_temp.try($$SELECT lease_fence.set_generation(60, '')$$);
SELECT pg_temp.try($$SELECT lease_fence.set_generation(60, repeat('x', 1025))$$);
-- (the detail names the highest generation issued, which other files move)
SELECT split_part(pg_temp.try($$SELECT lease_fence.set_generation(9000000000000, 'rf:job:2')$$), ' | ', 1) AS unissued;
SELECT count(*) AS job_2_fenced FROM lease_fence.resource_fences WHERE resource = 'rf:job:2';

-- the error fields of a resource fence's rejection: the table behind the
-- fences, and the resource as the constraint name
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
SELECT * FROM pg_temp.fields($$SELECT lease_fence.set_generation(45, 'rf:job:1')$$);	-- LF001
SELECT * FROM pg_temp.fields($$SELECT lease_fence.fence_resource('rf:job:1')$$);	-- LF002
SELECT * FROM pg_temp.fields($$SELECT lease_fence.set_generation(9000000000000, 'rf:job:1')$$);	-- LF004

-- fencing needs EXECUTE on fence_resource(), whichever function is called:
-- without it, set_generation() with a resource is 42501 and fences
-- nothing; with the generation alone it is everybody's
CREATE ROLE regress_lf_rf_app2;
SET ROLE regress_lf_rf_app2;
SELECT pg_temp.try($$SELECT lease_fence.set_generation(60, 'rf:job:3')$$) AS without_grant;
BEGIN;
SELECT lease_fence.set_generation(60) AS generation_alone;
COMMIT;
RESET ROLE;
SELECT count(*) AS job_3_fenced FROM lease_fence.resource_fences WHERE resource = 'rf:job:3';
GRANT EXECUTE ON FUNCTION lease_fence.fence_resource(text) TO regress_lf_rf_app2;
SET ROLE regress_lf_rf_app2;
BEGIN;
SELECT lease_fence.set_generation(60, 'rf:job:3') AS with_grant;
COMMIT;
RESET ROLE;
SELECT * FROM pg_temp.fences() WHERE resource = 'rf:job:3';
REVOKE EXECUTE ON FUNCTION lease_fence.fence_resource(text) FROM regress_lf_rf_app2;
DROP ROLE regress_lf_rf_app2;

-- leave nothing behind
DELETE FROM lease_fence.resource_generation WHERE resource LIKE 'rf:%';

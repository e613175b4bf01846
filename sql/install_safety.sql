-- install_safety: lease_fence installs only into a schema that only
-- superusers control, and its code finds its own objects through the
-- extension, never by what the schema's name resolves to.

CREATE FUNCTION pg_temp.try(stmt text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	st text; msg text;
BEGIN
	EXECUTE stmt;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
	RETURN st || ': ' || msg;
END $$;

SELECT current_database() AS db \gset
CREATE ROLE regress_lf_squatter;
GRANT CREATE ON DATABASE :"db" TO regress_lf_squatter;

-- DROP EXTENSION leaves the schema CREATE EXTENSION made: drop it too
DROP EXTENSION lease_fence;
DROP SCHEMA lease_fence;

------------------------------------------------------------------------------
-- A role that may create schemas takes the name before the superuser's
-- CREATE EXTENSION: refused, nothing is installed into its schema
------------------------------------------------------------------------------
SET ROLE regress_lf_squatter;
CREATE SCHEMA lease_fence;
RESET ROLE;
SELECT pg_temp.try($$CREATE EXTENSION lease_fence$$) AS squatted;
SELECT count(*) AS installed FROM pg_extension WHERE extname = 'lease_fence';
SELECT (SELECT count(*) FROM pg_class WHERE relnamespace = 'lease_fence'::regnamespace)
     + (SELECT count(*) FROM pg_proc WHERE pronamespace = 'lease_fence'::regnamespace) AS objects_in_it;
DROP SCHEMA lease_fence;

-- a superuser's schema in which another role may create objects: refused
CREATE SCHEMA lease_fence;
GRANT CREATE ON SCHEMA lease_fence TO regress_lf_squatter;
SELECT pg_temp.try($$CREATE EXTENSION lease_fence$$) AS create_granted;
GRANT CREATE ON SCHEMA lease_fence TO PUBLIC;
REVOKE CREATE ON SCHEMA lease_fence FROM regress_lf_squatter;
SELECT pg_temp.try($$CREATE EXTENSION lease_fence$$) AS create_granted_to_public;
-- ... or that holds an object another role made while it could
GRANT CREATE ON SCHEMA lease_fence TO regress_lf_squatter;
SET ROLE regress_lf_squatter;
CREATE FUNCTION lease_fence.protect(tbl regclass, fence_column name, strict boolean, mode text, extra int)
RETURNS void LANGUAGE sql AS 'SELECT';
RESET ROLE;
REVOKE CREATE ON SCHEMA lease_fence FROM PUBLIC;
REVOKE CREATE ON SCHEMA lease_fence FROM regress_lf_squatter;
SELECT pg_temp.try($$CREATE EXTENSION lease_fence$$) AS foreign_object;
DROP FUNCTION lease_fence.protect(regclass, name, boolean, text, integer);

-- a superuser's empty schema (like the one DROP EXTENSION leaves) will do
CREATE EXTENSION lease_fence;
SELECT extversion, extnamespace::regnamespace FROM pg_extension WHERE extname = 'lease_fence';

------------------------------------------------------------------------------
-- The C code finds its sequence and tables through the extension.  Here a
-- superuser has renamed the extension's schema, and another role has put a
-- look-alike under the old name: generations, resource fences and the
-- unissued check still use the extension's own objects.
------------------------------------------------------------------------------
SELECT max(g) AS before_rename FROM (SELECT lease_fence.next_generation() AS g FROM generate_series(1, 3)) s \gset
ALTER SCHEMA lease_fence RENAME TO lf_real;
CREATE SCHEMA lease_fence AUTHORIZATION regress_lf_squatter;
SET ROLE regress_lf_squatter;
CREATE SEQUENCE lease_fence.generation_seq AS bigint MINVALUE 1;
CREATE TABLE lease_fence.resource_generation (
	resource text COLLATE "C" PRIMARY KEY, generation bigint NOT NULL, updated_at timestamptz NOT NULL);
CREATE TABLE lease_fence.protected (relid regclass PRIMARY KEY, fence_column name, strict boolean, tokens text);
CREATE SEQUENCE lease_fence.heal_budget_seq AS bigint MINVALUE 0 START 5;
RESET ROLE;
-- a new session, with nothing cached
\c
SELECT lf_real.next_generation() = :before_rename + 1 AS generations_continue;
SELECT last_value, is_called FROM lease_fence.generation_seq;
-- advance_generation() renews the extension's heal budget, not the look-alike's
SELECT lf_real.advance_generation(0) = :before_rename + 1 AS advanced_nothing;
SELECT last_value, is_called FROM lease_fence.heal_budget_seq;
SELECT last_value, is_called FROM lf_real.heal_budget_seq;
BEGIN;
SELECT lf_real.set_generation(:before_rename + 1) IS NOT NULL AS set;
SELECT lf_real.fence_resource('is:1') = :before_rename + 1 AS fenced;
COMMIT;
SELECT count(*) AS lookalike_fences FROM lease_fence.resource_generation;
SELECT generation = :before_rename + 1 AS own_fence FROM lf_real.resource_fences WHERE resource = 'is:1';
-- the unissued check reads the extension's sequence (the look-alike's says 1)
CREATE TABLE is_t (id int, fence bigint NOT NULL DEFAULT 0);
CREATE TRIGGER zz_lease_fence BEFORE INSERT OR UPDATE OR DELETE ON is_t
	FOR EACH ROW EXECUTE FUNCTION lf_real.fence_trigger();
BEGIN;
SELECT lf_real.set_generation(:before_rename + 1) IS NOT NULL AS set;
INSERT INTO is_t VALUES (1) RETURNING fence = :before_rename + 1 AS fenced_at_issued;
COMMIT;
DROP TABLE is_t;

-- protect() and unprotect() refuse to run while "lease_fence" names another
-- schema: their bodies name the extension's objects by it
CREATE TEMP TABLE is_p (id int);
SELECT lf_real.protect('is_p');
SELECT lf_real.unprotect('is_p');
SELECT count(*) AS lookalike_rows FROM lease_fence.protected;

DROP SCHEMA lease_fence CASCADE;
ALTER SCHEMA lf_real RENAME TO lease_fence;
DELETE FROM lease_fence.resource_generation WHERE resource = 'is:1';

------------------------------------------------------------------------------
-- An object of the right name in the extension's schema that is not a
-- member of the extension is not used
------------------------------------------------------------------------------
ALTER EXTENSION lease_fence DROP SEQUENCE lease_fence.generation_seq;
\c
SELECT lease_fence.next_generation();
ALTER EXTENSION lease_fence ADD SEQUENCE lease_fence.generation_seq;
\c
SELECT lease_fence.next_generation() > 0 AS draws_again;

-- an index on the table of adoptions, which adopt_generations() would not
-- maintain: refused (55000) before anything moves
CREATE INDEX adoption_extra ON lease_fence.generation_adoption (refused_through);
SELECT lease_fence.highest_issued() AS issued_before \gset
SELECT lease_fence.adopt_generations();
SELECT lease_fence.highest_issued() = :issued_before AS nothing_moved,
       (SELECT count(*) FROM lease_fence.generation_adoption) AS adoptions;
DROP INDEX lease_fence.adoption_extra;

REVOKE CREATE ON DATABASE :"db" FROM regress_lf_squatter;
DROP ROLE regress_lf_squatter;
-- (left installed afresh: ALTER EXTENSION DROP took the sequence out of
-- what pg_dump dumps as configuration)
DROP EXTENSION lease_fence;
CREATE EXTENSION lease_fence;

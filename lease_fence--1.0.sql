/* lease_fence--1.0.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION lease_fence" to load this file. \quit

-- Every object below is schema-qualified with @extschema@ (always lease_fence:
-- the extension is not relocatable) or pg_catalog, and every SQL-language
-- function pins its search_path, so nothing here resolves through a schema a
-- less privileged role could write to.

------------------------------------------------------------------------------
-- Generations
------------------------------------------------------------------------------

-- The one generation space of this database.  Only next_generation() draws
-- from it: it flushes the WAL record that covers the value before it returns
-- it; a plain nextval() would not.
CREATE SEQUENCE @extschema@.generation_seq AS bigint MINVALUE 1 NO CYCLE;
REVOKE ALL ON SEQUENCE @extschema@.generation_seq FROM PUBLIC;

CREATE FUNCTION @extschema@.next_generation()
RETURNS bigint
AS 'MODULE_PATHNAME', 'lf_next_generation'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.next_generation() IS
'a durable generation: greater than every generation this database returned before, also across a crash';

-- next_generation() draws from the sequence without a privilege check (as an
-- identity column does): no role needs, or gets, rights on the sequence itself,
-- so nobody can setval() it backwards or draw an unflushed value from it.

CREATE FUNCTION @extschema@.set_generation(generation bigint, is_local boolean DEFAULT true)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lf_set_generation'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.set_generation(bigint, boolean) IS
'set the current generation that fenced writes carry (transaction-scoped unless is_local is false)';

CREATE FUNCTION @extschema@.current_generation()
RETURNS bigint
AS 'MODULE_PATHNAME', 'lf_current_generation'
LANGUAGE C STABLE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.current_generation() IS
'the current generation of this session or transaction, or NULL';

------------------------------------------------------------------------------
-- Fence
------------------------------------------------------------------------------

CREATE FUNCTION @extschema@.fence_trigger()
RETURNS trigger
AS 'MODULE_PATHNAME', 'lf_fence_trigger'
LANGUAGE C;

COMMENT ON FUNCTION @extschema@.fence_trigger() IS
'BEFORE INSERT OR UPDATE OR DELETE row trigger: rejects writes whose generation is lower than the stored fence; arguments: fence column (default fence), lenient|strict';

CREATE FUNCTION @extschema@.truncate_guard()
RETURNS trigger
AS 'MODULE_PATHNAME', 'lf_truncate_guard'
LANGUAGE C;

COMMENT ON FUNCTION @extschema@.truncate_guard() IS
'BEFORE TRUNCATE statement trigger: refuses TRUNCATE without a current generation, or with one lower than the highest stored fence';

-- What protect() installed, so that protected_tables can report a trigger
-- that has since been dropped.  Everybody may read it (pg_trigger is public
-- too); row level security lets a role add, change or remove only rows for
-- tables it owns, so protect() and unprotect() need no SECURITY DEFINER.
CREATE TABLE @extschema@.protected (
	relid regclass PRIMARY KEY,
	fence_column name NOT NULL,
	strict boolean NOT NULL
);

ALTER TABLE @extschema@.protected ENABLE ROW LEVEL SECURITY;

CREATE POLICY protected_read ON @extschema@.protected
	FOR SELECT USING (true);

CREATE POLICY protected_write_by_owner ON @extschema@.protected
	USING (pg_catalog.pg_has_role(
		(SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = relid), 'USAGE'))
	WITH CHECK (pg_catalog.pg_has_role(
		(SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = relid), 'USAGE'));

GRANT SELECT, INSERT, UPDATE, DELETE ON @extschema@.protected TO PUBLIC;

SELECT pg_catalog.pg_extension_config_dump('@extschema@.protected', '');

-- protect(): add the fence column if missing, then the fence trigger and the
-- TRUNCATE guard, both ENABLE ALWAYS.  Idempotent: calling it again (for
-- example after new partitions were attached) repairs what is missing and
-- switches the mode if strict changed.
CREATE FUNCTION @extschema@.protect(tbl regclass, fence_column name DEFAULT 'fence', strict boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	rel record;
	att record;
	mode text := CASE WHEN strict THEN 'strict' ELSE 'lenient' END;
	trg record;
	part regclass;
	later text;
	nul bytea := pg_catalog.decode('00', 'hex');
	fence_args bytea;
	guard_args bytea;
BEGIN
	IF tbl IS NULL OR fence_column IS NULL OR strict IS NULL THEN
		RAISE EXCEPTION 'lease_fence.protect: arguments must not be NULL'
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	-- pg_trigger.tgargs holds each argument followed by a NUL byte
	guard_args := pg_catalog.convert_to(fence_column::text, pg_catalog.getdatabaseencoding()) || nul;
	fence_args := guard_args || pg_catalog.convert_to(mode, pg_catalog.getdatabaseencoding()) || nul;

	SELECT c.relkind, c.relname, n.nspname INTO rel
	FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
	WHERE c.oid = tbl;

	IF rel.relkind = 'f' THEN
		RAISE EXCEPTION 'lease_fence.protect: % is a foreign table', tbl
			USING ERRCODE = 'wrong_object_type',
			      DETAIL = 'A local trigger cannot check and write the remote row in one atomic step.',
			      HINT = 'Protect the table on the server that stores it.';
	ELSIF rel.relkind NOT IN ('r', 'p') THEN
		RAISE EXCEPTION 'lease_fence.protect: % is not a table', tbl
			USING ERRCODE = 'wrong_object_type',
			      DETAIL = 'Only ordinary and partitioned tables can be fenced.';
	END IF;

	IF NOT pg_catalog.pg_has_role((SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = tbl), 'USAGE') THEN
		RAISE EXCEPTION 'must be owner of table %', tbl USING ERRCODE = 'insufficient_privilege';
	END IF;

	SELECT a.attnum, a.atttypid, a.attgenerated INTO att
	FROM pg_catalog.pg_attribute a
	WHERE a.attrelid = tbl AND a.attname = fence_column AND NOT a.attisdropped;

	IF NOT FOUND THEN
		EXECUTE pg_catalog.format('ALTER TABLE %s ADD COLUMN %I bigint NOT NULL DEFAULT 0',
		                          tbl, fence_column);
	ELSIF att.attnum <= 0 THEN
		RAISE EXCEPTION 'lease_fence.protect: column "%" of table % is a system column', fence_column, tbl
			USING ERRCODE = 'invalid_column_reference';
	ELSIF att.attgenerated <> '' THEN
		RAISE EXCEPTION 'lease_fence.protect: column "%" of table % is a generated column', fence_column, tbl
			USING ERRCODE = 'invalid_column_definition',
			      DETAIL = 'A generated column is computed after BEFORE triggers run, so it cannot carry a generation.';
	ELSIF att.atttypid <> 'pg_catalog.int8'::pg_catalog.regtype THEN
		RAISE EXCEPTION 'lease_fence.protect: column "%" of table % must be of type bigint', fence_column, tbl
			USING ERRCODE = 'datatype_mismatch',
			      DETAIL = pg_catalog.format('It is of type %s.', att.atttypid::pg_catalog.regtype);
	END IF;

	-- the fence trigger: recreate it when it is not exactly the one we want
	-- (other arguments, other events, a WHEN clause, another function)
	IF EXISTS (SELECT FROM pg_catalog.pg_trigger t
	           WHERE t.tgrelid = tbl AND t.tgname = 'zz_lease_fence'
	             AND (t.tgfoid <> '@extschema@.fence_trigger()'::pg_catalog.regprocedure
	                  OR t.tgtype <> 31     -- ROW | BEFORE | INSERT | DELETE | UPDATE
	                  OR t.tgqual IS NOT NULL
	                  OR t.tgattr::text <> ''
	                  OR t.tgargs <> fence_args)) THEN
		EXECUTE pg_catalog.format('DROP TRIGGER zz_lease_fence ON %s', tbl);
	END IF;
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_trigger t
	               WHERE t.tgrelid = tbl AND t.tgname = 'zz_lease_fence') THEN
		EXECUTE pg_catalog.format(
			'CREATE TRIGGER zz_lease_fence BEFORE INSERT OR UPDATE OR DELETE ON %s '
			'FOR EACH ROW EXECUTE FUNCTION @extschema@.fence_trigger(%L, %L)',
			tbl, fence_column, mode);
	END IF;
	EXECUTE pg_catalog.format('ALTER TABLE %s ENABLE ALWAYS TRIGGER zz_lease_fence', tbl);

	-- the TRUNCATE guard: statement triggers are not cloned to partitions,
	-- and TRUNCATE can name a partition directly, so every member of the
	-- hierarchy gets one
	FOR part IN
		SELECT p.relid FROM pg_catalog.pg_partition_tree(tbl) p
		UNION
		SELECT tbl
	LOOP
		IF EXISTS (SELECT FROM pg_catalog.pg_trigger t
		           WHERE t.tgrelid = part AND t.tgname = 'zz_lease_fence_truncate'
		             AND (t.tgfoid <> '@extschema@.truncate_guard()'::pg_catalog.regprocedure
		                  OR t.tgtype <> 34     -- STATEMENT | BEFORE | TRUNCATE
		                  OR t.tgargs <> guard_args)) THEN
			EXECUTE pg_catalog.format('DROP TRIGGER zz_lease_fence_truncate ON %s', part);
		END IF;
		IF NOT EXISTS (SELECT FROM pg_catalog.pg_trigger t
		               WHERE t.tgrelid = part AND t.tgname = 'zz_lease_fence_truncate') THEN
			EXECUTE pg_catalog.format(
				'CREATE TRIGGER zz_lease_fence_truncate BEFORE TRUNCATE ON %s '
				'FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.truncate_guard(%L)',
				part, fence_column);
		END IF;
		EXECUTE pg_catalog.format('ALTER TABLE %s ENABLE ALWAYS TRIGGER zz_lease_fence_truncate', part);
	END LOOP;

	INSERT INTO @extschema@.protected AS p (relid, fence_column, strict)
	VALUES (tbl, fence_column, strict)
	ON CONFLICT (relid) DO UPDATE
		SET fence_column = excluded.fence_column, strict = excluded.strict;

	-- BEFORE row triggers fire in name order: one that sorts after ours could
	-- change NEW after the check
	SELECT pg_catalog.string_agg(pg_catalog.quote_ident(t.tgname::text), ', ' ORDER BY t.tgname) INTO later
	FROM pg_catalog.pg_trigger t
	WHERE t.tgrelid = tbl AND NOT t.tgisinternal
	  AND (t.tgtype & 3) = 3          -- ROW and BEFORE
	  AND t.tgname COLLATE "C" > 'zz_lease_fence';
	IF later IS NOT NULL THEN
		RAISE WARNING 'lease_fence.protect: BEFORE row trigger % on table % fires after the fence trigger', later, tbl
			USING DETAIL = 'BEFORE row triggers fire in name order; a later one can change the row after it was checked.',
			      HINT = 'Rename it so that it sorts before "zz_lease_fence".';
	END IF;
END;
$$;

COMMENT ON FUNCTION @extschema@.protect(regclass, name, boolean) IS
'fence a table: add the bigint fence column if missing, the fence trigger and the TRUNCATE guard (ENABLE ALWAYS); idempotent';

CREATE FUNCTION @extschema@.unprotect(tbl regclass)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	part regclass;
BEGIN
	IF tbl IS NULL THEN
		RAISE EXCEPTION 'lease_fence.unprotect: table must not be NULL'
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	-- DROP TRIGGER checks ownership even when there is nothing to drop
	IF NOT pg_catalog.pg_has_role((SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = tbl), 'USAGE') THEN
		RAISE EXCEPTION 'must be owner of table %', tbl USING ERRCODE = 'insufficient_privilege';
	END IF;
	FOR part IN
		SELECT p.relid FROM pg_catalog.pg_partition_tree(tbl) p
		UNION
		SELECT tbl
	LOOP
		IF EXISTS (SELECT FROM pg_catalog.pg_trigger t
		           WHERE t.tgrelid = part AND t.tgname = 'zz_lease_fence' AND t.tgparentid = 0) THEN
			EXECUTE pg_catalog.format('DROP TRIGGER zz_lease_fence ON %s', part);
		END IF;
		IF EXISTS (SELECT FROM pg_catalog.pg_trigger t
		           WHERE t.tgrelid = part AND t.tgname = 'zz_lease_fence_truncate') THEN
			EXECUTE pg_catalog.format('DROP TRIGGER zz_lease_fence_truncate ON %s', part);
		END IF;
	END LOOP;
	DELETE FROM @extschema@.protected p WHERE p.relid = tbl;
END;
$$;

COMMENT ON FUNCTION @extschema@.unprotect(regclass) IS
'remove the fence trigger and TRUNCATE guard that protect() added; the fence column stays';

-- One row per protected table.  ok is false when a fence trigger or TRUNCATE
-- guard anywhere in the table's partition tree is missing or not ENABLE
-- ALWAYS, or when another BEFORE row trigger fires after the fence trigger;
-- problems says which, one line per member of the tree.
CREATE VIEW @extschema@.protected_tables AS
SELECT p.relid AS table_name,
	p.fence_column,
	p.strict,
	CASE t.tgenabled WHEN 'A' THEN 'always' WHEN 'O' THEN 'origin' WHEN 'R' THEN 'replica'
	                 WHEN 'D' THEN 'disabled' ELSE 'missing' END AS trigger_state,
	pg_catalog.cardinality(pr.problems) = 0 AS ok,
	pr.problems
FROM @extschema@.protected p
JOIN pg_catalog.pg_class c ON c.oid = p.relid
LEFT JOIN pg_catalog.pg_trigger t ON t.tgrelid = p.relid AND t.tgname = 'zz_lease_fence'
CROSS JOIN LATERAL (
	SELECT COALESCE(pg_catalog.array_agg(x.problem ORDER BY x.problem), '{}') AS problems
	FROM pg_catalog.pg_partition_tree(p.relid) m
	CROSS JOIN LATERAL (
		SELECT (SELECT g.tgenabled FROM pg_catalog.pg_trigger g
		        WHERE g.tgrelid = m.relid AND g.tgname = 'zz_lease_fence') AS fence_enabled,
		       (SELECT g.tgenabled FROM pg_catalog.pg_trigger g
		        WHERE g.tgrelid = m.relid AND g.tgname = 'zz_lease_fence_truncate') AS guard_enabled,
		       (SELECT pg_catalog.string_agg(pg_catalog.quote_ident(g.tgname::text), ', ' ORDER BY g.tgname)
		        FROM pg_catalog.pg_trigger g
		        WHERE g.tgrelid = m.relid AND NOT g.tgisinternal AND (g.tgtype & 3) = 3
		          AND g.tgname COLLATE "C" > 'zz_lease_fence') AS later_triggers
	) st
	CROSS JOIN LATERAL (VALUES
		(CASE WHEN st.fence_enabled IS NULL THEN pg_catalog.format('%s: fence trigger missing', m.relid)
		      WHEN st.fence_enabled <> 'A' THEN pg_catalog.format('%s: fence trigger %s', m.relid,
		           CASE st.fence_enabled WHEN 'D' THEN 'disabled' WHEN 'O' THEN 'enabled only for origin'
		                                 ELSE 'enabled only for replica' END) END),
		(CASE WHEN st.guard_enabled IS NULL THEN pg_catalog.format('%s: truncate guard missing', m.relid)
		      WHEN st.guard_enabled <> 'A' THEN pg_catalog.format('%s: truncate guard %s', m.relid,
		           CASE st.guard_enabled WHEN 'D' THEN 'disabled' WHEN 'O' THEN 'enabled only for origin'
		                                 ELSE 'enabled only for replica' END) END),
		(CASE WHEN st.later_triggers IS NOT NULL
		      THEN pg_catalog.format('%s: BEFORE row trigger %s fires after the fence trigger', m.relid, st.later_triggers) END)
	) x(problem)
	WHERE x.problem IS NOT NULL
) pr;

COMMENT ON VIEW @extschema@.protected_tables IS
'protected tables, with ok = false and the reason when a fence trigger or TRUNCATE guard is missing, disabled, or not last';

GRANT SELECT ON @extschema@.protected_tables TO PUBLIC;

GRANT USAGE ON SCHEMA @extschema@ TO PUBLIC;

/* lease_fence--1.2--1.3.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION lease_fence UPDATE TO '1.3'" to load this file. \quit

------------------------------------------------------------------------------
-- The schema must be one only superusers control
------------------------------------------------------------------------------

-- CREATE EXTENSION installs into an existing schema called lease_fence as
-- readily as into one it creates.  A role that owned such a schema, or may
-- create objects in it, could rename it away after the install, put a
-- look-alike with functions of its own in its place, and wait for a
-- superuser to call one.  So the extension's schema must be owned by a
-- superuser (as the schema CREATE EXTENSION makes is: only a superuser can
-- create this extension), no other role may create objects in it, and every
-- object in it must be owned by a superuser.  This runs on CREATE EXTENSION
-- (after the older scripts, in the same transaction) and on the update from
-- 1.2: an installation in a schema that fails it is refused and must be
-- made again (docs/security.md, "Installing where the database owner is not trusted").
DO $$
DECLARE
	ext pg_catalog.text := 'lease_fence';
	nsp pg_catalog.oid;
	owner_super boolean;
	bad pg_catalog.text;
BEGIN
	SELECT e.extnamespace INTO nsp FROM pg_catalog.pg_extension e WHERE e.extname = ext;
	SELECT r.rolsuper INTO owner_super
	FROM pg_catalog.pg_namespace n JOIN pg_catalog.pg_roles r ON r.oid = n.nspowner
	WHERE n.oid = nsp;
	IF NOT owner_super THEN
		RAISE EXCEPTION 'schema % is owned by role %, which is not a superuser', nsp::pg_catalog.regnamespace,
			(SELECT n.nspowner::pg_catalog.regrole FROM pg_catalog.pg_namespace n WHERE n.oid = nsp)
			USING ERRCODE = 'insufficient_privilege',
			      DETAIL = 'lease_fence is installed only into a schema that only superusers control: its owner could replace what the extension puts there.',
			      HINT = 'Drop that schema (or, once its contents are checked, make a superuser its owner) and create the extension again.';
	END IF;
	SELECT pg_catalog.string_agg(COALESCE(pg_catalog.quote_ident(r.rolname), 'PUBLIC'), ', ') INTO bad
	FROM pg_catalog.pg_namespace n
	CROSS JOIN LATERAL pg_catalog.aclexplode(n.nspacl) a
	LEFT JOIN pg_catalog.pg_roles r ON r.oid = a.grantee
	WHERE n.oid = nsp AND a.privilege_type = 'CREATE' AND NOT COALESCE(r.rolsuper, false);
	IF bad IS NOT NULL THEN
		RAISE EXCEPTION 'schema % grants CREATE to %', nsp::pg_catalog.regnamespace, bad
			USING ERRCODE = 'insufficient_privilege',
			      DETAIL = 'A role that may create objects in the extension''s schema could put objects there that the extension''s functions would find.',
			      HINT = 'REVOKE CREATE on that schema, then try again.';
	END IF;
	SELECT pg_catalog.string_agg(x.what, ', ') INTO bad
	FROM (SELECT pg_catalog.format('%s (owned by %s)', c.oid::pg_catalog.regclass, c.relowner::pg_catalog.regrole) AS what
	      FROM pg_catalog.pg_class c JOIN pg_catalog.pg_roles r ON r.oid = c.relowner
	      WHERE c.relnamespace = nsp AND NOT r.rolsuper
	      UNION ALL
	      SELECT pg_catalog.format('%s (owned by %s)', p.oid::pg_catalog.regprocedure, p.proowner::pg_catalog.regrole)
	      FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_roles r ON r.oid = p.proowner
	      WHERE p.pronamespace = nsp AND NOT r.rolsuper
	      UNION ALL
	      SELECT pg_catalog.format('%s (owned by %s)', t.oid::pg_catalog.regtype, t.typowner::pg_catalog.regrole)
	      FROM pg_catalog.pg_type t JOIN pg_catalog.pg_roles r ON r.oid = t.typowner
	      WHERE t.typnamespace = nsp AND NOT r.rolsuper) x;
	IF bad IS NOT NULL THEN
		RAISE EXCEPTION 'schema % holds objects that a role other than a superuser owns: %', nsp::pg_catalog.regnamespace, bad
			USING ERRCODE = 'insufficient_privilege',
			      HINT = 'Drop them, then try again.';
	END IF;
END
$$;

------------------------------------------------------------------------------
-- Resource fences: granted, not PUBLIC's
------------------------------------------------------------------------------

-- A role that may call fence_resource() can fence any resource with any
-- issued generation: that blocks every holder of a lower one (LF001), and
-- each new resource adds a row nobody but a superuser can remove.  Like
-- acquire, it is for the roles the DBA grants it to (docs/security.md, "Privileges").
--
-- The function is made again rather than REVOKEd: a REVOKE here would
-- record the function's whole ACL, with any GRANT a user made before the
-- update, as the extension's initial privileges, which pg_dump leaves out
-- (and which, from PostgreSQL 17 on, keep that grantee from being dropped).
-- So grants on it go with the old function, as acquire's did in 1.2: the
-- roles that fence are granted EXECUTE again in the update's transaction.
DROP FUNCTION @extschema@.fence_resource(text);

CREATE FUNCTION @extschema@.fence_resource(resource text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lf_fence_resource'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.fence_resource(text) IS
'fence a resource in this transaction: LF001 if a higher generation fenced it, else store the current generation and hold the resource to the end of the transaction';

REVOKE EXECUTE ON FUNCTION @extschema@.fence_resource(text) FROM PUBLIC;

------------------------------------------------------------------------------
-- Advancing the generations by hand
------------------------------------------------------------------------------

-- A stale answer moves the generations past what Redis holds by itself only
-- within a margin above what this database issued (docs/guides/failover-and-generations.md, "Generations");
-- beyond it, after a restore from an old backup, a superuser decides.
CREATE FUNCTION @extschema@.advance_generation(past bigint)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lf_advance_generation'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.advance_generation(bigint) IS
'superuser only: make every later generation greater than past (never moves backwards); returns the highest issued generation';

REVOKE EXECUTE ON FUNCTION @extschema@.advance_generation(bigint) FROM PUBLIC;

-- The heal budget: how far stale answers have moved the generations, in
-- total, since the install or a superuser's last advance_generation().  A
-- heal is bounded per step, but steps repeat: whoever may write Redis could
-- set a :gen key just above what this database issued before every acquire
-- and walk the sequence to the end of its epoch.  So all heals together may
-- move it at most 2^24 (the MAXVALUE) until a superuser renews the budget
-- (docs/guides/failover-and-generations.md, "How far a stale answer moves the generations").
--
-- A sequence, not a table: like generation_seq it is not transactional, so
-- a heal whose transaction aborts keeps both the move and its cost (a table
-- row would roll back while the sequence stays moved, and the budget would
-- be spent for free); it is WAL-logged with the same flush as the heal's
-- setval, so a crash never loses a cost whose move survived.  Only the C
-- code writes it (setval as its owner, under the lock that serialises
-- heals); nobody else has privileges on it.  Its value is dumped with
-- generation_seq's, so the budget travels with the generations it guards.
CREATE SEQUENCE @extschema@.heal_budget_seq AS bigint MINVALUE 0 MAXVALUE 16777216 START 0 NO CYCLE;
REVOKE ALL ON SEQUENCE @extschema@.heal_budget_seq FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.heal_budget_seq', '');

------------------------------------------------------------------------------
-- protect() and unprotect() call the extension's own objects
------------------------------------------------------------------------------

-- Their bodies name the extension's objects as lease_fence.<name>, which is
-- resolved when they run.  Each first checks that the schema of that name
-- is the extension's, so that a look-alike put in its place (after a
-- superuser renamed the real one) is never what a caller runs.  protect()
-- also warns about DO INSTEAD rules, which the fence never sees.
CREATE OR REPLACE FUNCTION @extschema@.protect(tbl regclass, fence_column name DEFAULT 'fence', strict boolean DEFAULT false,
                                               tokens text DEFAULT 'issued')
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	rel record;
	att record;
	mode text := CASE WHEN strict THEN 'strict' ELSE 'lenient' END;
	part regclass;
	later text;
	nul bytea := pg_catalog.decode('00', 'hex');
	fence_args bytea;
	guard_args bytea;
BEGIN
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
	               WHERE e.extname = 'lease_fence' AND n.nspname = '@extschema@') THEN
		RAISE EXCEPTION 'lease_fence.protect: schema "%" is not the schema of extension lease_fence', '@extschema@'
			USING ERRCODE = 'object_not_in_prerequisite_state',
			      HINT = 'Call protect() in the extension''s schema, or give that schema its name back.';
	END IF;
	IF tbl IS NULL OR fence_column IS NULL OR strict IS NULL OR tokens IS NULL THEN
		RAISE EXCEPTION 'lease_fence.protect: arguments must not be NULL'
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF tokens NOT IN ('issued', 'external') THEN
		RAISE EXCEPTION 'lease_fence.protect: unknown tokens "%"', tokens
			USING ERRCODE = 'invalid_parameter_value',
			      HINT = 'tokens is ''issued'' (generations of this database, the default) or ''external''.';
	END IF;
	-- pg_trigger.tgargs holds each argument followed by a NUL byte
	guard_args := pg_catalog.convert_to(fence_column::text, pg_catalog.getdatabaseencoding()) || nul
	              || pg_catalog.convert_to(tokens, pg_catalog.getdatabaseencoding()) || nul;
	fence_args := pg_catalog.convert_to(fence_column::text, pg_catalog.getdatabaseencoding()) || nul
	              || pg_catalog.convert_to(mode, pg_catalog.getdatabaseencoding()) || nul
	              || pg_catalog.convert_to(tokens, pg_catalog.getdatabaseencoding()) || nul;

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
			'FOR EACH ROW EXECUTE FUNCTION @extschema@.fence_trigger(%L, %L, %L)',
			tbl, fence_column, mode, tokens);
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
				'FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.truncate_guard(%L, %L)',
				part, fence_column, tokens);
		END IF;
		EXECUTE pg_catalog.format('ALTER TABLE %s ENABLE ALWAYS TRIGGER zz_lease_fence_truncate', part);
	END LOOP;

	INSERT INTO @extschema@.protected AS p (relid, fence_column, strict, tokens)
	VALUES (tbl, fence_column, strict, tokens)
	ON CONFLICT (relid) DO UPDATE
		SET fence_column = excluded.fence_column, strict = excluded.strict, tokens = excluded.tokens;

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

	-- a DO INSTEAD rule replaces a write by other commands: no row of this
	-- table is written, so the fence trigger never fires for it
	SELECT pg_catalog.string_agg(pg_catalog.quote_ident(r.rulename::text), ', ' ORDER BY r.rulename) INTO later
	FROM pg_catalog.pg_rewrite r
	WHERE r.ev_class IN (SELECT p.relid FROM pg_catalog.pg_partition_tree(tbl) p UNION SELECT tbl)
	  AND r.is_instead AND r.ev_type IN ('2', '3', '4');
	IF later IS NOT NULL THEN
		RAISE WARNING 'lease_fence.protect: DO INSTEAD rule % on table % bypasses the fence', later, tbl
			USING DETAIL = 'A DO INSTEAD rule replaces the write, so the fence trigger never sees it.',
			      HINT = 'Drop the rule, or make its commands fenced writes themselves.';
	END IF;
END;
$$;

CREATE OR REPLACE FUNCTION @extschema@.unprotect(tbl regclass)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	part regclass;
BEGIN
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
	               WHERE e.extname = 'lease_fence' AND n.nspname = '@extschema@') THEN
		RAISE EXCEPTION 'lease_fence.unprotect: schema "%" is not the schema of extension lease_fence', '@extschema@'
			USING ERRCODE = 'object_not_in_prerequisite_state',
			      HINT = 'Call unprotect() in the extension''s schema, or give that schema its name back.';
	END IF;
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

------------------------------------------------------------------------------
-- protected_tables: what the triggers say, not what the bookkeeping says
------------------------------------------------------------------------------

-- The arguments of a trigger, decoded from pg_trigger.tgargs (each argument
-- followed by a NUL byte), as the trigger manager hands them to the
-- trigger function.
CREATE FUNCTION @extschema@.trigger_arguments(tgargs bytea)
RETURNS text[]
LANGUAGE sql STABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT COALESCE(pg_catalog.array_agg(
	           pg_catalog.convert_from(pg_catalog.substr(tgargs, z.s, z.e - z.s),
	                                   pg_catalog.getdatabaseencoding())
	           ORDER BY z.e), '{}')
	FROM (SELECT n.e, COALESCE(pg_catalog.lag(n.e) OVER (ORDER BY n.e), 0) + 1 AS s
	      FROM (SELECT i + 1 AS e
	            FROM pg_catalog.generate_series(0, pg_catalog.length(tgargs) - 1) i
	            WHERE pg_catalog.get_byte(tgargs, i) = 0) n) z
$$;

COMMENT ON FUNCTION @extschema@.trigger_arguments(bytea) IS
'the arguments of a trigger, decoded from pg_trigger.tgargs (used by protected_tables)';

-- The table lease_fence.protected is what protect() recorded, and each
-- table's owner may change its rows: the view shows what the triggers
-- themselves say, read as the trigger functions read their arguments.
DROP VIEW @extschema@.protected_tables;

-- One row per protected table: the fence column, mode and tokens of its fence
-- trigger (NULL when there is no such trigger of lease_fence's, or its
-- arguments are not ones the trigger accepts).  ok is false when, anywhere in
-- the table's partition tree, a fence trigger or TRUNCATE guard is missing,
-- not ENABLE ALWAYS, not lease_fence's own (another function, other events,
-- a column list or a WHEN clause), or differs from what protect() recorded;
-- when another BEFORE row trigger fires after the fence trigger; or when a
-- DO INSTEAD rule rewrites writes.  problems says which, one line each.
CREATE VIEW @extschema@.protected_tables AS
SELECT p.relid AS table_name,
	f.fence_column,
	f.strict,
	f.tokens,
	CASE t.tgenabled WHEN 'A' THEN 'always' WHEN 'O' THEN 'origin' WHEN 'R' THEN 'replica'
	                 WHEN 'D' THEN 'disabled' ELSE 'missing' END AS trigger_state,
	pg_catalog.cardinality(pr.problems) = 0 AS ok,
	pr.problems
FROM @extschema@.protected p
JOIN pg_catalog.pg_class c ON c.oid = p.relid
LEFT JOIN pg_catalog.pg_trigger t ON t.tgrelid = p.relid AND t.tgname = 'zz_lease_fence'
CROSS JOIN LATERAL (
	SELECT CASE WHEN t.tgnargs >= 1 THEN a.args[1] ELSE 'fence' END::pg_catalog.name AS fence_column,
	       CASE WHEN t.tgnargs < 2 THEN false
	            WHEN pg_catalog.lower(a.args[2]) = 'strict' THEN true
	            WHEN pg_catalog.lower(a.args[2]) = 'lenient' THEN false END AS strict,
	       CASE WHEN t.tgnargs < 3 THEN 'issued'
	            WHEN pg_catalog.lower(a.args[3]) IN ('issued', 'external') THEN pg_catalog.lower(a.args[3]) END AS tokens
	FROM (SELECT @extschema@.trigger_arguments(t.tgargs) AS args) a
	WHERE t.tgfoid = '@extschema@.fence_trigger()'::pg_catalog.regprocedure AND t.tgnargs <= 3
	UNION ALL
	SELECT NULL, NULL, NULL
	WHERE t.tgfoid IS DISTINCT FROM '@extschema@.fence_trigger()'::pg_catalog.regprocedure OR t.tgnargs > 3
) f
CROSS JOIN LATERAL (
	SELECT COALESCE(pg_catalog.array_agg(x.problem ORDER BY x.problem), '{}') AS problems
	-- the table and, when partitioned, every member of its tree
	-- (pg_partition_tree lists nothing for a table that is not partitioned)
	FROM (SELECT p.relid UNION SELECT t.relid FROM pg_catalog.pg_partition_tree(p.relid) t) m
	LEFT JOIN pg_catalog.pg_trigger g ON g.tgrelid = m.relid AND g.tgname = 'zz_lease_fence'
	LEFT JOIN pg_catalog.pg_trigger u ON u.tgrelid = m.relid AND u.tgname = 'zz_lease_fence_truncate'
	CROSS JOIN LATERAL (
		SELECT CASE WHEN g.tgnargs >= 1 THEN ga[1] ELSE 'fence' END AS g_column,
		       CASE WHEN g.tgnargs < 2 THEN 'lenient' ELSE pg_catalog.lower(ga[2]) END AS g_mode,
		       CASE WHEN g.tgnargs < 3 THEN 'issued' ELSE pg_catalog.lower(ga[3]) END AS g_tokens,
		       CASE WHEN u.tgnargs >= 1 THEN ua[1] ELSE 'fence' END AS u_column,
		       CASE WHEN u.tgnargs < 2 THEN 'issued' ELSE pg_catalog.lower(ua[2]) END AS u_tokens,
		       (SELECT pg_catalog.string_agg(pg_catalog.quote_ident(o.tgname::text), ', ' ORDER BY o.tgname)
		        FROM pg_catalog.pg_trigger o
		        WHERE o.tgrelid = m.relid AND NOT o.tgisinternal AND (o.tgtype & 3) = 3
		          AND o.tgname COLLATE "C" > 'zz_lease_fence') AS later_triggers,
		       (SELECT pg_catalog.string_agg(pg_catalog.quote_ident(r.rulename::text), ', ' ORDER BY r.rulename)
		        FROM pg_catalog.pg_rewrite r
		        WHERE r.ev_class = m.relid AND r.is_instead AND r.ev_type IN ('2', '3', '4')) AS instead_rules
		FROM (SELECT @extschema@.trigger_arguments(g.tgargs) AS ga,
		             @extschema@.trigger_arguments(u.tgargs) AS ua) args
	) st
	CROSS JOIN LATERAL (VALUES
		(CASE WHEN g.oid IS NULL THEN pg_catalog.format('%s: fence trigger missing', m.relid)
		      WHEN g.tgenabled <> 'A' THEN pg_catalog.format('%s: fence trigger %s', m.relid,
		           CASE g.tgenabled WHEN 'D' THEN 'disabled' WHEN 'O' THEN 'enabled only for origin'
		                            ELSE 'enabled only for replica' END) END),
		(CASE WHEN g.oid IS NOT NULL
		       AND (g.tgfoid <> '@extschema@.fence_trigger()'::pg_catalog.regprocedure
		            OR g.tgtype <> 31 OR g.tgqual IS NOT NULL OR g.tgattr::text <> '' OR g.tgnargs > 3)
		      THEN pg_catalog.format('%s: fence trigger is not lease_fence''s (another function, other events, a column list or a WHEN clause)', m.relid)
		      WHEN g.oid IS NOT NULL
		       AND (st.g_column, st.g_mode, st.g_tokens) IS DISTINCT FROM
		           (p.fence_column::text, CASE WHEN p.strict THEN 'strict' ELSE 'lenient' END, p.tokens)
		      THEN pg_catalog.format('%s: fence trigger takes column %s, mode %s, tokens %s; protect() recorded column %s, mode %s, tokens %s',
		           m.relid, pg_catalog.quote_ident(st.g_column), st.g_mode, st.g_tokens,
		           pg_catalog.quote_ident(p.fence_column::text), CASE WHEN p.strict THEN 'strict' ELSE 'lenient' END, p.tokens) END),
		(CASE WHEN u.oid IS NULL THEN pg_catalog.format('%s: truncate guard missing', m.relid)
		      WHEN u.tgenabled <> 'A' THEN pg_catalog.format('%s: truncate guard %s', m.relid,
		           CASE u.tgenabled WHEN 'D' THEN 'disabled' WHEN 'O' THEN 'enabled only for origin'
		                            ELSE 'enabled only for replica' END) END),
		(CASE WHEN u.oid IS NOT NULL
		       AND (u.tgfoid <> '@extschema@.truncate_guard()'::pg_catalog.regprocedure
		            OR u.tgtype <> 34 OR u.tgnargs > 2)
		      THEN pg_catalog.format('%s: truncate guard is not lease_fence''s (another function or other events)', m.relid)
		      WHEN u.oid IS NOT NULL
		       AND (st.u_column, st.u_tokens) IS DISTINCT FROM (p.fence_column::text, p.tokens)
		      THEN pg_catalog.format('%s: truncate guard takes column %s, tokens %s; protect() recorded column %s, tokens %s',
		           m.relid, pg_catalog.quote_ident(st.u_column), st.u_tokens,
		           pg_catalog.quote_ident(p.fence_column::text), p.tokens) END),
		(CASE WHEN st.later_triggers IS NOT NULL
		      THEN pg_catalog.format('%s: BEFORE row trigger %s fires after the fence trigger', m.relid, st.later_triggers) END),
		(CASE WHEN st.instead_rules IS NOT NULL
		      THEN pg_catalog.format('%s: DO INSTEAD rule %s bypasses the fence', m.relid, st.instead_rules) END)
	) x(problem)
	WHERE x.problem IS NOT NULL
) pr;

COMMENT ON VIEW @extschema@.protected_tables IS
'protected tables, with the fence column, mode and tokens their fence triggers take; ok = false and the reason when a fence trigger or TRUNCATE guard is missing, disabled, not lease_fence''s, not as protect() recorded, or not last, or a DO INSTEAD rule bypasses it';

GRANT SELECT ON @extschema@.protected_tables TO PUBLIC;

------------------------------------------------------------------------------
-- One call per fenced transaction: set_generation(generation, resource)
------------------------------------------------------------------------------

-- set_generation(generation, resource) sets the transaction's generation and,
-- with a resource, fences it as fence_resource() does: a client sends one
-- parameterizable statement instead of a SET LOCAL it must build as a string
-- and a second call.  A call with the generation alone now means this form
-- (resource NULL: transaction-scoped, nothing fenced, as before); the
-- is_local form stays, without its default (both would match a call with one
-- argument), so set_generation(g, true | false) means what it meant.
DROP FUNCTION @extschema@.set_generation(bigint, boolean);

CREATE FUNCTION @extschema@.set_generation(generation bigint, is_local boolean)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lf_set_generation'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.set_generation(bigint, boolean) IS
'set the current generation that fenced writes carry, for the transaction (is_local) or the session';

CREATE FUNCTION @extschema@.set_generation(generation bigint, resource text DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lf_set_generation_resource'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.set_generation(bigint, text) IS
'set the transaction''s current generation and, with a resource, fence it as fence_resource() does (which needs EXECUTE on fence_resource)';

------------------------------------------------------------------------------
-- Why a lease operation was not granted or not known: a reason column
------------------------------------------------------------------------------

-- unavailable, unknown and unreplicated rows say why (the WARNING's text,
-- which poolers and ORMs do not pass on); NULL otherwise.  acquire's row
-- type gains the column at its end.  renew and release return new row
-- types, so they are made again: EXECUTE granted on them before goes with
-- them, as acquire's did in 1.2 (docs/security.md, "Privileges").
ALTER TYPE @extschema@.lease ADD ATTRIBUTE reason text;

DROP FUNCTION @extschema@.renew(text, text, bigint, bigint);

CREATE FUNCTION @extschema@.renew(resource text, identity text, ttl_ms bigint,
                                  min_validity_ms bigint DEFAULT 0,
                                  OUT renewed boolean, OUT status text, OUT validity_ms bigint,
                                  OUT reason text)
RETURNS record
AS 'MODULE_PATHNAME', 'lf_renew'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.renew(text, text, bigint, bigint) IS
'extend a lease that still holds this identity (never recreates a lost one); status renewed, lost, insufficient_validity, unreplicated, unavailable or unknown';

REVOKE EXECUTE ON FUNCTION @extschema@.renew(text, text, bigint, bigint) FROM PUBLIC;

DROP FUNCTION @extschema@.release(text, text);

CREATE FUNCTION @extschema@.release(resource text, identity text,
                                    OUT released boolean, OUT status text, OUT reason text)
RETURNS record
AS 'MODULE_PATHNAME', 'lf_release'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.release(text, text) IS
'delete a lease only if it still holds this identity; status released, not_held, unavailable or unknown';

REVOKE EXECUTE ON FUNCTION @extschema@.release(text, text) FROM PUBLIC;

------------------------------------------------------------------------------
-- This backend's Redis connections
------------------------------------------------------------------------------

-- What postgres_fdw_get_connections() and postgres_fdw_disconnect_all() are
-- for postgres_fdw: see the connections a session holds, and close them
-- (after a change of the Redis settings, or before a pooler hands the
-- session on).  Not granted to PUBLIC, as acquire is not: whoever may take
-- leases is given these with it (README, "Set up").
CREATE FUNCTION @extschema@.redis_connections(OUT endpoint text, OUT kind text, OUT tls boolean,
                                              OUT age_ms bigint, OUT requests bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'lf_redis_connections_sql'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.redis_connections() IS
'this backend''s open Redis connections: endpoint (NULL unless superuser or pg_read_all_settings), kind server, master, cluster_node or sentinel, TLS, age in ms, commands sent';

REVOKE EXECUTE ON FUNCTION @extschema@.redis_connections() FROM PUBLIC;

CREATE FUNCTION @extschema@.redis_disconnect()
RETURNS integer
AS 'MODULE_PATHNAME', 'lf_redis_disconnect_sql'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.redis_disconnect() IS
'close every Redis connection of this backend, after reading the answers of releases sent after COMMIT; returns how many were open; releases no lease';

REVOKE EXECUTE ON FUNCTION @extschema@.redis_disconnect() FROM PUBLIC;

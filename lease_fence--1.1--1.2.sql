/* lease_fence--1.1--1.2.sql: hardening, unissued generations */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION lease_fence UPDATE TO '1.2'" to load this file. \quit

------------------------------------------------------------------------------
-- Key prefix ownership (one database per key_prefix)
------------------------------------------------------------------------------

-- The first acquire on each new Redis connection checks that key_prefix
-- belongs to this database (system identifier and database OID, in the key
-- <key_prefix>owner) and claims it if nobody has; another database's prefix
-- makes acquire "unavailable" with a WARNING.  This takes a prefix over on
-- purpose, e.g. after a dump was restored into a new cluster.  Superusers
-- only: the function checks, and nobody else may execute it.
CREATE FUNCTION @extschema@.claim_key_prefix()
RETURNS text
AS 'MODULE_PATHNAME', 'lf_claim_key_prefix'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.claim_key_prefix() IS
'make lease_fence.key_prefix on the configured Redis belong to this database; returns the previous owner (NULL if none); superuser only';

REVOKE EXECUTE ON FUNCTION @extschema@.claim_key_prefix() FROM PUBLIC;


------------------------------------------------------------------------------
-- Unissued generations
------------------------------------------------------------------------------

-- By default a fenced write whose generation this database never issued
-- (a typo, a millisecond timestamp, a generation of another database) is
-- refused with LF004 before anything is written: once a fence took such a
-- value, every real holder would get LF001 on that row for good.  Which
-- tables are checked, and with which tokens, protect() records here; rows
-- of tables protected before 1.2 get the default.
ALTER TABLE @extschema@.protected
	ADD COLUMN tokens text NOT NULL DEFAULT 'issued'
	CONSTRAINT protected_tokens_check CHECK (tokens IN ('issued', 'external'));

COMMENT ON FUNCTION @extschema@.fence_trigger() IS
'BEFORE INSERT OR UPDATE OR DELETE row trigger: rejects writes whose generation is lower than the stored fence, or was never issued; arguments: fence column (default fence), lenient|strict, issued|external';

COMMENT ON FUNCTION @extschema@.truncate_guard() IS
'BEFORE TRUNCATE statement trigger: refuses TRUNCATE without a current generation, with one never issued, or with one lower than the highest stored fence; arguments: fence column, issued|external';

-- protect() gains tokens: 'issued' (the default: a supplied generation must
-- have been issued by next_generation(), else LF004) or 'external' (the
-- table's tokens come from elsewhere, such as etcd revisions or a Kafka
-- epoch).  A new signature needs DROP and CREATE; the new parameter comes
-- last with a default, so protect('t'), protect('t', 'fence', true) and
-- protect('t', strict => true) mean what they meant.  Tables protected
-- before keep their triggers: a fence trigger with two arguments and a
-- guard with one take the default, so they are checked from now on (README,
-- "Unissued generations").
DROP FUNCTION @extschema@.protect(regclass, name, boolean);

-- protect(): add the fence column if missing, then the fence trigger and the
-- TRUNCATE guard, both ENABLE ALWAYS.  Idempotent: calling it again (for
-- example after new partitions were attached) repairs what is missing and
-- switches the mode if strict or tokens changed.
CREATE FUNCTION @extschema@.protect(tbl regclass, fence_column name DEFAULT 'fence', strict boolean DEFAULT false,
                                    tokens text DEFAULT 'issued')
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
END;
$$;

COMMENT ON FUNCTION @extschema@.protect(regclass, name, boolean, text) IS
'fence a table: add the bigint fence column if missing, the fence trigger and the TRUNCATE guard (ENABLE ALWAYS); tokens issued (checked, the default) or external; idempotent';

-- protected_tables shows the tokens, next to strict: DROP and CREATE, since
-- a view cannot gain a column in the middle.
DROP VIEW @extschema@.protected_tables;

-- One row per protected table.  ok is false when a fence trigger or TRUNCATE
-- guard anywhere in the table's partition tree is missing or not ENABLE
-- ALWAYS, or when another BEFORE row trigger fires after the fence trigger;
-- problems says which, one line per member of the tree.
CREATE VIEW @extschema@.protected_tables AS
SELECT p.relid AS table_name,
	p.fence_column,
	p.strict,
	p.tokens,
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
'protected tables, their mode and tokens, with ok = false and the reason when a fence trigger or TRUNCATE guard is missing, disabled, or not last';

GRANT SELECT ON @extschema@.protected_tables TO PUBLIC;

-- repair_unissued(): set every fence of tbl above the highest issued
-- generation back to generation (which must be issued); returns the rows
-- changed, logs them, counts them in stats.  Superuser only: it lowers
-- fences, the one thing the fence exists to prevent.  It runs one UPDATE as
-- the calling superuser, never as another user (src/fence/fence_trigger.c says
-- why).
CREATE FUNCTION @extschema@.repair_unissued(tbl regclass, generation bigint)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lf_repair_unissued'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.repair_unissued(regclass, bigint) IS
'superuser only: set the fences of tbl that are above the highest issued generation back to generation; returns the rows changed';

REVOKE EXECUTE ON FUNCTION @extschema@.repair_unissued(regclass, bigint) FROM PUBLIC;


------------------------------------------------------------------------------
-- Other 1.2 additions
------------------------------------------------------------------------------

------------------------------------------------------------------------------
-- Resource fences and failover-safe generations
------------------------------------------------------------------------------

-- A generation carries its epoch in the sequence value (README.md,
-- "Generations across a failover"): pg_dump must keep that value, or a
-- restored database would start again from 1, below what it had issued.
-- Marked as configuration, the sequence's value is dumped (as a setval).
SELECT pg_catalog.pg_extension_config_dump('@extschema@.generation_seq', '');

-- The highest generation each resource was fenced at.  No role has any
-- privilege on it (its owner aside): a direct UPDATE that lowered a stored
-- generation would defeat the fence.  fence_resource() reads and writes it
-- in C, with no privilege check (as next_generation() draws from its
-- sequence) and no query, so no trigger, rule, policy or index expression
-- runs as anybody; everybody reads it through lease_fence.resource_fences.
-- COLLATE "C": resources are compared byte for byte, as Redis compares keys.
CREATE TABLE @extschema@.resource_generation (
	resource text COLLATE "C" PRIMARY KEY,
	generation bigint NOT NULL,
	updated_at timestamptz NOT NULL
);

REVOKE ALL ON @extschema@.resource_generation FROM PUBLIC;

-- the fences survive pg_dump / restore, as the row fences in users' tables do
SELECT pg_catalog.pg_extension_config_dump('@extschema@.resource_generation', '');

CREATE FUNCTION @extschema@.fence_resource(resource text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lf_fence_resource'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.fence_resource(text) IS
'fence a resource in this transaction: LF001 if a higher generation fenced it, else store the current generation and hold the resource to the end of the transaction';

CREATE VIEW @extschema@.resource_fences AS
	SELECT resource, generation, updated_at
	FROM @extschema@.resource_generation;

COMMENT ON VIEW @extschema@.resource_fences IS
'the highest generation each resource was fenced at, and when';

GRANT SELECT ON @extschema@.resource_fences TO PUBLIC;


------------------------------------------------------------------------------
-- Waiting for a busy lease, and keep-alive
------------------------------------------------------------------------------

-- acquire() gains wait_ms (wait up to that long while the lease is busy,
-- woken by the holder's release) and keepalive (a background worker renews
-- a session- or transaction-scoped lease while its session is active).
-- Both come last with defaults, so every 1.1 call means what it meant.  A
-- new signature needs a new function; the 1.1 one is dropped, since both
-- would match a call with four arguments or fewer.  EXECUTE granted on the
-- 1.1 function goes with it: the roles that take leases are granted EXECUTE
-- on the new one again, in the transaction of the update (README).  A GRANT
-- made here would be recorded as the extension's own initial privilege,
-- which pg_dump leaves out: it would vanish at the next dump and restore.
CREATE FUNCTION @extschema@.acquire(resource text, ttl_ms bigint,
                                    min_validity_ms bigint DEFAULT 0,
                                    scope text DEFAULT 'explicit',
                                    wait_ms bigint DEFAULT 0,
                                    keepalive boolean DEFAULT false)
RETURNS @extschema@.lease
AS 'MODULE_PATHNAME', 'lf_acquire'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.acquire(text, bigint, bigint, text, bigint, boolean) IS
'acquire a Redis lease with a fresh identity and a durable generation, waiting up to wait_ms while it is busy, kept alive by a background worker if keepalive; status acquired, busy, stale, insufficient_validity, unavailable, unknown or unreplicated';

REVOKE EXECUTE ON FUNCTION @extschema@.acquire(text, bigint, bigint, text, bigint, boolean) FROM PUBLIC;

DROP FUNCTION @extschema@.acquire(text, bigint, bigint, text);

COMMENT ON VIEW @extschema@.leases IS
'this session''s Redis leases: state held, lost (a kept-alive lease the worker could not keep), unknown, unconfirmed or released';

-- The state of a kept-alive lease, by its identity, from any session: an
-- application can watch its lease on another connection (watching on the
-- owner's own connection would keep the owner active).
CREATE FUNCTION @extschema@.keepalive_state(identity text)
RETURNS text
AS 'MODULE_PATHNAME', 'lf_keepalive_state'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.keepalive_state(text) IS
'active while the keep-alive worker keeps the lease of this identity alive, lost once it could not; NULL when no kept-alive lease has it';

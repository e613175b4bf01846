-- generation: next_generation() only grows, the current generation
-- (set_generation / current_generation / the GUC lease_fence.generation)
-- follows set_config rules, and the install script follows its own rules.

\set ECHO none
\i sql/include/try.sql

-- next_generation() strictly increases within a session
SELECT a < b AND b < c AS strictly_increasing
FROM (SELECT lease_fence.next_generation() AS a) x,
     LATERAL (SELECT lease_fence.next_generation() AS b) y,
     LATERAL (SELECT lease_fence.next_generation() AS c) z;

CREATE TEMP TABLE seen (g bigint);
INSERT INTO seen SELECT lease_fence.next_generation() FROM generate_series(1, 100);
SELECT count(DISTINCT g) = 100 AS all_distinct,
       bool_and(g > 0) AS all_positive
FROM seen;

-- a generation drawn in an aborted transaction is not handed out again
BEGIN;
SELECT lease_fence.next_generation() AS aborted_gen \gset
ROLLBACK;
SELECT lease_fence.next_generation() > :aborted_gen AS after_abort_is_greater;

-- a draw holds the sequence's lock only while it runs, not to the end of the
-- transaction as nextval() does: healing a stale generation (which excludes
-- draws) must not wait for, or deadlock with, open transactions that drew one
BEGIN;
SELECT lease_fence.next_generation() > 0 AS drew, lease_fence.next_generation() > 0 AS drew_again;
SELECT count(*) AS sequence_locks_held FROM pg_locks
WHERE locktype = 'relation' AND relation = 'lease_fence.generation_seq'::regclass
  AND pid = pg_backend_pid();
COMMIT;

-- also with synchronous_commit = off
SET synchronous_commit = off;
SELECT lease_fence.next_generation() AS async_gen \gset
SELECT lease_fence.next_generation() > :async_gen AS async_is_greater;
RESET synchronous_commit;

-- one generation space: a non-superuser may draw generations but has no
-- right on the sequence behind them (no nextval of unflushed values, no
-- setval backwards)
CREATE ROLE regress_lf_user;
SET ROLE regress_lf_user;
SELECT lease_fence.next_generation() > :async_gen AS user_can_draw;
SELECT pg_temp.try($$SELECT nextval('lease_fence.generation_seq')$$);
SELECT pg_temp.try($$SELECT setval('lease_fence.generation_seq', 1)$$);
RESET ROLE;

-- no current generation by default
SELECT lease_fence.current_generation() IS NULL AS unset;
SHOW lease_fence.generation;

-- set_generation() is transaction-scoped by default, like set_config()
BEGIN;
SELECT lease_fence.set_generation(42);
SELECT lease_fence.current_generation();
SHOW lease_fence.generation;
COMMIT;
SELECT lease_fence.current_generation() IS NULL AS gone_after_commit;

-- ... and session-scoped with is_local = false, until RESET
SELECT lease_fence.set_generation(43, false);
BEGIN;
SELECT lease_fence.current_generation();
COMMIT;
SELECT lease_fence.current_generation();
RESET lease_fence.generation;
SELECT lease_fence.current_generation() IS NULL AS gone_after_reset;

-- outside a transaction block (autocommit) a transaction-scoped generation
-- would be gone when the statement ends, and the next statement would write
-- without it: set_generation(g) is an error (25P01) that says so, not a
-- silent no-op, and so is set_generation(g, true); bad input comes first
SELECT lease_fence.set_generation(462);
\echo :LAST_ERROR_SQLSTATE
SELECT lease_fence.set_generation(462, true);
\echo :LAST_ERROR_SQLSTATE
SELECT lease_fence.set_generation(462, NULL::text);
\echo :LAST_ERROR_SQLSTATE
DO $$BEGIN PERFORM lease_fence.set_generation(462); END$$;
\echo :LAST_ERROR_SQLSTATE
SELECT lease_fence.set_generation(-1);
\echo :LAST_ERROR_SQLSTATE
SELECT lease_fence.current_generation() IS NULL AS nothing_set;

-- the GUC is the same thing: SET LOCAL from any client
BEGIN;
SET LOCAL lease_fence.generation = 44;
SELECT lease_fence.current_generation();
-- a subtransaction that rolls back restores the outer generation
SAVEPOINT s;
SELECT lease_fence.set_generation(45);
SELECT lease_fence.current_generation();
ROLLBACK TO SAVEPOINT s;
SELECT lease_fence.current_generation();
COMMIT;
SELECT lease_fence.current_generation() IS NULL AS gone_after_commit;

-- set_generation(generation, resource): a NULL resource fences nothing, and
-- the generation is the transaction's, as with the generation alone
BEGIN;
SELECT lease_fence.set_generation(46, NULL);
SELECT lease_fence.current_generation();
COMMIT;
SELECT lease_fence.current_generation() IS NULL AS gone_after_commit;

-- 64 bits, not 32
BEGIN;
SET LOCAL lease_fence.generation = '9223372036854775807';
SELECT lease_fence.current_generation();
SET LOCAL lease_fence.generation = '';
SELECT lease_fence.current_generation() IS NULL AS empty_is_unset;
COMMIT;

-- bad values are errors with a clear SQLSTATE and change nothing
BEGIN;
SET LOCAL lease_fence.generation = 7;
SELECT pg_temp.try($$SET LOCAL lease_fence.generation = 'seven'$$);
SELECT pg_temp.try($$SET LOCAL lease_fence.generation = -1$$);
SELECT pg_temp.try($$SET LOCAL lease_fence.generation = '+8'$$);
SELECT pg_temp.try($$SET LOCAL lease_fence.generation = '9223372036854775808'$$);
SELECT pg_temp.try($$SET LOCAL lease_fence.generation = '8 9'$$);
SELECT pg_temp.try($$SELECT lease_fence.set_generation(-1)$$);
SELECT pg_temp.try($$SELECT lease_fence.set_generation(NULL)$$);
SELECT pg_temp.try($$SELECT lease_fence.set_generation(8, NULL::boolean)$$);
SELECT pg_temp.try($$SELECT lease_fence.set_generation(NULL, 'r')$$);
SELECT pg_temp.try($$SELECT lease_fence.set_generation(8, '')$$);
SELECT lease_fence.current_generation() AS still_seven;
COMMIT;
SELECT lease_fence.set_generation(NULL);

-- advance_generation(): a superuser makes every later generation greater
-- than a value (after a restore from an old backup); never backwards, and
-- nobody else may (EXECUTE is revoked from PUBLIC, and the function checks)
SELECT lease_fence.next_generation() AS now_at \gset
SELECT lease_fence.advance_generation(:now_at + 1000) = :now_at + 1000 AS advanced;
SELECT lease_fence.next_generation() = :now_at + 1001 AS next_is_above;
SELECT lease_fence.advance_generation(5) = :now_at + 1001 AS never_backwards;
SELECT lease_fence.next_generation() = :now_at + 1002 AS next_still_above;
SELECT pg_temp.try($$SELECT lease_fence.advance_generation(NULL)$$);
SELECT pg_temp.try($$SELECT lease_fence.advance_generation(-1)$$);
-- a value after which nothing is left to draw in its epoch (2^40 - 2^24 - 1
-- and above: the last 2^24 values of an epoch are never handed out)
SELECT pg_temp.try($$SELECT lease_fence.advance_generation(1099494850559)$$);
SELECT lease_fence.next_generation() = :now_at + 1003 AS nothing_moved;
SET ROLE regress_lf_user;
SELECT pg_temp.try($$SELECT lease_fence.advance_generation(1)$$);
RESET ROLE;
GRANT EXECUTE ON FUNCTION lease_fence.advance_generation(bigint) TO regress_lf_user;
SET ROLE regress_lf_user;
SELECT pg_temp.try($$SELECT lease_fence.advance_generation(1)$$);
RESET ROLE;
REVOKE EXECUTE ON FUNCTION lease_fence.advance_generation(bigint) FROM regress_lf_user;

-- script rules: no SECURITY DEFINER, every SQL / PL/pgSQL function pins
-- search_path, the extension is not relocatable
SELECT p.oid::regprocedure AS security_definer
FROM pg_proc p WHERE p.pronamespace = 'lease_fence'::regnamespace AND p.prosecdef;
SELECT p.oid::regprocedure AS unpinned_search_path
FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
WHERE p.pronamespace = 'lease_fence'::regnamespace AND l.lanname IN ('sql', 'plpgsql')
  AND NOT coalesce(p.proconfig @> ARRAY['search_path=pg_catalog, pg_temp'], false);
SELECT extrelocatable, extnamespace::regnamespace FROM pg_extension WHERE extname = 'lease_fence';

DROP ROLE regress_lf_user;

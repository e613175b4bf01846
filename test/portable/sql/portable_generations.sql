-- The portable edition's generations: next_generation(), the heal
-- next_generation(above), its bounds and its budget, advance_generation(),
-- privileges, the timeline record.  Run as the superuser, in database
-- lf_portable, on the edition lf_owner installed (it SETs ROLE lf_owner
-- where the installing role acts).
\set VERBOSITY default
\set SHOW_CONTEXT never
SET client_min_messages = warning;
CREATE ROLE lf_gen_app NOLOGIN;
CREATE ROLE lf_gen_other NOLOGIN;
GRANT EXECUTE ON FUNCTION lease_fence.next_generation(bigint) TO lf_gen_app;
RESET client_min_messages;

-- generations only grow, and the highest issued is the last one drawn
SELECT lease_fence.next_generation() AS g1 \gset
SELECT lease_fence.next_generation() > :g1 AS grows;
SELECT lease_fence.highest_issued() = :g1 + 1 AS highest_is_last;

-- the timeline of the current epoch is recorded (this server can read it)
SELECT COALESCE(pg_catalog.pg_sequence_last_value('lease_fence.timeline_seq') = lease_fence.wal_timeline(), false)
       AS timeline_recorded;

-- Every heal spends from one budget: the heals together move the
-- generations at most 2^24 past the highest issued, until the owner's
-- advance_generation() starts the budget again (here it does, so that
-- the files before this one do not count)
SET ROLE lf_owner;
SELECT lease_fence.advance_generation(0) = lease_fence.highest_issued() AS advanced_nothing;
RESET ROLE;

-- a heal within the budget: the next generation is above it (1000 spent)
SELECT lease_fence.highest_issued() + 1000 AS above \gset
SELECT lease_fence.next_generation(:above) = :above + 1 AS healed_past;
SELECT lease_fence.highest_issued() = :above + 1 AS highest_moved;
-- a value at or below the highest issued moves nothing: just a draw
SELECT lease_fence.next_generation(5) = :above + 2 AS below_is_a_draw;

-- beyond the budget: XX001, nothing moved
SELECT lease_fence.highest_issued() AS before \gset
-- (the numbers in the messages depend on the draws before: SQLSTATEs only)
\set VERBOSITY sqlstate
SELECT lease_fence.next_generation(:before + 16777217);
SELECT lease_fence.next_generation(:before + 16777216);
SELECT lease_fence.next_generation(9223372036854775807);
-- another epoch (2^40): refused too
SELECT lease_fence.next_generation(1099511627776);
\set VERBOSITY default
-- the message, with the numbers taken out
DO $$
BEGIN
	PERFORM lease_fence.next_generation(9223372036854775807);
EXCEPTION WHEN data_corrupted THEN
	DECLARE m text; d text; h text;
	BEGIN
		GET STACKED DIAGNOSTICS m = MESSAGE_TEXT, d = PG_EXCEPTION_DETAIL, h = PG_EXCEPTION_HINT;
		RAISE NOTICE '%', regexp_replace(m, '[0-9]{2,}', 'N', 'g');
		RAISE NOTICE '%', regexp_replace(d, '[0-9]{2,}', 'N', 'g');
		RAISE NOTICE '%', h;
	END;
END;
$$;
SELECT lease_fence.highest_issued() = :before AS nothing_moved;
-- what is left of the budget is allowed, and then nothing more
SELECT lease_fence.next_generation(:before + 16777216 - 1000) = :before + 16777216 - 1000 + 1 AS rest_of_budget;
SELECT lease_fence.highest_issued() AS before \gset
\set VERBOSITY sqlstate
SELECT lease_fence.next_generation(:before + 1);
\set VERBOSITY default
SELECT lease_fence.highest_issued() = :before AS nothing_moved;
-- a heal that moves nothing spends nothing: still a draw
SELECT lease_fence.next_generation(:before) = :before + 1 AS at_highest_is_a_draw;

-- one heal of the whole budget, then the next one is refused (a loop of
-- next_generation(highest_issued() + 2^24) no longer exhausts the epoch)
SET ROLE lf_owner;
SELECT lease_fence.advance_generation(0) = lease_fence.highest_issued() AS budget_again;
RESET ROLE;
SELECT lease_fence.highest_issued() AS before \gset
SELECT lease_fence.next_generation(:before + 16777216) = :before + 16777217 AS whole_budget;
\set VERBOSITY sqlstate
SELECT lease_fence.next_generation(lease_fence.highest_issued() + 16777216);
\set VERBOSITY default
SELECT lease_fence.highest_issued() = :before + 16777217 AS nothing_moved;

-- a heal whose transaction rolls back has moved the generations all the
-- same (setval is not transactional), and has spent its share
SET ROLE lf_owner;
SELECT lease_fence.advance_generation(0) = lease_fence.highest_issued() AS budget_again;
RESET ROLE;
SELECT lease_fence.highest_issued() AS before \gset
BEGIN;
SELECT lease_fence.next_generation(:before + 16777216) = :before + 16777217 AS healed;
ROLLBACK;
SELECT lease_fence.highest_issued() = :before + 16777217 AS moved_all_the_same;
\set VERBOSITY sqlstate
SELECT lease_fence.next_generation(lease_fence.highest_issued() + 1);
\set VERBOSITY default

-- advance_generation(past): the owner's (the installing role's) only
SET ROLE lf_gen_other;
SELECT lease_fence.advance_generation(1);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
GRANT EXECUTE ON FUNCTION lease_fence.advance_generation(bigint) TO lf_gen_app;
SET ROLE lf_gen_app;
SELECT lease_fence.advance_generation(1);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
REVOKE EXECUTE ON FUNCTION lease_fence.advance_generation(bigint) FROM lf_gen_app;
SET ROLE lf_owner;
SELECT lease_fence.highest_issued() AS before \gset
-- past the heal budget, and it never goes back
SELECT lease_fence.advance_generation(:before + 33554432) = :before + 33554432 AS advanced;
SELECT lease_fence.next_generation() = :before + 33554433 AS draws_above;
SELECT lease_fence.advance_generation(5) = :before + 33554433 AS never_backwards;
-- and the budget is whole again
SELECT lease_fence.next_generation(lease_fence.highest_issued() + 16777216) > 0 AS budget_whole;
SELECT lease_fence.advance_generation(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT lease_fence.advance_generation(-1);
\echo :LAST_ERROR_SQLSTATE
-- the next draw must be a generation: not into the last 2^24 of an epoch
SELECT lease_fence.advance_generation(1099511627776 - 16777216 - 1);
\echo :LAST_ERROR_SQLSTATE
-- the files after this one start with the whole budget
SELECT lease_fence.advance_generation(0) > 0 AS budget_again;
RESET ROLE;

-- bad arguments
SELECT lease_fence.next_generation(NULL::bigint);
\echo :LAST_ERROR_SQLSTATE
SELECT lease_fence.next_generation(-1);
\echo :LAST_ERROR_SQLSTATE

-- privileges: next_generation() is PUBLIC's, next_generation(bigint) only
-- granted roles', draw_generation nobody's
SET ROLE lf_gen_other;
SELECT lease_fence.next_generation() > 0 AS public_can_draw;
SELECT lease_fence.next_generation(1);
\echo :LAST_ERROR_SQLSTATE
SELECT lease_fence.draw_generation(NULL);
SELECT pg_catalog.setval('lease_fence.generation_seq', 1);
SELECT pg_catalog.nextval('lease_fence.generation_seq');
SELECT FROM lease_fence.generation_timeline FOR UPDATE;
SELECT pg_catalog.setval('lease_fence.timeline_seq', 1);
SELECT last_value FROM lease_fence.heal_budget_seq;
SELECT pg_catalog.setval('lease_fence.heal_budget_seq', 0);
RESET ROLE;
SET ROLE lf_gen_app;
SELECT lease_fence.next_generation(1) > 0 AS granted_can_heal;
RESET ROLE;

-- a draw's transaction gets an xid: its COMMIT flushes the value
BEGIN;
SELECT lease_fence.next_generation() > 0 AS drawn;
SELECT pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL AS has_xid;
ROLLBACK;
-- and none is drawn in a read-only transaction
BEGIN READ ONLY;
SELECT lease_fence.next_generation();
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;

REVOKE EXECUTE ON FUNCTION lease_fence.next_generation(bigint) FROM lf_gen_app;
DROP ROLE lf_gen_app;
DROP ROLE lf_gen_other;

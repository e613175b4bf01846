-- The portable edition's generations: next_generation(), the heal
-- next_generation(above), its bounds and privileges, the timeline record.
-- Run as lf_owner (the installing role) in database lf_portable.
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
SELECT timeline IS NOT NULL AND timeline = lease_fence.wal_timeline() AS timeline_recorded
FROM lease_fence.generation_timeline;

-- a heal within 2^24 of the highest issued: the next generation is above it
SELECT lease_fence.highest_issued() + 1000 AS above \gset
SELECT lease_fence.next_generation(:above) = :above + 1 AS healed_past;
SELECT lease_fence.highest_issued() = :above + 1 AS highest_moved;
-- a value at or below the highest issued moves nothing: just a draw
SELECT lease_fence.next_generation(5) = :above + 2 AS below_is_a_draw;

-- beyond the margin: XX001, nothing moved
SELECT lease_fence.highest_issued() AS before \gset
-- (the numbers in the messages depend on the draws before: SQLSTATEs only)
\set VERBOSITY sqlstate
SELECT lease_fence.next_generation(:before + 16777217);
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
-- exactly the margin is allowed
SELECT lease_fence.next_generation(:before + 16777216) = :before + 16777217 AS margin_allowed;

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
UPDATE lease_fence.generation_timeline SET timeline = 0;
RESET ROLE;
SET ROLE lf_gen_app;
SELECT lease_fence.next_generation(1) > 0 AS granted_can_heal;
RESET ROLE;

-- a draw's transaction gets an xid: its COMMIT flushes the value
BEGIN;
SELECT lease_fence.next_generation() > 0 AS drawn;
SELECT pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL AS has_xid;
ROLLBACK;

REVOKE EXECUTE ON FUNCTION lease_fence.next_generation(bigint) FROM lf_gen_app;
DROP ROLE lf_gen_app;
DROP ROLE lf_gen_other;

-- try(stmt): run a statement; 'ok', or its SQLSTATE, message and detail;
-- and counter(operation, outcome) below.  In pg_temp, gone with the session.  A regress file includes it with
--   \set ECHO none
--   \i sql/include/try.sql
-- (pg_regress feeds psql a file on standard input: \i is relative to the
-- directory pg_regress runs in, the source tree or test/portable/run.sh's
-- copy of sql/; these lines are not echoed, and the last one turns echoing
-- back on)
CREATE FUNCTION pg_temp.try(stmt text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	st text; msg text; det text;
BEGIN
	EXECUTE stmt;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, det = PG_EXCEPTION_DETAIL;
	RETURN st || ': ' || msg || CASE WHEN det <> '' THEN ' | ' || det ELSE '' END;
END $$;
-- counter(operation, outcome): that row of lease_fence.stats, or NULL
-- where there are no counters (the portable edition)
CREATE FUNCTION pg_temp.counter(operation text, outcome text) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
	RETURN (SELECT s.count FROM lease_fence.stats s
	        WHERE s.operation = counter.operation AND s.outcome = counter.outcome);
EXCEPTION WHEN undefined_table THEN
	RETURN NULL;
END $$;
\set ECHO all

/* lease_fence--1.4--1.5.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION lease_fence UPDATE TO '1.5'" to load this file. \quit

------------------------------------------------------------------------------
-- Fenced leader election and take-over
------------------------------------------------------------------------------

-- Wait (wait_ms NULL: until cancelled) to lead an election, a resource: its
-- lease, whose generation is the term.  A win raises the election's resource
-- fence to the term in the same statement (every write of an older term
-- that checks it is refused from then on, LF001), is announced on channel
-- lease_fence_leader at COMMIT, and is released if its transaction aborts.
-- The lease is renewed by the client (renew()), never by the server: a
-- frozen client loses it when its TTL runs out.  Statuses as acquire's.
CREATE FUNCTION @extschema@.campaign(election text, ttl_ms bigint,
	wait_ms bigint DEFAULT NULL, value text DEFAULT NULL, scope text DEFAULT 'session',
	OUT status text, OUT identity text, OUT term bigint, OUT validity_ms bigint,
	OUT reason text)
RETURNS record
AS 'MODULE_PATHNAME', 'lf_campaign'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.campaign(text, bigint, bigint, text, text) IS
'waits to lead an election; a win raises the election''s resource fence to the term; status acquired, busy, stale, unavailable, unknown or unreplicated';

-- Who leads an election, in one round trip: held, the term, the leader's
-- value, its TTL, and (holder()'s rule) its identity, pid and database.
CREATE FUNCTION @extschema@.leader(election text,
	OUT held boolean, OUT term bigint, OUT value text, OUT ttl_ms bigint,
	OUT identity text, OUT pid integer, OUT database text)
RETURNS record
AS 'MODULE_PATHNAME', 'lf_leader'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.leader(text) IS
'asks Redis who leads an election: held, term, value, ttl_ms, and the identity, pid and database of its leader';

-- Hand an election on at once: release() of the leader's lease, whose
-- message wakes the waiting campaigns.
CREATE FUNCTION @extschema@.resign(election text, identity text,
	OUT released boolean, OUT status text, OUT reason text)
RETURNS record
AS 'MODULE_PATHNAME', 'lf_release'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.resign(text, text) IS
'hands an election on at once (release of the leader''s lease); status released, not_held, unavailable or unknown';

-- Take a lease whoever holds it, with a generation above every one granted,
-- and raise the resource fence to it; a transaction that fenced the resource
-- commits first or the take-over fails after timeout_ms having taken
-- nothing.  For operators and supervisors: not PUBLIC's, and not to be
-- granted with acquire().
CREATE FUNCTION @extschema@.take_over(resource text, ttl_ms bigint,
	timeout_ms bigint DEFAULT 5000, scope text DEFAULT 'explicit')
RETURNS @extschema@.lease
AS 'MODULE_PATHNAME', 'lf_take_over'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.take_over(text, bigint, bigint, text) IS
'takes a lease whoever holds it, with a new generation above every one granted, and raises the resource fence to it';

-- Each sends requests to Redis, as acquire() does: not PUBLIC's (README
-- shows the GRANTs).
REVOKE EXECUTE ON FUNCTION @extschema@.campaign(text, bigint, bigint, text, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION @extschema@.leader(text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION @extschema@.resign(text, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION @extschema@.take_over(text, bigint, bigint, text) FROM PUBLIC;

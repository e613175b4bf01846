/* lease_fence--1.0--1.1.sql: the Redis lease helper */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION lease_fence UPDATE TO '1.1'" to load this file. \quit

-- acquired is NULL when the outcome is unknown; identity and generation are
-- returned for "acquired" and "unknown", NULL otherwise.
CREATE TYPE @extschema@.lease AS (
	acquired boolean,
	status text,
	resource text,
	identity text,
	generation bigint,
	validity_ms bigint
);

CREATE FUNCTION @extschema@.acquire(resource text, ttl_ms bigint,
                                    min_validity_ms bigint DEFAULT 0,
                                    scope text DEFAULT 'explicit')
RETURNS @extschema@.lease
AS 'MODULE_PATHNAME', 'lf_acquire'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.acquire(text, bigint, bigint, text) IS
'acquire a Redis lease with a fresh identity and a durable generation; status acquired, busy, stale, insufficient_validity, unavailable or unknown';

CREATE FUNCTION @extschema@.renew(resource text, identity text, ttl_ms bigint,
                                  min_validity_ms bigint DEFAULT 0,
                                  OUT renewed boolean, OUT status text, OUT validity_ms bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'lf_renew'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.renew(text, text, bigint, bigint) IS
'extend a lease that still holds this identity (never recreates a lost one); status renewed, lost, insufficient_validity, unavailable or unknown';

CREATE FUNCTION @extschema@.release(resource text, identity text,
                                    OUT released boolean, OUT status text)
RETURNS record
AS 'MODULE_PATHNAME', 'lf_release'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.release(text, text) IS
'delete a lease only if it still holds this identity; status released, not_held, unavailable or unknown';

-- These open network connections from the server: nobody may call them
-- until granted (README shows the GRANT).
REVOKE EXECUTE ON FUNCTION @extschema@.acquire(text, bigint, bigint, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION @extschema@.renew(text, text, bigint, bigint) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION @extschema@.release(text, text) FROM PUBLIC;

CREATE FUNCTION @extschema@.session_leases(
	OUT resource text, OUT identity text, OUT generation bigint, OUT scope text,
	OUT state text, OUT acquired_at timestamptz, OUT expires_at timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'lf_session_leases'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

-- This session's leases.  expires_at is a local estimate (acquired_at plus
-- the validity measured at acquire or renew), shown while the lease is held.
CREATE VIEW @extschema@.leases AS
	SELECT resource, identity, generation, scope, state, acquired_at, expires_at
	FROM @extschema@.session_leases();

COMMENT ON VIEW @extschema@.leases IS
'this session''s Redis leases: state held, unknown, unconfirmed or released';

GRANT SELECT ON @extschema@.leases TO PUBLIC;

-- Counters of every outcome.  Cluster-wide when lease_fence is in
-- shared_preload_libraries (scope 'cluster'); otherwise each backend counts
-- for itself and these show the calling backend's counters (scope
-- 'backend', with a NOTICE).
CREATE FUNCTION @extschema@.stats_counters(
	OUT operation text, OUT outcome text, OUT count bigint,
	OUT scope text, OUT reset_at timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'lf_stats'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

CREATE VIEW @extschema@.stats AS
	SELECT operation, outcome, count, scope, reset_at
	FROM @extschema@.stats_counters();

COMMENT ON VIEW @extschema@.stats IS
'counters of lease outcomes, cleanups, commit checks, and fence writes accepted or rejected by SQLSTATE';

GRANT SELECT ON @extschema@.stats TO PUBLIC;

CREATE FUNCTION @extschema@.stats_reset()
RETURNS void
AS 'MODULE_PATHNAME', 'lf_stats_reset'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- like pg_stat_statements_reset(): not for everybody
REVOKE EXECUTE ON FUNCTION @extschema@.stats_reset() FROM PUBLIC;

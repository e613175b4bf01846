/* lease_fence--1.3--1.4.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION lease_fence UPDATE TO '1.4'" to load this file. \quit

------------------------------------------------------------------------------
-- Who holds what: every lease of the cluster, who holds a resource in Redis,
-- and how long Redis takes
------------------------------------------------------------------------------

-- Every lease any backend of the cluster holds, in any database, from the
-- lease table in shared memory (lease_fence in shared_preload_libraries,
-- lease_fence.max_tracked_leases slots); without it, the calling session's
-- own.  identity, which can renew and release the lease, is shown only to
-- the holder's role (and its members), superusers and pg_read_all_stats.
CREATE FUNCTION @extschema@.cluster_leases(
	OUT pid integer, OUT database text, OUT usename text, OUT resource text,
	OUT identity text, OUT generation bigint, OUT scope text, OUT state text,
	OUT keepalive boolean, OUT acquired_at timestamptz, OUT expires_at timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'lf_all_leases'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

CREATE VIEW @extschema@.all_leases AS
	SELECT pid, database, usename, resource, identity, generation, scope, state,
	       keepalive, acquired_at, expires_at
	FROM @extschema@.cluster_leases();

COMMENT ON VIEW @extschema@.all_leases IS
'every Redis lease of every backend of the cluster (the session''s own without shared_preload_libraries); identity only for its role, superusers and pg_read_all_stats';

GRANT SELECT ON @extschema@.all_leases TO PUBLIC;

-- Who holds a resource in Redis, in one round trip: held, identity (the
-- rule of all_leases), ttl_ms (NULL: no expiry), the highest generation
-- granted for it, and the pid and database of the backend of this cluster
-- that holds it.  It sends a request to Redis: not PUBLIC's.
CREATE FUNCTION @extschema@.holder(resource text,
	OUT held boolean, OUT identity text, OUT ttl_ms bigint, OUT generation bigint,
	OUT pid integer, OUT database text)
RETURNS record
AS 'MODULE_PATHNAME', 'lf_holder'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.holder(text) IS
'asks Redis who holds a resource: held, identity, ttl_ms, the highest generation granted, and the pid and database of its holder in this cluster';

REVOKE EXECUTE ON FUNCTION @extschema@.holder(text) FROM PUBLIC;

-- The Redis round trips of each operation, a histogram in fixed buckets:
-- one row per operation and bucket, le its upper bound in ms (Infinity for
-- the last), bucket_count the round trips at or below it (cumulative, as
-- Prometheus counts), count and sum_ms the operation's.  Cluster-wide when
-- preloaded (scope 'cluster'), else the calling backend's ('backend');
-- stats_reset() zeroes it.
CREATE FUNCTION @extschema@.latency_histogram(
	OUT operation text, OUT le double precision, OUT bucket_count bigint,
	OUT count bigint, OUT sum_ms double precision, OUT scope text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'lf_latency'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

CREATE VIEW @extschema@.latency AS
	SELECT operation, le, bucket_count, count, sum_ms, scope
	FROM @extschema@.latency_histogram();

COMMENT ON VIEW @extschema@.latency IS
'Redis round-trip times per operation (acquire, renew, release, commit_check, keepalive_renew): cumulative buckets, count and sum in ms';

GRANT SELECT ON @extschema@.latency TO PUBLIC;

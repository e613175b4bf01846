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
	fair boolean DEFAULT false,
	OUT status text, OUT identity text, OUT term bigint, OUT validity_ms bigint,
	OUT reason text)
RETURNS record
AS 'MODULE_PATHNAME', 'lf_campaign'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.campaign(text, bigint, bigint, text, text, boolean) IS
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
REVOKE EXECUTE ON FUNCTION @extschema@.campaign(text, bigint, bigint, text, text, boolean) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION @extschema@.leader(text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION @extschema@.resign(text, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION @extschema@.take_over(text, bigint, bigint, text) FROM PUBLIC;

------------------------------------------------------------------------------
-- Fair waiting
------------------------------------------------------------------------------

-- acquire() gains fair: a waiting acquire is granted in the order the
-- waiters' first requests reached Redis, one waiter woken per release, and a
-- waiter that leaves (cancel, timeout, exit) leaves its queue at once.  It
-- comes last with a default, so every 1.4 call means what it meant.  A new
-- signature needs a new function, and the 1.4 one is dropped (both would
-- match a call of six arguments or fewer): EXECUTE granted on it goes with
-- it, and is granted again on the new one in the transaction of the update
-- (README; a GRANT made here would be the extension's initial privilege,
-- which pg_dump leaves out).
CREATE FUNCTION @extschema@.acquire(resource text, ttl_ms bigint,
                                    min_validity_ms bigint DEFAULT 0,
                                    scope text DEFAULT 'explicit',
                                    wait_ms bigint DEFAULT 0,
                                    keepalive boolean DEFAULT false,
                                    fair boolean DEFAULT false)
RETURNS @extschema@.lease
AS 'MODULE_PATHNAME', 'lf_acquire'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.acquire(text, bigint, bigint, text, bigint, boolean, boolean) IS
'acquire a Redis lease with a fresh identity and a durable generation, waiting up to wait_ms while it is busy (in arrival order if fair), kept alive by a background worker if keepalive; status acquired, busy, stale, insufficient_validity, unavailable, unknown or unreplicated';

REVOKE EXECUTE ON FUNCTION @extschema@.acquire(text, bigint, bigint, text, bigint, boolean, boolean) FROM PUBLIC;

DROP FUNCTION @extschema@.acquire(text, bigint, bigint, text, bigint, boolean);

-- Who waits in a resource's fair queue, first to last, as Redis holds it;
-- pid, database and since when for the waiters of this cluster; identities
-- under holder()'s rule.
CREATE FUNCTION @extschema@.queue(resource text,
	OUT "position" integer, OUT identity text, OUT pid integer, OUT database text,
	OUT waiting_since timestamptz, OUT ttl_ms bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'lf_queue'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 16;

COMMENT ON FUNCTION @extschema@.queue(text) IS
'asks Redis who waits in a resource''s fair queue: position (1: next), identity, pid, database, waiting_since, ttl_ms of the waiter''s place';

-- It sends a request to Redis, as holder() does: not PUBLIC's.
REVOKE EXECUTE ON FUNCTION @extschema@.queue(text) FROM PUBLIC;

------------------------------------------------------------------------------
-- Fenced checkpoints
------------------------------------------------------------------------------

-- The newest checkpoint of each resource: the progress a job committed, the
-- generation it was written under, and when.  As resource_generation: no
-- role has any privilege on it (its owner aside), so that only
-- checkpoint() moves it, under a resource fence; it is read and written in
-- C, so no trigger, rule, policy or index expression runs as anybody.
CREATE TABLE @extschema@.resource_checkpoint (
	resource text COLLATE "C" PRIMARY KEY,
	generation bigint NOT NULL,
	state jsonb NOT NULL,
	written_at timestamptz NOT NULL
);

REVOKE ALL ON @extschema@.resource_checkpoint FROM PUBLIC;

-- the checkpoints survive pg_dump / restore, as the resource fences do
SELECT pg_catalog.pg_extension_config_dump('@extschema@.resource_checkpoint', '');

-- Fence the resource at the current generation (fence_resource()'s
-- refusals: LF001, LF002, LF004, LF010) and store state as its checkpoint
-- under that generation, in the caller's transaction.  Granted, not
-- PUBLIC's, as fence_resource().
CREATE FUNCTION @extschema@.checkpoint(resource text, state jsonb)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lf_checkpoint'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.checkpoint(text, jsonb) IS
'fence a resource at the current generation (as fence_resource) and store state as its checkpoint under it; returns the generation';

REVOKE EXECUTE ON FUNCTION @extschema@.checkpoint(text, jsonb) FROM PUBLIC;

-- The newest committed checkpoint of a resource (or this transaction's
-- own), read with a snapshot taken at the call: one row, or none.  The
-- state is the job's data: granted, not PUBLIC's.
CREATE FUNCTION @extschema@.last_checkpoint(resource text,
	OUT state jsonb, OUT generation bigint, OUT written_at timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'lf_last_checkpoint'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 1;

COMMENT ON FUNCTION @extschema@.last_checkpoint(text) IS
'the newest committed checkpoint of a resource: its state, the generation it was written under, and when (no row: none)';

REVOKE EXECUTE ON FUNCTION @extschema@.last_checkpoint(text) FROM PUBLIC;

------------------------------------------------------------------------------
-- Moving a database: a switchover to a logical replica
------------------------------------------------------------------------------

-- The highest generation this database has issued (0: none): what the
-- fence's LF004 check compares with.  Read on the old primary of a
-- switchover, it is adopt_generations()'s argument on the new one.  It
-- shows a count, as next_generation() does: PUBLIC's.
CREATE FUNCTION @extschema@.highest_issued()
RETURNS bigint
AS 'MODULE_PATHNAME', 'lf_highest_issued_sql'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.highest_issued() IS
'the highest generation this database has issued (0: none)';

-- Each adoption of another database's generations: from adopted_at on, the
-- fence refuses every generation from 1 to refused_through (LF004), and
-- every later draw is above it.  The fences it found, the old primary's
-- highest issued generation it was given and this database's own are kept
-- for the operator.  Written and read in C only, like resource_generation:
-- no role has any privilege on it (its owner aside).
CREATE TABLE @extschema@.generation_adoption (
	adopted_at timestamptz NOT NULL,
	refused_through bigint NOT NULL,
	highest_fence bigint,
	old_highest_issued bigint,
	highest_issued_before bigint NOT NULL
);

REVOKE ALL ON @extschema@.generation_adoption FROM PUBLIC;

-- adoptions survive pg_dump / restore and pg_upgrade, as the generations do
SELECT pg_catalog.pg_extension_config_dump('@extschema@.generation_adoption', '');

-- Run once on the new primary of a switchover to a logical replica, before
-- it takes writers: moves the generations to a new epoch above every fence
-- this database holds and above old_highest_issued, and refuses every
-- generation up to there (the old primary's holders take their leases
-- again).  Superuser or the extension's owner (checked in C): not PUBLIC's.
CREATE FUNCTION @extschema@.adopt_generations(old_highest_issued bigint DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lf_adopt_generations'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.adopt_generations(bigint) IS
'after a switchover to a logical replica: moves the generations above every fence held here and above the old primary''s highest issued one, and refuses every generation up to there; returns that generation';

REVOKE EXECUTE ON FUNCTION @extschema@.adopt_generations(bigint) FROM PUBLIC;

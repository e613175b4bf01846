-- lease_api: the lease helper's SQL surface without a Redis server — bad
-- input is an error before anything is sent, a Redis that is not there is
-- "unavailable", and who may call what and point the server where.

\set ECHO none
\i sql/include/try.sql

-- settings of a library are only checked once it is loaded
LOAD 'lease_fence';

-- a socket path that cannot exist: no request can reach any server
SET lease_fence.redis_socket = '/nonexistent/lease_fence_test.sock';
SET lease_fence.connect_timeout_ms = 200;

------------------------------------------------------------------------------
-- bad input: 22023 before anything is sent (else these would say
-- "unavailable")
------------------------------------------------------------------------------
SELECT pg_temp.try($$SELECT lease_fence.acquire(NULL, 1000)$$);
SELECT pg_temp.try($$SELECT lease_fence.acquire('', 1000)$$);
SELECT pg_temp.try($$SELECT lease_fence.acquire(repeat('r', 1025), 1000)$$);
SELECT pg_temp.try($$SELECT lease_fence.acquire('r', 0)$$);
SELECT pg_temp.try($$SELECT lease_fence.acquire('r', -5)$$);
SELECT pg_temp.try($$SELECT lease_fence.acquire('r', NULL)$$);
SELECT pg_temp.try($$SELECT lease_fence.acquire('r', 1000, -1)$$);
SELECT pg_temp.try($$SELECT lease_fence.acquire('r', 1000, 1001)$$);
SELECT pg_temp.try($$SELECT lease_fence.acquire('r', 1000, 0, 'forever')$$);
SELECT pg_temp.try($$SELECT lease_fence.acquire('r', 1000, 0, NULL)$$);
SELECT pg_temp.try($$SELECT lease_fence.renew('r', 'not-an-identity', 1000)$$);
SELECT pg_temp.try($$SELECT lease_fence.renew('r', NULL, 1000)$$);
SELECT pg_temp.try($$SELECT lease_fence.renew('r', repeat('a', 32), 0)$$);
SELECT pg_temp.try($$SELECT lease_fence.release('', repeat('a', 32))$$);
SELECT pg_temp.try($$SELECT lease_fence.release('r', upper(repeat('a', 32)))$$);
-- a transaction-scoped lease outside a transaction block would end with the
-- statement
SELECT lease_fence.acquire('r', 1000, 0, 'transaction');
-- the longest resource accepted is 1024 bytes
SET client_min_messages = error;
SELECT status FROM lease_fence.acquire(repeat('r', 1024), 1000);
RESET client_min_messages;

------------------------------------------------------------------------------
-- no Redis: "unavailable", acquired = false, nothing recorded
------------------------------------------------------------------------------
\set VERBOSITY terse
SELECT * FROM lease_fence.acquire('r', 1000);
SELECT * FROM lease_fence.renew('r', repeat('a', 32), 1000);
SELECT * FROM lease_fence.release('r', repeat('a', 32));
BEGIN;
SELECT acquired, status FROM lease_fence.acquire('r', 1000, 0, 'transaction');
SELECT lease_fence.current_generation() IS NULL AS no_generation_without_lease;
COMMIT;
\set VERBOSITY default
SELECT count(*) AS leases FROM lease_fence.leases;
-- and no connection is left open by the failed attempts
SELECT count(*) AS connections FROM lease_fence.redis_connections();
SELECT lease_fence.redis_disconnect() AS closed;

------------------------------------------------------------------------------
-- settings: where Redis is, and the password file, are superuser-only; the
-- timeouts are any user's, within bounds
------------------------------------------------------------------------------
SELECT name, context, unit, min_val, max_val, boot_val
FROM pg_settings WHERE name LIKE 'lease\_fence.%' ORDER BY name;

CREATE ROLE regress_lf_client;
SET ROLE regress_lf_client;
SELECT pg_temp.try($$SET lease_fence.redis_host = 'example.invalid'$$);
SELECT pg_temp.try($$SET lease_fence.redis_port = 1$$);
SELECT pg_temp.try($$SET lease_fence.redis_socket = '/tmp/x'$$);
SELECT pg_temp.try($$SET lease_fence.redis_db = 1$$);
SELECT pg_temp.try($$SET lease_fence.redis_user = 'x'$$);
SELECT pg_temp.try($$SET lease_fence.redis_password_file = '/tmp/x'$$);
SELECT pg_temp.try($$SET lease_fence.key_prefix = 'other:'$$);
SELECT pg_temp.try($$SET lease_fence.gen_key_ttl_s = 1$$);
SELECT pg_temp.try($$SET lease_fence.redis_sentinels = '127.0.0.1:26379'$$);
SELECT pg_temp.try($$SET lease_fence.redis_sentinel_master = 'm'$$);
SELECT pg_temp.try($$SET lease_fence.redis_sentinel_user = 'x'$$);
SELECT pg_temp.try($$SET lease_fence.redis_sentinel_password_file = '/tmp/x'$$);
SELECT pg_temp.try($$SET lease_fence.redis_cluster = on$$);
SELECT pg_temp.try($$SET lease_fence.redis_min_replicas = 0$$);
SELECT pg_temp.try($$SET lease_fence.redis_replica_timeout_ms = 5000$$);
SELECT pg_temp.try($$SHOW lease_fence.redis_sentinels$$);
SELECT pg_temp.try($$SHOW lease_fence.redis_password_file$$);
SELECT pg_temp.try($$SHOW lease_fence.redis_socket$$);
SELECT pg_temp.try($$SET lease_fence.command_timeout_ms = 250$$);
SELECT pg_temp.try($$SET lease_fence.command_timeout_ms = 0$$);
SELECT pg_temp.try($$SET lease_fence.cleanup_timeout_ms = 60001$$);
SELECT pg_temp.try($$SET lease_fence.connect_timeout_ms = '2s'$$);

-- EXECUTE on the helper is not PUBLIC's
SELECT pg_temp.try($$SELECT lease_fence.acquire('r', 1000)$$);
SELECT pg_temp.try($$SELECT lease_fence.renew('r', repeat('a', 32), 1000)$$);
SELECT pg_temp.try($$SELECT lease_fence.release('r', repeat('a', 32))$$);
-- taking a key_prefix over is a superuser's decision: EXECUTE is not PUBLIC's
SELECT pg_temp.try($$SELECT lease_fence.claim_key_prefix()$$);
-- nor on the backend's Redis connections
SELECT pg_temp.try($$SELECT * FROM lease_fence.redis_connections()$$);
SELECT pg_temp.try($$SELECT lease_fence.redis_disconnect()$$);
SELECT count(*) AS leases_view_is_public FROM lease_fence.leases;
RESET ROLE;
GRANT EXECUTE ON FUNCTION lease_fence.acquire(text, bigint, bigint, text, bigint, boolean, boolean),
                          lease_fence.renew(text, text, bigint, bigint),
                          lease_fence.release(text, text),
                          lease_fence.claim_key_prefix() TO regress_lf_client;
SET ROLE regress_lf_client;
\set VERBOSITY terse
-- (the WARNING shows where Redis is only to those who may read that setting)
SELECT acquired, status FROM lease_fence.acquire('r', 1000);
\set VERBOSITY default
-- and a GRANT does not make a non-superuser able to take one over
SELECT pg_temp.try($$SELECT lease_fence.claim_key_prefix()$$);
RESET ROLE;
REVOKE EXECUTE ON FUNCTION lease_fence.acquire(text, bigint, bigint, text, bigint, boolean, boolean),
                           lease_fence.renew(text, text, bigint, bigint),
                           lease_fence.release(text, text),
                           lease_fence.claim_key_prefix() FROM regress_lf_client;
DROP ROLE regress_lf_client;
-- a superuser without a Redis: an ERROR, never a silent success
SELECT pg_temp.try($$SELECT lease_fence.claim_key_prefix()$$);

-- the topology settings: a malformed sentinel list is refused when set,
-- and changes nothing
SELECT pg_temp.try($$SET lease_fence.redis_sentinels = '127.0.0.1'$$);
SELECT pg_temp.try($$SET lease_fence.redis_sentinels = '127.0.0.1:0'$$);
SELECT pg_temp.try($$SET lease_fence.redis_sentinels = 'a:1,b:65536'$$);
SELECT pg_temp.try($$SET lease_fence.redis_sentinels = ':26379'$$);
SHOW lease_fence.redis_sentinels;
SELECT pg_temp.try($$SET lease_fence.redis_min_replicas = -1$$);
SELECT pg_temp.try($$SET lease_fence.redis_replica_timeout_ms = 0$$);
-- no sentinel listening, no master name, both topologies at once: each is
-- "unavailable" with a WARNING that says why (port 1: nothing listens there)
SET lease_fence.redis_port = 1;
SET lease_fence.redis_sentinels = '[::1]:1, 127.0.0.1:1';
SELECT acquired, status FROM lease_fence.acquire('r', 1000);
SET lease_fence.redis_sentinel_master = 'm';
SELECT acquired, status FROM lease_fence.acquire('r', 1000);
SET lease_fence.redis_cluster = on;
SELECT acquired, status FROM lease_fence.acquire('r', 1000);
RESET lease_fence.redis_sentinels;
RESET lease_fence.redis_sentinel_master;
SELECT acquired, status FROM lease_fence.acquire('r', 1000);
RESET lease_fence.redis_cluster;
RESET lease_fence.redis_port;
RESET lease_fence.redis_socket;
RESET lease_fence.connect_timeout_ms;

-- test/valgrind_redis_tls.sql — the TLS paths of the "redis" phase of
-- test/valgrind.sh, against a throwaway redis-server with a TLS port on
-- 127.0.0.1 (certificates made by openssl in the run's temp dir).  Run by
-- test/valgrind.sh only, after test/valgrind_redis.sql:
--
--   psql -X -At -v tls_port=... -v ca=... -v otherca=... -v cert=... -v key=... -v key_open=... -f this
--
-- verify-full acquire / renew / release; a wrong CA; a plaintext client on
-- the TLS port; mutual TLS without a client certificate and with one; a key
-- file readable by others.  Every failure must be "unavailable".  STEP lines
-- as in test/valgrind_redis.sql; one session, PID|<pid> printed.

\set ON_ERROR_STOP off
\set VERBOSITY default
\pset footer off

SELECT 'PID|' || pg_backend_pid();
LOAD 'lease_fence';
SET lease_fence.redis_socket = '';
SET lease_fence.redis_host = 'localhost';
SET lease_fence.redis_port = :tls_port;
SET lease_fence.redis_sslmode = 'verify-full';
SET lease_fence.redis_sslrootcert = :'ca';
-- a backend's first TLS connection under valgrind (OpenSSL's start-up, the
-- CA file, the handshake, then PING) can take longer than the phase's
-- connect_timeout_ms of 2 s: it once did on CI, and the three tls_ steps
-- failed with "connection check (PING) failed: timed out"
SET lease_fence.connect_timeout_ms = 10000;

-- the server does not ask for a client certificate here (tls-auth-clients
-- optional): verify-full, every operation
SELECT vg_step('tls_acquired', a.status, 'acquired', a::text) FROM lease_fence.acquire('vg:tls', 30000) a;
SELECT identity AS id_tls FROM lease_fence.leases WHERE resource = 'vg:tls' AND state = 'held' \gset
SELECT vg_step('tls_renewed', r.status, 'renewed', r::text) FROM lease_fence.renew('vg:tls', :'id_tls', 30000) r;
SELECT vg_step('tls_released', r.status, 'released', r::text) FROM lease_fence.release('vg:tls', :'id_tls') r;

-- a wrong CA: the handshake fails on the certificate
SET lease_fence.redis_sslrootcert = :'otherca';
SELECT vg_step('tls_wrong_ca', a.status, 'unavailable', a::text) FROM lease_fence.acquire('vg:tls-ca', 30000) a;
SET lease_fence.redis_sslrootcert = :'ca';

-- plaintext to the TLS port: the connection check fails
SET lease_fence.redis_sslmode = 'disable';
SELECT vg_step('tls_plaintext', a.status, 'unavailable', a::text) FROM lease_fence.acquire('vg:tls-plain', 30000) a;
SET lease_fence.redis_sslmode = 'verify-full';

-- a client certificate, and its key readable by others (refused)
SET lease_fence.redis_sslcert = :'cert';
SET lease_fence.redis_sslkey = :'key';
SELECT vg_step('tls_client_cert', a.status, 'acquired', a::text) FROM lease_fence.acquire('vg:tls-mtls', 30000) a;
SET lease_fence.redis_sslkey = :'key_open';
SELECT vg_step('tls_key_mode', a.status, 'unavailable', a::text) FROM lease_fence.acquire('vg:tls-key', 30000) a;
RESET lease_fence.redis_sslcert;
RESET lease_fence.redis_sslkey;

-- the server asks for a client certificate (CONFIG SET tls-auth-clients yes)
\! redisctl cli CONFIG SET tls-auth-clients yes >/dev/null
-- (the cached TLS connection was accepted before: close it)
\! redisctl cli CLIENT KILL TYPE normal >/dev/null
SELECT vg_step('tls_no_client_cert', a.status, 'unavailable', a::text) FROM lease_fence.acquire('vg:tls-nocert', 30000) a;
\! redisctl cli CONFIG SET tls-auth-clients optional >/dev/null

-- test/valgrind_redis.sql — the "redis" phase of test/valgrind.sh: every Redis
-- path of the lease helper, against a throwaway redis-server, with the server
-- under valgrind memcheck (leak check on).  Run by test/valgrind.sh only:
--
--   psql -X -At -v pw_right=... -v pw_wrong=... -v pw_badmode=... -f this
--
-- as a superuser, with $PATH holding the generated `redisctl` helper (redis-cli
-- on the test's socket; stop / start the Redis; CLIENT PAUSE; wait for a
-- backend's valgrind log to be complete).  Three sessions, one after the
-- other (\c closes the previous one, so its backend exits and runs its exit
-- hooks and valgrind's leak check); the last one ends with Redis stopped.
-- test/valgrind_redis_terminate.sql (a backend terminated while it waits for
-- Redis) runs after it.
--
-- Every check prints one line
--   STEP|name|got|want|ok-or-FAIL|detail
-- and test/valgrind.sh requires every step name in this file to print
-- exactly such lines, all "ok".  Each session also prints PID|<pid> so the
-- script can wait for that backend's leak report before the server stops.
-- Resources are named vg:*, keys are lease_fence:{vg:*}.

\set ON_ERROR_STOP off
\set VERBOSITY default
\pset footer off

-- ------------------------------------------------------------ set-up
CREATE EXTENSION IF NOT EXISTS lease_fence;
CREATE OR REPLACE FUNCTION public.vg_step(step text, got text, want text, detail text DEFAULT '')
RETURNS text LANGUAGE sql AS $$
	SELECT format('STEP|%s|%s|%s|%s|%s', step, coalesce(got, '<null>'), want,
		CASE WHEN got IS NOT DISTINCT FROM want THEN 'ok' ELSE 'FAIL' END, detail)
$$;

-- ================================================ session A
SELECT 'PID|' || pg_backend_pid();
SELECT pg_backend_pid() AS pid_a \gset
SELECT vg_step('preloaded', current_setting('shared_preload_libraries'), 'lease_fence');
-- a role that may not see where Redis is (reasons and WARNINGs hide it)
CREATE ROLE vg_app;
GRANT EXECUTE ON FUNCTION lease_fence.acquire(text, bigint, bigint, text, bigint, boolean, boolean) TO vg_app;

-- ------------------------------------------------ acquired, busy, renewed, released, not_held, lost
SELECT vg_step('acquired', a.status, 'acquired', a::text) FROM lease_fence.acquire('vg:basic', 30000) a;
SELECT identity AS id_basic FROM lease_fence.leases WHERE resource = 'vg:basic' AND state = 'held' \gset
SELECT vg_step('busy', a.status, 'busy', a::text) FROM lease_fence.acquire('vg:basic', 30000) a;
SELECT vg_step('renewed', r.status, 'renewed', r::text) FROM lease_fence.renew('vg:basic', :'id_basic', 30000) r;
SELECT vg_step('renew_insufficient_validity', r.status, 'insufficient_validity', r::text)
	FROM lease_fence.renew('vg:basic', :'id_basic', 30000, 30000) r;
SELECT vg_step('released', r.status, 'released', r::text) FROM lease_fence.release('vg:basic', :'id_basic') r;
SELECT vg_step('not_held', r.status, 'not_held', r::text) FROM lease_fence.release('vg:basic', :'id_basic') r;
SELECT vg_step('lost', r.status, 'lost', r::text) FROM lease_fence.renew('vg:basic', :'id_basic', 30000) r;

-- ------------------------------------------------ stale (a :gen key above ours, within reach), and healed
SELECT lease_fence.next_generation() + 1000 AS vg_stale_gen \gset
\setenv VG_STALE_GEN :vg_stale_gen
\! redisctl cli SET 'lease_fence:{vg:stale}:gen' "$VG_STALE_GEN" >/dev/null
SELECT vg_step('stale', a.status, 'stale', a::text) FROM lease_fence.acquire('vg:stale', 30000) a;
SELECT vg_step('stale_then_acquired', a.status || '/' || (a.generation > :vg_stale_gen)::text, 'acquired/true', a::text)
	FROM lease_fence.acquire('vg:stale', 30000) a;
SELECT identity AS id_stale FROM lease_fence.leases WHERE resource = 'vg:stale' AND state = 'held' \gset
SELECT vg_step('stale_release', r.status, 'released', r::text) FROM lease_fence.release('vg:stale', :'id_stale') r;

-- a :gen key that holds no generation: XX001, thrown after the reply was freed
\! redisctl cli SET 'lease_fence:{vg:corrupt}:gen' zzzzzzzzzzzzzzzzzzzzzzzzzzzzzz >/dev/null
SELECT vg_step('corrupt_gen', a.status, '-', a::text) FROM lease_fence.acquire('vg:corrupt', 30000) a;
SELECT vg_step('corrupt_gen', :'SQLSTATE', 'XX001');
-- a generation this database could not have issued, and one with leading
-- zeros: XX001, nothing moved
\! redisctl cli SET 'lease_fence:{vg:poisoned}:gen' 9223372036854775807 >/dev/null
SELECT vg_step('heal_refused', a.status, '-', a::text) FROM lease_fence.acquire('vg:poisoned', 30000) a;
SELECT vg_step('heal_refused', :'SQLSTATE', 'XX001');
\! redisctl cli SET 'lease_fence:{vg:zeros}:gen' 0000007 >/dev/null
SELECT vg_step('heal_leading_zeros', a.status, '-', a::text) FROM lease_fence.acquire('vg:zeros', 30000) a;
SELECT vg_step('heal_leading_zeros', :'SQLSTATE', 'XX001');
-- a heal within 2^24 but beyond what is left of the heal budget (the stale
-- above used some): XX001, nothing moved; advance_generation renews it
SELECT lease_fence.next_generation() + 16777216 AS vg_budget_gen \gset
\setenv VG_BUDGET_GEN :vg_budget_gen
\! redisctl cli SET 'lease_fence:{vg:budget}:gen' "$VG_BUDGET_GEN" >/dev/null
SELECT vg_step('heal_budget_spent', a.status, '-', a::text) FROM lease_fence.acquire('vg:budget', 30000) a;
SELECT vg_step('heal_budget_spent', :'SQLSTATE', 'XX001');
SELECT vg_step('advance_generation', (lease_fence.advance_generation(lease_fence.next_generation() + 10) > 0)::text, 'true');

-- ------------------------------------------------ insufficient_validity (acquire), then released
SELECT vg_step('insufficient_validity', a.status, 'insufficient_validity', a::text)
	FROM lease_fence.acquire('vg:short', 100, 100) a;
SELECT vg_step('insufficient_validity_state', string_agg(state, ','), 'released')
	FROM lease_fence.leases WHERE resource = 'vg:short';
\! redisctl expect insufficient_validity_key_gone 0 EXISTS 'lease_fence:{vg:short}'

-- ------------------------------------------------ NOSCRIPT: EVALSHA refused, EVAL used
\! redisctl cli SCRIPT FLUSH >/dev/null
\! redisctl cli CONFIG RESETSTAT >/dev/null
SELECT vg_step('noscript_acquired', a.status, 'acquired', a::text) FROM lease_fence.acquire('vg:noscript', 30000) a;
\! redisctl calls noscript_eval_used 1 eval
SELECT identity AS id_noscript FROM lease_fence.leases WHERE resource = 'vg:noscript' AND state = 'held' \gset
SELECT vg_step('noscript_release', r.status, 'released', r::text) FROM lease_fence.release('vg:noscript', :'id_noscript') r;

-- ------------------------------------------------ unavailable: Redis stopped; reconnect after start
SELECT vg_step('down_setup', a.status, 'acquired', a::text) FROM lease_fence.acquire('vg:down-held', 30000) a;
SELECT identity AS id_down FROM lease_fence.leases WHERE resource = 'vg:down-held' AND state = 'held' \gset
\! redisctl stop
SELECT vg_step('unavailable_acquire', a.status, 'unavailable', a::text) FROM lease_fence.acquire('vg:down', 30000) a;
SELECT vg_step('unavailable_renew', r.status, 'unavailable', r::text) FROM lease_fence.renew('vg:down-held', :'id_down', 30000) r;
SELECT vg_step('unavailable_release', r.status, 'unavailable', r::text) FROM lease_fence.release('vg:down-held', :'id_down') r;
SET ROLE vg_app;
SELECT vg_step('unavailable_endpoint_hidden', (a.reason LIKE 'could not connect to Redis at <hidden>: %')::text, 'true', a::text)
	FROM lease_fence.acquire('vg:down', 30000) a;
RESET ROLE;
\! redisctl start
SELECT vg_step('reconnect_acquired', a.status, 'acquired', a::text) FROM lease_fence.acquire('vg:down', 30000) a;
SELECT identity AS id_down2 FROM lease_fence.leases WHERE resource = 'vg:down' AND state = 'held' \gset
SELECT vg_step('reconnect_release', r.status, 'released', r::text) FROM lease_fence.release('vg:down', :'id_down2') r;

-- ------------------------------------------------ unknown: CLIENT PAUSE 3000 ALL
-- acquire during a pause: unknown (acquired IS NULL), its cleanup on a fresh
-- connection times out too: unconfirmed
SELECT vg_step('pause_setup', a.status, 'acquired', a::text) FROM lease_fence.acquire('vg:pause-held', 60000) a;
SELECT identity AS id_pause FROM lease_fence.leases WHERE resource = 'vg:pause-held' AND state = 'held' \gset
\! redisctl pause 3000
SELECT vg_step('unknown_acquire', a.status || '/' || coalesce(a.acquired::text, 'null'), 'unknown/null', a::text)
	FROM lease_fence.acquire('vg:pause-acq', 30000) a;
SELECT vg_step('unknown_acquire_state', string_agg(state, ','), 'unconfirmed')
	FROM lease_fence.leases WHERE resource = 'vg:pause-acq';
\! redisctl wait
SELECT vg_step('after_pause_acquired', a.status, 'acquired', a::text) FROM lease_fence.acquire('vg:after-pause', 30000) a;
SELECT identity AS id_after FROM lease_fence.leases WHERE resource = 'vg:after-pause' AND state = 'held' \gset
SELECT vg_step('after_pause_release', r.status, 'released', r::text) FROM lease_fence.release('vg:after-pause', :'id_after') r;
-- renew during a pause
\! redisctl pause 3000
SELECT vg_step('unknown_renew', r.status || '/' || coalesce(r.renewed::text, 'null'), 'unknown/null', r::text)
	FROM lease_fence.renew('vg:pause-held', :'id_pause', 60000) r;
\! redisctl wait
-- release during a pause: unknown, settled at the end of its transaction
-- (fresh connection, still paused: unconfirmed), retried at backend exit.
-- The unknown renew closed its connection: a new one first (a release
-- nobody holds), or the release's own connection check would wait in the
-- pause and the release would be unavailable
SELECT vg_step('warm_release', r.status, 'not_held', r::text) FROM lease_fence.release('vg:warm', repeat('a', 32)) r;
\! redisctl pause 3000
SELECT vg_step('unknown_release', r.status || '/' || coalesce(r.released::text, 'null'), 'unknown/null', r::text)
	FROM lease_fence.release('vg:pause-held', :'id_pause') r;
SELECT vg_step('unknown_release_state', string_agg(state, ','), 'unconfirmed')
	FROM lease_fence.leases WHERE resource = 'vg:pause-held';
\! redisctl wait

-- ------------------------------------------------ statement_timeout while Redis is paused: 57014
-- (the cleanups above dropped the connection: a new one, and its key_prefix
-- owner check, first, so that the acquire below is what waits)
SELECT vg_step('timeout_warm', a.status, 'acquired', a::text) FROM lease_fence.acquire('vg:timeout-warm', 30000) a;
SELECT identity AS id_twarm FROM lease_fence.leases WHERE resource = 'vg:timeout-warm' AND state = 'held' \gset
SELECT vg_step('timeout_warm_release', r.status, 'released', r::text) FROM lease_fence.release('vg:timeout-warm', :'id_twarm') r;
SET lease_fence.command_timeout_ms = 5000;
\! redisctl pause 3000
SET statement_timeout = 1000;
SELECT vg_step('timeout_acquire', a.status, '-', a::text) FROM lease_fence.acquire('vg:timeout', 30000) a;
\set err :SQLSTATE
RESET statement_timeout;
SELECT vg_step('timeout_acquire', :'err', '57014');
SELECT vg_step('timeout_acquire_state', string_agg(state, ','), 'unconfirmed')
	FROM lease_fence.leases WHERE resource = 'vg:timeout';
\! redisctl wait
SELECT vg_step('timeout_renew_setup', a.status, 'acquired', a::text) FROM lease_fence.acquire('vg:timeout-renew', 60000) a;
SELECT identity AS id_trenew FROM lease_fence.leases WHERE resource = 'vg:timeout-renew' AND state = 'held' \gset
\! redisctl pause 3000
SET statement_timeout = 1000;
SELECT vg_step('timeout_renew', r.status, '-', r::text) FROM lease_fence.renew('vg:timeout-renew', :'id_trenew', 60000) r;
\set err :SQLSTATE
RESET statement_timeout;
SELECT vg_step('timeout_renew', :'err', '57014');
SELECT vg_step('timeout_renew_state', string_agg(state, ','), 'unconfirmed')
	FROM lease_fence.leases WHERE resource = 'vg:timeout-renew';
\! redisctl wait
SELECT vg_step('timeout_release_setup', a.status, 'acquired', a::text) FROM lease_fence.acquire('vg:timeout-release', 60000) a;
SELECT identity AS id_trel FROM lease_fence.leases WHERE resource = 'vg:timeout-release' AND state = 'held' \gset
\! redisctl pause 3000
SET statement_timeout = 1000;
SELECT vg_step('timeout_release', r.status, '-', r::text) FROM lease_fence.release('vg:timeout-release', :'id_trel') r;
\set err :SQLSTATE
RESET statement_timeout;
SELECT vg_step('timeout_release', :'err', '57014');
SELECT vg_step('timeout_release_state', string_agg(state, ','), 'unconfirmed')
	FROM lease_fence.leases WHERE resource = 'vg:timeout-release';
\! redisctl wait
-- the check at COMMIT interrupted: statement_timeout is not armed there
-- (PostgreSQL disarms it before it commits), so pg_cancel_backend() from a
-- second session: 57014, the transaction rolls back (a young lease is asked
-- about only with commit_check = always)
SET lease_fence.commit_check = 'always';
BEGIN;
SELECT vg_step('cancel_commit_setup', a.status, 'acquired', a::text)
	FROM lease_fence.acquire('vg:tx-cancel', 60000, 0, 'transaction') a;
SET LOCAL lease_fence.command_timeout_ms = 30000;
\! redisctl pause 8000
\setenv VG_PID :pid_a
\! redisctl cancel-later "$VG_PID"
COMMIT;
\set err :SQLSTATE
SELECT vg_step('cancel_commit', :'err', '57014');
SELECT vg_step('cancel_commit_state', string_agg(state, ','), 'unconfirmed')
	FROM lease_fence.leases WHERE resource = 'vg:tx-cancel';
RESET lease_fence.commit_check;
\! redisctl wait
RESET lease_fence.command_timeout_ms;
-- the answer to a release sent after COMMIT, awaited before the next request
-- while Redis is paused: a cancel ends that wait at once (57014; the release
-- is unconfirmed, its WARNING names no resource), the request is not sent
SET lease_fence.command_timeout_ms = 30000;
BEGIN;
SELECT vg_step('cancel_drain_setup', a.status, 'acquired', a::text)
	FROM lease_fence.acquire('vg:tx-drain', 60000, 0, 'transaction') a;
\! redisctl pause 8000
COMMIT;
\! redisctl cancel-later "$VG_PID"
SELECT a.status FROM lease_fence.acquire('vg:after-drain', 30000) a;
\set err :SQLSTATE
SELECT vg_step('cancel_drain', :'err', '57014');
\! redisctl wait
RESET lease_fence.command_timeout_ms;

-- ------------------------------------------------ transaction scope
SELECT vg_step('tx_outside_block', a.status, '-', a::text) FROM lease_fence.acquire('vg:tx-none', 30000, 0, 'transaction') a;
SELECT vg_step('tx_outside_block', :'SQLSTATE', '25P01');
-- COMMIT: not asked about (a young lease), released without waiting for the
-- answer, which the next command (the ROLLBACK case's acquire) reads
BEGIN;
SELECT vg_step('tx_commit_acquired', a.status, 'acquired', a::text)
	FROM lease_fence.acquire('vg:tx-commit', 30000, 0, 'transaction') a;
SELECT vg_step('tx_commit_generation', (lease_fence.current_generation() = generation)::text, 'true')
	FROM lease_fence.leases WHERE resource = 'vg:tx-commit' AND state = 'held';
COMMIT;
SELECT vg_step('tx_commit', :'SQLSTATE', '00000');
SELECT vg_step('tx_commit_state', string_agg(state, ','), 'released') FROM lease_fence.leases WHERE resource = 'vg:tx-commit';
\! redisctl expect tx_commit_key_gone 0 EXISTS 'lease_fence:{vg:tx-commit}'
-- ROLLBACK: released
BEGIN;
SELECT vg_step('tx_rollback_acquired', a.status, 'acquired', a::text)
	FROM lease_fence.acquire('vg:tx-rollback', 30000, 0, 'transaction') a;
ROLLBACK;
SELECT vg_step('tx_rollback_state', string_agg(state, ','), 'released') FROM lease_fence.leases WHERE resource = 'vg:tx-rollback';
\! redisctl expect tx_rollback_key_gone 0 EXISTS 'lease_fence:{vg:tx-rollback}'
-- the backend's connections: listed, then closed by redis_disconnect(),
-- which first reads the answer of a release sent after COMMIT
SELECT vg_step('redis_connections', string_agg(kind || '/' || tls, ','), 'server/false')
	FROM lease_fence.redis_connections();
BEGIN;
SELECT vg_step('disconnect_tx_acquired', a.status, 'acquired', a::text)
	FROM lease_fence.acquire('vg:tx-disconnect', 30000, 0, 'transaction') a;
COMMIT;
SELECT vg_step('redis_disconnect', lease_fence.redis_disconnect()::text, '1');
SELECT vg_step('redis_connections_none', count(*)::text, '0') FROM lease_fence.redis_connections();
\! redisctl expect disconnect_tx_key_gone 0 EXISTS 'lease_fence:{vg:tx-disconnect}'
-- LF010: the key was deleted behind our back (a young lease is asked about
-- only with commit_check = always)
SET lease_fence.commit_check = 'always';
BEGIN;
SELECT vg_step('tx_verified_acquired', a.status, 'acquired', a::text)
	FROM lease_fence.acquire('vg:tx-verified', 30000, 0, 'transaction') a;
COMMIT;
SELECT vg_step('tx_verified', :'SQLSTATE', '00000');
BEGIN;
SELECT vg_step('tx_lost_acquired', a.status, 'acquired', a::text)
	FROM lease_fence.acquire('vg:tx-lost', 30000, 0, 'transaction') a;
\! redisctl cli DEL 'lease_fence:{vg:tx-lost}' >/dev/null
COMMIT;
SELECT vg_step('tx_lf010_lost', :'SQLSTATE', 'LF010');
-- LF010: too little validity left at commit
BEGIN;
SELECT vg_step('tx_short_acquired', a.status, 'acquired', a::text)
	FROM lease_fence.acquire('vg:tx-short', 30000, 29000, 'transaction') a;
SELECT pg_sleep(1.5) \g /dev/null
COMMIT;
SELECT vg_step('tx_lf010_validity', :'SQLSTATE', 'LF010');
\! redisctl expect tx_lf010_keys_gone 0 EXISTS 'lease_fence:{vg:tx-lost}' 'lease_fence:{vg:tx-short}'
-- LF010: a renew found the lease lost (key deleted): a fenced write under
-- it is refused; a renew left too little validity: COMMIT is refused
BEGIN;
SELECT vg_step('tx_renew_lost_acquired', a.status, 'acquired', a::text)
	FROM lease_fence.acquire('vg:tx-renew-lost', 30000, 0, 'transaction') a;
SELECT identity AS id_trl FROM lease_fence.leases WHERE resource = 'vg:tx-renew-lost' AND state = 'held' \gset
\! redisctl cli DEL 'lease_fence:{vg:tx-renew-lost}' >/dev/null
SELECT vg_step('tx_renew_lost', r.status, 'lost', r::text) FROM lease_fence.renew('vg:tx-renew-lost', :'id_trl', 30000) r;
SELECT vg_step('tx_renew_lost_state', string_agg(state, ','), 'lost') FROM lease_fence.leases WHERE resource = 'vg:tx-renew-lost';
SELECT lease_fence.fence_resource('vg:tx-renew-lost') \g /dev/null
\set err :SQLSTATE
ROLLBACK;
SELECT vg_step('tx_renew_lost_write', :'err', 'LF010');
BEGIN;
SELECT vg_step('tx_renew_short_acquired', a.status, 'acquired', a::text)
	FROM lease_fence.acquire('vg:tx-renew-short', 30000, 0, 'transaction') a;
SELECT identity AS id_trs FROM lease_fence.leases WHERE resource = 'vg:tx-renew-short' AND state = 'held' \gset
SELECT vg_step('tx_renew_short', r.status, 'insufficient_validity', r::text)
	FROM lease_fence.renew('vg:tx-renew-short', :'id_trs', 1000, 1000) r;
COMMIT;
SELECT vg_step('tx_renew_short_commit', :'SQLSTATE', 'LF010');
\! redisctl expect tx_renew_keys_gone 0 EXISTS 'lease_fence:{vg:tx-renew-lost}' 'lease_fence:{vg:tx-renew-short}'
-- LF010: Redis paused at commit, the check times out; its cleanup too
BEGIN;
SELECT vg_step('tx_pause_acquired', a.status, 'acquired', a::text)
	FROM lease_fence.acquire('vg:tx-pause', 30000, 0, 'transaction') a;
\! redisctl pause 3000
COMMIT;
SELECT vg_step('tx_lf010_unverified', :'SQLSTATE', 'LF010');
SELECT vg_step('tx_lf010_unverified_state', string_agg(state, ','), 'unconfirmed')
	FROM lease_fence.leases WHERE resource = 'vg:tx-pause';
\! redisctl wait
RESET lease_fence.commit_check;

-- ------------------------------------------------ session scope: released when this backend exits
SELECT vg_step('session_acquired', a.status, 'acquired', a::text)
	FROM lease_fence.acquire('vg:session', 60000, 0, 'session') a;
\! redisctl expect session_key_held 1 EXISTS 'lease_fence:{vg:session}'

-- ------------------------------------------------ the views
SELECT 'LEASE|' || concat_ws('|', resource, scope, state, generation, expires_at IS NOT NULL)
	FROM lease_fence.leases ORDER BY acquired_at, resource;
SELECT vg_step('leases_view_unconfirmed', count(*)::text, '7')
	FROM lease_fence.leases WHERE state = 'unconfirmed';
SELECT vg_step('stats_cluster_a', string_agg(DISTINCT scope, ','), 'cluster') FROM lease_fence.stats;

-- end session A: its backend releases vg:session and settles the seven
-- unconfirmed leases at exit
\setenv VG_PID :pid_a
\c

-- ================================================ session B
SELECT 'PID|' || pg_backend_pid();
SELECT pg_backend_pid() AS pid_b \gset
\setenv VG_PID_B :pid_b
\! redisctl wait-exit session_a_exited "$VG_PID"
\! redisctl expect session_released_at_exit 0 EXISTS 'lease_fence:{vg:session}'
\! redisctl expect unconfirmed_settled_at_exit 0 EXISTS 'lease_fence:{vg:pause-held}' 'lease_fence:{vg:timeout-renew}' 'lease_fence:{vg:timeout-release}' 'lease_fence:{vg:tx-pause}' 'lease_fence:{vg:tx-cancel}' 'lease_fence:{vg:pause-acq}' 'lease_fence:{vg:timeout}'

-- ------------------------------------------------ the password file
SELECT vg_step('auth_baseline', a.status, 'acquired', a::text) FROM lease_fence.acquire('vg:auth-base', 30000) a;
\! redisctl cli CONFIG SET requirepass "$VG_REDIS_PW" >/dev/null
SET lease_fence.redis_password_file = :'pw_wrong';
SELECT vg_step('auth_wrong_password', a.status, 'unavailable', a::text) FROM lease_fence.acquire('vg:auth', 30000) a;
SET lease_fence.redis_password_file = :'pw_badmode';
SELECT vg_step('auth_file_mode_0644', a.status, 'unavailable', a::text) FROM lease_fence.acquire('vg:auth', 30000) a;
RESET lease_fence.redis_password_file;
-- (the cached connection without a password was made before requirepass,
-- and Redis keeps it authenticated: close it, so a new one meets NOAUTH)
\! REDISCLI_AUTH="$VG_REDIS_PW" redisctl cli CLIENT KILL TYPE normal >/dev/null
SELECT vg_step('auth_noauth_reply', a.status, 'unavailable', a::text) FROM lease_fence.acquire('vg:auth', 30000) a;
SET lease_fence.redis_password_file = :'pw_right';
SELECT vg_step('auth_right_password', a.status, 'acquired', a::text) FROM lease_fence.acquire('vg:auth', 30000) a;
SELECT identity AS id_auth FROM lease_fence.leases WHERE resource = 'vg:auth' AND state = 'held' \gset
SELECT vg_step('auth_release', r.status, 'released', r::text) FROM lease_fence.release('vg:auth', :'id_auth') r;
\! REDISCLI_AUTH="$VG_REDIS_PW" redisctl cli CONFIG SET requirepass '' >/dev/null
RESET lease_fence.redis_password_file;
SELECT identity AS id_base FROM lease_fence.leases WHERE resource = 'vg:auth-base' AND state = 'held' \gset
SELECT vg_step('auth_reset_release', r.status, 'released', r::text) FROM lease_fence.release('vg:auth-base', :'id_base') r;


-- AUTH during a pause: the handshake times out (unavailable), or is
-- interrupted by statement_timeout (57014, nothing recorded)
\! redisctl cli CONFIG SET requirepass "$VG_REDIS_PW" >/dev/null
SET lease_fence.redis_password_file = :'pw_right';
SET lease_fence.connect_timeout_ms = 500;
-- (no cached connection: the acquire's own AUTH is what waits in the pause)
\! REDISCLI_AUTH="$VG_REDIS_PW" redisctl cli CLIENT KILL TYPE normal >/dev/null
\! REDISCLI_AUTH="$VG_REDIS_PW" redisctl pause 3000
SELECT vg_step('auth_paused_unavailable', a.status, 'unavailable', a::text) FROM lease_fence.acquire('vg:auth-pause', 30000) a;
SET lease_fence.connect_timeout_ms = 5000;
SET statement_timeout = 1000;
SELECT vg_step('auth_paused_interrupted', a.status, '-', a::text) FROM lease_fence.acquire('vg:auth-pause', 30000) a;
\set err :SQLSTATE
RESET statement_timeout;
SELECT vg_step('auth_paused_interrupted', :'err', '57014');
SELECT vg_step('auth_paused_nothing_recorded', count(*)::text, '0') FROM lease_fence.leases WHERE resource = 'vg:auth-pause';
\! REDISCLI_AUTH="$VG_REDIS_PW" redisctl wait
RESET lease_fence.connect_timeout_ms;
-- an ACL user: AUTH user password
\! REDISCLI_AUTH="$VG_REDIS_PW" redisctl cli ACL SETUSER vguser on ">$VG_REDIS_PW" '~*' '&*' '+@all' >/dev/null
SET lease_fence.redis_user = 'vguser';
SELECT vg_step('acl_user_acquired', a.status, 'acquired', a::text) FROM lease_fence.acquire('vg:acl', 30000) a;
SELECT identity AS id_acl FROM lease_fence.leases WHERE resource = 'vg:acl' AND state = 'held' \gset
SELECT vg_step('acl_user_release', r.status, 'released', r::text) FROM lease_fence.release('vg:acl', :'id_acl') r;
\! REDISCLI_AUTH="$VG_REDIS_PW" redisctl cli CONFIG SET requirepass '' >/dev/null
-- redis_user without a password file: refused before anything is sent
RESET lease_fence.redis_password_file;
SELECT vg_step('user_without_password_file', a.status, 'unavailable', a::text) FROM lease_fence.acquire('vg:acl', 30000) a;
RESET lease_fence.redis_user;
-- redis_db: the SELECT handshake
SET lease_fence.redis_db = 1;
SELECT vg_step('db1_acquired', a.status, 'acquired', a::text) FROM lease_fence.acquire('vg:db1', 30000) a;
\! redisctl expect db1_key_in_db1 1 -n 1 EXISTS 'lease_fence:{vg:db1}'
SELECT identity AS id_db1 FROM lease_fence.leases WHERE resource = 'vg:db1' AND state = 'held' \gset
SELECT vg_step('db1_release', r.status, 'released', r::text) FROM lease_fence.release('vg:db1', :'id_db1') r;
RESET lease_fence.redis_db;

-- ------------------------------------------------ key_prefix owned by another database, then taken over
\! redisctl cli SET 'vg-other:owner' '1:2:elsewhere' >/dev/null
SET lease_fence.key_prefix = 'vg-other:';
SELECT vg_step('prefix_other_owner', a.status, 'unavailable', a::text) FROM lease_fence.acquire('vg:prefix', 30000) a;
SET ROLE vg_app;
SELECT vg_step('prefix_other_owner_reason', a.reason, 'key_prefix on this Redis belongs to another database', a::text)
	FROM lease_fence.acquire('vg:prefix', 30000) a;
RESET ROLE;
SELECT vg_step('prefix_takeover', lease_fence.claim_key_prefix(), '1:2:elsewhere');
SELECT vg_step('prefix_taken_over', a.status, 'acquired', a::text) FROM lease_fence.acquire('vg:prefix', 30000) a;
SELECT identity AS id_prefix FROM lease_fence.leases WHERE resource = 'vg:prefix' AND state = 'held' \gset
SELECT vg_step('prefix_release', r.status, 'released', r::text) FROM lease_fence.release('vg:prefix', :'id_prefix') r;
RESET lease_fence.key_prefix;

-- ------------------------------------------------ error replies that are not "unavailable": unknown
-- (WRONGTYPE inside the scripts; the reply text is copied before it is freed)
\! redisctl cli RPUSH 'lease_fence:{vg:wrongtype}:gen' x >/dev/null
SELECT vg_step('error_reply_acquire', a.status || '/' || coalesce(a.acquired::text, 'null'), 'unknown/null', a::text)
	FROM lease_fence.acquire('vg:wrongtype', 30000) a;
SELECT vg_step('error_reply_acquire_state', string_agg(state, ','), 'released')
	FROM lease_fence.leases WHERE resource = 'vg:wrongtype';
\! redisctl cli RPUSH 'lease_fence:{vg:wrongtype-key}' x >/dev/null
SELECT vg_step('error_reply_renew', r.status || '/' || coalesce(r.renewed::text, 'null'), 'unknown/null', r::text)
	FROM lease_fence.renew('vg:wrongtype-key', '0123456789abcdef0123456789abcdef', 30000) r;
SELECT vg_step('error_reply_release', r.status || '/' || coalesce(r.released::text, 'null'), 'unknown/null', r::text)
	FROM lease_fence.release('vg:wrongtype-key', '0123456789abcdef0123456789abcdef') r;
-- at COMMIT: LF010 "could not be verified"; its cleanup gets an error reply
-- too (unconfirmed, retried at exit, unconfirmed again)
SET lease_fence.commit_check = 'always';
BEGIN;
SELECT vg_step('error_reply_commit_setup', a.status, 'acquired', a::text)
	FROM lease_fence.acquire('vg:tx-wrongtype', 30000, 0, 'transaction') a;
\! redisctl cli DEL 'lease_fence:{vg:tx-wrongtype}' >/dev/null
\! redisctl cli RPUSH 'lease_fence:{vg:tx-wrongtype}' x >/dev/null
COMMIT;
SELECT vg_step('error_reply_commit', :'SQLSTATE', 'LF010');
SELECT vg_step('error_reply_commit_state', string_agg(state, ','), 'unconfirmed')
	FROM lease_fence.leases WHERE resource = 'vg:tx-wrongtype';
RESET lease_fence.commit_check;

SELECT 'LEASE|' || concat_ws('|', resource, scope, state, generation, expires_at IS NOT NULL)
	FROM lease_fence.leases ORDER BY acquired_at, resource;

-- ------------------------------------------------ waiting for a busy lease
SELECT vg_step('wait_holder', a.status, 'acquired', a::text) FROM lease_fence.acquire('vg:wait', 60000, 0, 'session') a;
SELECT vg_step('wait_deadline_busy', a.status, 'busy', a::text) FROM lease_fence.acquire('vg:wait', 1000, wait_ms => 300) a;
-- a message on the release channel wakes the wait (still busy: it waits on),
-- and the holder's lease running out lets it in
SELECT vg_step('wait_msg_holder', a.status, 'acquired', a::text) FROM lease_fence.acquire('vg:wait-msg', 3000) a;
\! (sleep 1; redisctl cli PUBLISH 'lease_fence:{vg:wait-msg}:released' '' >/dev/null) &
SELECT vg_step('wait_woken_then_expiry', a.status, 'acquired', a::text) FROM lease_fence.acquire('vg:wait-msg', 30000, wait_ms => 30000) a;
SELECT vg_step('wait_woken_counted', (count > 0)::text, 'true') FROM lease_fence.stats WHERE operation = 'wait' AND outcome = 'woken';
-- a cancel during the wait: 57014
\! redisctl cancel-later "$VG_PID_B"
SELECT * FROM lease_fence.acquire('vg:wait', 1000, wait_ms => 60000);
SELECT vg_step('wait_cancel', :'SQLSTATE', '57014');
\! redisctl expect wait_cancel_unsubscribed 'lease_fence:{vg:wait}:released 0' PUBSUB NUMSUB 'lease_fence:{vg:wait}:released'

-- ------------------------------------------------ keep-alive (the worker runs under valgrind too)
CREATE TABLE vg_ka (x int);
SELECT lease_fence.protect('vg_ka');
SELECT a.identity AS id_ka, a.generation AS gen_ka
	FROM lease_fence.acquire('vg:ka', 1500, scope => 'session', keepalive => true) a \gset
SELECT vg_step('keepalive_state_active', lease_fence.keepalive_state(:'id_ka'), 'active');
SELECT pg_sleep(4);
\! redisctl expect keepalive_renewed_past_ttl 1 EXISTS 'lease_fence:{vg:ka}'
\! redisctl cli SET 'lease_fence:{vg:ka}' ffffffffffffffffffffffffffffffff PX 60000 >/dev/null
SELECT pg_sleep(2);
SELECT vg_step('keepalive_state_lost', lease_fence.keepalive_state(:'id_ka'), 'lost');
BEGIN;
SET LOCAL lease_fence.generation = :gen_ka;
INSERT INTO vg_ka VALUES (1);
\set ka_write_state :SQLSTATE
ROLLBACK;
SELECT vg_step('keepalive_lost_write', :'ka_write_state', 'LF010');
BEGIN;
SET LOCAL lease_fence.generation = :gen_ka;
TRUNCATE vg_ka;
\set ka_truncate_state :SQLSTATE
ROLLBACK;
SELECT vg_step('keepalive_lost_truncate', :'ka_truncate_state', 'LF010');
SELECT vg_step('keepalive_lost_release', r.status, 'not_held', r::text) FROM lease_fence.release('vg:ka', :'id_ka') r;
SELECT vg_step('keepalive_counted', string_agg(outcome, ',' ORDER BY outcome), 'lost,renewed')
	FROM lease_fence.stats WHERE operation = 'keepalive' AND outcome IN ('renewed', 'lost') AND count > 0;
\! redisctl cli DEL 'lease_fence:{vg:ka}' >/dev/null
-- a fenced write under a kept-alive lease cannot be prepared
SELECT a.identity AS id_ka2, a.generation AS gen_ka2
	FROM lease_fence.acquire('vg:ka2', 30000, scope => 'session', keepalive => true) a \gset
BEGIN;
SET LOCAL lease_fence.generation = :gen_ka2;
INSERT INTO vg_ka VALUES (2);
PREPARE TRANSACTION 'vg_ka2';
SELECT vg_step('keepalive_prepare_refused', :'SQLSTATE', '0A000');
SELECT vg_step('keepalive_prepare_release', r.status, 'released', r::text) FROM lease_fence.release('vg:ka2', :'id_ka2') r;

-- ------------------------------------------------ one deadline for the cleanups at a transaction's end
BEGIN;
SELECT count(*) FROM lease_fence.acquire('vg:budget-tx-1', 30000, 0, 'transaction') a WHERE a.status = 'acquired';
SELECT count(*) FROM lease_fence.acquire('vg:budget-tx-2', 30000, 0, 'transaction') a WHERE a.status = 'acquired';
SELECT count(*) FROM lease_fence.acquire('vg:budget-tx-3', 30000, 0, 'transaction') a WHERE a.status = 'acquired';
\! redisctl pause 3000
ROLLBACK;
SELECT vg_step('budget_rollback_untried', (count > 0)::text, 'true') FROM lease_fence.stats WHERE operation = 'cleanup' AND outcome = 'skipped';
\! redisctl wait
-- and for those at the backend's exit (three session leases, Redis frozen)
SELECT count(*) FROM lease_fence.acquire('vg:budget-exit-1', 30000, 0, 'session') a WHERE a.status = 'acquired';
SELECT count(*) FROM lease_fence.acquire('vg:budget-exit-2', 30000, 0, 'session') a WHERE a.status = 'acquired';
SELECT count(*) FROM lease_fence.acquire('vg:budget-exit-3', 30000, 0, 'session') a WHERE a.status = 'acquired';
\! redisctl pause 3000

\setenv VG_PID :pid_b
\c

-- ================================================ session C: the counters, once A and B are gone
SELECT 'PID|' || pg_backend_pid();
\! redisctl wait-exit session_b_exited "$VG_PID"
\! redisctl wait
SELECT vg_step('stats_cluster', string_agg(DISTINCT scope, ','), 'cluster') FROM lease_fence.stats;
SELECT vg_step('stats_every_lease_outcome',
		coalesce(string_agg(operation || '/' || outcome, ',' ORDER BY operation, outcome) FILTER (WHERE count = 0), 'none'),
		'none')
	FROM lease_fence.stats WHERE operation IN ('acquire', 'renew', 'release', 'cleanup', 'commit_check')
	-- (unreplicated needs a replica setting: test/valgrind_redis_topology.sql)
	AND (operation, outcome) NOT IN (('acquire', 'unreplicated'), ('renew', 'unreplicated'));
SELECT 'STAT|' || concat_ws('|', operation, outcome, count) FROM lease_fence.stats WHERE count > 0 ORDER BY operation, outcome;

-- who holds what: the lease table, holder() (its script and reply), the
-- latency histograms
SELECT a.identity AS who_id FROM lease_fence.acquire('vg:who', 30000) a \gset
SELECT vg_step('all_leases_row', count(*)::text, '1') FROM lease_fence.all_leases
	WHERE resource = 'vg:who' AND pid = pg_backend_pid() AND identity = :'who_id';
SELECT vg_step('holder_held', h.held || ' ' || h.identity || ' ' || (h.pid = pg_backend_pid()),
		'true ' || :'who_id' || ' true', h::text)
	FROM lease_fence.holder('vg:who') h;
SELECT vg_step('holder_free', h.held::text, 'false', h::text) FROM lease_fence.holder('vg:nobody') h;
SELECT vg_step('released_who', r.status, 'released') FROM lease_fence.release('vg:who', :'who_id') r;
SELECT vg_step('all_leases_gone', count(*)::text, '0') FROM lease_fence.all_leases WHERE resource = 'vg:who';
SELECT vg_step('latency_samples', (sum(count) FILTER (WHERE le = 'Infinity') > 0)::text, 'true')
	FROM lease_fence.latency;

-- ------------------------------------------------ elections: campaign, leader, resign, take_over
-- bad arguments: 22023 before anything is sent
SELECT * FROM lease_fence.campaign('vg:el', 30000, value => repeat('x', 1025));
SELECT vg_step('campaign_value_too_long', :'SQLSTATE', '22023');
SELECT * FROM lease_fence.campaign('vg:el', 30000, scope => 'transaction');
SELECT vg_step('campaign_scope_transaction', :'SQLSTATE', '22023');
SELECT * FROM lease_fence.leader(NULL);
SELECT vg_step('leader_null', :'SQLSTATE', '22023');
SELECT * FROM lease_fence.resign('vg:el', 'not-an-identity');
SELECT vg_step('resign_bad_identity', :'SQLSTATE', '22023');
SELECT * FROM lease_fence.take_over('vg:el', 30000, timeout_ms => -1);
SELECT vg_step('take_over_bad_timeout', :'SQLSTATE', '22023');
\! redisctl expect campaign_bad_nothing_written 0 EXISTS 'lease_fence:{vg:el}' 'lease_fence:{vg:el}:value'
-- a win (with a value: the acquire script's third key), the fence raised to
-- the term, leader() (its script's reply and the value), a follower whose
-- wait ends busy (subscribed), a resign, and not_held after it
SELECT c.identity AS el_id, c.term AS el_term
	FROM lease_fence.campaign('vg:el', 30000, wait_ms => 10000, value => E'host-a\n''quoted'' \u00e9') c \gset
SELECT vg_step('campaign_won', (:el_term > 0)::text, 'true');
SELECT vg_step('campaign_fence', generation::text, :'el_term') FROM lease_fence.resource_fences WHERE resource = 'vg:el';
SELECT vg_step('leader_held', l.held || ' ' || l.term || ' ' || l.identity || ' ' || (l.pid = pg_backend_pid()),
		'true ' || :'el_term' || ' ' || :'el_id' || ' true', l::text)
	FROM lease_fence.leader('vg:el') l;
SELECT vg_step('leader_value', l.value, E'host-a\n''quoted'' \u00e9') FROM lease_fence.leader('vg:el') l;
SELECT vg_step('campaign_busy', c.status, 'busy', c::text) FROM lease_fence.campaign('vg:el', 30000, wait_ms => 300) c;
SELECT vg_step('resign_released', r.status, 'released', r::text) FROM lease_fence.resign('vg:el', :'el_id') r;
SELECT vg_step('resign_not_held', r.status, 'not_held', r::text) FROM lease_fence.resign('vg:el', :'el_id') r;
SELECT vg_step('leader_nobody', l.held || ' ' || l.term || ' ' || (l.value IS NULL), 'false ' || :'el_term' || ' true', l::text)
	FROM lease_fence.leader('vg:el') l;
-- a campaign that waits for the leader's TTL to run out (no resign), then wins
SELECT c.identity AS el_ttl_id FROM lease_fence.campaign('vg:el-ttl', 1500, wait_ms => 10000, scope => 'explicit') c \gset
SELECT c.status AS el_ttl_status, c.identity AS el_ttl_id2
	FROM lease_fence.campaign('vg:el-ttl', 30000, wait_ms => 30000, scope => 'explicit') c \gset
SELECT vg_step('campaign_won_after_ttl', :'el_ttl_status', 'acquired');
SELECT vg_step('campaign_ttl_resign', r.status, 'released', r::text) FROM lease_fence.resign('vg:el-ttl', :'el_ttl_id2') r;
-- a win whose transaction rolls back holds nothing
BEGIN;
SELECT vg_step('campaign_in_xact', c.status, 'acquired', c::text) FROM lease_fence.campaign('vg:el-rb', 30000, wait_ms => 0) c;
ROLLBACK;
\! redisctl expect campaign_rolled_back_released 0 EXISTS 'lease_fence:{vg:el-rb}'
-- take_over: of a lease this session holds (marked lost in the lease
-- table), of a resource whose generation key is above (healed, retried),
-- and refused to a role without EXECUTE
SELECT a.identity AS to_victim, a.generation AS to_victim_gen
	FROM lease_fence.acquire('vg:to', 60000, scope => 'session') a \gset
SELECT t.identity AS to_id, t.generation AS to_gen FROM lease_fence.take_over('vg:to', 30000) t \gset
\setenv VG_TO_ID :to_id
\! redisctl expect take_over_key_ours "$VG_TO_ID" GET 'lease_fence:{vg:to}'
SELECT vg_step('take_over_fence', generation::text, :'to_gen') FROM lease_fence.resource_fences WHERE resource = 'vg:to';
BEGIN;
SET LOCAL lease_fence.generation = :to_victim_gen;
INSERT INTO vg_ka VALUES (3);
\set to_write_state :SQLSTATE
ROLLBACK;
SELECT vg_step('take_over_victim_write', :'to_write_state', 'LF010');
SELECT vg_step('take_over_victim_renew', r.status, 'lost', r::text) FROM lease_fence.renew('vg:to', :'to_victim', 30000) r;
SELECT vg_step('take_over_victim_release', r.status, 'not_held', r::text) FROM lease_fence.release('vg:to', :'to_victim') r;
SELECT vg_step('take_over_release', r.status, 'released', r::text) FROM lease_fence.release('vg:to', :'to_id') r;
SELECT lease_fence.next_generation() + 1000 AS to_stale_gen \gset
\setenv VG_TO_STALE_GEN :to_stale_gen
\! redisctl cli SET 'lease_fence:{vg:to-stale}:gen' "$VG_TO_STALE_GEN" >/dev/null
SELECT vg_step('take_over_healed', t.status || '/' || (t.generation > :to_stale_gen)::text, 'acquired/true', t::text)
	FROM lease_fence.take_over('vg:to-stale', 30000) t;
SELECT identity AS to_stale_id FROM lease_fence.leases WHERE resource = 'vg:to-stale' AND state = 'held' \gset
SELECT vg_step('take_over_healed_release', r.status, 'released', r::text) FROM lease_fence.release('vg:to-stale', :'to_stale_id') r;
SET ROLE vg_app;
SELECT * FROM lease_fence.take_over('vg:to', 30000);
SELECT vg_step('take_over_no_grant', :'SQLSTATE', '42501');
RESET ROLE;
-- a value key holding more than lease_fence writes: leader() is XX001
\! redisctl cli SETRANGE 'lease_fence:{vg:el-big}:value' 2047 x >/dev/null
SELECT * FROM lease_fence.leader('vg:el-big');
SELECT vg_step('leader_oversized_value', :'SQLSTATE', 'XX001');

-- ------------------------------------------------ fair waiting: acquire(fair), campaign(fair), queue()
SELECT * FROM lease_fence.acquire('vg:fair', 30000, fair => NULL);
SELECT vg_step('fair_null', :'SQLSTATE', '22023');
-- a waiter of another cluster (its entry and waiter key written here):
-- queue() shows it (no pid); a fair wait joins behind it and leaves at its
-- deadline (busy); fair and unfair acquires without a wait are busy though
-- nobody holds the lease; a fair wait ended by statement_timeout leaves at
-- the end of its transaction
\! redisctl cli ZADD 'lease_fence:{vg:fair}:queue' 1 aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa >/dev/null
\! redisctl cli SET 'lease_fence:{vg:fair}:queue:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa' 1 PX 600000 >/dev/null
SELECT vg_step('fair_queue_other',
		string_agg(q.position || ' ' || q.identity || ' ' || (q.pid IS NULL) || ' ' || (q.ttl_ms > 0), ','),
		'1 aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa true true')
	FROM lease_fence.queue('vg:fair') q;
SELECT vg_step('fair_wait_busy', a.status, 'busy', a::text)
	FROM lease_fence.acquire('vg:fair', 30000, wait_ms => 300, fair => true) a;
SELECT vg_step('fair_wait_left', count(*)::text, '1') FROM lease_fence.queue('vg:fair');
SELECT vg_step('fair_zero_busy', a.status, 'busy', a::text) FROM lease_fence.acquire('vg:fair', 30000, fair => true) a;
SELECT vg_step('fair_unfair_yields', a.status, 'busy', a::text) FROM lease_fence.acquire('vg:fair', 30000) a;
SET statement_timeout = 500;
SELECT vg_step('fair_timeout', a.status, '-', a::text)
	FROM lease_fence.acquire('vg:fair', 30000, wait_ms => 10000, fair => true) a;
\set err :SQLSTATE
RESET statement_timeout;
SELECT vg_step('fair_timeout', :'err', '57014');
SELECT vg_step('fair_timeout_left', count(*)::text, '1') FROM lease_fence.queue('vg:fair');
-- the other waiter dead (its waiter key gone): skipped by queue(), removed
-- by the next grant; a fair wait queued behind a holder is granted when the
-- holder's lease runs out
\! redisctl cli DEL 'lease_fence:{vg:fair}:queue:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa' >/dev/null
SELECT vg_step('fair_queue_dead_skipped', count(*)::text, '0') FROM lease_fence.queue('vg:fair');
SELECT vg_step('fair_acquired', a.status, 'acquired', a::text) FROM lease_fence.acquire('vg:fair', 1500, fair => true) a;
SELECT a.status AS fair_status, a.identity AS fair_id
	FROM lease_fence.acquire('vg:fair', 30000, wait_ms => 20000, fair => true) a \gset
SELECT vg_step('fair_granted_after_wait', :'fair_status', 'acquired');
SELECT vg_step('fair_release', r.status, 'released', r::text) FROM lease_fence.release('vg:fair', :'fair_id') r;
SELECT vg_step('fair_counters', string_agg(outcome || ' ' || (count > 0), ',' ORDER BY outcome),
		'granted true,left true,queued true')
	FROM lease_fence.stats WHERE operation = 'fair';
SELECT c.status AS elf_status, c.identity AS elf_id
	FROM lease_fence.campaign('vg:el-fair', 30000, wait_ms => 1000, fair => true) c \gset
SELECT vg_step('campaign_fair', :'elf_status', 'acquired');
SELECT vg_step('campaign_fair_resign', r.status, 'released', r::text) FROM lease_fence.resign('vg:el-fair', :'elf_id') r;

-- a key holding more than lease_fence writes: the scripts refuse to return
-- it (LFOVERSIZED), and holder() and the acquire are XX001; its identity
-- read back as text (\xNN for bytes that are not printable ASCII)
\! redisctl cli SETRANGE 'lease_fence:{vg:big}:gen' 4095 x >/dev/null
SELECT * FROM lease_fence.acquire('vg:big', 30000);
SELECT vg_step('oversized_gen_acquire', :'SQLSTATE', 'XX001');
SELECT * FROM lease_fence.holder('vg:big');
SELECT vg_step('oversized_gen_holder', :'SQLSTATE', 'XX001');
\! redisctl cli SET 'lease_fence:{vg:text}' "$(printf 'id\377\001')" PX 60000 >/dev/null
SELECT vg_step('holder_text', h.identity, 'id\xff\x01', h::text) FROM lease_fence.holder('vg:text') h;
-- a transaction-scoped lease released inside its transaction: COMMIT refuses
BEGIN;
SELECT a.identity AS rel_id FROM lease_fence.acquire('vg:rel-in-xact', 30000, 0, 'transaction') a \gset
SELECT vg_step('release_in_xact', r.status, 'released', r::text) FROM lease_fence.release('vg:rel-in-xact', :'rel_id') r;
COMMIT;
SELECT vg_step('release_in_xact_commit', :'SQLSTATE', 'LF010');

-- a session lease whose release at exit finds Redis stopped (test/valgrind.sh
-- checks the server log for the WARNING, then starts Redis again)
SELECT vg_step('exit_down_acquired', a.status, 'acquired', a::text)
	FROM lease_fence.acquire('vg:exit-down', 60000, 0, 'session') a;
\! redisctl stop
-- elections with Redis stopped: campaign unavailable (never busy), leader()
-- and take_over() an ERROR 08006
SELECT vg_step('campaign_redis_down', c.status || '/' || (c.identity IS NULL), 'unavailable/true', c::text)
	FROM lease_fence.campaign('vg:el-down', 30000, wait_ms => 0) c;
SELECT * FROM lease_fence.leader('vg:el-down');
SELECT vg_step('leader_redis_down', :'SQLSTATE', '08006');
SELECT * FROM lease_fence.take_over('vg:el-down', 30000);
SELECT vg_step('take_over_redis_down', :'SQLSTATE', '08006');

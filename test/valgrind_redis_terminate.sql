-- test/valgrind_redis_terminate.sql — the last session of the "redis" phase of
-- test/valgrind.sh, after test/valgrind_redis.sql (see there): a backend that
-- holds a session lease is terminated (pg_terminate_backend, from a second
-- psql started in the background by `redisctl terminate-later`) while it
-- waits for a paused Redis.  Its exit hooks then settle the interrupted
-- acquire and release the session lease, during the pause: both cleanups time
-- out.  psql loses its connection here and exits with status 2, which
-- test/valgrind.sh expects; it then checks the server log and that the
-- backend's valgrind report is complete.

\set ON_ERROR_STOP off
\pset footer off

SELECT 'PID|' || pg_backend_pid();
SELECT pg_backend_pid() AS pid_d \gset
\setenv VG_PID :pid_d
SELECT vg_step('terminate_session_lease', a.status, 'acquired', a::text)
	FROM lease_fence.acquire('vg:term-session', 60000, 0, 'session') a;
SET lease_fence.command_timeout_ms = 30000;
\! redisctl pause 8000
\! redisctl terminate-later "$VG_PID"
-- not printed when the backend was terminated, as it should be
SELECT vg_step('terminate_acquire_unreached', a.status, '-', a::text) FROM lease_fence.acquire('vg:term', 30000) a;
SELECT vg_step('terminate_acquire_unreached', 'not terminated', 'terminated');

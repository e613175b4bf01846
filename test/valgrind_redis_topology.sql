-- test/valgrind_redis_topology.sql — the Sentinel and Cluster paths of the
-- lease helper, in the "redis" phase of test/valgrind.sh, with the server
-- under valgrind memcheck (leak check on).  Run by test/valgrind.sh only:
--
--   psql -X -At -v c1=<port> -v sentinels=127.0.0.1:<port> -f this
--
-- against two cluster nodes that share the slots (127.0.0.1:c1 and
-- $TOPO_C2) and a master without replicas watched by one sentinel, which
-- test/valgrind.sh starts; `vgtopo` (in $PATH) moves a key's slot.  Every
-- reply parsed on these paths (CLUSTER SLOTS, MOVED, ASK, TRYAGAIN,
-- SENTINEL get-master-addr-by-name, ROLE, WAIT) must be freed.  Steps
-- print STEP lines as in test/valgrind_redis.sql (vg_step() is defined
-- there).

\set ON_ERROR_STOP off
\set VERBOSITY default
\pset footer off

SELECT 'PID|' || pg_backend_pid();

-- ------------------------------------------------ Cluster: the slot map, 200 resources
SET lease_fence.redis_cluster = on;
SET lease_fence.redis_host = '127.0.0.1';
SET lease_fence.redis_port = :c1;
SET lease_fence.command_timeout_ms = 2000;
SELECT vg_step('cluster_acquired', count(*) FILTER (WHERE a.status = 'acquired')::text, '200')
	FROM generate_series(1, 200) i, LATERAL lease_fence.acquire('vg:c' || i, 30000) a;
SELECT vg_step('cluster_released', count(*) FILTER (WHERE r.status = 'released')::text, '200')
	FROM lease_fence.leases l, LATERAL lease_fence.release(l.resource, l.identity) r
	WHERE l.state = 'held' AND l.resource LIKE 'vg:c%';
SELECT vg_step('cluster_no_redirect', count::text, '0')
	FROM lease_fence.stats WHERE operation = 'cluster' AND outcome = 'redirect_followed';

-- ------------------------------------------------ a slot in migration: ASK, TRYAGAIN; then MOVED
SELECT vg_step('cluster_move_setup', a.status, 'acquired', a::text) FROM lease_fence.acquire('vg:move', 30000) a;
SELECT identity AS id_move FROM lease_fence.leases WHERE resource = 'vg:move' AND state = 'held' \gset
\! vgtopo migrate-start 'lease_fence:{vg:move}' 'lease_fence:{vg:move}:gen' >/dev/null
SELECT vg_step('cluster_ask_renew', r.status, 'renewed', r::text) FROM lease_fence.renew('vg:move', :'id_move', 30000) r;
-- both keys are on the importing node: the acquire script runs there
SELECT vg_step('cluster_ask_busy', a.status, 'busy', a::text) FROM lease_fence.acquire('vg:move', 30000) a;
SELECT vg_step('cluster_ask_release', r.status, 'released', r::text) FROM lease_fence.release('vg:move', :'id_move') r;
-- the lease key is missing now: TRYAGAIN, retried until command_timeout_ms
SET lease_fence.command_timeout_ms = 300;
SELECT vg_step('cluster_tryagain', a.status, 'unavailable', a::text) FROM lease_fence.acquire('vg:move', 30000) a;
SET lease_fence.command_timeout_ms = 2000;
\! vgtopo migrate-end 'lease_fence:{vg:move}' >/dev/null
SELECT vg_step('cluster_moved_acquired', a.status, 'acquired', a::text) FROM lease_fence.acquire('vg:move', 30000) a;
SELECT identity AS id_move2 FROM lease_fence.leases WHERE resource = 'vg:move' AND state = 'held' \gset
SELECT vg_step('cluster_moved_released', r.status, 'released', r::text) FROM lease_fence.release('vg:move', :'id_move2') r;
SELECT vg_step('cluster_redirects_counted', (count > 0)::text, 'true')
	FROM lease_fence.stats WHERE operation = 'cluster' AND outcome = 'redirect_followed';

-- ------------------------------------------------ an election on a Cluster, its slot moved
-- the leader() and campaign scripts name three keys: ASK while the slot
-- migrates (all three on the importing node), MOVED after
SELECT c.identity AS el_id, c.term AS el_term
	FROM lease_fence.campaign('vg:el-move', 30000, wait_ms => 10000, value => 'v', scope => 'explicit') c \gset
SELECT vg_step('cluster_campaign_won', (:el_term > 0)::text, 'true');
\! vgtopo migrate-start 'lease_fence:{vg:el-move}' 'lease_fence:{vg:el-move}:gen' 'lease_fence:{vg:el-move}:value' >/dev/null
SELECT vg_step('cluster_leader_ask', l.held || ' ' || l.term || ' ' || l.value, 'true ' || :'el_term' || ' v', l::text)
	FROM lease_fence.leader('vg:el-move') l;
SELECT vg_step('cluster_campaign_ask_busy', c.status, 'busy', c::text)
	FROM lease_fence.campaign('vg:el-move', 30000, wait_ms => 0) c;
\! vgtopo migrate-end 'lease_fence:{vg:el-move}' >/dev/null
SELECT vg_step('cluster_leader_moved', l.held || ' ' || l.term, 'true ' || :'el_term', l::text)
	FROM lease_fence.leader('vg:el-move') l;
SELECT vg_step('cluster_resign', r.status, 'released', r::text) FROM lease_fence.resign('vg:el-move', :'el_id') r;
SELECT vg_step('cluster_take_over', t.status, 'acquired', t::text) FROM lease_fence.take_over('vg:el-move', 30000) t;
SELECT identity AS el_to_id FROM lease_fence.leases WHERE resource = 'vg:el-move' AND state = 'held' \gset
SELECT vg_step('cluster_take_over_release', r.status, 'released', r::text) FROM lease_fence.release('vg:el-move', :'el_to_id') r;

-- ------------------------------------------------ the seed down: the map comes from a node seen before
SET lease_fence.redis_port = 1;
SELECT vg_step('cluster_known_node', a.status, 'acquired', a::text) FROM lease_fence.acquire('vg:seedless', 30000) a;
SELECT identity AS id_seedless FROM lease_fence.leases WHERE resource = 'vg:seedless' AND state = 'held' \gset
SELECT vg_step('cluster_known_node_release', r.status, 'released', r::text) FROM lease_fence.release('vg:seedless', :'id_seedless') r;
RESET lease_fence.redis_port;
RESET lease_fence.redis_host;
RESET lease_fence.redis_cluster;

-- ------------------------------------------------ Sentinel: discovery, ROLE, WAIT
SET lease_fence.redis_sentinels = :'sentinels';
SET lease_fence.redis_sentinel_master = 'vg';
SELECT vg_step('sentinel_acquired', a.status, 'acquired', a::text) FROM lease_fence.acquire('vg:s', 30000) a;
SELECT identity AS id_s FROM lease_fence.leases WHERE resource = 'vg:s' AND state = 'held' \gset
SELECT vg_step('sentinel_released', r.status, 'released', r::text) FROM lease_fence.release('vg:s', :'id_s') r;
SELECT vg_step('sentinel_discovered', count::text, '1')
	FROM lease_fence.stats WHERE operation = 'sentinel' AND outcome = 'master_discovered';
-- no replica to acknowledge: unreplicated, released
SET lease_fence.redis_min_replicas = 1;
SET lease_fence.redis_replica_timeout_ms = 100;
SELECT vg_step('sentinel_unreplicated', a.status, 'unreplicated', a::text) FROM lease_fence.acquire('vg:s2', 30000) a;
RESET lease_fence.redis_min_replicas;
RESET lease_fence.redis_replica_timeout_ms;
-- a name the sentinel does not monitor (a nil reply)
SET lease_fence.redis_sentinel_master = 'nobody';
SELECT vg_step('sentinel_unknown_name', a.status, 'unavailable', a::text) FROM lease_fence.acquire('vg:s3', 30000) a;
RESET lease_fence.redis_sentinel_master;
-- renew and release WAIT too: without a replica, unreplicated and unknown
SET lease_fence.redis_sentinel_master = 'vg';
SELECT a.identity AS id_s4 FROM lease_fence.acquire('vg:s4', 30000) a \gset
SET lease_fence.redis_min_replicas = 1;
SET lease_fence.redis_replica_timeout_ms = 100;
SELECT vg_step('sentinel_renew_unreplicated', r.status, 'unreplicated', r::text) FROM lease_fence.renew('vg:s4', :'id_s4', 30000) r;
SELECT vg_step('sentinel_release_unreplicated', r.status, 'unknown', r::text) FROM lease_fence.release('vg:s4', :'id_s4') r;
RESET lease_fence.redis_min_replicas;
RESET lease_fence.redis_replica_timeout_ms;
-- an election through the sentinel: campaign, leader(), resign(); and
-- unreplicated (no replica to acknowledge the win: released, nothing held)
SELECT c.identity AS s_el_id, c.term AS s_el_term FROM lease_fence.campaign('vg:s-el', 30000, wait_ms => 10000, scope => 'explicit') c \gset
SELECT vg_step('sentinel_leader', l.held || ' ' || l.term, 'true ' || :'s_el_term', l::text) FROM lease_fence.leader('vg:s-el') l;
SELECT vg_step('sentinel_resign', r.status, 'released', r::text) FROM lease_fence.resign('vg:s-el', :'s_el_id') r;
SET lease_fence.redis_min_replicas = 1;
SET lease_fence.redis_replica_timeout_ms = 100;
SELECT vg_step('sentinel_campaign_unreplicated', c.status, 'unreplicated', c::text)
	FROM lease_fence.campaign('vg:s-el', 30000, wait_ms => 0) c;
SELECT * FROM lease_fence.take_over('vg:s-el', 30000);
SELECT vg_step('sentinel_take_over_unreplicated', :'SQLSTATE', '08006');
RESET lease_fence.redis_min_replicas;
RESET lease_fence.redis_replica_timeout_ms;

-- the Sentinel watch (a background worker, under valgrind too), from the
-- server's settings: once it has named the master, this session, whose
-- settings are the same, takes its answer instead of asking the sentinel
ALTER SYSTEM SET lease_fence.redis_sentinels = :'sentinels';
ALTER SYSTEM SET lease_fence.redis_sentinel_master = 'vg';
SELECT pg_reload_conf();
DO $$
BEGIN
	FOR i IN 1..600 LOOP
		EXIT WHEN (SELECT count FROM lease_fence.stats
		           WHERE operation = 'sentinel' AND outcome = 'master_discovered') >= 2;
		PERFORM pg_sleep(0.1);
	END LOOP;
END $$;
SELECT vg_step('watch_discovered', (count >= 2)::text, 'true')
	FROM lease_fence.stats WHERE operation = 'sentinel' AND outcome = 'master_discovered';
SELECT vg_step('watch_acquired', a.status, 'acquired', a::text) FROM lease_fence.acquire('vg:w', 30000) a;
SELECT identity AS id_w FROM lease_fence.leases WHERE resource = 'vg:w' AND state = 'held' \gset
SELECT vg_step('watch_renewed', r.status, 'renewed', r::text) FROM lease_fence.renew('vg:w', :'id_w', 30000) r;
SELECT vg_step('watch_released', r.status, 'released', r::text) FROM lease_fence.release('vg:w', :'id_w') r;
ALTER SYSTEM RESET lease_fence.redis_sentinels;
ALTER SYSTEM RESET lease_fence.redis_sentinel_master;
SELECT pg_reload_conf();
RESET lease_fence.redis_sentinel_master;
RESET lease_fence.redis_sentinels;

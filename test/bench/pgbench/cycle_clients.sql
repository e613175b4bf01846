-- one acquire + release cycle, each client on a resource of its own (no
-- client waits for another's lease: what is measured is the cost of the
-- cycle under concurrency, not contention).  As cycle.sql, a cycle that did
-- not acquire stops pgbench.
SELECT identity FROM lease_fence.acquire('bench-cycle-' || :client_id, 30000) \gset
SELECT status FROM lease_fence.release('bench-cycle-' || :client_id, :identity);

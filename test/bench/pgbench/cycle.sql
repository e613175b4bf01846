-- one acquire + release cycle through SQL: two round trips (no colon in
-- the resource name: pgbench would read it as a variable).  A cycle that
-- did not acquire passes a NULL identity to release, which is an error, and
-- pgbench stops: every counted cycle took and gave back the lease.
SELECT identity FROM lease_fence.acquire('bench-cycle', 30000) \gset
SELECT status FROM lease_fence.release('bench-cycle', :identity);

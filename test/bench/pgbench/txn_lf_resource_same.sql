-- as txn_lf_resource, with the fence in the statement that sets the
-- generation (evaluated left to right): no extra round trip, so what it
-- adds to txn_lf is the resource fence's row update alone
\set id random(1, :rows)
BEGIN;
SELECT lease_fence.set_generation(:gen), lease_fence.fence_resource('bench:' || :id);
UPDATE u_lf SET v = v + 1 WHERE id = :id;
END;

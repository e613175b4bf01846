-- the fenced transaction of txn_lf, fencing the resource too, in a
-- statement of its own as the client helpers do (one more round trip, and
-- one indexed row update: the resource's fence, set up in setup.sql for
-- every row's resource)
\set id random(1, :rows)
BEGIN;
SELECT lease_fence.set_generation(:gen);
SELECT lease_fence.fence_resource('bench:' || :id);
UPDATE u_lf SET v = v + 1 WHERE id = :id;
END;

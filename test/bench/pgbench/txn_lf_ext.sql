-- txn_lf_reread.sql on a table protected with tokens => 'external': the
-- same draw and the same fenced write, without the issued check
\set id random(1, :rows)
SELECT nextval('lease_fence.generation_seq') AS g \gset
BEGIN;
SELECT lease_fence.set_generation(:g);
UPDATE u_lf_ext SET v = v + 1 WHERE id = :id;
END;

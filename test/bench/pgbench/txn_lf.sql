-- the same transaction, fenced as an application writes it: set the
-- lease's generation for the transaction, then write
\set id random(1, :rows)
BEGIN;
SELECT lease_fence.set_generation(:gen);
UPDATE u_lf SET v = v + 1 WHERE id = :id;
END;

-- the issued check at its worst: every transaction supplies a generation
-- issued after this backend last read the sequence (drawn with a plain
-- nextval, as another backend's acquire would draw it, which leaves this
-- backend's cache behind), so the trigger reads the sequence's page again
-- each time.  Compare with txn_lf_ext.sql: the same, with no check at all.
\set id random(1, :rows)
SELECT nextval('lease_fence.generation_seq') AS g \gset
BEGIN;
SELECT lease_fence.set_generation(:g);
UPDATE u_lf_reread SET v = v + 1 WHERE id = :id;
END;

-- adopt: lease_fence.adopt_generations() on a database that received
-- another database's fences (a logical replica about to become the
-- primary), lease_fence.highest_issued().  One rule per block: before the
-- adoption, the received fences are above every generation this database
-- issued (the problem: a new holder's write is LF001, an old holder's
-- LF004 "unissued"); bad input and a non-owner are refused with nothing
-- moved (a read-only transaction 25006, no epoch left 54000); an
-- old_highest_issued below a fence held is 22023, nothing moved;
-- the adoption moves the generations to a new epoch above everything,
-- records it and counts it; from then on every generation up to it is
-- LF004 with the adoption's message (rows, TRUNCATE, resource fences,
-- checkpoints), generation 0 and an external table's tokens stay accepted,
-- and new holders' writes stand; a second adoption refuses the first one's
-- generations too.  The replica's received rows are written here with the
-- tables' triggers disabled (the fence lets a logical replication worker's
-- rows through as given, and no session can be one); a real publisher and
-- subscriber: test/t/generation_logical_switchover.pl.
-- Ends by installing the extension again (its generations restart from 1).

SET client_min_messages = warning;

\set ECHO none
\i sql/include/try.sql

-- the refusal's DETAIL names the time of the adoption: masked
CREATE FUNCTION pg_temp.try_masked(stmt text) RETURNS text
LANGUAGE sql AS $$
	SELECT regexp_replace(pg_temp.try(stmt), 'at \d{4}-\d\d-\d\d [0-9:.+-]+ and', 'at <time> and')
$$;

CREATE TABLE adopt_t (id int PRIMARY KEY, v text, fence bigint NOT NULL DEFAULT 0);
SELECT lease_fence.protect('adopt_t');
CREATE TABLE adopt_s (id int PRIMARY KEY, v text, fence bigint);
SELECT lease_fence.protect('adopt_s', strict => true);
CREATE TABLE adopt_p (id int, v text, fence bigint) PARTITION BY RANGE (id);
CREATE TABLE adopt_p1 PARTITION OF adopt_p FOR VALUES FROM (0) TO (100);
CREATE TABLE adopt_p2 PARTITION OF adopt_p FOR VALUES FROM (100) TO (200);
SELECT lease_fence.protect('adopt_p');
CREATE TABLE adopt_x (id int PRIMARY KEY, fence bigint);
SELECT lease_fence.protect('adopt_x', tokens => 'external');

-- this database issued a few generations of its own
SELECT lease_fence.next_generation() AS own1 \gset
SELECT lease_fence.next_generation() AS own2 \gset
SELECT lease_fence.highest_issued() = :own2 AS highest_issued_is_the_last_drawn;

-- what logical replication brings: the old primary's rows and fences,
-- written as given (its generations went up to 5000), and its resource
-- fences and checkpoints
ALTER TABLE adopt_t DISABLE TRIGGER USER;
ALTER TABLE adopt_s DISABLE TRIGGER USER;
ALTER TABLE adopt_p1 DISABLE TRIGGER USER;
ALTER TABLE adopt_p2 DISABLE TRIGGER USER;
ALTER TABLE adopt_x DISABLE TRIGGER USER;
INSERT INTO adopt_t VALUES (1, 'old', 4000), (2, 'old', 3000);
INSERT INTO adopt_s VALUES (1, 'old', 4500);
INSERT INTO adopt_p VALUES (1, 'old', 2000), (150, 'old', 4800);
INSERT INTO adopt_x VALUES (1, 9000000000000000000);
INSERT INTO lease_fence.resource_generation VALUES ('adopt-r', 4900, now());
INSERT INTO lease_fence.resource_checkpoint VALUES ('adopt-r', 4900, '{"step": 7}', now());
ALTER TABLE adopt_t ENABLE TRIGGER USER;
ALTER TABLE adopt_s ENABLE TRIGGER USER;
ALTER TABLE adopt_p1 ENABLE TRIGGER USER;
ALTER TABLE adopt_p2 ENABLE TRIGGER USER;
ALTER TABLE adopt_x ENABLE TRIGGER USER;

-- the problem: a new holder's generation is below the fences (LF001), and
-- the old primary's holder's is one this database never issued (LF004)
SELECT pg_temp.try($$SELECT lease_fence.set_generation(lease_fence.next_generation());
                     UPDATE adopt_t SET v = 'new' WHERE id = 1$$) ~ '^LF001' AS new_holder_refused_before;
SELECT pg_temp.try($$SELECT lease_fence.set_generation(5000); UPDATE adopt_t SET v = 'x' WHERE id = 1$$);

-- bad input, nothing moved
SELECT lease_fence.highest_issued() AS before \gset
SELECT pg_temp.try($$SELECT lease_fence.adopt_generations(-1)$$);
-- an old_highest_issued below a fence held cannot be the old primary's
SELECT pg_temp.try($$SELECT lease_fence.adopt_generations(4000)$$);
CREATE ROLE regress_lf_adopt;
GRANT USAGE ON SCHEMA lease_fence TO regress_lf_adopt;
GRANT EXECUTE ON FUNCTION lease_fence.adopt_generations(bigint) TO regress_lf_adopt;
SET ROLE regress_lf_adopt;
SELECT pg_temp.try($$SELECT lease_fence.adopt_generations(5000)$$);
-- highest_issued() is everybody's
SELECT lease_fence.highest_issued() = :before AS anybody_reads_highest_issued;
RESET ROLE;
REVOKE EXECUTE ON FUNCTION lease_fence.adopt_generations(bigint) FROM regress_lf_adopt;
-- a read-only transaction (25006), and a value with no epoch above it (54000)
BEGIN READ ONLY;
SELECT pg_temp.try($$SELECT lease_fence.adopt_generations(5000)$$);
ROLLBACK;
SELECT left(pg_temp.try($$SELECT lease_fence.adopt_generations(9223372036854775807)$$), 5) AS no_epoch_left;
SELECT lease_fence.highest_issued() = :before AS nothing_moved,
       (SELECT count(*) FROM lease_fence.generation_adoption) AS adoptions;
SELECT has_function_privilege('public', 'lease_fence.adopt_generations(bigint)', 'EXECUTE') AS public_may_adopt,
       has_function_privilege('public', 'lease_fence.highest_issued()', 'EXECUTE') AS public_may_read,
       has_table_privilege('public', 'lease_fence.generation_adoption', 'SELECT') AS public_reads_adoptions;

-- the adoption: the next epoch above the old primary's 5000 (epoch 0):
-- 2^40, logged, counted, recorded
SELECT coalesce(pg_temp.counter('generation', 'adopted'), 0) AS adopted_before \gset
SET client_min_messages = log;
SELECT lease_fence.adopt_generations(5000) AS refused \gset
SET client_min_messages = warning;
SELECT :refused = 1099511627776 AS first_value_of_epoch_1,
       lease_fence.highest_issued() = :refused AS issued_up_to_it;
-- (no counters in the portable edition: NULL there)
SELECT pg_temp.counter('generation', 'adopted') IS NULL OR pg_temp.counter('generation', 'adopted') = :adopted_before + 1 AS counted;
SELECT refused_through, highest_fence, old_highest_issued, highest_issued_before = :before AS own_before,
       adopted_at <= now() AS adopted_at
FROM lease_fence.generation_adoption;

-- every generation up to it is refused, with the reason: the old
-- primary's holders (rows, TRUNCATE, resource fences, checkpoints) and this
-- database's own from before
SELECT pg_temp.try_masked($$SELECT lease_fence.set_generation(5000); UPDATE adopt_t SET v = 'x' WHERE id = 1$$);
SELECT pg_temp.try_masked($$SELECT lease_fence.set_generation(4500); DELETE FROM adopt_s WHERE id = 1$$);
SELECT pg_temp.try_masked($$SELECT lease_fence.set_generation(4800); UPDATE adopt_p SET v = 'x' WHERE id = 150$$);
SELECT pg_temp.try_masked($$SELECT lease_fence.set_generation(4800); TRUNCATE adopt_t$$);
SELECT pg_temp.try_masked($$SELECT lease_fence.set_generation(4900, 'adopt-r')$$);
SELECT pg_temp.try_masked($$SELECT lease_fence.set_generation(4900); SELECT lease_fence.checkpoint('adopt-r', '{"step": 8}')$$);
SELECT pg_temp.try_masked(format($$SELECT lease_fence.set_generation(%s); INSERT INTO adopt_t VALUES (3, 'x', 0)$$, :own2));
SELECT pg_temp.try_masked(format($$SELECT lease_fence.set_generation(%s); UPDATE adopt_t SET v = 'x' WHERE id = 1$$, :refused));
-- (lenient, no current generation: a written fence is a supplied one)
SELECT pg_temp.try_masked($$INSERT INTO adopt_t VALUES (4, 'x', 4000)$$);
SELECT v, fence FROM adopt_t ORDER BY id;

-- generation 0 (a row no holder wrote) and an external table's tokens are
-- not generations of this database's: accepted as before
SELECT pg_temp.try($$INSERT INTO adopt_t (id, v) VALUES (5, 'no holder')$$);
SELECT pg_temp.try($$UPDATE adopt_x SET fence = 9000000000000000001 WHERE id = 1$$);

-- a new holder's writes stand, everywhere
BEGIN;
SELECT lease_fence.set_generation(lease_fence.next_generation()) - :refused AS new_holder_above;
UPDATE adopt_t SET v = 'new' WHERE id = 1;
UPDATE adopt_s SET v = 'new' WHERE id = 1;
UPDATE adopt_p SET v = 'new' WHERE id = 150;
SELECT lease_fence.fence_resource('adopt-r') - :refused AS resource_fenced;
SELECT lease_fence.checkpoint('adopt-r', '{"step": 8}') - :refused AS checkpointed;
COMMIT;
SELECT id, v, fence - :refused AS fence_above FROM adopt_t WHERE id = 1
UNION ALL SELECT id, v, fence - :refused FROM adopt_s
UNION ALL SELECT id, v, fence - :refused FROM adopt_p WHERE id = 150;
SELECT state FROM lease_fence.last_checkpoint('adopt-r');

-- a second adoption moves on to epoch 2 and refuses the first one's
-- generations too, this database's own holders' included
SELECT lease_fence.highest_issued() AS holder \gset
SELECT lease_fence.adopt_generations() AS refused2 \gset
SELECT :refused2 = 2 * 1099511627776 AS first_value_of_epoch_2;
SELECT pg_temp.try_masked(format($$SELECT lease_fence.set_generation(%s); UPDATE adopt_t SET v = 'y' WHERE id = 1$$, :holder));
SELECT refused_through, highest_fence, old_highest_issued FROM lease_fence.generation_adoption ORDER BY refused_through;

DROP TABLE adopt_t, adopt_s, adopt_p, adopt_x;
REVOKE USAGE ON SCHEMA lease_fence FROM regress_lf_adopt;
DROP ROLE regress_lf_adopt;
-- the next files start from a fresh generation space
DROP EXTENSION lease_fence CASCADE;
CREATE EXTENSION lease_fence;
SELECT lease_fence.highest_issued() AS fresh;

-- portable_adopt: what the portable edition's adopt_generations() does its
-- own way (the rules both editions share: sql/adopt.sql; a real switchover:
-- test/portable/run.sh).  Runs as a superuser, in a database of its own,
-- the edition installed by lf_owner, who adopts (SET ROLE).
--   1. an adoption whose transaction rolls back refuses nothing: the fence
--      reads the sequence adoption_floor_seq first (moved, as setval, even
--      so) and then the committed adoption, and there is none;
--   2. the installing role adopts without a superuser, and the fence refuses
--      for a writer granted nothing on lease_fence's tables;
--   3. the fences are read by queries as the caller: a protected table the
--      installing role may not read, or whose rows a policy would filter,
--      is 42501 and nothing moved (fail closed);
--   4. a read-only transaction is 25006, nothing moved.
SET client_min_messages = warning;

\set ECHO none
\i sql/include/try.sql

-- the refusal's DETAIL names the time of the adoption: masked
CREATE FUNCTION pg_temp.try_masked(stmt text) RETURNS text
LANGUAGE sql AS $$
	SELECT regexp_replace(pg_temp.try(stmt), 'at \d{4}-\d\d-\d\d [0-9:.+-]+ and', 'at <time> and')
$$;

-- the state adopt_generations() moves
CREATE FUNCTION pg_temp.state() RETURNS text
LANGUAGE sql AS $$
	SELECT format('issued %s, floor %s, adoptions %s', lease_fence.highest_issued(),
	              pg_sequence_last_value('lease_fence.adoption_floor_seq'),
	              (SELECT count(*) FROM lease_fence.generation_adoption))
$$;

CREATE ROLE regress_pa_writer;
CREATE TABLE pa_t (id int PRIMARY KEY, v text, fence bigint NOT NULL DEFAULT 0);
ALTER TABLE pa_t OWNER TO lf_owner;
GRANT SELECT, UPDATE ON pa_t TO regress_pa_writer;
SET ROLE lf_owner;
SELECT lease_fence.protect('pa_t');
SELECT lease_fence.next_generation() AS g1 \gset
INSERT INTO pa_t VALUES (1, 'g1', :g1);

-- 1. rolled back: the sequence moved to the next epoch, nothing refused
BEGIN;
SELECT lease_fence.adopt_generations() AS rolled_back \gset
ROLLBACK;
SELECT pg_temp.state();
SELECT :rolled_back = 1099511627776 AS would_have_refused_epoch_0;
SELECT pg_temp.try(format($$SELECT lease_fence.set_generation(%s); UPDATE pa_t SET v = 'g1 again' WHERE id = 1$$, :g1));

-- 2. the owner adopts (run again: the sequence is in epoch 1 now, so epoch 2)
SELECT lease_fence.adopt_generations(:g1) AS refused \gset
SELECT :refused = 2 * 1099511627776 AS epoch_2, pg_temp.state();
RESET ROLE;
SET ROLE regress_pa_writer;
SELECT pg_temp.try_masked(format($$SELECT lease_fence.set_generation(%s); UPDATE pa_t SET v = 'x' WHERE id = 1$$, :g1));
-- (refused_through itself is refused; the next draw, above it, is not)
SELECT pg_temp.try_masked(format($$SELECT lease_fence.set_generation(%s); UPDATE pa_t SET v = 'x' WHERE id = 1$$, :refused));
SELECT pg_temp.try($$SELECT lease_fence.set_generation(lease_fence.next_generation()); UPDATE pa_t SET v = 'new' WHERE id = 1$$);
RESET ROLE;
SELECT v, fence - :refused AS fence_above FROM pa_t;

-- 3. a protected table the installing role may not read, then one whose
-- rows a policy would filter: 42501, nothing moved
CREATE TABLE pa_hidden (id int, fence bigint NOT NULL DEFAULT 0);
SELECT lease_fence.protect('pa_hidden');
SET ROLE lf_owner;
SELECT pg_temp.state() AS before \gset
SELECT pg_temp.try($$SELECT lease_fence.adopt_generations()$$);
RESET ROLE;
GRANT SELECT ON pa_hidden TO lf_owner;
ALTER TABLE pa_hidden ENABLE ROW LEVEL SECURITY;
CREATE POLICY pa_some ON pa_hidden USING (id < 10);
SET ROLE lf_owner;
SELECT pg_temp.try($$SELECT lease_fence.adopt_generations()$$);
SELECT pg_temp.state() = :'before' AS nothing_moved;

-- 4. a read-only transaction
BEGIN READ ONLY;
SELECT pg_temp.try($$SELECT lease_fence.adopt_generations()$$);
ROLLBACK;
SELECT pg_temp.state() = :'before' AS nothing_moved;

RESET ROLE;
SELECT lease_fence.unprotect('pa_hidden');
DROP TABLE pa_t, pa_hidden;
DROP ROLE regress_pa_writer;

-- unissued: a supplied generation greater than every generation
-- next_generation() has issued in this database is refused with LF004,
-- before anything is written, for UPDATE, INSERT, DELETE and TRUNCATE; a
-- table whose tokens come from elsewhere opts out (tokens => 'external');
-- repair_unissued() (superuser only) resets fences that took such a value.
-- Runs alone: it needs only the extension (pg_regress installs it), and
-- makes and drops its own objects.

\set ECHO none
\i sql/include/try.sql

-- Known numbers whether this file runs alone or after others: raise the
-- generation space to 1000000 (as a superuser does after a restore: see
-- docs/operations.md), so that 1000000 is the highest issued generation.  The guard
-- makes sure this never moves it backwards (the output would differ).
SELECT setval('lease_fence.generation_seq', 1000000) AS highest_issued
FROM lease_fence.generation_seq WHERE last_value < 1000000;
SET client_min_messages = warning;
SELECT lease_fence.stats_reset();
RESET client_min_messages;

CREATE TABLE u (id int PRIMARY KEY, v text);
SELECT lease_fence.protect('u');
BEGIN;
SET LOCAL lease_fence.generation = 1000000;
INSERT INTO u VALUES (1, 'a'), (2, 'b');
COMMIT;

------------------------------------------------------------------------------
-- a generation never issued: refused for every write, the rows unchanged
------------------------------------------------------------------------------
SET lease_fence.generation = 9223372036854775807;
UPDATE u SET v = 'typo' WHERE id = 1;
SELECT pg_temp.try($$UPDATE u SET v = 'typo' WHERE id = 1$$);
SELECT pg_temp.try($$INSERT INTO u VALUES (3, 'c')$$);
SELECT pg_temp.try($$DELETE FROM u WHERE id = 2$$);
SELECT pg_temp.try($$TRUNCATE u$$);
-- one above the highest issued is just as unissued
SET lease_fence.generation = 1000001;
SELECT pg_temp.try($$UPDATE u SET v = 'early' WHERE id = 1$$);
RESET lease_fence.generation;
SELECT * FROM u ORDER BY id;

-- without a current generation, a fence value the statement writes is the
-- supplied generation, and is checked too
SELECT pg_temp.try($$UPDATE u SET fence = 9223372036854775807 WHERE id = 1$$);
SELECT pg_temp.try($$INSERT INTO u VALUES (3, 'c', 1000001)$$);
-- 0 (the column's default) is always accepted, and a lenient UPDATE that
-- leaves the fence alone brings no value of its own
INSERT INTO u VALUES (3, 'c') RETURNING *;
UPDATE u SET v = 'b2' WHERE id = 2 RETURNING *;
SELECT * FROM u ORDER BY id;

------------------------------------------------------------------------------
-- the highest issued generation itself passes; the next one passes as soon
-- as it is issued
------------------------------------------------------------------------------
BEGIN;
SET LOCAL lease_fence.generation = 1000000;
UPDATE u SET v = 'a2' WHERE id = 1 RETURNING *;
COMMIT;
SELECT lease_fence.next_generation() AS issued;
BEGIN;
SET LOCAL lease_fence.generation = 1000001;
UPDATE u SET v = 'a3' WHERE id = 1 RETURNING *;
COMMIT;
-- issued by another backend (a plain nextval, which this backend's cache
-- does not see): refused values are read again, and pass once issued
BEGIN;
SET LOCAL lease_fence.generation = 1000002;
SELECT pg_temp.try($$UPDATE u SET v = 'a4' WHERE id = 1$$);
SELECT nextval('lease_fence.generation_seq') AS issued_elsewhere;
UPDATE u SET v = 'a4' WHERE id = 1 RETURNING *;
COMMIT;
BEGIN;
SELECT lease_fence.set_generation(1000002);
INSERT INTO u VALUES (4, 'd') RETURNING *;
DELETE FROM u WHERE id = 4;
TRUNCATE u;
ROLLBACK;
-- an issued generation lower than the fence is still LF001
BEGIN;
SET LOCAL lease_fence.generation = 1000001;
SELECT pg_temp.try($$UPDATE u SET v = 'old' WHERE id = 1$$);
ROLLBACK;

------------------------------------------------------------------------------
-- tokens => 'external': for tables whose tokens come from elsewhere (etcd
-- revisions, a Kafka epoch); every other rule still holds
------------------------------------------------------------------------------
CREATE TABLE ext (id int PRIMARY KEY, v text);
SELECT lease_fence.protect('ext', tokens => 'external');
SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger
WHERE tgrelid = 'ext'::regclass ORDER BY tgname;
SELECT table_name, fence_column, strict, tokens, ok FROM lease_fence.protected_tables
WHERE table_name IN ('u'::regclass, 'ext'::regclass) ORDER BY table_name::text;
SELECT relid, tokens FROM lease_fence.protected
WHERE relid IN ('u'::regclass, 'ext'::regclass) ORDER BY relid::text;
BEGIN;
SET LOCAL lease_fence.generation = 9223372036854775000;
INSERT INTO ext VALUES (1, 'revision'), (2, 'revision') RETURNING *;
UPDATE ext SET v = 'revision 2' WHERE id = 1 RETURNING *;
DELETE FROM ext WHERE id = 2;
COMMIT;
BEGIN;
SET LOCAL lease_fence.generation = 9223372036854774999;
SELECT pg_temp.try($$UPDATE ext SET v = 'older' WHERE id = 1$$);
ROLLBACK;
BEGIN;
SET LOCAL lease_fence.generation = 9223372036854775807;
TRUNCATE ext;
ROLLBACK;
SELECT * FROM ext;
-- strict and external at once; then back to the default, which checks again
SELECT lease_fence.protect('ext', 'fence', true, 'external');
SELECT table_name, strict, tokens FROM lease_fence.protected_tables WHERE table_name = 'ext'::regclass;
SELECT pg_temp.try($$UPDATE ext SET v = 'unfenced'$$);
SELECT lease_fence.protect('ext');
SELECT table_name, strict, tokens FROM lease_fence.protected_tables WHERE table_name = 'ext'::regclass;
SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgrelid = 'ext'::regclass ORDER BY tgname;
BEGIN;
SET LOCAL lease_fence.generation = 9223372036854775807;
SELECT pg_temp.try($$UPDATE ext SET v = 'x'$$);
ROLLBACK;
-- what protect refuses
SELECT pg_temp.try($$SELECT lease_fence.protect('ext', tokens => 'etcd')$$);
SELECT pg_temp.try($$SELECT lease_fence.protect('ext', tokens => NULL)$$);
SELECT table_name, tokens FROM lease_fence.protected_tables WHERE table_name = 'ext'::regclass;

-- a hand-made trigger: the third argument is the tokens; 2 arguments (as
-- protect() made them before 1.2) mean 'issued'
CREATE TABLE hand (id int, fence bigint NOT NULL DEFAULT 0);
CREATE TRIGGER two_args BEFORE INSERT ON hand
	FOR EACH ROW EXECUTE FUNCTION lease_fence.fence_trigger('fence', 'lenient');
SELECT pg_temp.try($$INSERT INTO hand VALUES (1, 1000003)$$);
DROP TRIGGER two_args ON hand;
CREATE TRIGGER three_args BEFORE INSERT ON hand
	FOR EACH ROW EXECUTE FUNCTION lease_fence.fence_trigger('fence', 'lenient', 'external');
SELECT pg_temp.try($$INSERT INTO hand VALUES (1, 1000003)$$);
DROP TRIGGER three_args ON hand;
CREATE TRIGGER bad_tokens BEFORE INSERT ON hand
	FOR EACH ROW EXECUTE FUNCTION lease_fence.fence_trigger('fence', 'lenient', 'kafka');
SELECT pg_temp.try($$INSERT INTO hand VALUES (2)$$);
DROP TRIGGER bad_tokens ON hand;
CREATE TRIGGER bad_guard BEFORE TRUNCATE ON hand
	FOR EACH STATEMENT EXECUTE FUNCTION lease_fence.truncate_guard('fence', 'kafka');
BEGIN;
SET LOCAL lease_fence.generation = 1;
SELECT pg_temp.try($$TRUNCATE hand$$);
ROLLBACK;
DROP TRIGGER bad_guard ON hand;
CREATE TRIGGER one_arg_guard BEFORE TRUNCATE ON hand
	FOR EACH STATEMENT EXECUTE FUNCTION lease_fence.truncate_guard('fence');
BEGIN;
SET LOCAL lease_fence.generation = 1000003;
SELECT pg_temp.try($$TRUNCATE hand$$);
ROLLBACK;
SELECT * FROM hand;
DROP TABLE hand;

------------------------------------------------------------------------------
-- repair_unissued(): fences that took an unissued value (here: written
-- while the table took external tokens, then switched to the default) lock
-- every real holder out until a superuser sets them back
------------------------------------------------------------------------------
CREATE TABLE broken (id int PRIMARY KEY, v text);
SELECT lease_fence.protect('broken', tokens => 'external');
INSERT INTO broken VALUES (1, 'typo', 9223372036854775807), (2, 'timestamp', 1767225600000),
                          (3, 'fine', 1000000), (4, 'new', 0);
SELECT lease_fence.protect('broken');
-- the real holder of generation 1000002 is locked out of rows 1 and 2
BEGIN;
SET LOCAL lease_fence.generation = 1000002;
SELECT pg_temp.try($$UPDATE broken SET v = 'holder' WHERE id = 1$$);
ROLLBACK;

-- superuser only: EXECUTE is revoked from PUBLIC, and the function checks
CREATE ROLE regress_lf_unissued;
GRANT SELECT, UPDATE ON broken TO regress_lf_unissued;
SET ROLE regress_lf_unissued;
SELECT pg_temp.try($$SELECT lease_fence.repair_unissued('broken', 1000002)$$);
RESET ROLE;
GRANT EXECUTE ON FUNCTION lease_fence.repair_unissued(regclass, bigint) TO regress_lf_unissued;
SET ROLE regress_lf_unissued;
SELECT pg_temp.try($$SELECT lease_fence.repair_unissued('broken', 1000002)$$);
RESET ROLE;
REVOKE EXECUTE ON FUNCTION lease_fence.repair_unissued(regclass, bigint) FROM regress_lf_unissued;
SELECT * FROM broken ORDER BY id;

-- bad input, before anything changes
SELECT pg_temp.try($$SELECT lease_fence.repair_unissued('broken', 1000003)$$);
SELECT pg_temp.try($$SELECT lease_fence.repair_unissued('broken', -1)$$);
SELECT pg_temp.try($$SELECT lease_fence.repair_unissued('broken', NULL)$$);
SELECT pg_temp.try($$SELECT lease_fence.repair_unissued(NULL, 1)$$);
CREATE TABLE unfenced (id int, fence bigint);
SELECT pg_temp.try($$SELECT lease_fence.repair_unissued('unfenced', 1)$$);
DROP TABLE unfenced;
SELECT lease_fence.protect('ext', tokens => 'external');
SELECT pg_temp.try($$SELECT lease_fence.repair_unissued('ext', 1)$$);
SELECT * FROM broken ORDER BY id;

-- the repair: the two unissued fences go back to the given generation, the
-- issued ones stay, and it is logged
SET client_min_messages = log;
SELECT lease_fence.repair_unissued('broken', 1000002) AS repaired;
RESET client_min_messages;
SELECT * FROM broken ORDER BY id;
-- the holder writes again; an older one is still fenced out
BEGIN;
SET LOCAL lease_fence.generation = 1000002;
UPDATE broken SET v = 'holder' WHERE id = 1 RETURNING *;
COMMIT;
BEGIN;
SET LOCAL lease_fence.generation = 1000001;
SELECT pg_temp.try($$UPDATE broken SET v = 'stale' WHERE id = 2$$);
ROLLBACK;
-- nothing left to repair
SELECT lease_fence.repair_unissued('broken', 1000002) AS repaired_again;

-- a partitioned table: every partition is repaired, and another table's
-- unissued fences are not touched
CREATE TABLE parted (id int, v text) PARTITION BY RANGE (id);
CREATE TABLE parted_1 PARTITION OF parted FOR VALUES FROM (1) TO (10);
CREATE TABLE parted_2 PARTITION OF parted FOR VALUES FROM (10) TO (20);
SELECT lease_fence.protect('parted', tokens => 'external');
INSERT INTO parted VALUES (1, 'a', 2000000), (11, 'b', 3000000), (12, 'c', 5);
SELECT lease_fence.protect('parted');
SELECT lease_fence.protect('broken', tokens => 'external');
UPDATE broken SET fence = 4000000 WHERE id = 4;
SELECT lease_fence.protect('broken');
SELECT lease_fence.repair_unissued('parted', 1000001) AS repaired;
SELECT tableoid::regclass, * FROM parted ORDER BY id;
SELECT * FROM broken WHERE id = 4;

-- a fence that becomes issued while the repair runs (here a trigger draws,
-- as a concurrent acquire would) may be a real holder's by now: it stays
CREATE TABLE racing (id int PRIMARY KEY);
SELECT lease_fence.protect('racing', tokens => 'external');
INSERT INTO racing VALUES (1, 1000003), (2, 9000000);
SELECT lease_fence.protect('racing');
CREATE FUNCTION racing_draw() RETURNS trigger LANGUAGE plpgsql
AS $$BEGIN PERFORM nextval('lease_fence.generation_seq'); RETURN NEW; END$$;
CREATE TRIGGER a_draw BEFORE UPDATE ON racing
	FOR EACH ROW EXECUTE FUNCTION racing_draw();
SELECT lease_fence.repair_unissued('racing', 1000002) AS repaired;
SELECT * FROM racing ORDER BY id;
SELECT last_value AS highest_issued FROM lease_fence.generation_seq;

------------------------------------------------------------------------------
-- the repair runs each UPDATE as the table's owner, as a security-restricted
-- operation: what the owner defined (here a trigger that makes its owner a
-- superuser when it runs as one) never runs with the superuser's rights
------------------------------------------------------------------------------
CREATE ROLE regress_lf_tricky;
CREATE TABLE tricky (id int PRIMARY KEY);
ALTER TABLE tricky OWNER TO regress_lf_tricky;
CREATE TABLE tricky_seen (who name, was_superuser boolean, restricted text);
GRANT INSERT ON tricky_seen TO regress_lf_tricky;
CREATE FUNCTION tricky_escalate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO public.tricky_seen
	VALUES (current_user, (SELECT rolsuper FROM pg_roles WHERE rolname = current_user),
	        (SELECT CASE WHEN current_setting('search_path') = 'pg_catalog, pg_temp'
	                     THEN 'safe search_path' ELSE current_setting('search_path') END));
	IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
		EXECUTE 'ALTER ROLE regress_lf_tricky SUPERUSER';
	END IF;
	RETURN NEW;
END $$;
SET ROLE regress_lf_tricky;
SELECT lease_fence.protect('tricky', tokens => 'external');
INSERT INTO tricky VALUES (1, 9000000000000000000);
SELECT lease_fence.protect('tricky');
CREATE TRIGGER a_escalate BEFORE UPDATE ON tricky FOR EACH ROW EXECUTE FUNCTION public.tricky_escalate();
RESET ROLE;
SELECT lease_fence.repair_unissued('tricky', 1000002) AS repaired;
SELECT * FROM tricky;
SELECT * FROM tricky_seen;
SELECT rolsuper AS owner_became_superuser FROM pg_roles WHERE rolname = 'regress_lf_tricky';
-- the session is the superuser's again afterwards
SELECT current_user = session_user AS back_to_caller, current_setting('search_path') AS search_path;
DROP TABLE tricky, tricky_seen;
DROP FUNCTION tricky_escalate();
DROP ROLE regress_lf_tricky;

------------------------------------------------------------------------------
-- stats: every LF004 above, and the rows repaired
------------------------------------------------------------------------------
SET client_min_messages = warning;
SELECT operation, outcome, count FROM lease_fence.stats
WHERE (operation = 'fence' AND outcome = 'LF004') OR operation = 'repair' ORDER BY 1, 2;
RESET client_min_messages;

DROP TABLE u, ext, broken, parted, racing;
DROP FUNCTION racing_draw();
DROP ROLE regress_lf_unissued;

-- fence: the rules of lease_fence.fence_trigger() (docs/guides/fencing-tables.md, "The rules"), in
-- lenient and strict mode, and its misuse errors.

\set ECHO none
\i sql/include/try.sql

-- Before the library is loaded in a session, lease_fence.generation is only a
-- placeholder, so a bad value cannot be refused when it is set.  It must not
-- leave the session unfenced either: the first fenced write (which loads the
-- library) fails with LF002, and so does current_generation(), until the
-- generation is set again.  (docs/guides/fencing-tables.md: preload the library.)
CREATE TABLE early (id int, fence bigint NOT NULL DEFAULT 5);
INSERT INTO early VALUES (1);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON early
	FOR EACH ROW EXECUTE FUNCTION lease_fence.fence_trigger();
SET lease_fence.generation = 'nonsense';
UPDATE early SET id = 2;
SELECT pg_temp.try($$SELECT lease_fence.current_generation()$$);
SELECT pg_temp.try($$DELETE FROM early$$);
-- once loaded, a bad value is refused when it is set
SELECT pg_temp.try($$SET lease_fence.generation = 'nonsense'$$);
RESET lease_fence.generation;
SELECT lease_fence.current_generation() IS NULL AS cleared;
UPDATE early SET id = 2 RETURNING *;
DROP TABLE early;

-- The generations below are small numbers: draw them first, so that they
-- were issued (a generation this database never issued is LF004: see
-- unissued.sql).
SELECT max(g) >= 20 AS issued_through_20
FROM (SELECT lease_fence.next_generation() AS g FROM generate_series(1, 20)) s;

------------------------------------------------------------------------------
-- misuse: each is a clear error naming trigger, table and column
------------------------------------------------------------------------------
CREATE TABLE misuse (id int PRIMARY KEY, fence bigint NOT NULL DEFAULT 0,
                     small int NOT NULL DEFAULT 0,
                     gen bigint GENERATED ALWAYS AS (id * 2) STORED);
INSERT INTO misuse VALUES (1);

-- called as a plain function
SELECT pg_temp.try($$SELECT lease_fence.fence_trigger()$$);

-- statement level
CREATE TRIGGER t_stmt BEFORE UPDATE ON misuse
	FOR EACH STATEMENT EXECUTE FUNCTION lease_fence.fence_trigger();
SELECT pg_temp.try($$UPDATE misuse SET id = id$$);
DROP TRIGGER t_stmt ON misuse;

-- AFTER
CREATE TRIGGER t_after AFTER UPDATE ON misuse
	FOR EACH ROW EXECUTE FUNCTION lease_fence.fence_trigger();
SELECT pg_temp.try($$UPDATE misuse SET id = id$$);
DROP TRIGGER t_after ON misuse;

-- INSTEAD OF on a view is not BEFORE either
CREATE VIEW misuse_v AS SELECT * FROM misuse;
CREATE TRIGGER t_instead INSTEAD OF UPDATE ON misuse_v
	FOR EACH ROW EXECUTE FUNCTION lease_fence.fence_trigger();
SELECT pg_temp.try($$UPDATE misuse_v SET id = id$$);
DROP VIEW misuse_v;

-- missing column (the default name "fence" and an explicit one)
CREATE TABLE nofence (id int);
CREATE TRIGGER t_nocol BEFORE INSERT ON nofence
	FOR EACH ROW EXECUTE FUNCTION lease_fence.fence_trigger();
SELECT pg_temp.try($$INSERT INTO nofence VALUES (1)$$);
DROP TABLE nofence;
CREATE TRIGGER t_nocol BEFORE UPDATE ON misuse
	FOR EACH ROW EXECUTE FUNCTION lease_fence.fence_trigger('nosuch');
SELECT pg_temp.try($$UPDATE misuse SET id = id$$);
DROP TRIGGER t_nocol ON misuse;

-- system column, wrong type, generated column
CREATE TRIGGER t_sys BEFORE UPDATE ON misuse
	FOR EACH ROW EXECUTE FUNCTION lease_fence.fence_trigger('xmin');
SELECT pg_temp.try($$UPDATE misuse SET id = id$$);
DROP TRIGGER t_sys ON misuse;
CREATE TRIGGER t_int BEFORE UPDATE ON misuse
	FOR EACH ROW EXECUTE FUNCTION lease_fence.fence_trigger('small');
SELECT pg_temp.try($$UPDATE misuse SET id = id$$);
DROP TRIGGER t_int ON misuse;
CREATE TRIGGER t_gen BEFORE UPDATE ON misuse
	FOR EACH ROW EXECUTE FUNCTION lease_fence.fence_trigger('gen');
SELECT pg_temp.try($$UPDATE misuse SET id = id$$);
DROP TRIGGER t_gen ON misuse;

-- bad mode, bad tokens, too many arguments
CREATE TRIGGER t_mode BEFORE UPDATE ON misuse
	FOR EACH ROW EXECUTE FUNCTION lease_fence.fence_trigger('fence', 'sloppy');
SELECT pg_temp.try($$UPDATE misuse SET id = id$$);
DROP TRIGGER t_mode ON misuse;
CREATE TRIGGER t_tokens BEFORE UPDATE ON misuse
	FOR EACH ROW EXECUTE FUNCTION lease_fence.fence_trigger('fence', 'strict', 'extra');
SELECT pg_temp.try($$UPDATE misuse SET id = id$$);
DROP TRIGGER t_tokens ON misuse;
CREATE TRIGGER t_args BEFORE UPDATE ON misuse
	FOR EACH ROW EXECUTE FUNCTION lease_fence.fence_trigger('fence', 'strict', 'issued', 'extra');
SELECT pg_temp.try($$UPDATE misuse SET id = id$$);
DROP TRIGGER t_args ON misuse;

-- none of the failed statements changed the row
SELECT * FROM misuse;
DROP TABLE misuse;

-- the full error shape once: message, DETAIL (table, stored, supplied), HINT
CREATE TABLE acct (id int PRIMARY KEY, balance int NOT NULL, fence bigint NOT NULL DEFAULT 0);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON acct
	FOR EACH ROW EXECUTE FUNCTION lease_fence.fence_trigger();
INSERT INTO acct VALUES (1, 100, 10), (2, 200, 10), (3, 300, 10);
BEGIN;
SET LOCAL lease_fence.generation = 9;
UPDATE acct SET balance = 0 WHERE id = 1;
ROLLBACK;

------------------------------------------------------------------------------
-- lenient mode (the default), with a current generation
------------------------------------------------------------------------------
BEGIN;
SET LOCAL lease_fence.generation = 12;
-- UPDATE with a higher generation: the row's fence becomes it
UPDATE acct SET balance = balance + 1 WHERE id = 1 RETURNING *;
-- an equal generation passes
UPDATE acct SET balance = balance + 1 WHERE id = 1 RETURNING *;
-- writing the current generation explicitly is no conflict
UPDATE acct SET balance = balance + 1, fence = 12 WHERE id = 2 RETURNING *;
-- a different explicit value is: LF003
SELECT pg_temp.try($$UPDATE acct SET fence = 13 WHERE id = 3$$);
SELECT pg_temp.try($$UPDATE acct SET fence = 11 WHERE id = 3$$);
-- a NULL fence is never accepted: LF002
SELECT pg_temp.try($$UPDATE acct SET fence = NULL WHERE id = 3$$);
-- INSERT: the fence becomes the current generation, whatever was written
INSERT INTO acct VALUES (4, 400, 3) RETURNING *;
INSERT INTO acct (id, balance) VALUES (5, 500) RETURNING *;
INSERT INTO acct VALUES (6, 600, NULL) RETURNING *;
COMMIT;

BEGIN;
SELECT lease_fence.set_generation(11);
-- a lower generation: LF001, with table, stored and supplied in the detail
SELECT pg_temp.try($$UPDATE acct SET balance = 0 WHERE id = 1$$);
SELECT pg_temp.try($$DELETE FROM acct WHERE id = 1$$);
-- one stale row fails the whole statement: rows 1 and 2 are at 12, row 3 at 10
SELECT pg_temp.try($$UPDATE acct SET balance = -1$$);
-- rows at or below 11 are fine
DELETE FROM acct WHERE id = 3 RETURNING *;
COMMIT;

SELECT * FROM acct ORDER BY id;

------------------------------------------------------------------------------
-- lenient mode without a current generation: the written value is supplied
------------------------------------------------------------------------------
-- a lower fence value: LF001
SELECT pg_temp.try($$UPDATE acct SET balance = 0, fence = 11 WHERE id = 1$$);
-- a higher one is accepted and stored
UPDATE acct SET balance = balance + 1, fence = 20 WHERE id = 1 RETURNING *;
-- fence left unchanged: an equal generation, so it passes.  This is how an
-- unfenced writer slips through lenient mode; strict mode closes it.
UPDATE acct SET balance = balance + 1 WHERE id = 1 RETURNING *;
-- DELETE without a generation has nothing to compare: it passes
DELETE FROM acct WHERE id = 6 RETURNING *;
-- INSERT keeps the written value
INSERT INTO acct VALUES (7, 700, 3) RETURNING *;
-- NULL is refused: LF002
SELECT pg_temp.try($$UPDATE acct SET fence = NULL WHERE id = 1$$);

------------------------------------------------------------------------------
-- strict mode: no current generation, no write
------------------------------------------------------------------------------
CREATE TABLE strict_t (id int PRIMARY KEY, v text, fence bigint NOT NULL DEFAULT 0);
INSERT INTO strict_t VALUES (1, 'a', 5), (2, 'b', 5);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON strict_t
	FOR EACH ROW EXECUTE FUNCTION lease_fence.fence_trigger('fence', 'strict');
SELECT pg_temp.try($$INSERT INTO strict_t VALUES (3, 'c', 5)$$);
SELECT pg_temp.try($$UPDATE strict_t SET v = 'x' WHERE id = 1$$);
SELECT pg_temp.try($$UPDATE strict_t SET v = 'x', fence = 6 WHERE id = 1$$);
SELECT pg_temp.try($$DELETE FROM strict_t WHERE id = 1$$);
-- the full error shape of LF002
UPDATE strict_t SET v = 'x' WHERE id = 1;
BEGIN;
SET LOCAL lease_fence.generation = 5;
UPDATE strict_t SET v = 'x' WHERE id = 1 RETURNING *;
INSERT INTO strict_t VALUES (3, 'c', NULL) RETURNING *;
DELETE FROM strict_t WHERE id = 2 RETURNING *;
-- a fence above the stored one that is not the current generation: LF003
SELECT pg_temp.try($$UPDATE strict_t SET v = 'y', fence = 6 WHERE id = 1$$);
COMMIT;
BEGIN;
SET LOCAL lease_fence.generation = 4;
SELECT pg_temp.try($$UPDATE strict_t SET v = 'y' WHERE id = 1$$);
SELECT pg_temp.try($$DELETE FROM strict_t WHERE id = 1$$);
COMMIT;
SELECT * FROM strict_t ORDER BY id;
-- the mode is case-insensitive
DROP TRIGGER fence ON strict_t;
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON strict_t
	FOR EACH ROW EXECUTE FUNCTION lease_fence.fence_trigger('fence', 'STRICT');
SELECT pg_temp.try($$UPDATE strict_t SET v = 'z' WHERE id = 1$$);

------------------------------------------------------------------------------
-- a nullable fence column (trigger added by hand): a stored NULL is "no
-- fence yet", but a NULL is never written
------------------------------------------------------------------------------
CREATE TABLE nullable (id int PRIMARY KEY, fence bigint);
INSERT INTO nullable VALUES (1, NULL), (2, NULL);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON nullable
	FOR EACH ROW EXECUTE FUNCTION lease_fence.fence_trigger();
SELECT pg_temp.try($$INSERT INTO nullable VALUES (3, NULL)$$);
SELECT pg_temp.try($$UPDATE nullable SET id = 10 WHERE id = 1$$);
BEGIN;
SET LOCAL lease_fence.generation = 1;
UPDATE nullable SET id = 10 WHERE id = 1 RETURNING *;
DELETE FROM nullable WHERE id = 2 RETURNING *;
COMMIT;

------------------------------------------------------------------------------
-- another fence column name, and the cache across statements when the
-- column moves (drop and re-add)
------------------------------------------------------------------------------
CREATE TABLE renamed (id int, token bigint NOT NULL DEFAULT 0);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON renamed
	FOR EACH ROW EXECUTE FUNCTION lease_fence.fence_trigger('token');
INSERT INTO renamed VALUES (1, 5);
SELECT pg_temp.try($$UPDATE renamed SET token = 4$$);
ALTER TABLE renamed DROP COLUMN token;
ALTER TABLE renamed ADD COLUMN extra int, ADD COLUMN token bigint NOT NULL DEFAULT 8;
SELECT pg_temp.try($$UPDATE renamed SET token = 7$$);
UPDATE renamed SET token = 9, extra = 1 RETURNING *;

DROP TABLE acct, strict_t, nullable, renamed;

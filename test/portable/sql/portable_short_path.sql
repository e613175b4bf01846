-- The portable trigger trusts no setting but the current generation: the
-- rules hold for rows after the first one of a transaction too, and a
-- writer that sets the edition's own settings by hand
-- (lease_fence_portable.fast, which an earlier version of the trigger
-- trusted, and lease_fence_portable.checked) skips no rule: not LF001, LF003 or
-- LF004.  Run as the superuser (it SETs ROLE to a role with DML grants only).
\set SHOW_CONTEXT never
-- (the generations in the DETAILs depend on the files before: messages only)
\set VERBOSITY terse
CREATE TABLE sp (id int PRIMARY KEY, v int NOT NULL DEFAULT 0);
SELECT lease_fence.protect('sp');
SELECT lease_fence.next_generation() AS g1 \gset
SELECT lease_fence.next_generation() AS g2 \gset
SELECT lease_fence.next_generation() AS g3 \gset
INSERT INTO sp (id) SELECT i FROM generate_series(1, 4) i;
-- row 4 was written under g3 already
BEGIN;
SET LOCAL lease_fence.generation = :g3;
UPDATE sp SET v = 1 WHERE id = 4;
COMMIT;

BEGIN;
SET LOCAL lease_fence.generation = :g2;
UPDATE sp SET v = v + 1 WHERE id = 1;
-- no setting remembers a short path
SELECT coalesce(current_setting('lease_fence_portable.fast', true), '') = '' AS no_short_path;
-- later rows: the fence becomes the generation
UPDATE sp SET v = v + 1 WHERE id IN (2, 3);
SELECT id, fence = :g2 AS at_g2 FROM sp WHERE id <= 3 ORDER BY id;
-- a full-row save (the fence written at or below the stored one) passes
UPDATE sp SET v = v + 1, fence = 0 WHERE id = 2;
UPDATE sp SET fence = :g2 WHERE id = 3;
-- a row fenced by a newer generation: still LF001
SAVEPOINT s;
UPDATE sp SET v = v + 1 WHERE id = 4;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK TO s;
-- a fence written above the stored one and not the generation: LF003
SAVEPOINT s;
UPDATE sp SET fence = :g3 WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK TO s;
-- an older generation later in the same transaction: LF001
SET LOCAL lease_fence.generation = :g1;
SAVEPOINT s;
UPDATE sp SET v = v + 1 WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK TO s;
COMMIT;
SELECT id, v, fence = :g2 AS at_g2 FROM sp WHERE id <= 3 ORDER BY id;

-- the setting forged by hand: a generation below row 1's fence is still
-- LF001 ...
BEGIN;
SET LOCAL lease_fence.generation = :g1;
SELECT set_config('lease_fence_portable.fast',
       concat('sp'::regclass::oid, '/zz_lease_fence:', :'g1'), true) IS NOT NULL AS forged;
UPDATE sp SET v = v + 1 WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- ... and a fence written above the stored one (LF003)
BEGIN;
SET LOCAL lease_fence.generation = :g2;
SELECT set_config('lease_fence_portable.fast',
       concat('sp'::regclass::oid, '/zz_lease_fence:', :'g2'), true) IS NOT NULL AS forged;
UPDATE sp SET fence = :g3 WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- a generation never issued: LF004, whether or not the setting is forged
-- (it used to write the unissued fence, which then locked the row out for
-- every holder of an issued generation)
SELECT lease_fence.highest_issued() + 1000 AS unissued \gset
BEGIN;
SET LOCAL lease_fence.generation = :unissued;
UPDATE sp SET v = v + 1 WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SET LOCAL lease_fence.generation = :unissued;
SELECT set_config('lease_fence_portable.fast',
       concat('sp'::regclass::oid, '/zz_lease_fence:', :'unissued'), true) IS NOT NULL AS forged;
UPDATE sp SET v = v + 1 WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SET LOCAL lease_fence.generation = 9000000000000000000;
SELECT set_config('lease_fence_portable.fast',
       concat('sp'::regclass::oid, '/zz_lease_fence:9000000000000000000'), true) IS NOT NULL AS forged;
UPDATE sp SET v = v + 1 WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT id, v, fence = :g2 AS at_g2 FROM sp WHERE id = 1;

-- A table protected with fence_column => 'tok' that also has an ordinary
-- integer column named fence, written by a role with DML grants only: the
-- forged setting does not make the trigger compare (and write) the column
-- fence instead of tok; the stale UPDATE is LF001 and the row unchanged
CREATE ROLE lf_sp_app NOLOGIN;
CREATE TABLE sp_tok (id int PRIMARY KEY, fence int NOT NULL DEFAULT 0, v int NOT NULL DEFAULT 0);
SELECT lease_fence.protect('sp_tok', fence_column => 'tok');
GRANT SELECT, INSERT, UPDATE, DELETE ON sp_tok TO lf_sp_app;
INSERT INTO sp_tok (id) VALUES (1);
BEGIN;
SET LOCAL lease_fence.generation = :g2;
UPDATE sp_tok SET v = 1 WHERE id = 1;
COMMIT;
SET ROLE lf_sp_app;
BEGIN;
SET LOCAL lease_fence.generation = :g1;
SELECT set_config('lease_fence_portable.fast',
       concat('sp_tok'::regclass::oid, '/zz_lease_fence:', :'g1'), true) IS NOT NULL AS forged;
UPDATE sp_tok SET v = 2 WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- the same with the column check marked done by hand
BEGIN;
SET LOCAL lease_fence.generation = :g1;
SELECT set_config('lease_fence_portable.checked',
       concat('sp_tok'::regclass::oid, '/zz_lease_fence;'), true) IS NOT NULL AS forged;
UPDATE sp_tok SET v = 2 WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- and an unissued generation
BEGIN;
SET LOCAL lease_fence.generation = :unissued;
SELECT set_config('lease_fence_portable.fast',
       concat('sp_tok'::regclass::oid, '/zz_lease_fence:', :'unissued'), true) IS NOT NULL AS forged;
UPDATE sp_tok SET v = 2 WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
RESET ROLE;
SELECT id, fence, v, tok = :g2 AS tok_at_g2 FROM sp_tok;
DROP TABLE sp_tok;
DROP ROLE lf_sp_app;
DROP TABLE sp;

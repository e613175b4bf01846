-- The portable trigger's short path (lease_fence_portable.fast): the rules
-- hold for rows after the first one of a transaction too, and a forged
-- setting skips nothing but what the README says.
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
-- the first row takes the full rules and opens the short path
UPDATE sp SET v = v + 1 WHERE id = 1;
SELECT current_setting('lease_fence_portable.fast', true) <> '' AS short_path_open;
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
-- another generation in the same transaction: not the remembered one
SET LOCAL lease_fence.generation = :g1;
SAVEPOINT s;
UPDATE sp SET v = v + 1 WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK TO s;
COMMIT;
SELECT id, v, fence = :g2 AS at_g2 FROM sp WHERE id <= 3 ORDER BY id;

-- forged by hand: the short path for a generation below row 1's fence
-- still refuses (it checks LF001 itself) ...
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
-- what it skips: LF004 for a generation never issued (README.md of
-- portable/: the writer's own writes only)
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
SELECT fence = :unissued AS unissued_written FROM sp WHERE id = 1;
ROLLBACK;
DROP TABLE sp;

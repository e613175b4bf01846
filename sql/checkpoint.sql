-- checkpoint: lease_fence.checkpoint(resource, state) stores a job's
-- progress under a resource fence; lease_fence.last_checkpoint(resource)
-- reads the newest one.  One rule per block: no current generation is
-- LF002 and a never-issued one LF004, nothing stored; the first checkpoint
-- stores state, generation and time, and fences the resource; a stale
-- holder's checkpoint is LF001 and leaves the stored one as it was; an
-- equal or higher generation replaces it; a checkpoint is part of its
-- transaction; bad input is 22023 / 22004 before anything; the table behind
-- it cannot be written or read but through the two functions, which are
-- not PUBLIC's.  Two holders at once: test/specs/checkpoint.spec.
-- Assumes only that the extension is installed.

SET client_min_messages = warning;

\set ECHO none
\i sql/include/try.sql

CREATE FUNCTION pg_temp.last(resource text) RETURNS TABLE (state jsonb, generation bigint)
LANGUAGE sql AS $$
	SELECT state, generation FROM lease_fence.last_checkpoint(resource)
$$;

CREATE FUNCTION pg_temp.written() RETURNS bigint
LANGUAGE sql AS $$
	SELECT count FROM lease_fence.stats WHERE operation = 'checkpoint' AND outcome = 'written'
$$;

-- resource fences made (not transactional: a fence its subtransaction
-- rolled back still counts; NULL in the portable edition, where the point
-- below then shows nothing): pg_temp.counter, from sql/include/try.sql

-- the generations below are small numbers: draw them first, so that they
-- were issued
SELECT max(g) >= 80 AS issued_through_80
FROM (SELECT lease_fence.next_generation() AS g FROM generate_series(1, 80)) s;

SELECT lease_fence.stats_reset();

------------------------------------------------------------------------------
-- none yet: no row
------------------------------------------------------------------------------
SELECT count(*) AS rows_before_any FROM lease_fence.last_checkpoint('cp:job:1');

------------------------------------------------------------------------------
-- no current generation: LF002; a never-issued one: LF004; nothing stored
------------------------------------------------------------------------------
SELECT pg_temp.try($$SELECT lease_fence.checkpoint('cp:job:1', '{"step": 1}')$$);
BEGIN;
SET LOCAL lease_fence.generation = 9000000000000000000;
-- (the highest issued depends on what ran before in this database)
SELECT regexp_replace(pg_temp.try($$SELECT lease_fence.checkpoint('cp:job:1', '{"step": 1}')$$),
                      'issued in this database [0-9]+', 'issued in this database N') AS try;
ROLLBACK;
SELECT count(*) AS rows_after_refusals FROM lease_fence.last_checkpoint('cp:job:1');
SELECT count(*) AS fences_after_refusals FROM lease_fence.resource_fences WHERE resource = 'cp:job:1';

------------------------------------------------------------------------------
-- the first checkpoint stores state, generation and time, returns the
-- generation, and fences the resource at it
------------------------------------------------------------------------------
BEGIN;
SELECT lease_fence.set_generation(10);
SELECT lease_fence.checkpoint('cp:job:1', '{"step": 1, "cursor": "a"}') AS written_under;
-- this transaction reads its own
SELECT * FROM pg_temp.last('cp:job:1');
COMMIT;
SELECT * FROM pg_temp.last('cp:job:1');
SELECT written_at IS NOT NULL AND written_at <= clock_timestamp() AS has_written_at
FROM lease_fence.last_checkpoint('cp:job:1');
SELECT generation AS fenced_at FROM lease_fence.resource_fences WHERE resource = 'cp:job:1';

------------------------------------------------------------------------------
-- a rolled-back checkpoint is gone
------------------------------------------------------------------------------
BEGIN;
SELECT lease_fence.set_generation(10);
SELECT lease_fence.checkpoint('cp:job:1', '{"step": 2}') AS rolled_back;
ROLLBACK;
SELECT * FROM pg_temp.last('cp:job:1');

------------------------------------------------------------------------------
-- the same holder moves it on (equal generation); a newer holder replaces
-- it; then the stale holder is refused (LF001) and the newer one's stays
------------------------------------------------------------------------------
BEGIN;
SELECT lease_fence.set_generation(10);
SELECT lease_fence.checkpoint('cp:job:1', '{"step": 2}') AS same_holder;
COMMIT;
SELECT * FROM pg_temp.last('cp:job:1');
BEGIN;
SELECT lease_fence.set_generation(20);
SELECT lease_fence.checkpoint('cp:job:1', '{"step": 3}') AS newer_holder;
COMMIT;
BEGIN;
SELECT lease_fence.set_generation(10);
SELECT pg_temp.try($$SELECT lease_fence.checkpoint('cp:job:1', '{"step": 9}')$$);
ROLLBACK;
SELECT * FROM pg_temp.last('cp:job:1');
SELECT generation AS fenced_at FROM lease_fence.resource_fences WHERE resource = 'cp:job:1';

------------------------------------------------------------------------------
-- the resource fence of set_generation(g, resource) and the checkpoint
-- are one: a checkpoint after a newer holder fenced is LF001 too
------------------------------------------------------------------------------
BEGIN;
SELECT lease_fence.set_generation(30, 'cp:job:1') AS newer_fences;
COMMIT;
BEGIN;
SELECT lease_fence.set_generation(20);
SELECT pg_temp.try($$SELECT lease_fence.checkpoint('cp:job:1', '{"step": 4}')$$);
ROLLBACK;
SELECT * FROM pg_temp.last('cp:job:1');

------------------------------------------------------------------------------
-- resources are apart, byte for byte; a state large enough for TOAST comes
-- back whole
------------------------------------------------------------------------------
BEGIN;
SELECT lease_fence.set_generation(40);
SELECT lease_fence.checkpoint('cp:job:2', jsonb_build_object('blob', repeat('x', 300000))) AS big;
SELECT lease_fence.checkpoint('cp:Job:1', '[]') AS other_case;
COMMIT;
SELECT length(state->>'blob') AS blob_length, generation FROM lease_fence.last_checkpoint('cp:job:2');
SELECT * FROM pg_temp.last('cp:Job:1');
SELECT * FROM pg_temp.last('cp:job:1');
SELECT pg_temp.written() AS counted_written;

------------------------------------------------------------------------------
-- bad input: 22023 / 22004 before anything is fenced or stored; the size
-- limit is 1 MB of the state's text form, inclusive
------------------------------------------------------------------------------
BEGIN;
SELECT lease_fence.set_generation(50);
SELECT pg_temp.try($$SELECT lease_fence.checkpoint(NULL, '{}')$$);
SELECT pg_temp.try($$SELECT lease_fence.checkpoint('', '{}')$$);
SELECT pg_temp.try($$SELECT lease_fence.checkpoint(repeat('r', 1025), '{}')$$);
SELECT pg_temp.try($$SELECT lease_fence.checkpoint('cp:bad', NULL)$$);
SELECT pg_temp.try($$SELECT lease_fence.checkpoint('cp:bad', to_jsonb(repeat('x', 1048575)))$$);
SELECT pg_temp.try($$SELECT lease_fence.last_checkpoint(NULL)$$);
SELECT pg_temp.try($$SELECT lease_fence.last_checkpoint('')$$);
SELECT count(*) AS bad_fenced FROM lease_fence.resource_fences WHERE resource = 'cp:bad';
SELECT lease_fence.checkpoint('cp:limit', to_jsonb(repeat('x', 1048574))) AS at_the_limit;
SELECT octet_length(state::text) AS limit_bytes FROM lease_fence.last_checkpoint('cp:limit');
COMMIT;
SELECT pg_temp.written() AS counted_written;

------------------------------------------------------------------------------
-- a read-only transaction: 25006, nothing stored
------------------------------------------------------------------------------
BEGIN READ ONLY;
SET LOCAL lease_fence.generation = 60;
SELECT pg_temp.try($$SELECT lease_fence.checkpoint('cp:job:1', '{"step": 0}')$$);
COMMIT;
SELECT * FROM pg_temp.last('cp:job:1');

------------------------------------------------------------------------------
-- privileges: the functions are not PUBLIC's; the table is nobody's; a
-- granted role checkpoints and reads through the functions only
------------------------------------------------------------------------------
CREATE ROLE regress_lf_cp_app;
SET ROLE regress_lf_cp_app;
SELECT pg_temp.try($$SELECT lease_fence.last_checkpoint('cp:job:1')$$);
BEGIN;
SET LOCAL lease_fence.generation = 60;
SELECT pg_temp.try($$SELECT lease_fence.checkpoint('cp:job:1', '{}')$$);
ROLLBACK;
RESET ROLE;
GRANT EXECUTE ON FUNCTION lease_fence.checkpoint(text, jsonb), lease_fence.last_checkpoint(text)
	TO regress_lf_cp_app;
SET ROLE regress_lf_cp_app;
BEGIN;
SET LOCAL lease_fence.generation = 60;
SELECT lease_fence.checkpoint('cp:job:1', '{"step": 5}') AS app_checkpoints;
COMMIT;
SELECT * FROM pg_temp.last('cp:job:1');
SELECT pg_temp.try($$UPDATE lease_fence.resource_checkpoint SET generation = 0$$);
SELECT pg_temp.try($$INSERT INTO lease_fence.resource_checkpoint VALUES ('cp:x', 1, '{}', now())$$);
SELECT pg_temp.try($$DELETE FROM lease_fence.resource_checkpoint$$);
SELECT pg_temp.try($$SELECT * FROM lease_fence.resource_checkpoint$$);
RESET ROLE;
SELECT has_function_privilege('public', 'lease_fence.checkpoint(text, jsonb)', 'EXECUTE') AS public_may_checkpoint,
       has_function_privilege('public', 'lease_fence.last_checkpoint(text)', 'EXECUTE') AS public_may_read;
REVOKE EXECUTE ON FUNCTION lease_fence.checkpoint(text, jsonb), lease_fence.last_checkpoint(text)
	FROM regress_lf_cp_app;
DROP ROLE regress_lf_cp_app;

------------------------------------------------------------------------------
-- an index the extension did not create is refused before anything is
-- fenced or written (the fence stays where it was)
------------------------------------------------------------------------------
CREATE INDEX cp_extra ON lease_fence.resource_checkpoint (generation);
BEGIN;
SET LOCAL lease_fence.generation = 70;
SELECT coalesce(pg_temp.counter('resource_fence', 'accepted'), -1) AS fenced_before \gset
SELECT pg_temp.try($$SELECT lease_fence.checkpoint('cp:job:1', '{"step": 6}')$$);
SELECT coalesce(pg_temp.counter('resource_fence', 'accepted'), -1) = :fenced_before AS no_fence_before_refusal;
SELECT generation AS still_fenced_at FROM lease_fence.resource_fences WHERE resource = 'cp:job:1';
ROLLBACK;
DROP INDEX lease_fence.cp_extra;
SELECT * FROM pg_temp.last('cp:job:1');

-- (what this file fenced and stored goes: later files and specs may share
-- the database, as the portable edition's run does)
DELETE FROM lease_fence.resource_checkpoint WHERE resource LIKE 'cp:%';
DELETE FROM lease_fence.resource_generation WHERE resource LIKE 'cp:%';

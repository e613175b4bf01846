-- test/bench/setup.sql — schema of the benchmark (psql -v rows=N).
--
-- Five tables of the same shape and size, one per way of running the same
-- UPDATE: no trigger, PostgreSQL's built-in C trigger
-- suppress_redundant_updates_trigger (the cost of the row-trigger machinery
-- itself), the PL/pgSQL fence a user would write instead of lease_fence, and
-- lease_fence (twice: a new generation every round, so the trigger rewrites
-- the fence of every row; and the generation the rows already carry, so it
-- only compares).  Autovacuum is off on them: run.sh vacuums each table
-- before each timed UPDATE, so all five go through the same states.

\set ON_ERROR_STOP 1

CREATE EXTENSION lease_fence;

-- The fence rule of lease_fence for UPDATE, as a user would write it:
-- supplied = the current generation if set, else the value written; a
-- supplied generation lower than the stored one is rejected; the row's fence
-- becomes the supplied generation.
CREATE FUNCTION bench_plpgsql_fence() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
	g text := current_setting('lease_fence.generation', true);
	supplied bigint;
BEGIN
	IF g IS NOT NULL AND g <> '' THEN
		supplied := g::bigint;
	ELSE
		supplied := NEW.fence;
	END IF;
	IF supplied IS NULL THEN
		RAISE EXCEPTION 'missing generation' USING ERRCODE = 'LF002';
	END IF;
	IF supplied < OLD.fence THEN
		RAISE EXCEPTION 'stale generation: write rejected by fence'
			USING ERRCODE = 'LF001',
				  DETAIL = format('Table %s: stored generation %s, supplied generation %s.',
								  TG_TABLE_NAME, OLD.fence, supplied);
	END IF;
	NEW.fence := supplied;
	RETURN NEW;
END
$$;

CREATE TABLE u_none (id int PRIMARY KEY, v bigint NOT NULL, pad text NOT NULL,
					 fence bigint NOT NULL DEFAULT 0) WITH (autovacuum_enabled = off);
CREATE TABLE u_builtin (LIKE u_none INCLUDING ALL) WITH (autovacuum_enabled = off);
CREATE TABLE u_plpgsql (LIKE u_none INCLUDING ALL) WITH (autovacuum_enabled = off);
CREATE TABLE u_lf (LIKE u_none INCLUDING ALL) WITH (autovacuum_enabled = off);
CREATE TABLE u_lf_same (LIKE u_none INCLUDING ALL) WITH (autovacuum_enabled = off);
-- the memory test's table (section 5)
CREATE TABLE u_mem (LIKE u_none INCLUDING ALL) WITH (autovacuum_enabled = off);
-- section 2, the issued check at its worst: a new generation in every
-- transaction, and the same on a table with tokens from elsewhere (no check)
CREATE TABLE u_lf_reread (LIKE u_none INCLUDING ALL) WITH (autovacuum_enabled = off);
CREATE TABLE u_lf_ext (LIKE u_none INCLUDING ALL) WITH (autovacuum_enabled = off);

CREATE TRIGGER zz_builtin BEFORE UPDATE ON u_builtin
	FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger();
CREATE TRIGGER zz_plpgsql BEFORE UPDATE ON u_plpgsql
	FOR EACH ROW EXECUTE FUNCTION bench_plpgsql_fence();
SELECT lease_fence.protect('u_lf');
SELECT lease_fence.protect('u_lf_same');
SELECT lease_fence.protect('u_mem');
SELECT lease_fence.protect('u_lf_reread');
SELECT lease_fence.protect('u_lf_ext', tokens => 'external');

INSERT INTO u_none
	SELECT i, i, md5(i::text), 0 FROM generate_series(1, :rows) i;
INSERT INTO u_builtin SELECT * FROM u_none;
INSERT INTO u_plpgsql SELECT * FROM u_none;
INSERT INTO u_lf SELECT * FROM u_none;
INSERT INTO u_lf_same SELECT * FROM u_none;
INSERT INTO u_mem SELECT * FROM u_none;
INSERT INTO u_lf_reread SELECT * FROM u_none;
INSERT INTO u_lf_ext SELECT * FROM u_none;

-- Every table gets the same first UPDATE and VACUUM, so that all of them are
-- in the same physical state at every round (a bulk UPDATE writes the new
-- row versions either into the pages the last VACUUM freed or into new
-- pages, alternately).  It also gives u_lf_same the generation its UPDATEs
-- will supply: every round finds the row's fence equal to the current
-- generation.
SELECT lease_fence.next_generation() AS same_gen \gset
BEGIN;
SET LOCAL lease_fence.generation = :same_gen;
UPDATE u_none SET v = v + 1;
UPDATE u_builtin SET v = v + 1;
UPDATE u_plpgsql SET v = v + 1;
UPDATE u_lf SET v = v + 1;
UPDATE u_lf_same SET v = v + 1;
COMMIT;

-- section 2: one resource fence per row of u_lf ('bench:<id>'), at
-- generation 0, so that txn_lf_resource updates a stored fence, as a
-- holder's transaction does, rather than inserting the first one
BEGIN;
SET LOCAL lease_fence.generation = 0;
SELECT count(lease_fence.fence_resource('bench:' || i)) AS resource_fences
FROM generate_series(1, :rows) i;
COMMIT;

-- section 4: a plain sequence, as lease_fence.generation_seq is made
CREATE SEQUENCE bench_seq AS bigint MINVALUE 1 NO CYCLE;

-- section 7, the fenced job: one row per client (client i writes row i),
-- fenced by lease_fence for the job done with its leases, and a plain table
-- with a token column for the job done with Redis alone (the UPDATE itself
-- compares the token: fence <= token)
CREATE TABLE bench_job_item (id int PRIMARY KEY, v bigint NOT NULL DEFAULT 0, fence bigint);
SELECT lease_fence.protect('bench_job_item');
INSERT INTO bench_job_item (id, fence) SELECT i, 0 FROM generate_series(1, 64) i;
CREATE TABLE bench_job_item2 (id int PRIMARY KEY, v bigint NOT NULL DEFAULT 0, fence bigint NOT NULL DEFAULT 0);
INSERT INTO bench_job_item2 (id) SELECT i FROM generate_series(1, 64) i;

VACUUM ANALYZE;
CHECKPOINT;

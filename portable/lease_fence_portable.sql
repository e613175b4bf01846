-- lease_fence_portable.sql — the fence of lease_fence 1.3 in plain SQL and
-- PL/pgSQL, for servers that cannot load C extensions (managed PostgreSQL).
--
--   psql -v ON_ERROR_STOP=1 -f portable/lease_fence_portable.sql  (as the database owner; no superuser)
--
-- Installs into schema lease_fence, which it creates, or which must already
-- be owned by the installing role and grant CREATE to nobody else.  Running
-- it again over its own install replaces the functions and views in place
-- (tables and the generation sequence are kept).  What differs from the C
-- edition: portable/README.md.
--
-- Every function pins search_path to pg_catalog, pg_temp and names every
-- object schema-qualified, except fence_trigger(), whose every operator,
-- function and type is qualified instead (it says why).  SECURITY DEFINER is used for exactly five
-- functions, which write (or read) objects on which nobody else has the privilege
-- (the C edition does it in C, without a privilege check):
--   next_generation()    nextval on lease_fence.generation_seq (and a new
--                        epoch on a new timeline): nobody may setval it
--                        backwards or draw from it otherwise (SELECT on it
--                        is PUBLIC's: last_value is no secret);
--   next_generation(bigint)  the same after moving the sequence up (the
--                        heal of a stale answer), within a budget of 2^24
--                        for all heals together (lease_fence.heal_budget_seq);
--                        EXECUTE is not PUBLIC's;
--   fence_resource(text) writes lease_fence.resource_generation, which
--                        nobody may write directly (a direct UPDATE could
--                        lower a stored fence); EXECUTE is not PUBLIC's;
--   checkpoint(text, jsonb)  fences as fence_resource() and writes
--                        lease_fence.resource_checkpoint, which nobody may
--                        write directly; EXECUTE is not PUBLIC's;
--   last_checkpoint(text)  reads lease_fence.resource_checkpoint (a job's
--                        data: nobody else may read it); EXECUTE is not
--                        PUBLIC's.
-- They run as the installing role (the database owner), take no SQL text
-- from the caller, and touch only those objects (and
-- lease_fence.generation_timeline, whose row is the lock of the
-- generations, lease_fence.timeline_seq, the timeline of the current
-- epoch, and lease_fence.heal_budget_seq).  adopt_generations() is not
-- among them: only the installing role or a superuser may run it, as
-- advance_generation(), and it runs as that caller.

\set ON_ERROR_STOP on
SET client_min_messages = warning;
BEGIN;

DO $install$
DECLARE
	nsp oid;
	bad text;
BEGIN
	SELECT n.oid INTO nsp FROM pg_catalog.pg_namespace n WHERE n.nspname = 'lease_fence';
	IF nsp IS NULL THEN
		EXECUTE 'CREATE SCHEMA lease_fence';
		RETURN;
	END IF;
	IF EXISTS (SELECT FROM pg_catalog.pg_extension e WHERE e.extnamespace = nsp) THEN
		RAISE EXCEPTION 'schema lease_fence belongs to an extension'
			USING ERRCODE = 'object_not_in_prerequisite_state',
			      HINT = 'The portable edition does not install beside CREATE EXTENSION lease_fence.';
	END IF;
	IF (SELECT n.nspowner FROM pg_catalog.pg_namespace n WHERE n.oid = nsp)
	   <> (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = current_user) THEN
		RAISE EXCEPTION 'schema lease_fence is owned by role %, not by %',
			(SELECT n.nspowner::pg_catalog.regrole FROM pg_catalog.pg_namespace n WHERE n.oid = nsp), current_user
			USING ERRCODE = 'insufficient_privilege',
			      DETAIL = 'The portable edition installs only into a schema it creates or that the installing role owns.',
			      HINT = 'Drop or rename that schema, or install as its owner.';
	END IF;
	SELECT pg_catalog.string_agg(a.grantee::pg_catalog.regrole::text, ', ') INTO bad
	FROM pg_catalog.pg_namespace n, pg_catalog.aclexplode(n.nspacl) a
	WHERE n.oid = nsp AND a.privilege_type = 'CREATE' AND a.grantee <> n.nspowner;
	IF bad IS NOT NULL THEN
		RAISE EXCEPTION 'schema lease_fence grants CREATE to %', bad
			USING ERRCODE = 'insufficient_privilege',
			      HINT = 'REVOKE CREATE on that schema, then try again.';
	END IF;
	SELECT pg_catalog.string_agg(c.oid::pg_catalog.regclass::text, ', ') INTO bad
	FROM pg_catalog.pg_class c
	WHERE c.relnamespace = nsp AND c.relowner <> (SELECT n.nspowner FROM pg_catalog.pg_namespace n WHERE n.oid = nsp);
	IF bad IS NOT NULL THEN
		RAISE EXCEPTION 'schema lease_fence holds relations another role owns: %', bad
			USING ERRCODE = 'insufficient_privilege';
	END IF;
	IF EXISTS (SELECT FROM pg_catalog.pg_proc p WHERE p.pronamespace = nsp AND p.proowner <>
	           (SELECT n.nspowner FROM pg_catalog.pg_namespace n WHERE n.oid = nsp)) THEN
		RAISE EXCEPTION 'schema lease_fence holds functions another role owns'
			USING ERRCODE = 'insufficient_privilege';
	END IF;
END;
$install$;

REVOKE CREATE ON SCHEMA lease_fence FROM PUBLIC;
GRANT USAGE ON SCHEMA lease_fence TO PUBLIC;

------------------------------------------------------------------------------
-- Generations
------------------------------------------------------------------------------

CREATE SEQUENCE IF NOT EXISTS lease_fence.generation_seq AS bigint MINVALUE 1 NO CYCLE;
REVOKE ALL ON SEQUENCE lease_fence.generation_seq FROM PUBLIC;

-- A generation is (epoch << 40) + counter, as in the C edition.  A new
-- timeline (a promotion, a point-in-time recovery) starts a new epoch,
-- above every value the timeline it branched off could have handed out.
-- The timeline is read from the name of the current WAL file
-- (pg_walfile_name(pg_current_wal_lsn()), which PUBLIC may call in
-- PostgreSQL); where a service does not allow that, wal_timeline() is NULL
-- and there is no timeline check (README.md says so).
CREATE OR REPLACE FUNCTION lease_fence.wal_timeline()
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	RETURN ('x' || pg_catalog.substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()), 1, 8))::bit(32)::bigint;
EXCEPTION WHEN OTHERS THEN
	RETURN NULL;
END;
$$;

COMMENT ON FUNCTION lease_fence.wal_timeline() IS
'the timeline this server writes WAL on, or NULL where it cannot be read (portable edition)';

-- The lock of the generations: the one row of this table.  A draw locks
-- it FOR SHARE around its nextval; whatever moves the generations (a new
-- epoch, a heal, advance_generation()) locks it FOR UPDATE.  Each takes it
-- in a subtransaction that it rolls back before it returns
-- (draw_generation() says how), so the lock lasts as long as the call
-- that took it, never as long as the caller's transaction: a transaction
-- that drew, healed or started a new epoch and stays open holds no draw
-- up.  Nobody but the installing role has any privilege on this table, so
-- nobody else can lock the row otherwise, and what any role can take on
-- the table (the locks a PREPARE of a SELECT or an INSERT holds without a
-- privilege check) conflicts with neither of the row locks.
CREATE TABLE IF NOT EXISTS lease_fence.generation_timeline (
	one boolean PRIMARY KEY DEFAULT true CHECK (one)
);
REVOKE ALL ON lease_fence.generation_timeline FROM PUBLIC;
INSERT INTO lease_fence.generation_timeline (one) VALUES (true)
	ON CONFLICT (one) DO NOTHING;

-- The timeline the current epoch belongs to: the last value of this
-- sequence, moved by setval only; none (NULL) where the timeline could not
-- be read when it was recorded.  A sequence, not a table row, because
-- setval is not transactional: the first draw on a new timeline records it
-- under the row lock above and then lets the lock go, and what it recorded
-- stays recorded when the drawer's transaction rolls back (a row updated
-- in that transaction would have kept the lock until it ended, and its
-- rollback would have made the next draw start the new epoch once more).
-- Nobody but the installing role may read or move it.
CREATE SEQUENCE IF NOT EXISTS lease_fence.timeline_seq AS bigint MINVALUE 1 NO CYCLE;
REVOKE ALL ON SEQUENCE lease_fence.timeline_seq FROM PUBLIC;

-- Record the timeline: on a new install, the one it starts on; over an
-- install of an earlier version, the one it recorded in the column
-- generation_timeline.timeline, which is then dropped.  Either only while
-- none is recorded: what the first draw would record all the same (a
-- value only ever recorded after the sequence was moved to its epoch, or
-- with no timeline check before it).  The column is dropped only if no
-- other transaction holds a lock on the table now: an installer waiting
-- for that lock would make every draw queue behind it; then a WARNING,
-- and the next run drops it (nothing reads it any more).
DO $upgrade$
DECLARE
	tls CONSTANT pg_catalog.regclass := 'lease_fence.timeline_seq';
	recorded bigint;
	has_column boolean := EXISTS (
		SELECT FROM pg_catalog.pg_attribute a
		WHERE a.attrelid = 'lease_fence.generation_timeline'::pg_catalog.regclass
		  AND a.attname = 'timeline' AND NOT a.attisdropped);
BEGIN
	IF pg_catalog.pg_sequence_last_value(tls) IS NULL THEN
		IF has_column THEN
			EXECUTE 'SELECT t.timeline FROM lease_fence.generation_timeline t' INTO recorded;
		ELSE
			recorded := lease_fence.wal_timeline();
		END IF;
		IF recorded IS NOT NULL THEN
			PERFORM pg_catalog.setval(tls, recorded);
		END IF;
	END IF;
	IF has_column THEN
		BEGIN
			LOCK TABLE lease_fence.generation_timeline IN ACCESS EXCLUSIVE MODE NOWAIT;
			ALTER TABLE lease_fence.generation_timeline DROP COLUMN timeline;
		EXCEPTION WHEN lock_not_available THEN
			RAISE WARNING 'column timeline of lease_fence.generation_timeline is no longer used, and was not dropped: another transaction holds a lock on the table'
				USING HINT = 'Run portable/lease_fence_portable.sql again to drop it.';
		END;
	END IF;
END;
$upgrade$;

-- The heal budget spent: how far heals (next_generation(above)) have moved
-- the generations since the install or the owner's last
-- advance_generation(), summed over heals (the value healed to minus the
-- highest issued before that heal).  At most 2^24 in total, as in the C
-- edition.  A sequence, not a table row: a heal's setval is not
-- transactional, so a heal whose transaction rolls back has moved the
-- generations all the same, and must have spent its share.  Nobody but the
-- installing role may read or move it.
CREATE SEQUENCE IF NOT EXISTS lease_fence.heal_budget_seq AS bigint MINVALUE 0 START 0 NO CYCLE;
REVOKE ALL ON SEQUENCE lease_fence.heal_budget_seq FROM PUBLIC;

-- Move the sequence so that every later generation is greater than past
-- (never backwards), after starting a new epoch if the timeline changed.
-- It locks the row of generation_timeline FOR UPDATE: every draw holds it
-- FOR SHARE around its nextval, so no draw runs between the read of the
-- highest issued here and the setval (which is not transactional): a
-- setval never lands below a value just drawn, and never moves the
-- sequence backwards.  Its callers run it in a subtransaction that they
-- roll back before they return: it writes only sequences (setval is not
-- transactional), so the rollback undoes nothing but the lock.
--
-- checked (a heal: next_generation(above)): past must be a value this
-- database could have issued: in the current epoch, and within the heal
-- budget -- heals move the generations at most 2^24 (16,777,216) past the
-- highest issued in total (lease_fence.heal_budget_seq), until the owner's next
-- advance_generation().  Beyond that, XX001 and nothing is moved: a :gen
-- key set by anybody who may write Redis to 2^63-1 or a timestamp, or one
-- heal after another, would otherwise exhaust the generations for good.
-- Not checked (advance_generation(), the owner's decision): any past that
-- leaves the next draw a generation, and the budget starts again.
CREATE OR REPLACE FUNCTION lease_fence.move_generations(past bigint, checked boolean)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	seq CONSTANT pg_catalog.regclass := 'lease_fence.generation_seq';
	spent_seq CONSTANT pg_catalog.regclass := 'lease_fence.heal_budget_seq';
	counter_mask CONSTANT bigint := (1::bigint << 40) - 1;
	counter_limit CONSTANT bigint := (1::bigint << 40) - (1::bigint << 24);
	heal_budget CONSTANT bigint := 1::bigint << 24;
	epoch_max CONSTANT bigint := (1::bigint << 23) - 1;
	timeline_seq CONSTANT pg_catalog.regclass := 'lease_fence.timeline_seq';
	tl bigint := lease_fence.wal_timeline();
	known bigint;
	last bigint;
	epoch bigint;
	target bigint;
	spent bigint;
BEGIN
	-- no draw, heal or advance runs until the caller's subtransaction ends
	PERFORM FROM lease_fence.generation_timeline t FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'table lease_fence.generation_timeline has lost its row'
			USING ERRCODE = 'object_not_in_prerequisite_state',
			      HINT = 'Run portable/lease_fence_portable.sql again: it puts the row back.';
	END IF;
	-- (read under the lock: a call that waited for it sees the moves made meanwhile)
	known := pg_catalog.pg_sequence_last_value(timeline_seq);
	last := COALESCE(pg_catalog.pg_sequence_last_value(seq), 0);
	epoch := last >> 40;
	-- every check first, then the moves: setval is not transactional, so a
	-- refused heal must not have moved to a new epoch before it is refused
	IF tl IS NOT NULL AND known IS NOT NULL AND tl > known THEN
		-- a new timeline: the current epoch plus its number, as the C edition
		target := epoch + tl;
		IF target > epoch_max THEN
			RAISE EXCEPTION 'no generation epoch is left for timeline %', tl
				USING ERRCODE = 'program_limit_exceeded',
				      DETAIL = pg_catalog.format('The current epoch is %s and epochs go up to %s.', epoch, epoch_max);
		END IF;
		last := target << 40;
		epoch := target;
	END IF;
	IF checked AND past > last THEN
		spent := COALESCE(pg_catalog.pg_sequence_last_value(spent_seq), 0);
		IF (past >> 40) <> epoch OR past - last > heal_budget - spent OR (past & counter_mask) >= counter_limit - 1 THEN
			RAISE EXCEPTION 'generation % was not issued by this database', past
				USING ERRCODE = 'data_corrupted',
				      DETAIL = pg_catalog.format('This database has issued up to %s (epoch %s). Heals move the generations at most %s past the highest issued in total, within the epoch, until the database owner runs lease_fence.advance_generation(); %s of that is left. Nothing was moved.',
				                                 last, epoch, heal_budget, GREATEST(heal_budget - spent, 0)),
				      HINT = 'If this database was restored from a backup older than that generation, the database owner moves the generations past it with lease_fence.advance_generation() once the value is checked. Otherwise something other than lease_fence wrote the resource''s generation key: delete that key.';
		END IF;
	END IF;

	-- the epoch first: when the WAL of the timeline's record is on disk, so
	-- is the move it stands for
	IF target IS NOT NULL THEN
		PERFORM pg_catalog.setval(seq, target << 40);
		RAISE LOG 'timeline %: generations move from epoch % to epoch %', tl, target - tl, target;
	END IF;
	IF tl IS NOT NULL AND (known IS NULL OR tl > known) THEN
		PERFORM pg_catalog.setval(timeline_seq, tl);
	END IF;
	IF past IS NULL THEN
		RETURN;
	END IF;
	IF NOT checked THEN
		IF past > last THEN
			PERFORM pg_catalog.setval(seq, past);
		END IF;
		PERFORM pg_catalog.setval(spent_seq, 0);
	ELSIF past > last THEN
		-- the budget first: when the WAL of the move is on disk, so is its cost
		PERFORM pg_catalog.setval(spent_seq, spent + (past - last));
		PERFORM pg_catalog.setval(seq, past);
	END IF;
	-- (past <= last: the next draw is above it already)
END;
$$;

REVOKE EXECUTE ON FUNCTION lease_fence.move_generations(bigint, boolean) FROM PUBLIC;

-- Draw a generation; with above, first move the sequence past above (the
-- heal of a stale answer: Redis holds a generation this database may have
-- issued before a restore, or that a stalled acquirer drew and lost).
--
-- A draw locks the row of generation_timeline FOR SHARE (draws do not
-- wait for each other); whatever moves the sequence (a new epoch, a heal,
-- advance_generation()) locks it FOR UPDATE in move_generations().  Either
-- way only while the call runs: the lock is taken in a subtransaction that
-- is rolled back once the value is drawn.  What the call did stays done
-- (nextval and setval are not transactional, and the timeline is recorded
-- in a sequence), and nothing is left locked, so a caller's transaction
-- that stays open -- any role's, also the first draw on a new timeline --
-- holds up no draw, heal or advance.  Row locks, not advisory locks: any
-- role may take any advisory lock, and one that held the draws' key froze
-- every draw; only the installing role may lock this row.
--
-- The value leaves only through a transaction with an xid, so that its
-- COMMIT flushes the WAL that covers it (a plain nextval in a transaction
-- without an xid is not flushed at commit).  Not callable by PUBLIC: the
-- two SECURITY DEFINER functions below call it.
CREATE OR REPLACE FUNCTION lease_fence.draw_generation(above bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	seq CONSTANT pg_catalog.regclass := 'lease_fence.generation_seq';
	timeline_seq CONSTANT pg_catalog.regclass := 'lease_fence.timeline_seq';
	counter_mask CONSTANT bigint := (1::bigint << 40) - 1;
	counter_limit CONSTANT bigint := (1::bigint << 40) - (1::bigint << 24);
	tl bigint;
	known bigint;
	g bigint;
BEGIN
	IF pg_catalog.pg_is_in_recovery() THEN
		RAISE EXCEPTION 'cannot draw a generation during recovery' USING ERRCODE = 'read_only_sql_transaction';
	END IF;
	IF pg_catalog.current_setting('transaction_read_only')::boolean THEN
		RAISE EXCEPTION 'cannot draw a generation in a read-only transaction' USING ERRCODE = 'read_only_sql_transaction';
	END IF;
	IF above < 0 THEN
		RAISE EXCEPTION 'above must not be negative' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	tl := lease_fence.wal_timeline();
	-- read without a lock, to choose the lock: the recorded timeline and
	-- the sequence only grow, so what needs no move now needs none later
	known := pg_catalog.pg_sequence_last_value(timeline_seq);
	-- the row lock only while this call runs: a subtransaction, rolled back
	-- once the value is drawn (the value stays drawn, and a move stays
	-- made: nextval and setval are not transactional)
	BEGIN
		IF (tl IS NULL OR tl <= known)
		   AND (above IS NULL OR above < COALESCE(pg_catalog.pg_sequence_last_value(seq), 0)) THEN
			-- a draw
			PERFORM FROM lease_fence.generation_timeline t FOR SHARE;
			IF NOT FOUND THEN
				RAISE EXCEPTION 'table lease_fence.generation_timeline has lost its row'
					USING ERRCODE = 'object_not_in_prerequisite_state',
					      HINT = 'Run portable/lease_fence_portable.sql again: it puts the row back.';
			END IF;
		ELSE
			-- a move: a new epoch, or a heal
			PERFORM lease_fence.move_generations(above, true);
		END IF;
		g := pg_catalog.nextval(seq);
		-- (a code of this function's own: it never leaves it)
		RAISE EXCEPTION 'drawn' USING ERRCODE = 'LFDRW';
	EXCEPTION WHEN SQLSTATE 'LFDRW' THEN
		NULL;
	END;
	IF (g & counter_mask) >= counter_limit THEN
		RAISE EXCEPTION 'the generations of epoch % are exhausted', g >> 40
			USING ERRCODE = 'program_limit_exceeded',
			      DETAIL = pg_catalog.format('lease_fence.generation_seq reached %s; the counter of an epoch has 40 bits, and the last 2^24 values of each are never handed out.', g),
			      HINT = 'A new timeline (a promotion or a point-in-time recovery) starts a new epoch.';
	END IF;
	PERFORM pg_catalog.pg_current_xact_id();
	RETURN g;
END;
$$;

REVOKE EXECUTE ON FUNCTION lease_fence.draw_generation(bigint) FROM PUBLIC;

-- next_generation(): a new generation, strictly greater than every one
-- returned before.  SECURITY DEFINER: it moves generation_seq, which nobody
-- else may write.
CREATE OR REPLACE FUNCTION lease_fence.next_generation()
RETURNS bigint
LANGUAGE sql VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT lease_fence.draw_generation(NULL)
$$;

COMMENT ON FUNCTION lease_fence.next_generation() IS
'draw a new generation, strictly greater than every one returned before (portable edition: durable once the calling transaction commits)';

-- next_generation(above): a new generation greater than above (within the
-- heal budget, else XX001): how a client-side acquire heals a stale
-- answer.  SECURITY DEFINER for the same reason; EXECUTE is not PUBLIC's
-- (heals spend a budget shared by the whole database): grant it to the
-- roles that take leases.
CREATE OR REPLACE FUNCTION lease_fence.next_generation(above bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF above IS NULL THEN
		RAISE EXCEPTION 'above must not be NULL' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	RETURN lease_fence.draw_generation(above);
END;
$$;

REVOKE EXECUTE ON FUNCTION lease_fence.next_generation(bigint) FROM PUBLIC;

COMMENT ON FUNCTION lease_fence.next_generation(bigint) IS
'draw a new generation greater than above; heals move the generations at most 2^24 past the highest issued in total until advance_generation() (the heal of a stale answer; portable edition)';

-- advance_generation(past): every later generation is greater than past,
-- durably once the transaction commits, and the heal budget starts again.
-- The database owner's decision, as the superuser's in the C edition: after
-- a restore from a backup older than the generations Redis or the fenced
-- rows hold beyond what heals may move by themselves.  Returns the highest
-- issued generation afterwards.  Not SECURITY DEFINER: only the installing
-- role (and superusers) may run it; EXECUTE is not PUBLIC's, and a role
-- granted it has no privilege on the sequence it moves all the same.
CREATE OR REPLACE FUNCTION lease_fence.advance_generation(past bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	counter_mask CONSTANT bigint := (1::bigint << 40) - 1;
	counter_limit CONSTANT bigint := (1::bigint << 40) - (1::bigint << 24);
	gen_owner oid := (SELECT c.relowner FROM pg_catalog.pg_class c
	                  WHERE c.oid = 'lease_fence.generation_seq'::pg_catalog.regclass);
	hi bigint;
BEGIN
	IF NOT pg_catalog.pg_has_role(gen_owner, 'USAGE') THEN
		RAISE EXCEPTION 'must be owner of the generations to advance them'
			USING ERRCODE = 'insufficient_privilege',
			      DETAIL = 'Every value up to the new one counts as issued: the fence then accepts it.',
			      HINT = pg_catalog.format('Role %s, which installed the portable edition, owns them.', gen_owner::pg_catalog.regrole);
	END IF;
	IF past IS NULL THEN
		RAISE EXCEPTION 'past must not be NULL' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF past < 0 THEN
		RAISE EXCEPTION 'past must not be negative' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	-- past + 1, the next draw, must be a generation
	IF (past & counter_mask) >= counter_limit - 1 THEN
		RAISE EXCEPTION 'generation % leaves no generation to draw after it', past
			USING ERRCODE = 'invalid_parameter_value',
			      DETAIL = 'The last 2^24 values of each epoch are never handed out.';
	END IF;
	IF pg_catalog.pg_is_in_recovery() THEN
		RAISE EXCEPTION 'cannot advance the generations during recovery' USING ERRCODE = 'read_only_sql_transaction';
	END IF;
	IF pg_catalog.current_setting('transaction_read_only')::boolean THEN
		RAISE EXCEPTION 'cannot advance the generations in a read-only transaction' USING ERRCODE = 'read_only_sql_transaction';
	END IF;
	-- the generations' lock only while this call runs (see draw_generation)
	BEGIN
		PERFORM lease_fence.move_generations(past, false);
		hi := lease_fence.highest_issued();
		RAISE EXCEPTION 'moved' USING ERRCODE = 'LFDRW';
	EXCEPTION WHEN SQLSTATE 'LFDRW' THEN
		NULL;
	END;
	-- the value leaves through a transaction with an xid (see draw_generation)
	PERFORM pg_catalog.pg_current_xact_id();
	RAISE LOG 'generations advanced: the highest issued generation is now %', hi;
	RETURN hi;
END;
$$;

REVOKE EXECUTE ON FUNCTION lease_fence.advance_generation(bigint) FROM PUBLIC;

COMMENT ON FUNCTION lease_fence.advance_generation(bigint) IS
'the database owner only: make every later generation greater than past (never moves backwards) and start the heal budget again; returns the highest issued generation (portable edition)';

-- The highest generation issued: the sequence's last value (0 before the first draw).
-- SELECT on the sequence is PUBLIC's (it lets a role read last_value, as
-- pg_sequences would show it: not draw from it, nor move it); the fence
-- trigger reads it with pg_sequence_last_value(), which is NULL before the
-- first draw.  Read on the old primary of a switchover (after its writers
-- stopped), it is adopt_generations()'s argument on the new one.
GRANT SELECT ON SEQUENCE lease_fence.generation_seq TO PUBLIC;

CREATE OR REPLACE FUNCTION lease_fence.highest_issued()
RETURNS bigint
LANGUAGE sql VOLATILE PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT COALESCE(pg_catalog.pg_sequence_last_value('lease_fence.generation_seq'::pg_catalog.regclass), 0)
$$;

COMMENT ON FUNCTION lease_fence.highest_issued() IS
'the highest generation this database has issued (0: none): what the fence''s LF004 check compares with (portable edition)';

------------------------------------------------------------------------------
-- Moving a database: a switchover to a logical replica
------------------------------------------------------------------------------

-- Each adoption of the generations of the database this one replaced (a
-- switchover to a logical replica copies the fences, not generation_seq):
-- from adopted_at on, the fence refuses every generation from 1 to
-- refused_through (LF004), and every later draw is above it.  The fences it
-- found, the old primary's highest issued generation it was given and this
-- database's own are kept for the operator.  Nobody but the installing role
-- has any privilege on it; a plain table, so pg_dump and pg_upgrade carry
-- it (the C edition marks it with pg_extension_config_dump).
CREATE TABLE IF NOT EXISTS lease_fence.generation_adoption (
	adopted_at timestamptz NOT NULL,
	refused_through bigint NOT NULL,
	highest_fence bigint,
	old_highest_issued bigint,
	highest_issued_before bigint NOT NULL
);
REVOKE ALL ON lease_fence.generation_adoption FROM PUBLIC;

-- What the fence refuses, for every writer (the fence runs as the writer,
-- who has no privilege on generation_adoption): the newest adoption that
-- committed.  A view, as its owner: it shows what the LF004 message of a
-- refused write shows anyway (the time and the generation), nothing else.
CREATE OR REPLACE VIEW lease_fence.adoption_floor AS
	SELECT a.refused_through, a.adopted_at
	FROM lease_fence.generation_adoption a
	ORDER BY a.refused_through DESC, a.adopted_at DESC
	LIMIT 1;
GRANT SELECT ON lease_fence.adoption_floor TO PUBLIC;

COMMENT ON VIEW lease_fence.adoption_floor IS
'the newest adoption of another database''s generations: the fence refuses every generation from 1 to refused_through (portable edition)';

-- The per-write cost of the floor.  The row fence is the hot path, and it
-- runs as the writer: a query of adoption_floor on every row would cost
-- more than the rest of the check, and a session-level setting cannot be
-- trusted (a session can set any setting, and none may let a write skip a
-- rule: see fence_trigger()).  So the fence reads this sequence, as it
-- reads generation_seq: adopt_generations() moves it to refused_through
-- (setval, never down) BEFORE it records the adoption, so its last value
-- is at least every refused_through that ever committed.  A generation
-- above it passes at the cost of one sequence read (every holder of this
-- database, and every one when nothing was ever adopted); only one at or
-- below it reads adoption_floor, which says whether an adoption that
-- refuses it committed (one rolled back moved the sequence but refuses
-- nothing).  SELECT is PUBLIC's (its last value is no secret); only the
-- installing role may move it.
CREATE SEQUENCE IF NOT EXISTS lease_fence.adoption_floor_seq AS bigint MINVALUE 0 START 0 NO CYCLE;
REVOKE ALL ON SEQUENCE lease_fence.adoption_floor_seq FROM PUBLIC;
GRANT SELECT ON SEQUENCE lease_fence.adoption_floor_seq TO PUBLIC;

-- LF004 for a generation an adoption refuses: called by the fence only when
-- g is at or below adoption_floor_seq (see above); returns when no
-- committed adoption refuses it.  target is the DETAIL's subject ("Table
-- ...", "Resource ..."); the error fields are the table's (sch, tbl, col) or,
-- for a resource fence, resource_generation's with the resource as
-- CONSTRAINT (res), as the other fence errors.
CREATE OR REPLACE FUNCTION lease_fence.refuse_adopted(g bigint, target text,
	sch text, tbl text, col text, res text)
RETURNS void
LANGUAGE plpgsql STABLE PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp
-- the time of the adoption as the C edition writes it, whatever the
-- session's DateStyle (in its time zone)
SET datestyle = 'ISO, MDY'
AS $$
DECLARE
	floor record;
	msg CONSTANT text := 'generation issued before lease_fence.adopt_generations(): write rejected by fence';
	hint CONSTANT text := 'Take the lease again on this database: its generations are above every one of the database it replaced.';
	detail text;
BEGIN
	IF g IS NULL OR g <= 0 THEN
		RETURN;
	END IF;
	SELECT f.refused_through, f.adopted_at INTO floor FROM lease_fence.adoption_floor f;
	IF NOT FOUND OR g > floor.refused_through THEN
		RETURN;
	END IF;
	detail := pg_catalog.format('%s: supplied generation %s; this database adopted the generations of the database it replaced at %s and refuses every generation up to %s.',
	                            target, g, floor.adopted_at, floor.refused_through);
	IF res IS NOT NULL THEN
		RAISE EXCEPTION '%', msg
			USING ERRCODE = 'LF004', DETAIL = detail, HINT = hint,
			      SCHEMA = 'lease_fence', TABLE = 'resource_generation', CONSTRAINT = res;
	END IF;
	RAISE EXCEPTION '%', msg
		USING ERRCODE = 'LF004', DETAIL = detail, HINT = hint,
		      SCHEMA = sch, TABLE = tbl, COLUMN = col;
END;
$$;

-- In REPEATABLE READ / SERIALIZABLE: whether a transaction other than this
-- one committed after this transaction's snapshot was taken, so that a
-- query cannot see what it wrote (the C edition scans under the latest
-- snapshot).  Gives this transaction an xid.  Used by truncate_guard() and
-- adopt_generations(), which then refuse with 40001 (fail closed).
CREATE OR REPLACE FUNCTION lease_fence.committed_since_snapshot()
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	snap pg_catalog.pg_snapshot := pg_catalog.pg_current_snapshot();
	me bigint := pg_catalog.pg_current_xact_id()::text::bigint;
	xmax bigint := pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot())::text::bigint;
BEGIN
	RETURN me - xmax > 100000
	   OR EXISTS (SELECT FROM pg_catalog.pg_snapshot_xip(snap) x
	              WHERE x::text::bigint <> me AND pg_catalog.pg_xact_status(x) = 'committed')
	   OR EXISTS (SELECT FROM pg_catalog.generate_series(xmax, me - 1) x
	              WHERE pg_catalog.pg_xact_status(x::text::pg_catalog.xid8) = 'committed');
END;
$$;

-- adopt_generations(old_highest_issued): run once on the new primary of a
-- switchover to a logical replica, after it caught up and the old
-- primary's writers stopped, before it takes writers.  Moves the
-- generations to a new epoch E = epoch(top) + 1, top being the highest of
-- this database's own highest issued, every fence it holds (protected
-- tables with tokens 'issued', partitions included; resource fences;
-- checkpoints) and old_highest_issued; refuses every generation from 1 to
-- E << 40 (the fence's LF004, refuse_adopted()) from the commit on; records
-- the adoption; returns E << 40.  The heal budget is left as it is.
--
-- The installing role's (the extension owner's) or a superuser's, as
-- advance_generation(): not SECURITY DEFINER, EXECUTE not PUBLIC's.  The
-- fences are read with queries as the caller under row_security = off: a
-- protected table the caller may not read, or one a policy would filter,
-- is 42501 and nothing moved (fail closed, as the TRUNCATE guard).
CREATE OR REPLACE FUNCTION lease_fence.adopt_generations(old_highest_issued bigint DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	seq CONSTANT pg_catalog.regclass := 'lease_fence.generation_seq';
	floor_seq CONSTANT pg_catalog.regclass := 'lease_fence.adoption_floor_seq';
	timeline_seq CONSTANT pg_catalog.regclass := 'lease_fence.timeline_seq';
	epoch_max CONSTANT bigint := (1::bigint << 23) - 1;
	gen_owner oid := (SELECT c.relowner FROM pg_catalog.pg_class c
	                  WHERE c.oid = 'lease_fence.generation_seq'::pg_catalog.regclass);
	old bigint := adopt_generations.old_highest_issued;
	rls text;
	prot record;
	leaf pg_catalog.regclass;
	h bigint;
	highest bigint;
	found_in text;
	tl bigint;
	known bigint;
	before bigint;
	last bigint;
	top bigint;
	e bigint;
	r bigint;
BEGIN
	IF NOT pg_catalog.pg_has_role(gen_owner, 'USAGE') THEN
		RAISE EXCEPTION 'must be superuser or the role that installed lease_fence to adopt generations'
			USING ERRCODE = 'insufficient_privilege',
			      DETAIL = 'Every holder''s generation up to the new one is refused from then on.',
			      HINT = pg_catalog.format('Role %s installed the portable edition.', gen_owner::pg_catalog.regrole);
	END IF;
	IF old < 0 THEN
		RAISE EXCEPTION 'old_highest_issued must not be negative'
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF pg_catalog.pg_is_in_recovery() THEN
		RAISE EXCEPTION 'cannot execute lease_fence.adopt_generations() during recovery' USING ERRCODE = 'read_only_sql_transaction';
	END IF;
	IF pg_catalog.current_setting('transaction_read_only')::boolean THEN
		RAISE EXCEPTION 'cannot execute lease_fence.adopt_generations() in a read-only transaction' USING ERRCODE = 'read_only_sql_transaction';
	END IF;
	-- one adoption at a time (the caller owns the table, or is a superuser)
	LOCK TABLE lease_fence.generation_adoption IN SHARE ROW EXCLUSIVE MODE;
	IF pg_catalog.current_setting('transaction_isolation') <> 'read committed'
	   AND lease_fence.committed_since_snapshot() THEN
		RAISE EXCEPTION 'could not serialize access: lease_fence.adopt_generations() after transactions committed since this transaction''s snapshot'
			USING ERRCODE = 'serialization_failure',
			      DETAIL = 'The portable edition reads the fences under the transaction''s snapshot, which does not show rows committed after it.',
			      HINT = 'Retry the transaction, or call it in a READ COMMITTED transaction.';
	END IF;

	-- 1. the highest fence this database holds, and where (for the errors
	-- and the LOG); the protected tables' rows under row_security = off,
	-- for this transaction only (set_config(..., true), put back below; an
	-- error ends the transaction or the caller's subtransaction, which puts
	-- it back too).  A protected table dropped since is skipped.
	rls := pg_catalog.current_setting('row_security');
	FOR prot IN
		SELECT p.relid, p.fence_column FROM lease_fence.protected p
		WHERE p.tokens = 'issued'
		  AND EXISTS (SELECT FROM pg_catalog.pg_class c WHERE c.oid = p.relid)
	LOOP
		PERFORM pg_catalog.set_config('row_security', 'off', true);
		FOR leaf IN
			SELECT m.relid FROM (SELECT t.relid FROM pg_catalog.pg_partition_tree(prot.relid) t
			                     UNION SELECT prot.relid) m
			JOIN pg_catalog.pg_class c ON c.oid = m.relid
			WHERE c.relkind = 'r'
			ORDER BY m.relid
		LOOP
			EXECUTE pg_catalog.format('SELECT max(%I) FROM ONLY %s', prot.fence_column, leaf) INTO h;
			IF h > highest OR (highest IS NULL AND h IS NOT NULL) THEN
				highest := h;
				found_in := pg_catalog.format('table %s, column "%s"', leaf, prot.fence_column);
			END IF;
		END LOOP;
		PERFORM pg_catalog.set_config('row_security', rls, true);
	END LOOP;
	h := (SELECT max(r.generation) FROM lease_fence.resource_generation r);
	IF h > highest OR (highest IS NULL AND h IS NOT NULL) THEN
		highest := h;
		found_in := 'lease_fence.resource_generation';
	END IF;
	h := (SELECT max(c.generation) FROM lease_fence.resource_checkpoint c);
	IF h > highest OR (highest IS NULL AND h IS NOT NULL) THEN
		highest := h;
		found_in := 'lease_fence.resource_checkpoint';
	END IF;

	-- 2. the old primary's highest issued cannot be below a fence it issued
	IF old < highest THEN
		RAISE EXCEPTION 'old_highest_issued % is below a fence this database holds', old
			USING ERRCODE = 'invalid_parameter_value',
			      DETAIL = pg_catalog.format('%s holds generation %s, so the database it came from issued at least that. Nothing was changed.', found_in, highest),
			      HINT = 'Read lease_fence.highest_issued() on the old primary once its writers have stopped and this database has caught up.';
	END IF;

	-- 3. and 4., under the generations' lock (see draw_generation), in a
	-- subtransaction rolled back before the call returns: nothing is left
	-- locked, and the moves stay made (setval is not transactional)
	BEGIN
		PERFORM FROM lease_fence.generation_timeline t FOR UPDATE;
		before := COALESCE(pg_catalog.pg_sequence_last_value(seq), 0);
		last := before;
		-- a new timeline not drawn on yet: its epoch counts as issued (the
		-- next draw would start it)
		tl := lease_fence.wal_timeline();
		known := pg_catalog.pg_sequence_last_value(timeline_seq);
		IF tl IS NOT NULL AND known IS NOT NULL AND tl > known THEN
			last := ((last >> 40) + tl) << 40;
		END IF;
		top := GREATEST(last, highest, old);
		e := (top >> 40) + 1;
		IF e > epoch_max THEN
			RAISE EXCEPTION 'no generation epoch is left to adopt generations'
				USING ERRCODE = 'program_limit_exceeded',
				      DETAIL = pg_catalog.format('The highest generation to adopt is %s (epoch %s) and epochs go up to %s. Nothing was changed.', top, top >> 40, epoch_max);
		END IF;
		r := e << 40;
		-- the new timeline's epoch recorded first, as a draw would (nothing
		-- may start it again above r)
		PERFORM lease_fence.move_generations(NULL, true);
		-- the floor before the record of the adoption: the fence reads the
		-- sequence first (see adoption_floor_seq)
		PERFORM pg_catalog.setval(floor_seq, GREATEST(r, COALESCE(pg_catalog.pg_sequence_last_value(floor_seq), 0)));
		IF r > COALESCE(pg_catalog.pg_sequence_last_value(seq), 0) THEN
			PERFORM pg_catalog.setval(seq, r);
		END IF;
		RAISE EXCEPTION 'moved' USING ERRCODE = 'LFDRW';
	EXCEPTION WHEN SQLSTATE 'LFDRW' THEN
		NULL;
	END;

	-- 5. and 6.: refused from the commit on
	INSERT INTO lease_fence.generation_adoption
		(adopted_at, refused_through, highest_fence, old_highest_issued, highest_issued_before)
	VALUES (pg_catalog.transaction_timestamp(), r, highest, old, before);
	RAISE LOG 'generations adopted: every generation up to % is refused from now on (highest fence %, old primary''s highest issued %, this database''s highest issued before %)',
		r, COALESCE(highest || ' in ' || found_in, 'none'), COALESCE(old::text, 'not given'), before;
	RETURN r;
END;
$$;

REVOKE EXECUTE ON FUNCTION lease_fence.adopt_generations(bigint) FROM PUBLIC;

COMMENT ON FUNCTION lease_fence.adopt_generations(bigint) IS
'after a switchover to a logical replica: moves the generations above every fence held here and above the old primary''s highest issued one, and refuses every generation up to there; returns that generation (portable edition)';

-- The current generation: the custom setting lease_fence.generation, which
-- works as a placeholder without any library.  Empty means none; anything
-- but a non-negative bigint (with optional blanks) is LF002.
CREATE OR REPLACE FUNCTION lease_fence.current_generation()
RETURNS bigint
LANGUAGE plpgsql STABLE PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	gs text := pg_catalog.current_setting('lease_fence.generation', true);
	t text;
BEGIN
	IF gs IS NULL THEN
		RETURN NULL;
	END IF;
	t := pg_catalog.btrim(gs, E' \t');
	IF t = '' THEN
		RETURN NULL;
	END IF;
	IF t !~ '^[0-9]+$' OR pg_catalog.length(pg_catalog.ltrim(t, '0')) > 19
	   OR (pg_catalog.length(pg_catalog.ltrim(t, '0')) = 19 AND pg_catalog.ltrim(t, '0') > '9223372036854775807') THEN
		RAISE EXCEPTION 'invalid generation: lease_fence.generation is not a generation'
			USING ERRCODE = 'LF002',
			      DETAIL = pg_catalog.format('It was set to "%s" before lease_fence was loaded in this session.', gs),
			      HINT = 'Set it to a non-negative bigint, or RESET it.';
	END IF;
	RETURN t::bigint;
END;
$$;

COMMENT ON FUNCTION lease_fence.current_generation() IS
'the current generation (lease_fence.generation), or NULL';

CREATE OR REPLACE FUNCTION lease_fence.set_generation(generation bigint, is_local boolean)
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF generation IS NULL THEN
		RAISE EXCEPTION 'generation must not be NULL'
			USING ERRCODE = 'null_value_not_allowed',
			      HINT = 'To clear the current generation, use RESET lease_fence.generation.';
	END IF;
	IF generation < 0 THEN
		RAISE EXCEPTION 'generation must not be negative'
			USING ERRCODE = 'invalid_parameter_value',
			      DETAIL = pg_catalog.format('The generation given was %s.', generation);
	END IF;
	IF is_local IS NULL THEN
		RAISE EXCEPTION 'is_local must not be NULL' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM pg_catalog.set_config('lease_fence.generation', generation::text, is_local);
	RETURN generation;
END;
$$;

COMMENT ON FUNCTION lease_fence.set_generation(bigint, boolean) IS
'set the current generation for the transaction (is_local) or the session';

------------------------------------------------------------------------------
-- Resource fences
------------------------------------------------------------------------------

CREATE TABLE IF NOT EXISTS lease_fence.resource_generation (
	resource text COLLATE "C" PRIMARY KEY,
	generation bigint NOT NULL,
	updated_at timestamptz NOT NULL
);
REVOKE ALL ON lease_fence.resource_generation FROM PUBLIC;

-- A resource argument: NULL, empty or over 1024 bytes is 22023.
CREATE OR REPLACE FUNCTION lease_fence.check_resource(resource text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF resource IS NULL THEN
		RAISE EXCEPTION 'resource must not be NULL' USING ERRCODE = 'invalid_parameter_value';
	ELSIF resource = '' THEN
		RAISE EXCEPTION 'resource must not be empty' USING ERRCODE = 'invalid_parameter_value';
	ELSIF pg_catalog.octet_length(resource) > 1024 THEN
		RAISE EXCEPTION 'resource is too long' USING ERRCODE = 'invalid_parameter_value',
			DETAIL = pg_catalog.format('It has %s bytes; the limit is %s.', pg_catalog.octet_length(resource), 1024);
	END IF;
END;
$$;

-- 55000 when one of the tables keyed by resource (resource_generation,
-- resource_checkpoint) has an index other than its primary key: the
-- functions that write them maintain only that one, and nothing of
-- anybody's (an index expression) may run while they write.
CREATE OR REPLACE FUNCTION lease_fence.check_own_indexes(tbl text)
RETURNS void
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	extra text;
BEGIN
	SELECT pg_catalog.string_agg(c.relname::text, ', ') INTO extra
	FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid
	WHERE i.indrelid = pg_catalog.to_regclass('lease_fence.' OPERATOR(pg_catalog.||) tbl)
	  AND NOT (i.indisprimary AND i.indnatts = 1 AND i.indkey[0] = 1
	           AND i.indexprs IS NULL AND i.indpred IS NULL);
	IF extra IS NOT NULL THEN
		RAISE EXCEPTION 'table lease_fence.% has an index lease_fence did not create: %', tbl, extra
			USING ERRCODE = 'object_not_in_prerequisite_state',
			      HINT = 'Drop that index: lease_fence maintains only the primary key of its tables.';
	END IF;
END;
$$;

CREATE OR REPLACE FUNCTION lease_fence.fence_resource(resource text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
	res text := fence_resource.resource;
	g bigint;
	stored bigint;
	hi bigint;
BEGIN
	PERFORM lease_fence.check_resource(res);
	g := lease_fence.current_generation();
	IF g IS NULL THEN
		RAISE EXCEPTION 'missing generation: resource fence rejected'
			USING ERRCODE = 'LF002',
			      DETAIL = pg_catalog.format('Resource "%s": no current generation is set.', res),
			      HINT = 'Set the current generation with lease_fence.set_generation() or SET LOCAL lease_fence.generation.',
			      SCHEMA = 'lease_fence', TABLE = 'resource_generation', CONSTRAINT = res;
	END IF;
	hi := lease_fence.highest_issued();
	IF g > hi THEN
		RAISE EXCEPTION 'unissued generation: write rejected by fence'
			USING ERRCODE = 'LF004',
			      DETAIL = pg_catalog.format('Resource "%s": supplied generation %s, highest generation issued in this database %s.', res, g, hi),
			      HINT = 'Supply a generation from lease_fence.next_generation() or lease_fence.acquire(); a table whose tokens come from elsewhere is protected with tokens => ''external''.',
			      SCHEMA = 'lease_fence', TABLE = 'resource_generation', CONSTRAINT = res;
	END IF;
	-- refused by an adoption (adoption_floor_seq says why the sequence first)
	IF g <= COALESCE(pg_catalog.pg_sequence_last_value('lease_fence.adoption_floor_seq'::pg_catalog.regclass), 0) THEN
		PERFORM lease_fence.refuse_adopted(g, pg_catalog.format('Resource "%s"', res),
		                                   NULL, NULL, NULL, res);
	END IF;
	IF pg_catalog.current_setting('transaction_read_only')::boolean THEN
		RAISE EXCEPTION 'cannot execute lease_fence.fence_resource() in a read-only transaction'
			USING ERRCODE = 'read_only_sql_transaction';
	END IF;
	-- as the C edition: only the primary key may index the table (nothing
	-- of anybody's runs while a fence is written)
	PERFORM lease_fence.check_own_indexes('resource_generation');
	-- the first fence of a resource inserts; later ones lock the newest
	-- version (ON CONFLICT locks the conflicting row, whatever the snapshot,
	-- before it evaluates the WHERE)
	INSERT INTO lease_fence.resource_generation AS r (resource, generation, updated_at)
	VALUES (res, g, pg_catalog.transaction_timestamp())
	ON CONFLICT (resource) DO UPDATE
		SET generation = excluded.generation, updated_at = excluded.updated_at
		WHERE r.generation OPERATOR(pg_catalog.<=) excluded.generation
	RETURNING r.generation INTO stored;
	IF NOT FOUND THEN
		-- the row is locked by ON CONFLICT: read its newest version
		SELECT r.generation INTO stored FROM lease_fence.resource_generation r
		WHERE r.resource OPERATOR(pg_catalog.=) res FOR NO KEY UPDATE;
		RAISE EXCEPTION 'stale generation: resource fence rejected'
			USING ERRCODE = 'LF001',
			      DETAIL = pg_catalog.format('Resource "%s": stored generation %s, supplied generation %s.', res, stored, g),
			      HINT = 'A holder with a newer generation has fenced this resource; this holder''s lease is gone. Stop, and acquire a new generation before working on it again.',
			      SCHEMA = 'lease_fence', TABLE = 'resource_generation', CONSTRAINT = res;
	END IF;
	RETURN g;
END;
$$;

REVOKE EXECUTE ON FUNCTION lease_fence.fence_resource(text) FROM PUBLIC;

COMMENT ON FUNCTION lease_fence.fence_resource(text) IS
'fence a resource in this transaction: LF001 if a higher generation fenced it, else store the current generation and hold the resource to the end of the transaction';

CREATE OR REPLACE FUNCTION lease_fence.set_generation(generation bigint, resource text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF generation IS NULL THEN
		RAISE EXCEPTION 'generation must not be NULL'
			USING ERRCODE = 'null_value_not_allowed',
			      HINT = 'To clear the current generation, use RESET lease_fence.generation.';
	END IF;
	IF generation < 0 THEN
		RAISE EXCEPTION 'generation must not be negative'
			USING ERRCODE = 'invalid_parameter_value',
			      DETAIL = pg_catalog.format('The generation given was %s.', generation);
	END IF;
	IF resource IS NOT NULL THEN
		PERFORM lease_fence.check_resource(resource);
		IF NOT pg_catalog.has_function_privilege('lease_fence.fence_resource(text)', 'EXECUTE') THEN
			RAISE EXCEPTION 'permission denied for function fence_resource'
				USING ERRCODE = 'insufficient_privilege',
				      DETAIL = 'set_generation() with a resource fences it, which needs EXECUTE on lease_fence.fence_resource().';
		END IF;
	END IF;
	PERFORM pg_catalog.set_config('lease_fence.generation', generation::text, true);
	IF resource IS NOT NULL THEN
		PERFORM lease_fence.fence_resource(resource);
	END IF;
	RETURN generation;
END;
$$;

COMMENT ON FUNCTION lease_fence.set_generation(bigint, text) IS
'set the current generation for the transaction and, with a resource, fence it as fence_resource() does';

CREATE OR REPLACE VIEW lease_fence.resource_fences AS
	SELECT resource, generation, updated_at
	FROM lease_fence.resource_generation;
GRANT SELECT ON lease_fence.resource_fences TO PUBLIC;

------------------------------------------------------------------------------
-- Fenced checkpoints
------------------------------------------------------------------------------

-- The newest checkpoint of each resource.  As resource_generation: nobody
-- but the installing role has any privilege on it, so that only
-- checkpoint() moves it, under a resource fence.
CREATE TABLE IF NOT EXISTS lease_fence.resource_checkpoint (
	resource text COLLATE "C" PRIMARY KEY,
	generation bigint NOT NULL,
	state jsonb NOT NULL,
	written_at timestamptz NOT NULL
);
REVOKE ALL ON lease_fence.resource_checkpoint FROM PUBLIC;

-- Fence the resource at the current generation (fence_resource()'s
-- refusals) and store state as its checkpoint under it.  SECURITY DEFINER:
-- it writes resource_checkpoint, which nobody may write directly (a direct
-- UPDATE would move a checkpoint under no lease); EXECUTE is not PUBLIC's.
CREATE OR REPLACE FUNCTION lease_fence.checkpoint(resource text, state jsonb)
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
	res text := checkpoint.resource;
	st jsonb := checkpoint.state;
	len bigint;
	g bigint;
BEGIN
	PERFORM lease_fence.check_resource(res);
	IF st IS NULL THEN
		RAISE EXCEPTION 'state must not be NULL' USING ERRCODE = 'null_value_not_allowed',
			HINT = 'A checkpoint with nothing to say can be ''{}''.';
	END IF;
	len := pg_catalog.octet_length(st::text);
	IF len > 1048576 THEN
		RAISE EXCEPTION 'state is too large for a checkpoint' USING ERRCODE = 'invalid_parameter_value',
			DETAIL = pg_catalog.format('Its text form has %s bytes; the limit is %s.', len, 1048576),
			HINT = 'Keep the progress in a table of your own, fenced, and checkpoint a reference to it.';
	END IF;
	-- as fence_resource(): only the primary key may index the table
	PERFORM lease_fence.check_own_indexes('resource_checkpoint');
	-- the fence keeps the resource's row locked to the end of the
	-- transaction: the checkpoints of one resource are written one
	-- transaction at a time
	g := lease_fence.fence_resource(res);
	INSERT INTO lease_fence.resource_checkpoint AS c (resource, generation, state, written_at)
	VALUES (res, g, st, pg_catalog.clock_timestamp())
	ON CONFLICT (resource) DO UPDATE
		SET generation = excluded.generation, state = excluded.state,
		    written_at = excluded.written_at;
	RETURN g;
END;
$$;

REVOKE EXECUTE ON FUNCTION lease_fence.checkpoint(text, jsonb) FROM PUBLIC;

COMMENT ON FUNCTION lease_fence.checkpoint(text, jsonb) IS
'fence a resource at the current generation (as fence_resource) and store state as its checkpoint under it; returns the generation';

-- The newest checkpoint of a resource: one row, or none.  SECURITY
-- DEFINER: it reads resource_checkpoint, which nobody else may read (the
-- state is the job's data); EXECUTE is not PUBLIC's.  VOLATILE, so that
-- its query takes a snapshot of its own in READ COMMITTED; in REPEATABLE
-- READ it reads the transaction's snapshot (portable/README.md).
CREATE OR REPLACE FUNCTION lease_fence.last_checkpoint(resource text,
	OUT state jsonb, OUT generation bigint, OUT written_at timestamptz)
RETURNS SETOF record
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE ROWS 1
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	PERFORM lease_fence.check_resource(last_checkpoint.resource);
	RETURN QUERY
		SELECT c.state, c.generation, c.written_at
		FROM lease_fence.resource_checkpoint c
		WHERE c.resource OPERATOR(pg_catalog.=) last_checkpoint.resource;
END;
$$;

REVOKE EXECUTE ON FUNCTION lease_fence.last_checkpoint(text) FROM PUBLIC;

COMMENT ON FUNCTION lease_fence.last_checkpoint(text) IS
'the newest committed checkpoint of a resource: its state, the generation it was written under, and when (no row: none)';

------------------------------------------------------------------------------
-- The fence
------------------------------------------------------------------------------

-- Checks a fence column of a table as the C trigger's first row does.
-- Called once per trigger and transaction (the row trigger remembers it in
-- the setting lease_fence_portable.checked, transaction-local; a role that forges it
-- only skips these misuse checks, never a fence rule).
CREATE OR REPLACE FUNCTION lease_fence.check_fence_column(fname text, tbl oid, tgname text, col text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	att record;
	relname text := (SELECT pg_catalog.format('%I.%I', n.nspname, c.relname)
	                 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
	                 WHERE c.oid = tbl);
BEGIN
	SELECT a.attnum, a.atttypid, a.attgenerated INTO att
	FROM pg_catalog.pg_attribute a
	WHERE a.attrelid = tbl AND a.attname = col AND NOT a.attisdropped;
	IF NOT FOUND THEN
		RAISE EXCEPTION '%: fence column "%" of table % does not exist', fname, col, relname
			USING ERRCODE = 'undefined_column',
			      DETAIL = pg_catalog.format('Trigger "%s" names it as its fence column.', tgname),
			      HINT = 'Use lease_fence.protect() to add the column, or name an existing bigint column as the trigger''s first argument.';
	ELSIF att.attnum <= 0 THEN
		RAISE EXCEPTION '%: fence column "%" of table % is a system column', fname, col, relname
			USING ERRCODE = 'invalid_column_reference';
	ELSIF att.attgenerated <> '' THEN
		RAISE EXCEPTION '%: fence column "%" of table % is a generated column', fname, col, relname
			USING ERRCODE = 'invalid_column_definition',
			      DETAIL = 'A generated column is computed after BEFORE triggers run, so it cannot carry a generation.';
	ELSIF att.atttypid <> 'pg_catalog.int8'::pg_catalog.regtype THEN
		RAISE EXCEPTION '%: fence column "%" of table % must be of type bigint', fname, col, relname
			USING ERRCODE = 'datatype_mismatch',
			      DETAIL = pg_catalog.format('It is of type %s.', pg_catalog.format_type(att.atttypid, NULL));
	END IF;
END;
$$;

-- The rules of the row fence, fence_trigger.c's line by line: what
-- fence_trigger() runs for every row.  The
-- trigger's variables come as arguments (TG_OP, TG_LEVEL, ...), OLD and NEW
-- as old_row / new_row (NULL where the trigger has none); it returns the row
-- the trigger returns, or raises the fence's error.  EXECUTE is PUBLIC's, as
-- it must be for every writer's trigger: called directly it only computes
-- (and sets the caller's own lease_fence_portable.checked).
CREATE OR REPLACE FUNCTION lease_fence.fence_rules(tg_op text, tg_level text, tg_when text,
	tg_relid oid, tg_name text, tg_schema text, tg_table text, tg_nargs integer, tg_argv text[],
	old_row record, new_row record)
RETURNS record
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	col text := 'fence';
	is_strict boolean := false;
	check_issued boolean := true;
	relname text;
	key text;
	gs text;
	g bigint;
	s bigint;
	n bigint;
	written boolean;
	supplied bigint;
	hi bigint;
BEGIN
	-- how it was fired and its arguments: the usual case (as protect()
	-- makes the trigger) in one test, everything else checked in full
	IF tg_level = 'ROW' AND tg_when = 'BEFORE' AND tg_nargs = 3
	   AND tg_argv[1] IN ('lenient', 'strict') AND tg_argv[2] IN ('issued', 'external') THEN
		col := tg_argv[0];
		is_strict := tg_argv[1] = 'strict';
		check_issued := tg_argv[2] = 'issued';
	ELSE
		IF tg_level <> 'ROW' THEN
			RAISE EXCEPTION 'fence_trigger: must be fired for each row'
				USING ERRCODE = 'trigger_protocol_violated',
				      DETAIL = pg_catalog.format('Trigger "%s" on table %I.%I is a statement-level trigger.', tg_name, tg_schema, tg_table);
		END IF;
		IF tg_when <> 'BEFORE' THEN
			RAISE EXCEPTION 'fence_trigger: must be fired BEFORE the write'
				USING ERRCODE = 'trigger_protocol_violated',
				      DETAIL = pg_catalog.format('Trigger "%s" on table %I.%I is not a BEFORE trigger; only a BEFORE trigger can check the row before it is written.', tg_name, tg_schema, tg_table);
		END IF;
		IF tg_nargs > 3 THEN
			RAISE EXCEPTION 'fence_trigger: too many arguments'
				USING ERRCODE = 'trigger_protocol_violated',
				      DETAIL = pg_catalog.format('Trigger "%s" on table %I.%I has %s arguments; it takes the fence column, the mode and the tokens.', tg_name, tg_schema, tg_table, tg_nargs);
		END IF;
		-- (exact spellings first: lower() is not free on every row)
		IF tg_nargs >= 2 THEN
			IF tg_argv[1] = 'strict' OR (tg_argv[1] <> 'lenient' AND pg_catalog.lower(tg_argv[1]) = 'strict') THEN
				is_strict := true;
			ELSIF tg_argv[1] <> 'lenient' AND pg_catalog.lower(tg_argv[1]) <> 'lenient' THEN
				RAISE EXCEPTION 'fence_trigger: unknown mode "%"', tg_argv[1]
					USING ERRCODE = 'invalid_parameter_value',
					      DETAIL = pg_catalog.format('Trigger "%s" on table %I.%I names mode "%s".', tg_name, tg_schema, tg_table, tg_argv[1]),
					      HINT = 'The mode is "lenient" or "strict".';
			END IF;
			IF tg_nargs = 3 AND tg_argv[2] <> 'issued' THEN
				IF tg_argv[2] = 'external' OR pg_catalog.lower(tg_argv[2]) = 'external' THEN
					check_issued := false;
				ELSIF pg_catalog.lower(tg_argv[2]) <> 'issued' THEN
					RAISE EXCEPTION 'fence_trigger: unknown tokens "%"', tg_argv[2]
						USING ERRCODE = 'invalid_parameter_value',
						      DETAIL = pg_catalog.format('Trigger "%s" on table %I.%I names tokens "%s".', tg_name, tg_schema, tg_table, tg_argv[2]),
						      HINT = 'The tokens are "issued" (generations of this database) or "external".';
				END IF;
			END IF;
		END IF;
		IF tg_nargs >= 1 THEN
			col := tg_argv[0];
		END IF;
	END IF;

	-- the column, checked once per trigger and transaction
	key := tg_relid::text || '/' || tg_name || ';';
	IF pg_catalog.strpos(COALESCE(pg_catalog.current_setting('lease_fence_portable.checked', true), ''), key) = 0 THEN
		PERFORM lease_fence.check_fence_column('fence_trigger', tg_relid, tg_name, col);
		PERFORM pg_catalog.set_config('lease_fence_portable.checked',
			COALESCE(pg_catalog.current_setting('lease_fence_portable.checked', true), '') || key, true);
	END IF;

	-- the current generation (inline lease_fence.current_generation())
	-- (digits only, at most 18 of them: cast at once; anything else,
	-- blanks included, through current_generation(); no regex per row)
	gs := pg_catalog.current_setting('lease_fence.generation', true);
	IF gs <> '' AND pg_catalog.octet_length(gs) <= 18 AND pg_catalog.ltrim(gs, '0123456789') = '' THEN
		g := gs::bigint;
	ELSIF gs <> '' THEN
		g := lease_fence.current_generation();
	END IF;

	-- the usual UPDATE under a current generation, in one test: the fence
	-- left alone or written at or below the stored one (a full-row save) or
	-- as the current generation, the current generation not stale and
	-- issued; it becomes the row's fence.  Anything else takes the full
	-- rules below, which raise what applies.
	IF tg_op = 'UPDATE' AND g IS NOT NULL AND col = 'fence' THEN
		s := old_row.fence;
		n := new_row.fence;
		IF s <= g AND (n <= s OR n = g)
		   AND (NOT check_issued OR g = 0
		        OR (g <= COALESCE(pg_catalog.pg_sequence_last_value('lease_fence.generation_seq'::pg_catalog.regclass), 0)
		            AND g > COALESCE(pg_catalog.pg_sequence_last_value('lease_fence.adoption_floor_seq'::pg_catalog.regclass), 0))) THEN
			new_row.fence := g;
			RETURN new_row;
		END IF;
	END IF;

	IF tg_op = 'DELETE' THEN
		IF g IS NOT NULL THEN
			IF check_issued AND g > 0 THEN
				hi := COALESCE(pg_catalog.pg_sequence_last_value('lease_fence.generation_seq'::pg_catalog.regclass), 0);
				IF g > hi THEN
					RAISE EXCEPTION 'unissued generation: write rejected by fence'
						USING ERRCODE = 'LF004',
						      DETAIL = pg_catalog.format('Table %I.%I, column "%s": supplied generation %s, highest generation issued in this database %s.', tg_schema, tg_table, col, g, hi),
						      HINT = 'Supply a generation from lease_fence.next_generation() or lease_fence.acquire(); a table whose tokens come from elsewhere is protected with tokens => ''external''.',
						      SCHEMA = tg_schema, TABLE = tg_table, COLUMN = col;
				END IF;
				-- refused by an adoption (adoption_floor_seq says why the sequence first)
				IF g <= COALESCE(pg_catalog.pg_sequence_last_value('lease_fence.adoption_floor_seq'::pg_catalog.regclass), 0) THEN
					PERFORM lease_fence.refuse_adopted(g, pg_catalog.format('Table %I.%I, column "%s"', tg_schema, tg_table, col),
					                                   tg_schema, tg_table, col, NULL);
				END IF;
			END IF;
			IF col = 'fence' THEN
				s := old_row.fence;
			ELSE
				s := (pg_catalog.to_jsonb(old_row) OPERATOR(pg_catalog.->>) col)::bigint;
			END IF;
			IF s IS NOT NULL AND g < s THEN
				supplied := g;
				-- LF001 below
			END IF;
		ELSIF is_strict THEN
			RAISE EXCEPTION 'missing generation: write rejected by fence'
				USING ERRCODE = 'LF002',
				      DETAIL = pg_catalog.format('Table %I.%I is fenced in strict mode and no current generation is set.', tg_schema, tg_table),
				      HINT = 'Set the current generation with lease_fence.set_generation() or SET LOCAL lease_fence.generation.',
				      SCHEMA = tg_schema, TABLE = tg_table, COLUMN = col;
		END IF;
		IF supplied IS NULL THEN
			RETURN old_row;
		END IF;
	ELSIF tg_op = 'INSERT' THEN
		IF col = 'fence' THEN
			n := new_row.fence;
		ELSE
			n := (pg_catalog.to_jsonb(new_row) OPERATOR(pg_catalog.->>) col)::bigint;
		END IF;
		IF g IS NULL THEN
			IF is_strict THEN
				RAISE EXCEPTION 'missing generation: write rejected by fence'
					USING ERRCODE = 'LF002',
					      DETAIL = pg_catalog.format('Table %I.%I is fenced in strict mode and no current generation is set.', tg_schema, tg_table),
					      HINT = 'Set the current generation with lease_fence.set_generation() or SET LOCAL lease_fence.generation.',
					      SCHEMA = tg_schema, TABLE = tg_table, COLUMN = col;
			END IF;
			IF n IS NULL THEN
				RAISE EXCEPTION 'missing generation: write rejected by fence'
					USING ERRCODE = 'LF002',
					      DETAIL = pg_catalog.format('Table %I.%I, column "%s": the fence would be NULL, and a NULL fence is never accepted.', tg_schema, tg_table, col),
					      HINT = 'Set the current generation with lease_fence.set_generation() or SET LOCAL lease_fence.generation.',
					      SCHEMA = tg_schema, TABLE = tg_table, COLUMN = col;
			END IF;
			IF check_issued AND n > 0 THEN
				hi := COALESCE(pg_catalog.pg_sequence_last_value('lease_fence.generation_seq'::pg_catalog.regclass), 0);
				IF n > hi THEN
					RAISE EXCEPTION 'unissued generation: write rejected by fence'
						USING ERRCODE = 'LF004',
						      DETAIL = pg_catalog.format('Table %I.%I, column "%s": supplied generation %s, highest generation issued in this database %s.', tg_schema, tg_table, col, n, hi),
						      HINT = 'Supply a generation from lease_fence.next_generation() or lease_fence.acquire(); a table whose tokens come from elsewhere is protected with tokens => ''external''.',
						      SCHEMA = tg_schema, TABLE = tg_table, COLUMN = col;
				END IF;
				-- refused by an adoption (adoption_floor_seq says why the sequence first)
				IF n <= COALESCE(pg_catalog.pg_sequence_last_value('lease_fence.adoption_floor_seq'::pg_catalog.regclass), 0) THEN
					PERFORM lease_fence.refuse_adopted(n, pg_catalog.format('Table %I.%I, column "%s"', tg_schema, tg_table, col),
					                                   tg_schema, tg_table, col, NULL);
				END IF;
			END IF;
			RETURN new_row;
		END IF;
		IF check_issued AND g > 0 THEN
			hi := COALESCE(pg_catalog.pg_sequence_last_value('lease_fence.generation_seq'::pg_catalog.regclass), 0);
			IF g > hi THEN
				RAISE EXCEPTION 'unissued generation: write rejected by fence'
					USING ERRCODE = 'LF004',
					      DETAIL = pg_catalog.format('Table %I.%I, column "%s": supplied generation %s, highest generation issued in this database %s.', tg_schema, tg_table, col, g, hi),
					      HINT = 'Supply a generation from lease_fence.next_generation() or lease_fence.acquire(); a table whose tokens come from elsewhere is protected with tokens => ''external''.',
					      SCHEMA = tg_schema, TABLE = tg_table, COLUMN = col;
			END IF;
			-- refused by an adoption (adoption_floor_seq says why the sequence first)
			IF g <= COALESCE(pg_catalog.pg_sequence_last_value('lease_fence.adoption_floor_seq'::pg_catalog.regclass), 0) THEN
				PERFORM lease_fence.refuse_adopted(g, pg_catalog.format('Table %I.%I, column "%s"', tg_schema, tg_table, col),
				                                   tg_schema, tg_table, col, NULL);
			END IF;
		END IF;
		IF n = g THEN
			RETURN new_row;
		END IF;
	ELSE
		-- UPDATE
		IF col = 'fence' THEN
			s := old_row.fence;
			n := new_row.fence;
		ELSE
			s := (pg_catalog.to_jsonb(old_row) OPERATOR(pg_catalog.->>) col)::bigint;
			n := (pg_catalog.to_jsonb(new_row) OPERATOR(pg_catalog.->>) col)::bigint;
		END IF;
		written := n IS DISTINCT FROM s;
		IF written AND n IS NULL THEN
			RAISE EXCEPTION 'missing generation: write rejected by fence'
				USING ERRCODE = 'LF002',
				      DETAIL = pg_catalog.format('Table %I.%I, column "%s": the fence would be NULL, and a NULL fence is never accepted.', tg_schema, tg_table, col),
				      HINT = 'Set the current generation with lease_fence.set_generation() or SET LOCAL lease_fence.generation.',
				      SCHEMA = tg_schema, TABLE = tg_table, COLUMN = col;
		END IF;
		IF g IS NOT NULL THEN
			-- a full-row save: a fence written at or below the stored one is
			-- the loaded value, not the statement's own generation
			IF written AND s IS NOT NULL AND n < s THEN
				written := false;
			END IF;
			IF written AND n <> g THEN
				RAISE EXCEPTION 'conflicting generation: write rejected by fence'
					USING ERRCODE = 'LF003',
					      DETAIL = pg_catalog.format('Table %I.%I, column "%s": the statement writes %s but the current generation is %s.', tg_schema, tg_table, col, n, g),
					      HINT = 'Leave the fence column out of the statement, or write the current generation into it.',
					      SCHEMA = tg_schema, TABLE = tg_table, COLUMN = col;
			END IF;
			supplied := g;
			IF check_issued AND g > 0 THEN
				hi := COALESCE(pg_catalog.pg_sequence_last_value('lease_fence.generation_seq'::pg_catalog.regclass), 0);
				IF g > hi THEN
					RAISE EXCEPTION 'unissued generation: write rejected by fence'
						USING ERRCODE = 'LF004',
						      DETAIL = pg_catalog.format('Table %I.%I, column "%s": supplied generation %s, highest generation issued in this database %s.', tg_schema, tg_table, col, g, hi),
						      HINT = 'Supply a generation from lease_fence.next_generation() or lease_fence.acquire(); a table whose tokens come from elsewhere is protected with tokens => ''external''.',
						      SCHEMA = tg_schema, TABLE = tg_table, COLUMN = col;
				END IF;
				-- refused by an adoption (adoption_floor_seq says why the sequence first)
				IF g <= COALESCE(pg_catalog.pg_sequence_last_value('lease_fence.adoption_floor_seq'::pg_catalog.regclass), 0) THEN
					PERFORM lease_fence.refuse_adopted(g, pg_catalog.format('Table %I.%I, column "%s"', tg_schema, tg_table, col),
					                                   tg_schema, tg_table, col, NULL);
				END IF;
			END IF;
		ELSE
			IF is_strict THEN
				RAISE EXCEPTION 'missing generation: write rejected by fence'
					USING ERRCODE = 'LF002',
					      DETAIL = pg_catalog.format('Table %I.%I is fenced in strict mode and no current generation is set.', tg_schema, tg_table),
					      HINT = 'Set the current generation with lease_fence.set_generation() or SET LOCAL lease_fence.generation.',
					      SCHEMA = tg_schema, TABLE = tg_table, COLUMN = col;
			END IF;
			IF n IS NULL THEN
				RAISE EXCEPTION 'missing generation: write rejected by fence'
					USING ERRCODE = 'LF002',
					      DETAIL = pg_catalog.format('Table %I.%I, column "%s": the fence would be NULL, and a NULL fence is never accepted.', tg_schema, tg_table, col),
					      HINT = 'Set the current generation with lease_fence.set_generation() or SET LOCAL lease_fence.generation.',
					      SCHEMA = tg_schema, TABLE = tg_table, COLUMN = col;
			END IF;
			supplied := n;
			IF written AND check_issued AND n > 0 THEN
				hi := COALESCE(pg_catalog.pg_sequence_last_value('lease_fence.generation_seq'::pg_catalog.regclass), 0);
				IF n > hi THEN
					RAISE EXCEPTION 'unissued generation: write rejected by fence'
						USING ERRCODE = 'LF004',
						      DETAIL = pg_catalog.format('Table %I.%I, column "%s": supplied generation %s, highest generation issued in this database %s.', tg_schema, tg_table, col, n, hi),
						      HINT = 'Supply a generation from lease_fence.next_generation() or lease_fence.acquire(); a table whose tokens come from elsewhere is protected with tokens => ''external''.',
						      SCHEMA = tg_schema, TABLE = tg_table, COLUMN = col;
				END IF;
				-- refused by an adoption (adoption_floor_seq says why the sequence first)
				IF n <= COALESCE(pg_catalog.pg_sequence_last_value('lease_fence.adoption_floor_seq'::pg_catalog.regclass), 0) THEN
					PERFORM lease_fence.refuse_adopted(n, pg_catalog.format('Table %I.%I, column "%s"', tg_schema, tg_table, col),
					                                   tg_schema, tg_table, col, NULL);
				END IF;
			END IF;
		END IF;
	END IF;

	-- UPDATE and DELETE: the stale check
	IF tg_op <> 'INSERT' AND s IS NOT NULL AND supplied < s THEN
		RAISE EXCEPTION 'stale generation: write rejected by fence'
			USING ERRCODE = 'LF001',
			      DETAIL = pg_catalog.format('Table %I.%I, column "%s": stored generation %s, supplied generation %s.', tg_schema, tg_table, col, s, supplied),
			      HINT = 'A holder with a newer generation has written this row; this writer''s lease is gone. Stop, and acquire a new generation before writing again.',
			      SCHEMA = tg_schema, TABLE = tg_table, COLUMN = col;
	END IF;
	IF tg_op = 'DELETE' THEN
		RETURN old_row;
	END IF;
	IF tg_op = 'UPDATE' AND n = supplied THEN
		RETURN new_row;
	END IF;

	-- the row's fence becomes the current generation
	IF col = 'fence' THEN
		new_row.fence := g;
	ELSE
		new_row := pg_catalog.jsonb_populate_record(new_row, pg_catalog.jsonb_build_object(col, g));
	END IF;
	RETURN new_row;
END;
$$;

-- BEFORE INSERT OR UPDATE OR DELETE FOR EACH ROW.  Arguments: the fence
-- column (default fence), 'lenient' (default) or 'strict', 'issued'
-- (default) or 'external'.  Every row goes to fence_rules(), which reads
-- the fence column the trigger's own arguments name.
--
-- No short path is remembered in a setting: a session can set any custom
-- setting by hand, so nothing a writer sets may let a row skip a rule.  The
-- only state kept across rows is lease_fence_portable.checked, which skips
-- the misuse checks of the fence column, never a rule.
--
-- No SET search_path here, on purpose: setting it costs about as much per
-- row as the call it wraps.  Instead nothing below depends on it: the
-- function is schema-qualified, and fence_rules() pins search_path for
-- itself.  (The function is compiled and its expressions planned under the
-- caller's search_path; with everything qualified, the plans are the same
-- under any.)
CREATE OR REPLACE FUNCTION lease_fence.fence_trigger()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
	RETURN lease_fence.fence_rules(TG_OP, TG_LEVEL, TG_WHEN, TG_RELID, TG_NAME, TG_TABLE_SCHEMA, TG_TABLE_NAME,
	                               TG_NARGS, TG_ARGV, OLD, NEW);
END;
$$;

COMMENT ON FUNCTION lease_fence.fence_trigger() IS
'BEFORE row trigger: rejects a write whose generation is lower than the stored fence (portable edition, PL/pgSQL)';

-- BEFORE TRUNCATE FOR EACH STATEMENT.  Arguments: the fence column, then
-- 'issued' (default) or 'external'.  The highest fence is read with a query
-- as the caller (README.md: where the portable edition differs).
CREATE OR REPLACE FUNCTION lease_fence.truncate_guard()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
-- a policy that would hide rows from the caller makes the scan an ERROR
-- (42501) instead of a maximum over the rows it may see: fail closed
SET row_security = off
AS $$
DECLARE
	col text := 'fence';
	check_issued boolean := true;
	g bigint;
	hi bigint;
	h bigint;
	highest bigint;
	leaf regclass;
BEGIN
	IF TG_LEVEL <> 'STATEMENT' OR TG_WHEN <> 'BEFORE' OR TG_OP <> 'TRUNCATE' THEN
		RAISE EXCEPTION 'truncate_guard: must be fired BEFORE TRUNCATE FOR EACH STATEMENT'
			USING ERRCODE = 'trigger_protocol_violated',
			      DETAIL = pg_catalog.format('Trigger "%s" on table %I.%I is not.', TG_NAME, TG_TABLE_SCHEMA, TG_TABLE_NAME);
	END IF;
	IF TG_NARGS > 2 THEN
		RAISE EXCEPTION 'truncate_guard: too many arguments'
			USING ERRCODE = 'trigger_protocol_violated',
			      DETAIL = pg_catalog.format('Trigger "%s" on table %I.%I has %s arguments; it takes the fence column and the tokens.', TG_NAME, TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_NARGS);
	END IF;
	IF TG_NARGS = 2 THEN
		IF pg_catalog.lower(TG_ARGV[1]) = 'external' THEN
			check_issued := false;
		ELSIF pg_catalog.lower(TG_ARGV[1]) <> 'issued' THEN
			RAISE EXCEPTION 'truncate_guard: unknown tokens "%"', TG_ARGV[1]
				USING ERRCODE = 'invalid_parameter_value',
				      DETAIL = pg_catalog.format('Trigger "%s" on table %I.%I names tokens "%s".', TG_NAME, TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_ARGV[1]),
				      HINT = 'The tokens are "issued" (generations of this database) or "external".';
		END IF;
	END IF;
	IF TG_NARGS >= 1 THEN
		col := TG_ARGV[0];
	END IF;
	PERFORM lease_fence.check_fence_column('truncate_guard', TG_RELID, TG_NAME, col);

	g := lease_fence.current_generation();
	IF g IS NULL THEN
		RAISE EXCEPTION 'missing generation: TRUNCATE rejected by fence'
			USING ERRCODE = 'LF002',
			      DETAIL = pg_catalog.format('Table %I.%I is fenced and no current generation is set.', TG_TABLE_SCHEMA, TG_TABLE_NAME),
			      HINT = 'Set the current generation with lease_fence.set_generation() or SET LOCAL lease_fence.generation.',
			      SCHEMA = TG_TABLE_SCHEMA, TABLE = TG_TABLE_NAME, COLUMN = col;
	END IF;
	IF check_issued AND g > 0 THEN
		hi := lease_fence.highest_issued();
		IF g > hi THEN
			RAISE EXCEPTION 'unissued generation: write rejected by fence'
				USING ERRCODE = 'LF004',
				      DETAIL = pg_catalog.format('Table %I.%I, column "%s": supplied generation %s, highest generation issued in this database %s.', TG_TABLE_SCHEMA, TG_TABLE_NAME, col, g, hi),
				      HINT = 'Supply a generation from lease_fence.next_generation() or lease_fence.acquire(); a table whose tokens come from elsewhere is protected with tokens => ''external''.',
				      SCHEMA = TG_TABLE_SCHEMA, TABLE = TG_TABLE_NAME, COLUMN = col;
		END IF;
		-- refused by an adoption (adoption_floor_seq says why the sequence first)
		IF g <= COALESCE(pg_catalog.pg_sequence_last_value('lease_fence.adoption_floor_seq'::pg_catalog.regclass), 0) THEN
			PERFORM lease_fence.refuse_adopted(g, pg_catalog.format('Table %I.%I, column "%s"', TG_TABLE_SCHEMA, TG_TABLE_NAME, col),
			                                   TG_TABLE_SCHEMA, TG_TABLE_NAME, col, NULL);
		END IF;
	END IF;

	-- TRUNCATE removes rows committed after a REPEATABLE READ / SERIALIZABLE
	-- snapshot too, and a query here cannot see them (the C guard scans
	-- under the latest snapshot).  TRUNCATE holds ACCESS EXCLUSIVE, so no
	-- write to the table is in progress: if no transaction has committed
	-- since the snapshot was taken, the snapshot sees every row; otherwise
	-- refuse with a serialization failure (retry in a new transaction, which
	-- sees them).  Fail closed.
	IF pg_catalog.current_setting('transaction_isolation') <> 'read committed'
	   AND lease_fence.committed_since_snapshot() THEN
		RAISE EXCEPTION 'could not serialize access: TRUNCATE of fenced table %.% after transactions committed since this transaction''s snapshot',
			pg_catalog.quote_ident(TG_TABLE_SCHEMA), pg_catalog.quote_ident(TG_TABLE_NAME)
			USING ERRCODE = 'serialization_failure',
			      DETAIL = 'The portable TRUNCATE guard reads the highest fence under the transaction''s snapshot, which does not show rows committed after it, and TRUNCATE removes those too.',
			      HINT = 'Retry the transaction, or TRUNCATE in a READ COMMITTED transaction.',
			      SCHEMA = TG_TABLE_SCHEMA, TABLE = TG_TABLE_NAME, COLUMN = col;
	END IF;

	-- every leaf with storage of the table's partition tree (the table itself when not partitioned)
	FOR leaf IN
		SELECT m.relid FROM (SELECT t.relid FROM pg_catalog.pg_partition_tree(TG_RELID) t
		                     UNION SELECT TG_RELID::pg_catalog.regclass) m
		JOIN pg_catalog.pg_class c ON c.oid = m.relid
		WHERE c.relkind = 'r'
	LOOP
		PERFORM lease_fence.check_fence_column('truncate_guard', leaf, TG_NAME, col);
		EXECUTE pg_catalog.format('SELECT max(%I) FROM ONLY %s', col, leaf) INTO h;
		IF h IS NOT NULL AND (highest IS NULL OR h > highest) THEN
			highest := h;
		END IF;
	END LOOP;

	IF highest IS NOT NULL AND highest > g THEN
		RAISE EXCEPTION 'stale generation: write rejected by fence'
			USING ERRCODE = 'LF001',
			      DETAIL = pg_catalog.format('Table %I.%I, column "%s": stored generation %s, supplied generation %s.', TG_TABLE_SCHEMA, TG_TABLE_NAME, col, highest, g),
			      HINT = 'A holder with a newer generation has written this row; this writer''s lease is gone. Stop, and acquire a new generation before writing again.',
			      SCHEMA = TG_TABLE_SCHEMA, TABLE = TG_TABLE_NAME, COLUMN = col;
	END IF;
	RETURN NULL;
END;
$$;

COMMENT ON FUNCTION lease_fence.truncate_guard() IS
'BEFORE TRUNCATE statement trigger: refuses TRUNCATE without a current generation, or with one lower than the highest stored fence';

------------------------------------------------------------------------------
-- protect() / unprotect() / protected_tables (as the C edition's 1.3 SQL)
------------------------------------------------------------------------------

-- What protect() installed.  Everybody may read it; row level security lets
-- a role add, change or remove only rows for tables it owns, so protect()
-- and unprotect() need no SECURITY DEFINER.
CREATE TABLE IF NOT EXISTS lease_fence.protected (
	relid regclass PRIMARY KEY,
	fence_column name NOT NULL,
	strict boolean NOT NULL,
	tokens text NOT NULL DEFAULT 'issued'
		CONSTRAINT protected_tokens_check CHECK (tokens IN ('issued', 'external'))
);

ALTER TABLE lease_fence.protected ENABLE ROW LEVEL SECURITY;

DROP POLICY IF EXISTS protected_read ON lease_fence.protected;
CREATE POLICY protected_read ON lease_fence.protected
	FOR SELECT USING (true);

DROP POLICY IF EXISTS protected_write_by_owner ON lease_fence.protected;
CREATE POLICY protected_write_by_owner ON lease_fence.protected
	USING (pg_catalog.pg_has_role(
		(SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = relid), 'USAGE'))
	WITH CHECK (pg_catalog.pg_has_role(
		(SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = relid), 'USAGE'));

GRANT SELECT, INSERT, UPDATE, DELETE ON lease_fence.protected TO PUBLIC;

CREATE OR REPLACE FUNCTION lease_fence.protect(tbl regclass, fence_column name DEFAULT 'fence', strict boolean DEFAULT false,
                                               tokens text DEFAULT 'issued')
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	rel record;
	att record;
	mode text := CASE WHEN strict THEN 'strict' ELSE 'lenient' END;
	part regclass;
	later text;
	nul bytea := pg_catalog.decode('00', 'hex');
	fence_args bytea;
	guard_args bytea;
BEGIN
	IF tbl IS NULL OR fence_column IS NULL OR strict IS NULL OR tokens IS NULL THEN
		RAISE EXCEPTION 'lease_fence.protect: arguments must not be NULL'
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF tokens NOT IN ('issued', 'external') THEN
		RAISE EXCEPTION 'lease_fence.protect: unknown tokens "%"', tokens
			USING ERRCODE = 'invalid_parameter_value',
			      HINT = 'tokens is ''issued'' (generations of this database, the default) or ''external''.';
	END IF;
	-- pg_trigger.tgargs holds each argument followed by a NUL byte
	guard_args := pg_catalog.convert_to(fence_column::text, pg_catalog.getdatabaseencoding()) || nul
	              || pg_catalog.convert_to(tokens, pg_catalog.getdatabaseencoding()) || nul;
	fence_args := pg_catalog.convert_to(fence_column::text, pg_catalog.getdatabaseencoding()) || nul
	              || pg_catalog.convert_to(mode, pg_catalog.getdatabaseencoding()) || nul
	              || pg_catalog.convert_to(tokens, pg_catalog.getdatabaseencoding()) || nul;

	SELECT c.relkind, c.relname, n.nspname INTO rel
	FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
	WHERE c.oid = tbl;

	IF rel.relkind = 'f' THEN
		RAISE EXCEPTION 'lease_fence.protect: % is a foreign table', tbl
			USING ERRCODE = 'wrong_object_type',
			      DETAIL = 'A local trigger cannot check and write the remote row in one atomic step.',
			      HINT = 'Protect the table on the server that stores it.';
	ELSIF rel.relkind NOT IN ('r', 'p') THEN
		RAISE EXCEPTION 'lease_fence.protect: % is not a table', tbl
			USING ERRCODE = 'wrong_object_type',
			      DETAIL = 'Only ordinary and partitioned tables can be fenced.';
	END IF;

	IF NOT pg_catalog.pg_has_role((SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = tbl), 'USAGE') THEN
		RAISE EXCEPTION 'must be owner of table %', tbl USING ERRCODE = 'insufficient_privilege';
	END IF;

	SELECT a.attnum, a.atttypid, a.attgenerated INTO att
	FROM pg_catalog.pg_attribute a
	WHERE a.attrelid = tbl AND a.attname = fence_column AND NOT a.attisdropped;

	IF NOT FOUND THEN
		EXECUTE pg_catalog.format('ALTER TABLE %s ADD COLUMN %I bigint NOT NULL DEFAULT 0',
		                          tbl, fence_column);
	ELSIF att.attnum <= 0 THEN
		RAISE EXCEPTION 'lease_fence.protect: column "%" of table % is a system column', fence_column, tbl
			USING ERRCODE = 'invalid_column_reference';
	ELSIF att.attgenerated <> '' THEN
		RAISE EXCEPTION 'lease_fence.protect: column "%" of table % is a generated column', fence_column, tbl
			USING ERRCODE = 'invalid_column_definition',
			      DETAIL = 'A generated column is computed after BEFORE triggers run, so it cannot carry a generation.';
	ELSIF att.atttypid <> 'pg_catalog.int8'::pg_catalog.regtype THEN
		RAISE EXCEPTION 'lease_fence.protect: column "%" of table % must be of type bigint', fence_column, tbl
			USING ERRCODE = 'datatype_mismatch',
			      DETAIL = pg_catalog.format('It is of type %s.', att.atttypid::pg_catalog.regtype);
	END IF;

	-- the fence trigger: recreate it when it is not exactly the one we want
	-- (other arguments, other events, a WHEN clause, another function)
	IF EXISTS (SELECT FROM pg_catalog.pg_trigger t
	           WHERE t.tgrelid = tbl AND t.tgname = 'zz_lease_fence'
	             AND (t.tgfoid <> 'lease_fence.fence_trigger()'::pg_catalog.regprocedure
	                  OR t.tgtype <> 31     -- ROW | BEFORE | INSERT | DELETE | UPDATE
	                  OR t.tgqual IS NOT NULL
	                  OR t.tgattr::text <> ''
	                  OR t.tgargs <> fence_args)) THEN
		EXECUTE pg_catalog.format('DROP TRIGGER zz_lease_fence ON %s', tbl);
	END IF;
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_trigger t
	               WHERE t.tgrelid = tbl AND t.tgname = 'zz_lease_fence') THEN
		EXECUTE pg_catalog.format(
			'CREATE TRIGGER zz_lease_fence BEFORE INSERT OR UPDATE OR DELETE ON %s '
			'FOR EACH ROW EXECUTE FUNCTION lease_fence.fence_trigger(%L, %L, %L)',
			tbl, fence_column, mode, tokens);
	END IF;
	EXECUTE pg_catalog.format('ALTER TABLE %s ENABLE ALWAYS TRIGGER zz_lease_fence', tbl);

	-- the TRUNCATE guard: statement triggers are not cloned to partitions,
	-- and TRUNCATE can name a partition directly, so every member of the
	-- hierarchy gets one
	FOR part IN
		SELECT p.relid FROM pg_catalog.pg_partition_tree(tbl) p
		UNION
		SELECT tbl
	LOOP
		IF EXISTS (SELECT FROM pg_catalog.pg_trigger t
		           WHERE t.tgrelid = part AND t.tgname = 'zz_lease_fence_truncate'
		             AND (t.tgfoid <> 'lease_fence.truncate_guard()'::pg_catalog.regprocedure
		                  OR t.tgtype <> 34     -- STATEMENT | BEFORE | TRUNCATE
		                  OR t.tgargs <> guard_args)) THEN
			EXECUTE pg_catalog.format('DROP TRIGGER zz_lease_fence_truncate ON %s', part);
		END IF;
		IF NOT EXISTS (SELECT FROM pg_catalog.pg_trigger t
		               WHERE t.tgrelid = part AND t.tgname = 'zz_lease_fence_truncate') THEN
			EXECUTE pg_catalog.format(
				'CREATE TRIGGER zz_lease_fence_truncate BEFORE TRUNCATE ON %s '
				'FOR EACH STATEMENT EXECUTE FUNCTION lease_fence.truncate_guard(%L, %L)',
				part, fence_column, tokens);
		END IF;
		EXECUTE pg_catalog.format('ALTER TABLE %s ENABLE ALWAYS TRIGGER zz_lease_fence_truncate', part);
	END LOOP;

	INSERT INTO lease_fence.protected AS p (relid, fence_column, strict, tokens)
	VALUES (tbl, fence_column, strict, tokens)
	ON CONFLICT (relid) DO UPDATE
		SET fence_column = excluded.fence_column, strict = excluded.strict, tokens = excluded.tokens;

	-- BEFORE row triggers fire in name order: one that sorts after ours could
	-- change NEW after the check
	SELECT pg_catalog.string_agg(pg_catalog.quote_ident(t.tgname::text), ', ' ORDER BY t.tgname) INTO later
	FROM pg_catalog.pg_trigger t
	WHERE t.tgrelid = tbl AND NOT t.tgisinternal
	  AND (t.tgtype & 3) = 3          -- ROW and BEFORE
	  AND t.tgname COLLATE "C" > 'zz_lease_fence';
	IF later IS NOT NULL THEN
		RAISE WARNING 'lease_fence.protect: BEFORE row trigger % on table % fires after the fence trigger', later, tbl
			USING DETAIL = 'BEFORE row triggers fire in name order; a later one can change the row after it was checked.',
			      HINT = 'Rename it so that it sorts before "zz_lease_fence".';
	END IF;

	-- a DO INSTEAD rule replaces a write by other commands: no row of this
	-- table is written, so the fence trigger never fires for it
	SELECT pg_catalog.string_agg(pg_catalog.quote_ident(r.rulename::text), ', ' ORDER BY r.rulename) INTO later
	FROM pg_catalog.pg_rewrite r
	WHERE r.ev_class IN (SELECT p.relid FROM pg_catalog.pg_partition_tree(tbl) p UNION SELECT tbl)
	  AND r.is_instead AND r.ev_type IN ('2', '3', '4');
	IF later IS NOT NULL THEN
		RAISE WARNING 'lease_fence.protect: DO INSTEAD rule % on table % bypasses the fence', later, tbl
			USING DETAIL = 'A DO INSTEAD rule replaces the write, so the fence trigger never sees it.',
			      HINT = 'Drop the rule, or make its commands fenced writes themselves.';
	END IF;
END;
$$;

CREATE OR REPLACE FUNCTION lease_fence.unprotect(tbl regclass)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	part regclass;
BEGIN
	IF tbl IS NULL THEN
		RAISE EXCEPTION 'lease_fence.unprotect: table must not be NULL'
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	-- DROP TRIGGER checks ownership even when there is nothing to drop
	IF NOT pg_catalog.pg_has_role((SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = tbl), 'USAGE') THEN
		RAISE EXCEPTION 'must be owner of table %', tbl USING ERRCODE = 'insufficient_privilege';
	END IF;
	FOR part IN
		SELECT p.relid FROM pg_catalog.pg_partition_tree(tbl) p
		UNION
		SELECT tbl
	LOOP
		IF EXISTS (SELECT FROM pg_catalog.pg_trigger t
		           WHERE t.tgrelid = part AND t.tgname = 'zz_lease_fence' AND t.tgparentid = 0) THEN
			EXECUTE pg_catalog.format('DROP TRIGGER zz_lease_fence ON %s', part);
		END IF;
		IF EXISTS (SELECT FROM pg_catalog.pg_trigger t
		           WHERE t.tgrelid = part AND t.tgname = 'zz_lease_fence_truncate') THEN
			EXECUTE pg_catalog.format('DROP TRIGGER zz_lease_fence_truncate ON %s', part);
		END IF;
	END LOOP;
	DELETE FROM lease_fence.protected p WHERE p.relid = tbl;
END;
$$;

CREATE OR REPLACE FUNCTION lease_fence.trigger_arguments(tgargs bytea)
RETURNS text[]
LANGUAGE sql STABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT COALESCE(pg_catalog.array_agg(
	           pg_catalog.convert_from(pg_catalog.substr(tgargs, z.s, z.e - z.s),
	                                   pg_catalog.getdatabaseencoding())
	           ORDER BY z.e), '{}')
	FROM (SELECT n.e, COALESCE(pg_catalog.lag(n.e) OVER (ORDER BY n.e), 0) + 1 AS s
	      FROM (SELECT i + 1 AS e
	            FROM pg_catalog.generate_series(0, pg_catalog.length(tgargs) - 1) i
	            WHERE pg_catalog.get_byte(tgargs, i) = 0) n) z
$$;

DROP VIEW IF EXISTS lease_fence.protected_tables;
CREATE VIEW lease_fence.protected_tables AS
SELECT p.relid AS table_name,
	f.fence_column,
	f.strict,
	f.tokens,
	CASE t.tgenabled WHEN 'A' THEN 'always' WHEN 'O' THEN 'origin' WHEN 'R' THEN 'replica'
	                 WHEN 'D' THEN 'disabled' ELSE 'missing' END AS trigger_state,
	pg_catalog.cardinality(pr.problems) = 0 AS ok,
	pr.problems
FROM lease_fence.protected p
JOIN pg_catalog.pg_class c ON c.oid = p.relid
LEFT JOIN pg_catalog.pg_trigger t ON t.tgrelid = p.relid AND t.tgname = 'zz_lease_fence'
CROSS JOIN LATERAL (
	SELECT CASE WHEN t.tgnargs >= 1 THEN a.args[1] ELSE 'fence' END::pg_catalog.name AS fence_column,
	       CASE WHEN t.tgnargs < 2 THEN false
	            WHEN pg_catalog.lower(a.args[2]) = 'strict' THEN true
	            WHEN pg_catalog.lower(a.args[2]) = 'lenient' THEN false END AS strict,
	       CASE WHEN t.tgnargs < 3 THEN 'issued'
	            WHEN pg_catalog.lower(a.args[3]) IN ('issued', 'external') THEN pg_catalog.lower(a.args[3]) END AS tokens
	FROM (SELECT lease_fence.trigger_arguments(t.tgargs) AS args) a
	WHERE t.tgfoid = 'lease_fence.fence_trigger()'::pg_catalog.regprocedure AND t.tgnargs <= 3
	UNION ALL
	SELECT NULL, NULL, NULL
	WHERE t.tgfoid IS DISTINCT FROM 'lease_fence.fence_trigger()'::pg_catalog.regprocedure OR t.tgnargs > 3
) f
CROSS JOIN LATERAL (
	SELECT COALESCE(pg_catalog.array_agg(x.problem ORDER BY x.problem), '{}') AS problems
	-- the table and, when partitioned, every member of its tree
	-- (pg_partition_tree lists nothing for a table that is not partitioned)
	FROM (SELECT p.relid UNION SELECT t.relid FROM pg_catalog.pg_partition_tree(p.relid) t) m
	LEFT JOIN pg_catalog.pg_trigger g ON g.tgrelid = m.relid AND g.tgname = 'zz_lease_fence'
	LEFT JOIN pg_catalog.pg_trigger u ON u.tgrelid = m.relid AND u.tgname = 'zz_lease_fence_truncate'
	CROSS JOIN LATERAL (
		SELECT CASE WHEN g.tgnargs >= 1 THEN ga[1] ELSE 'fence' END AS g_column,
		       CASE WHEN g.tgnargs < 2 THEN 'lenient' ELSE pg_catalog.lower(ga[2]) END AS g_mode,
		       CASE WHEN g.tgnargs < 3 THEN 'issued' ELSE pg_catalog.lower(ga[3]) END AS g_tokens,
		       CASE WHEN u.tgnargs >= 1 THEN ua[1] ELSE 'fence' END AS u_column,
		       CASE WHEN u.tgnargs < 2 THEN 'issued' ELSE pg_catalog.lower(ua[2]) END AS u_tokens,
		       (SELECT pg_catalog.string_agg(pg_catalog.quote_ident(o.tgname::text), ', ' ORDER BY o.tgname)
		        FROM pg_catalog.pg_trigger o
		        WHERE o.tgrelid = m.relid AND NOT o.tgisinternal AND (o.tgtype & 3) = 3
		          AND o.tgname COLLATE "C" > 'zz_lease_fence') AS later_triggers,
		       (SELECT pg_catalog.string_agg(pg_catalog.quote_ident(r.rulename::text), ', ' ORDER BY r.rulename)
		        FROM pg_catalog.pg_rewrite r
		        WHERE r.ev_class = m.relid AND r.is_instead AND r.ev_type IN ('2', '3', '4')) AS instead_rules
		FROM (SELECT lease_fence.trigger_arguments(g.tgargs) AS ga,
		             lease_fence.trigger_arguments(u.tgargs) AS ua) args
	) st
	CROSS JOIN LATERAL (VALUES
		(CASE WHEN g.oid IS NULL THEN pg_catalog.format('%s: fence trigger missing', m.relid)
		      WHEN g.tgenabled <> 'A' THEN pg_catalog.format('%s: fence trigger %s', m.relid,
		           CASE g.tgenabled WHEN 'D' THEN 'disabled' WHEN 'O' THEN 'enabled only for origin'
		                            ELSE 'enabled only for replica' END) END),
		(CASE WHEN g.oid IS NOT NULL
		       AND (g.tgfoid <> 'lease_fence.fence_trigger()'::pg_catalog.regprocedure
		            OR g.tgtype <> 31 OR g.tgqual IS NOT NULL OR g.tgattr::text <> '' OR g.tgnargs > 3)
		      THEN pg_catalog.format('%s: fence trigger is not lease_fence''s (another function, other events, a column list or a WHEN clause)', m.relid)
		      WHEN g.oid IS NOT NULL
		       AND (st.g_column, st.g_mode, st.g_tokens) IS DISTINCT FROM
		           (p.fence_column::text, CASE WHEN p.strict THEN 'strict' ELSE 'lenient' END, p.tokens)
		      THEN pg_catalog.format('%s: fence trigger takes column %s, mode %s, tokens %s; protect() recorded column %s, mode %s, tokens %s',
		           m.relid, pg_catalog.quote_ident(st.g_column), st.g_mode, st.g_tokens,
		           pg_catalog.quote_ident(p.fence_column::text), CASE WHEN p.strict THEN 'strict' ELSE 'lenient' END, p.tokens) END),
		(CASE WHEN u.oid IS NULL THEN pg_catalog.format('%s: truncate guard missing', m.relid)
		      WHEN u.tgenabled <> 'A' THEN pg_catalog.format('%s: truncate guard %s', m.relid,
		           CASE u.tgenabled WHEN 'D' THEN 'disabled' WHEN 'O' THEN 'enabled only for origin'
		                            ELSE 'enabled only for replica' END) END),
		(CASE WHEN u.oid IS NOT NULL
		       AND (u.tgfoid <> 'lease_fence.truncate_guard()'::pg_catalog.regprocedure
		            OR u.tgtype <> 34 OR u.tgnargs > 2)
		      THEN pg_catalog.format('%s: truncate guard is not lease_fence''s (another function or other events)', m.relid)
		      WHEN u.oid IS NOT NULL
		       AND (st.u_column, st.u_tokens) IS DISTINCT FROM (p.fence_column::text, p.tokens)
		      THEN pg_catalog.format('%s: truncate guard takes column %s, tokens %s; protect() recorded column %s, tokens %s',
		           m.relid, pg_catalog.quote_ident(st.u_column), st.u_tokens,
		           pg_catalog.quote_ident(p.fence_column::text), p.tokens) END),
		(CASE WHEN st.later_triggers IS NOT NULL
		      THEN pg_catalog.format('%s: BEFORE row trigger %s fires after the fence trigger', m.relid, st.later_triggers) END),
		(CASE WHEN st.instead_rules IS NOT NULL
		      THEN pg_catalog.format('%s: DO INSTEAD rule %s bypasses the fence', m.relid, st.instead_rules) END)
	) x(problem)
	WHERE x.problem IS NOT NULL
) pr;

COMMENT ON VIEW lease_fence.protected_tables IS
'protected tables, with the fence column, mode and tokens their fence triggers take; ok = false and the reason when a fence trigger or TRUNCATE guard is missing, disabled, not lease_fence''s, not as protect() recorded, or not last, or a DO INSTEAD rule bypasses it';

GRANT SELECT ON lease_fence.protected_tables TO PUBLIC;

-- tables protected in this database and the fence their triggers take
COMMENT ON VIEW lease_fence.protected_tables IS
'protected tables, with the fence column, mode and tokens their fence triggers take; ok = false and the reason when a fence trigger or TRUNCATE guard is missing, disabled, not lease_fence''s, not as protect() recorded, or not last, or a DO INSTEAD rule bypasses it';

COMMIT;

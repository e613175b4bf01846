-- protect: protect() / unprotect() / protected_tables, ENABLE ALWAYS,
-- trigger order, the TRUNCATE guard, idempotence, and who may do what.

-- The generations below are small numbers: draw them first, so that they
-- were issued (a generation this database never issued is LF004: see
-- unissued.sql).
SELECT max(g) >= 20 AS issued_through_20
FROM (SELECT lease_fence.next_generation() AS g FROM generate_series(1, 20)) s;

\set ECHO none
\i sql/include/try.sql

CREATE TABLE orders (id int PRIMARY KEY, item text NOT NULL);
INSERT INTO orders VALUES (1, 'apple'), (2, 'pear');

-- protect adds the column (bigint NOT NULL DEFAULT 0), the fence trigger and
-- the TRUNCATE guard, both firing always
SELECT lease_fence.protect('orders');
\d orders
SELECT * FROM lease_fence.protected_tables;

-- idempotent: a second call changes nothing (same trigger OIDs)
SELECT array_agg(oid ORDER BY tgname) AS before_oids FROM pg_trigger WHERE tgrelid = 'orders'::regclass \gset
SELECT lease_fence.protect('orders');
SELECT array_agg(oid ORDER BY tgname) = :'before_oids' AS same_triggers
FROM pg_trigger WHERE tgrelid = 'orders'::regclass;
SELECT count(*) AS fence_columns FROM pg_attribute WHERE attrelid = 'orders'::regclass AND attname = 'fence';

-- switching to strict replaces the trigger; protected_tables says so
SELECT lease_fence.protect('orders', strict => true);
SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgrelid = 'orders'::regclass AND tgname = 'zz_lease_fence';
SELECT table_name, strict, ok FROM lease_fence.protected_tables;
SELECT pg_temp.try($$UPDATE orders SET item = 'plum' WHERE id = 1$$);
SELECT lease_fence.protect('orders');
SELECT pg_temp.try($$UPDATE orders SET item = 'plum' WHERE id = 1$$);

-- an existing bigint column of another name is used as it is
CREATE TABLE docs (id int, body text, version bigint NOT NULL DEFAULT 3);
INSERT INTO docs VALUES (1, 'x');
SELECT lease_fence.protect('docs', 'version');
SELECT pg_temp.try($$UPDATE docs SET body = 'y', version = 2$$);
SELECT * FROM docs;

-- what protect refuses, before changing anything
CREATE TABLE wrongtype (id int, fence int);
SELECT pg_temp.try($$SELECT lease_fence.protect('wrongtype')$$);
CREATE TABLE generated (id int, fence bigint GENERATED ALWAYS AS (id) STORED);
SELECT pg_temp.try($$SELECT lease_fence.protect('generated')$$);
SELECT pg_temp.try($$SELECT lease_fence.protect('orders', 'xmin')$$);
CREATE VIEW orders_v AS SELECT * FROM orders;
SELECT pg_temp.try($$SELECT lease_fence.protect('orders_v')$$);
SELECT pg_temp.try($$SELECT lease_fence.protect(NULL)$$);
SELECT pg_temp.try($$SELECT lease_fence.protect('orders', NULL)$$);
SELECT count(*) AS triggers_on_refused_tables FROM pg_trigger
WHERE tgrelid IN ('wrongtype'::regclass, 'generated'::regclass);
DROP VIEW orders_v;
DROP TABLE wrongtype, generated;

------------------------------------------------------------------------------
-- ENABLE ALWAYS: session_replication_role = replica skips ordinary triggers,
-- not the fence
------------------------------------------------------------------------------
UPDATE orders SET fence = 10;
CREATE TABLE audit (n int);
CREATE FUNCTION audit_row() RETURNS trigger LANGUAGE plpgsql AS
	$$BEGIN INSERT INTO audit VALUES (1); RETURN NEW; END$$;
CREATE TRIGGER a_audit BEFORE UPDATE ON orders FOR EACH ROW EXECUTE FUNCTION audit_row();
SET session_replication_role = replica;
BEGIN;
SET LOCAL lease_fence.generation = 9;
SELECT pg_temp.try($$UPDATE orders SET item = 'fig' WHERE id = 1$$);
COMMIT;
BEGIN;
SET LOCAL lease_fence.generation = 11;
UPDATE orders SET item = 'fig' WHERE id = 1 RETURNING *;
COMMIT;
RESET session_replication_role;
-- the ordinary trigger did not fire under replica (the control)
SELECT count(*) AS audit_rows FROM audit;
DROP TRIGGER a_audit ON orders;

------------------------------------------------------------------------------
-- protected_tables flags a disabled, missing or outrun trigger; protect()
-- repairs the first two
------------------------------------------------------------------------------
ALTER TABLE orders DISABLE TRIGGER zz_lease_fence;
SELECT table_name, trigger_state, ok, problems FROM lease_fence.protected_tables WHERE table_name = 'orders'::regclass;
ALTER TABLE orders ENABLE TRIGGER zz_lease_fence;
SELECT table_name, trigger_state, ok, problems FROM lease_fence.protected_tables WHERE table_name = 'orders'::regclass;
ALTER TABLE orders ENABLE REPLICA TRIGGER zz_lease_fence_truncate;
DROP TRIGGER zz_lease_fence ON orders;
SELECT table_name, trigger_state, ok, problems FROM lease_fence.protected_tables WHERE table_name = 'orders'::regclass;
SELECT lease_fence.protect('orders');
SELECT table_name, trigger_state, ok, problems FROM lease_fence.protected_tables WHERE table_name = 'orders'::regclass;

-- a BEFORE row trigger whose name sorts after the fence trigger fires after
-- it and could change NEW after the check: protect warns, the view flags it
CREATE FUNCTION bump_fence() RETURNS trigger LANGUAGE plpgsql AS
	$$BEGIN NEW.fence := 0; RETURN NEW; END$$;
CREATE TRIGGER zzz_late BEFORE UPDATE ON orders FOR EACH ROW EXECUTE FUNCTION bump_fence();
SELECT lease_fence.protect('orders');
SELECT ok, problems FROM lease_fence.protected_tables WHERE table_name = 'orders'::regclass;
-- (and it really does undo the fence: the row ends at 0)
BEGIN;
SET LOCAL lease_fence.generation = 12;
UPDATE orders SET item = 'kiwi' WHERE id = 2 RETURNING *;
ROLLBACK;
DROP TRIGGER zzz_late ON orders;
-- one that sorts before it is fine: the fence sees what it wrote (a 0, at
-- or below the stored fence, counts as leaving the fence alone: the row
-- ends at 12)
CREATE TRIGGER early BEFORE UPDATE ON orders FOR EACH ROW EXECUTE FUNCTION bump_fence();
SELECT ok FROM lease_fence.protected_tables WHERE table_name = 'orders'::regclass;
BEGIN;
SET LOCAL lease_fence.generation = 12;
UPDATE orders SET item = 'kiwi' WHERE id = 2 RETURNING *;
ROLLBACK;
DROP TRIGGER early ON orders;

------------------------------------------------------------------------------
-- the TRUNCATE guard
------------------------------------------------------------------------------
SELECT max(fence) FROM orders;
SELECT pg_temp.try($$TRUNCATE orders$$);
BEGIN;
SET LOCAL lease_fence.generation = 10;
SELECT pg_temp.try($$TRUNCATE orders$$);
COMMIT;
SELECT count(*) AS rows_left FROM orders;
-- the full error shape once
TRUNCATE orders;
BEGIN;
SET LOCAL lease_fence.generation = 11;
TRUNCATE orders;
SELECT count(*) AS rows_left FROM orders;
ROLLBACK;
-- under session_replication_role = replica too
SET session_replication_role = replica;
SELECT pg_temp.try($$TRUNCATE orders$$);
RESET session_replication_role;
-- the guard sees every row: row level security hides rows from a SELECT,
-- not from TRUNCATE, and a role may hold TRUNCATE without SELECT
CREATE ROLE regress_lf_truncator;
GRANT SELECT, TRUNCATE ON orders TO regress_lf_truncator;
ALTER TABLE orders ENABLE ROW LEVEL SECURITY;
CREATE POLICY only_low ON orders FOR SELECT USING (fence < 11);
SET ROLE regress_lf_truncator;
SELECT max(fence) AS max_fence_it_can_see FROM orders;
BEGIN;
SET LOCAL lease_fence.generation = 10;
SELECT pg_temp.try($$TRUNCATE orders$$);
ROLLBACK;
RESET ROLE;
REVOKE SELECT ON orders FROM regress_lf_truncator;
SET ROLE regress_lf_truncator;
BEGIN;
SET LOCAL lease_fence.generation = 10;
SELECT pg_temp.try($$TRUNCATE orders$$);
ROLLBACK;
RESET ROLE;
DROP POLICY only_low ON orders;
ALTER TABLE orders DISABLE ROW LEVEL SECURITY;
REVOKE ALL ON orders FROM regress_lf_truncator;
DROP ROLE regress_lf_truncator;
SELECT count(*) AS rows_left FROM orders;

------------------------------------------------------------------------------
-- privileges: only the table's owner may protect or unprotect it, or write
-- its row in lease_fence.protected; everyone may read the list
------------------------------------------------------------------------------
CREATE ROLE regress_lf_owner;
CREATE ROLE regress_lf_app;
CREATE TABLE owned (id int);
ALTER TABLE owned OWNER TO regress_lf_owner;
GRANT SELECT, INSERT, UPDATE, DELETE ON owned TO regress_lf_app;
SET ROLE regress_lf_app;
SELECT pg_temp.try($$SELECT lease_fence.protect('owned')$$);
SELECT pg_temp.try($$INSERT INTO lease_fence.protected VALUES ('owned', 'fence', false)$$);
-- the list itself is public, like pg_trigger
SELECT count(*) AS visible_to_app FROM lease_fence.protected_tables;
RESET ROLE;
SET ROLE regress_lf_owner;
SELECT lease_fence.protect('owned');
SELECT table_name, ok FROM lease_fence.protected_tables ORDER BY table_name::text;
-- the app role can write fenced rows but cannot switch the fence off
RESET ROLE;
SET ROLE regress_lf_app;
BEGIN;
SET LOCAL lease_fence.generation = 3;
INSERT INTO owned VALUES (1) RETURNING *;
COMMIT;
SELECT pg_temp.try($$ALTER TABLE owned DISABLE TRIGGER zz_lease_fence$$);
SELECT pg_temp.try($$SELECT lease_fence.unprotect('owned')$$);
RESET ROLE;

------------------------------------------------------------------------------
-- the view reads the triggers themselves: what an owner writes into
-- lease_fence.protected, or a trigger made by hand, cannot make it lie
------------------------------------------------------------------------------
-- (the owner's helpers below live in public, where it may not create)
CREATE FUNCTION pass() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NEW; END$$;
CREATE TABLE owned_log (id int);
ALTER TABLE owned_log OWNER TO regress_lf_owner;
SET ROLE regress_lf_owner;
-- the owner records "strict" for its lenient table: the view says lenient,
-- and that the trigger is not what protect() recorded
UPDATE lease_fence.protected SET strict = true WHERE relid = 'owned'::regclass;
SELECT table_name, fence_column, strict, tokens, ok, problems FROM lease_fence.protected_tables
WHERE table_name = 'owned'::regclass;
SELECT lease_fence.protect('owned');
-- a fence trigger of its own making under the name: strict in its
-- arguments, but with a WHEN clause that never lets it fire
DROP TRIGGER zz_lease_fence ON owned;
CREATE TRIGGER zz_lease_fence BEFORE INSERT OR UPDATE OR DELETE ON owned
	FOR EACH ROW WHEN (false) EXECUTE FUNCTION lease_fence.fence_trigger('fence', 'strict');
UPDATE lease_fence.protected SET strict = true WHERE relid = 'owned'::regclass;
SELECT table_name, fence_column, strict, tokens, ok, problems FROM lease_fence.protected_tables
WHERE table_name = 'owned'::regclass;
-- or another function altogether
DROP TRIGGER zz_lease_fence ON owned;
CREATE TRIGGER zz_lease_fence BEFORE INSERT OR UPDATE OR DELETE ON owned
	FOR EACH ROW EXECUTE FUNCTION pass();
SELECT table_name, fence_column, strict, tokens, ok, problems FROM lease_fence.protected_tables
WHERE table_name = 'owned'::regclass;
SELECT lease_fence.protect('owned');
SELECT table_name, fence_column, strict, tokens, ok, problems FROM lease_fence.protected_tables
WHERE table_name = 'owned'::regclass;
-- a guard made by hand with other tokens
DROP TRIGGER zz_lease_fence_truncate ON owned;
CREATE TRIGGER zz_lease_fence_truncate BEFORE TRUNCATE ON owned
	FOR EACH STATEMENT EXECUTE FUNCTION lease_fence.truncate_guard('fence', 'external');
SELECT ok, problems FROM lease_fence.protected_tables WHERE table_name = 'owned'::regclass;
SELECT lease_fence.protect('owned');
-- a DO INSTEAD rule: the write never reaches the table, so the fence
-- never sees it; protect() warns and the view flags it (a DO ALSO rule
-- leaves the write to the fence)
CREATE RULE owned_instead AS ON UPDATE TO owned DO INSTEAD
	INSERT INTO owned_log VALUES (NEW.id);
CREATE RULE owned_also AS ON DELETE TO owned DO ALSO
	INSERT INTO owned_log VALUES (OLD.id);
SELECT lease_fence.protect('owned');
SELECT ok, problems FROM lease_fence.protected_tables WHERE table_name = 'owned'::regclass;
-- (what it bypasses: an UPDATE with no generation at all goes through)
UPDATE owned SET id = 2;
SELECT count(*) AS logged FROM owned_log;
DROP RULE owned_instead ON owned;
DROP RULE owned_also ON owned;
SELECT ok FROM lease_fence.protected_tables WHERE table_name = 'owned'::regclass;
RESET ROLE;
DROP TABLE owned_log;
DROP FUNCTION pass();

------------------------------------------------------------------------------
-- unprotect removes what protect added and keeps the column
------------------------------------------------------------------------------
SELECT lease_fence.unprotect('docs');
SELECT tgname FROM pg_trigger WHERE tgrelid = 'docs'::regclass;
SELECT * FROM docs;
UPDATE docs SET version = 1 RETURNING *;
SELECT table_name FROM lease_fence.protected_tables ORDER BY table_name::text;
-- unprotecting twice is harmless
SELECT lease_fence.unprotect('docs');
-- a dropped table disappears from the view
DROP TABLE docs;
SET ROLE regress_lf_owner;
DROP TABLE owned;
RESET ROLE;
SELECT table_name FROM lease_fence.protected_tables ORDER BY table_name::text;
DROP TABLE audit, orders;
DROP FUNCTION audit_row(), bump_fence();
DROP ROLE regress_lf_app, regress_lf_owner;

-- upgrade: version 1.0 (fence and generations) updates to 1.1 (the lease
-- helper), then to 1.2 and 1.3, keeping protected tables and the generation
-- space.
DROP EXTENSION IF EXISTS lease_fence;
CREATE EXTENSION lease_fence VERSION '1.0';
CREATE TABLE up (id int);
SELECT lease_fence.protect('up');
SELECT lease_fence.next_generation() AS before_update \gset
SELECT count(*) AS helper_functions FROM pg_proc
WHERE pronamespace = 'lease_fence'::regnamespace AND proname IN ('acquire', 'renew', 'release');

ALTER EXTENSION lease_fence UPDATE TO '1.1';
SELECT extversion FROM pg_extension WHERE extname = 'lease_fence';
SELECT p.oid::regprocedure AS helper, has_function_privilege('public', p.oid, 'EXECUTE') AS public_execute
FROM pg_proc p WHERE p.pronamespace = 'lease_fence'::regnamespace AND proname IN ('acquire', 'renew', 'release')
ORDER BY 1::text;
SELECT lease_fence.next_generation() > :before_update AS generations_continue;
SELECT table_name, ok FROM lease_fence.protected_tables;
-- the extension was created afresh above, so 2 is the highest generation
-- issued (1 before the update, 2 just now)
BEGIN;
SET LOCAL lease_fence.generation = 2;
INSERT INTO up VALUES (1) RETURNING *;
COMMIT;

-- an application role granted the 1.1 acquire
CREATE ROLE lf_up_app;
GRANT EXECUTE ON FUNCTION lease_fence.acquire(text, bigint, bigint, text) TO lf_up_app;

ALTER EXTENSION lease_fence UPDATE TO '1.2';
SELECT extversion FROM pg_extension WHERE extname = 'lease_fence';
-- acquire gained wait_ms and keepalive: one function, which nobody but its
-- owner may execute until granted again (docs/security.md: in the update's transaction)
SELECT p.oid::regprocedure AS acquire,
       has_function_privilege('lf_up_app', p.oid, 'EXECUTE') AS app_execute,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_execute
FROM pg_proc p WHERE p.pronamespace = 'lease_fence'::regnamespace AND proname = 'acquire';
GRANT EXECUTE ON FUNCTION lease_fence.acquire(text, bigint, bigint, text, bigint, boolean) TO lf_up_app;
SELECT has_function_privilege('lf_up_app', 'lease_fence.acquire(text, bigint, bigint, text, bigint, boolean)', 'EXECUTE') AS app_execute_granted;
-- that GRANT is the user's, not the extension's: pg_dump dumps it
SELECT count(*) AS extension_initial_grants_to_app
FROM pg_init_privs i, LATERAL aclexplode(i.initprivs) a
WHERE i.objoid = 'lease_fence.acquire(text, bigint, bigint, text, bigint, boolean)'::regprocedure
  AND a.grantee = 'lf_up_app'::regrole;
REVOKE EXECUTE ON FUNCTION lease_fence.acquire(text, bigint, bigint, text, bigint, boolean) FROM lf_up_app;
DROP ROLE lf_up_app;
SELECT lease_fence.next_generation() > :before_update AS generations_continue;
SELECT table_name, ok FROM lease_fence.protected_tables;
-- a table protected before 1.2 keeps its triggers (fence column and mode,
-- no tokens argument) and gets the default: tokens issued, checked
SELECT table_name, strict, tokens, ok FROM lease_fence.protected_tables;
SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgrelid = 'up'::regclass ORDER BY tgname;
BEGIN;
SET LOCAL lease_fence.generation = 4;
UPDATE up SET id = 2 RETURNING *;
ROLLBACK;
BEGIN;
SET LOCAL lease_fence.generation = 3;
UPDATE up SET id = 2 RETURNING *;
COMMIT;
-- the calls of 1.1 still mean what they meant, and the new parameter opts out
SELECT lease_fence.protect('up', 'fence', true);
SELECT lease_fence.protect('up', strict => false);
SELECT lease_fence.protect('up', tokens => 'external');
SELECT table_name, strict, tokens, ok FROM lease_fence.protected_tables;
SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgrelid = 'up'::regclass ORDER BY tgname;
BEGIN;
SET LOCAL lease_fence.generation = 4;
UPDATE up SET id = 3 RETURNING *;
COMMIT;

-- 1.3: fence_resource() is made again, nobody's but its owner's: a grant
-- made before goes with the old function, and is made again in the
-- update's transaction (docs/security.md); protected_tables reads the triggers
-- renew and release gain a reason column, so they are made again too; acquire
-- keeps its grants (its row type gains the column)
CREATE ROLE lf_up_fencer;
GRANT EXECUTE ON FUNCTION lease_fence.fence_resource(text),
                          lease_fence.acquire(text, bigint, bigint, text, bigint, boolean),
                          lease_fence.renew(text, text, bigint, bigint),
                          lease_fence.release(text, text) TO lf_up_fencer;
BEGIN;
ALTER EXTENSION lease_fence UPDATE TO '1.3';
SELECT extversion FROM pg_extension WHERE extname = 'lease_fence';
SELECT has_function_privilege('public', 'lease_fence.fence_resource(text)', 'EXECUTE') AS public_may_fence,
       has_function_privilege('lf_up_fencer', 'lease_fence.fence_resource(text)', 'EXECUTE') AS fencer_may_fence,
       has_function_privilege('public', 'lease_fence.advance_generation(bigint)', 'EXECUTE') AS public_may_advance;
SELECT p.oid::regprocedure AS helper,
       has_function_privilege('lf_up_fencer', p.oid, 'EXECUTE') AS app_execute,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_execute
FROM pg_proc p WHERE p.pronamespace = 'lease_fence'::regnamespace AND proname IN ('acquire', 'renew', 'release')
ORDER BY 1::text;
GRANT EXECUTE ON FUNCTION lease_fence.fence_resource(text),
                          lease_fence.renew(text, text, bigint, bigint),
                          lease_fence.release(text, text) TO lf_up_fencer;
COMMIT;
-- the result columns, reason last
SELECT p.oid::regprocedure AS helper, pg_get_function_arguments(p.oid) AS arguments
FROM pg_proc p WHERE p.pronamespace = 'lease_fence'::regnamespace AND proname IN ('renew', 'release')
ORDER BY 1::text;
SELECT string_agg(attname, ', ' ORDER BY attnum) AS lease_columns FROM pg_attribute
WHERE attrelid = 'lease_fence.lease'::regclass AND attnum > 0 AND NOT attisdropped;
-- the calls of 1.2 still mean what they meant: set_generation(g) and
-- set_generation(g, is_local)
BEGIN;
SELECT lease_fence.set_generation(4) AS g, lease_fence.current_generation() AS current;
COMMIT;
SELECT lease_fence.current_generation() IS NULL AS transaction_scoped;
BEGIN;
SELECT lease_fence.set_generation(4, true) AS g;
COMMIT;
SELECT lease_fence.current_generation() IS NULL AS transaction_scoped;
SELECT lease_fence.set_generation(4, false) AS g;
SELECT lease_fence.current_generation() AS session_scoped;
RESET lease_fence.generation;
-- that GRANT is the user's, not the extension's: pg_dump dumps it
SELECT count(*) AS extension_initial_grants_to_fencer
FROM pg_init_privs i, LATERAL aclexplode(i.initprivs) a
WHERE i.objoid = 'lease_fence.fence_resource(text)'::regprocedure
  AND a.grantee = 'lf_up_fencer'::regrole;
REVOKE EXECUTE ON FUNCTION lease_fence.fence_resource(text),
                           lease_fence.acquire(text, bigint, bigint, text, bigint, boolean),
                           lease_fence.renew(text, text, bigint, bigint),
                           lease_fence.release(text, text) FROM lf_up_fencer;
DROP ROLE lf_up_fencer;
SELECT table_name, fence_column, strict, tokens, ok FROM lease_fence.protected_tables;
SELECT lease_fence.next_generation() > :before_update AS generations_continue;

-- 1.4: all_leases and latency for everybody; holder() asks Redis, so it is
-- not PUBLIC's
ALTER EXTENSION lease_fence UPDATE TO '1.4';
SELECT extversion FROM pg_extension WHERE extname = 'lease_fence';
SELECT has_function_privilege('public', 'lease_fence.holder(text)', 'EXECUTE') AS public_may_ask_holder,
       has_table_privilege('public', 'lease_fence.all_leases', 'SELECT') AS public_sees_all_leases,
       has_table_privilege('public', 'lease_fence.latency', 'SELECT') AS public_sees_latency;

-- 1.5: campaign, leader, resign, take_over and queue, none of them
-- PUBLIC's; acquire gains fair: one function again, which a role granted
-- the 1.4 one may not execute until granted again (in the update's
-- transaction, docs/operations.md)
CREATE ROLE lf_up_app15;
GRANT EXECUTE ON FUNCTION lease_fence.acquire(text, bigint, bigint, text, bigint, boolean) TO lf_up_app15;
BEGIN;
ALTER EXTENSION lease_fence UPDATE TO '1.5';
SELECT extversion FROM pg_extension WHERE extname = 'lease_fence';
SELECT p.oid::regprocedure AS acquire,
       has_function_privilege('lf_up_app15', p.oid, 'EXECUTE') AS app_execute,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_execute
FROM pg_proc p WHERE p.pronamespace = 'lease_fence'::regnamespace AND proname = 'acquire';
GRANT EXECUTE ON FUNCTION lease_fence.acquire(text, bigint, bigint, text, bigint, boolean, boolean) TO lf_up_app15;
COMMIT;
SELECT has_function_privilege('lf_up_app15', 'lease_fence.acquire(text, bigint, bigint, text, bigint, boolean, boolean)', 'EXECUTE') AS app_execute_granted;
REVOKE EXECUTE ON FUNCTION lease_fence.acquire(text, bigint, bigint, text, bigint, boolean, boolean) FROM lf_up_app15;
DROP ROLE lf_up_app15;
SELECT has_function_privilege('public', 'lease_fence.campaign(text, bigint, bigint, text, text, boolean)', 'EXECUTE') AS public_may_campaign,
       has_function_privilege('public', 'lease_fence.leader(text)', 'EXECUTE') AS public_may_ask_leader,
       has_function_privilege('public', 'lease_fence.resign(text, text)', 'EXECUTE') AS public_may_resign,
       has_function_privilege('public', 'lease_fence.take_over(text, bigint, bigint, text)', 'EXECUTE') AS public_may_take_over,
       has_function_privilege('public', 'lease_fence.queue(text)', 'EXECUTE') AS public_may_ask_queue;

-- the members of an updated extension are those of a fresh install (a guard
-- for the day a direct lease_fence--1.1.sql or later script is added)
CREATE TEMP TABLE updated AS
SELECT pg_describe_object(classid, objid, 0) AS member
FROM pg_depend WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
  AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'lease_fence');
SELECT lease_fence.unprotect('up');
DROP EXTENSION lease_fence;
CREATE EXTENSION lease_fence;
SELECT extversion FROM pg_extension WHERE extname = 'lease_fence';
CREATE TEMP TABLE fresh AS
SELECT pg_describe_object(classid, objid, 0) AS member
FROM pg_depend WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
  AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'lease_fence');
(SELECT member FROM updated EXCEPT SELECT member FROM fresh)
UNION ALL
(SELECT member FROM fresh EXCEPT SELECT member FROM updated);
-- the fresh install's members, without the array types and the row types
-- of tables and views that PostgreSQL lists as members from 17 on (the same
-- count on every version)
SELECT count(*) AS members FROM pg_depend d
WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
  AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'lease_fence')
  AND NOT EXISTS (SELECT FROM pg_type t LEFT JOIN pg_class c ON c.oid = t.typrelid
                  WHERE d.classid = 'pg_type'::regclass AND t.oid = d.objid
                    AND (t.typcategory = 'A' OR c.relkind <> 'c'));
DROP TABLE up;

-- reinstall: DROP EXTENSION / CREATE EXTENSION without an upgrade script.

CREATE TABLE keep (id int);
SELECT lease_fence.protect('keep');
-- this backend has seen a generation issued (and caches it)
SELECT lease_fence.next_generation() >= 1 AS drew_before_reinstall;

-- protected tables depend on the trigger functions: DROP EXTENSION refuses
-- rather than silently unfencing them
DROP EXTENSION lease_fence;

SELECT lease_fence.unprotect('keep');
DROP EXTENSION lease_fence;
-- nothing of it is left but the schema CREATE EXTENSION made (PostgreSQL
-- does not drop that one)
SELECT count(*) AS objects_left FROM pg_class WHERE relnamespace = 'lease_fence'::regnamespace;
SELECT count(*) AS functions_left FROM pg_proc WHERE pronamespace = 'lease_fence'::regnamespace;

CREATE EXTENSION lease_fence;
SELECT lease_fence.protect('keep');
SELECT table_name, ok FROM lease_fence.protected_tables ORDER BY table_name::text;
-- the reinstalled generation space has issued nothing yet: what this
-- backend saw issued before the reinstall does not count
BEGIN;
SET LOCAL lease_fence.generation = 1;
INSERT INTO keep VALUES (1) RETURNING *;
ROLLBACK;
-- it starts again from 1: docs/guides/failover-and-generations.md explains why a reinstall must be treated
-- like a restore from backup
SELECT lease_fence.next_generation() AS first_after_reinstall;
BEGIN;
SET LOCAL lease_fence.generation = 1;
INSERT INTO keep VALUES (1) RETURNING *;
COMMIT;

-- (left installed, as the other files find it)
DROP TABLE keep;

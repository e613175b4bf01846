-- dml: INSERT ... ON CONFLICT DO UPDATE, MERGE and COPY FROM go through the
-- fence like plain INSERT / UPDATE / DELETE.

-- The generations below are small numbers: draw them first, so that they
-- were issued (a generation this database never issued is LF004: see
-- unissued.sql).
SELECT max(g) >= 20 AS issued_through_20
FROM (SELECT lease_fence.next_generation() AS g FROM generate_series(1, 20)) s;

\set ECHO none
\i sql/include/try.sql

CREATE TABLE kv (k text PRIMARY KEY, v int NOT NULL);
SELECT lease_fence.protect('kv');
BEGIN;
SET LOCAL lease_fence.generation = 10;
INSERT INTO kv VALUES ('a', 1), ('b', 2);
COMMIT;

------------------------------------------------------------------------------
-- INSERT ... ON CONFLICT DO UPDATE
------------------------------------------------------------------------------
-- the conflicting row is stored at 10: a stale upsert is rejected
BEGIN;
SET LOCAL lease_fence.generation = 9;
SELECT pg_temp.try($$INSERT INTO kv VALUES ('a', 100) ON CONFLICT (k) DO UPDATE SET v = excluded.v$$);
-- with no conflict the INSERT path takes the generation
INSERT INTO kv VALUES ('c', 3) ON CONFLICT (k) DO UPDATE SET v = excluded.v RETURNING *;
COMMIT;
-- a newer generation updates, and the fence follows
BEGIN;
SET LOCAL lease_fence.generation = 11;
INSERT INTO kv VALUES ('a', 100) ON CONFLICT (k) DO UPDATE SET v = excluded.v RETURNING *;
-- SET fence = excluded.fence writes the INSERT's fence, which the BEFORE
-- INSERT trigger already set to the current generation: no conflict
INSERT INTO kv VALUES ('b', 200, 5) ON CONFLICT (k) DO UPDATE SET v = excluded.v, fence = excluded.fence RETURNING *;
-- an explicit other value is a conflict
SELECT pg_temp.try($$INSERT INTO kv VALUES ('b', 300) ON CONFLICT (k) DO UPDATE SET v = excluded.v, fence = 99$$);
COMMIT;
-- without a generation (lenient), the upsert's written fence is supplied
SELECT pg_temp.try($$INSERT INTO kv VALUES ('a', 7, 1) ON CONFLICT (k) DO UPDATE SET v = excluded.v, fence = excluded.fence$$);
SELECT * FROM kv ORDER BY k;

------------------------------------------------------------------------------
-- MERGE
------------------------------------------------------------------------------
CREATE TEMP TABLE src (k text, v int, del boolean);
INSERT INTO src VALUES ('a', 1000, false), ('c', 0, true), ('d', 4000, false);
-- a stale MERGE fails as a whole (row a is at 11)
BEGIN;
SET LOCAL lease_fence.generation = 10;
SELECT pg_temp.try($$
MERGE INTO kv USING src ON kv.k = src.k
WHEN MATCHED AND src.del THEN DELETE
WHEN MATCHED THEN UPDATE SET v = src.v
WHEN NOT MATCHED THEN INSERT (k, v) VALUES (src.k, src.v)$$);
COMMIT;
SELECT * FROM kv ORDER BY k;
-- a current one: matched rows updated or deleted, new rows fenced
BEGIN;
SET LOCAL lease_fence.generation = 12;
MERGE INTO kv USING src ON kv.k = src.k
WHEN MATCHED AND src.del THEN DELETE
WHEN MATCHED THEN UPDATE SET v = src.v
WHEN NOT MATCHED THEN INSERT (k, v) VALUES (src.k, src.v);
COMMIT;
SELECT * FROM kv ORDER BY k;
-- DELETE branch alone, stale
BEGIN;
SET LOCAL lease_fence.generation = 11;
SELECT pg_temp.try($$MERGE INTO kv USING (VALUES ('d')) s(k) ON kv.k = s.k WHEN MATCHED THEN DELETE$$);
COMMIT;

------------------------------------------------------------------------------
-- COPY FROM
------------------------------------------------------------------------------
BEGIN;
SET LOCAL lease_fence.generation = 13;
COPY kv (k, v, fence) FROM stdin;
e	5	1
f	6	\N
\.
COMMIT;
-- lenient without a generation keeps the written fence, refuses NULL
COPY kv (k, v, fence) FROM stdin;
g	7	2
\.
SELECT * FROM kv ORDER BY k;
CREATE TABLE kv_strict (k text PRIMARY KEY, v int);
SELECT lease_fence.protect('kv_strict', strict => true);
-- strict: COPY without a generation is refused, and copies nothing
COPY kv_strict (k, v) FROM stdin;
x	1
\.
SELECT count(*) AS copied FROM kv_strict;
COPY kv (k, v, fence) FROM stdin;
h	8	\N
\.
SELECT count(*) AS copied FROM kv WHERE k = 'h';

DROP TABLE kv, kv_strict;

/* lease_fence--1.1--1.2.sql: hardening, unissued generations */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION lease_fence UPDATE TO '1.2'" to load this file. \quit

------------------------------------------------------------------------------
-- Key prefix ownership (one database per key_prefix)
------------------------------------------------------------------------------



------------------------------------------------------------------------------
-- Unissued generations
------------------------------------------------------------------------------



------------------------------------------------------------------------------
-- Other 1.2 additions
------------------------------------------------------------------------------

------------------------------------------------------------------------------
-- Resource fences and failover-safe generations
------------------------------------------------------------------------------

-- A generation carries its epoch in the sequence value (README.md,
-- "Generations across a failover"): pg_dump must keep that value, or a
-- restored database would start again from 1, below what it had issued.
-- Marked as configuration, the sequence's value is dumped (as a setval).
SELECT pg_catalog.pg_extension_config_dump('@extschema@.generation_seq', '');

-- The highest generation each resource was fenced at.  No role has any
-- privilege on it (its owner aside): a direct UPDATE that lowered a stored
-- generation would defeat the fence.  fence_resource() reads and writes it
-- in C, with no privilege check (as next_generation() draws from its
-- sequence) and no query, so no trigger, rule, policy or index expression
-- runs as anybody; everybody reads it through lease_fence.resource_fences.
-- COLLATE "C": resources are compared byte for byte, as Redis compares keys.
CREATE TABLE @extschema@.resource_generation (
	resource text COLLATE "C" PRIMARY KEY,
	generation bigint NOT NULL,
	updated_at timestamptz NOT NULL
);

REVOKE ALL ON @extschema@.resource_generation FROM PUBLIC;

-- the fences survive pg_dump / restore, as the row fences in users' tables do
SELECT pg_catalog.pg_extension_config_dump('@extschema@.resource_generation', '');

CREATE FUNCTION @extschema@.fence_resource(resource text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lf_fence_resource'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.fence_resource(text) IS
'fence a resource in this transaction: LF001 if a higher generation fenced it, else store the current generation and hold the resource to the end of the transaction';

CREATE VIEW @extschema@.resource_fences AS
	SELECT resource, generation, updated_at
	FROM @extschema@.resource_generation;

COMMENT ON VIEW @extschema@.resource_fences IS
'the highest generation each resource was fenced at, and when';

GRANT SELECT ON @extschema@.resource_fences TO PUBLIC;

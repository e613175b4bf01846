/* lease_fence--1.1--1.2.sql: hardening, unissued generations */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION lease_fence UPDATE TO '1.2'" to load this file. \quit

------------------------------------------------------------------------------
-- Key prefix ownership (one database per key_prefix)
------------------------------------------------------------------------------

-- The first acquire on each new Redis connection checks that key_prefix
-- belongs to this database (system identifier and database OID, in the key
-- <key_prefix>owner) and claims it if nobody has; another database's prefix
-- makes acquire "unavailable" with a WARNING.  This takes a prefix over on
-- purpose, e.g. after a dump was restored into a new cluster.  Superusers
-- only: the function checks, and nobody else may execute it.
CREATE FUNCTION @extschema@.claim_key_prefix()
RETURNS text
AS 'MODULE_PATHNAME', 'lf_claim_key_prefix'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.claim_key_prefix() IS
'make lease_fence.key_prefix on the configured Redis belong to this database; returns the previous owner (NULL if none); superuser only';

REVOKE EXECUTE ON FUNCTION @extschema@.claim_key_prefix() FROM PUBLIC;


------------------------------------------------------------------------------
-- Unissued generations
------------------------------------------------------------------------------



------------------------------------------------------------------------------
-- Other 1.2 additions
------------------------------------------------------------------------------


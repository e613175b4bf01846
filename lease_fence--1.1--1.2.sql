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


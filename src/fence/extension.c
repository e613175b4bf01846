/*-------------------------------------------------------------------------
 *
 * extension.c
 *	  The extension's own tables and sequence, found through the extension.
 *
 * The C code reads and writes relations of its own: the generation
 * sequence, the heal budget's sequence, the resource fences' and the
 * checkpoints' tables, the table of protected tables and the table of
 * adoptions.
 * Looking them up by schema and name would find whatever the name resolves
 * to: a role that once owned a schema called lease_fence (one created before
 * CREATE EXTENSION, say) could rename the real one away and put a look-alike
 * in its place, and the C code would draw generations from, or write fences
 * into, objects of that role's choosing.  So each one is found through the
 * extension: the extension's schema (pg_extension.extnamespace, an OID that
 * no rename changes), the name there, and then the proof that the relation
 * found is a member of the extension (pg_depend), which only CREATE
 * EXTENSION and ALTER EXTENSION can make it.
 *
 * The answers are cached per backend and dropped when the relation's
 * relcache entry is invalidated (it was dropped, altered, or the whole
 * cache was reset): the catalog is read again only then.
 *
 * IDENTIFICATION
 *	  src/fence/extension.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/dependency.h"
#include "catalog/indexing.h"
#include "catalog/pg_class.h"
#include "catalog/pg_extension.h"
#include "base/compat.h"
#include "commands/extension.h"
#include "fence/fence.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#define LF_EXTENSION_NAME "lease_fence"

/* what is looked up, in LfOwnRelation order */
static const struct
{
	const char *name;
	char		relkind;
}			own_relations[LF_NUM_OWN_RELATIONS] = {
	[LF_GENERATION_SEQ] = {"generation_seq", RELKIND_SEQUENCE},
	[LF_RESOURCE_GENERATION] = {"resource_generation", RELKIND_RELATION},
	[LF_PROTECTED] = {"protected", RELKIND_RELATION},
	[LF_HEAL_BUDGET_SEQ] = {"heal_budget_seq", RELKIND_SEQUENCE},
	[LF_RESOURCE_CHECKPOINT] = {"resource_checkpoint", RELKIND_RELATION},
	[LF_GENERATION_ADOPTION] = {"generation_adoption", RELKIND_RELATION},
};

/* the cached answers: InvalidOid until looked up */
static Oid	cached[LF_NUM_OWN_RELATIONS];

/* Drop a cached answer whose relation changed (all of them on a reset). */
static void
own_relations_callback(Datum arg, Oid relid)
{
	int			i;

	for (i = 0; i < LF_NUM_OWN_RELATIONS; i++)
		if (relid == InvalidOid || cached[i] == relid)
			cached[i] = InvalidOid;
}

/* Called from _PG_init. */
void
lf_extension_init(void)
{
	CacheRegisterRelcacheCallback(own_relations_callback, (Datum) 0);
}

/*
 * The schema of extension extoid, read from pg_extension (PostgreSQL 15
 * does not export get_extension_schema()).
 */
static Oid
extension_schema(Oid extoid)
{
	Relation	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tuple;
	Oid			nspid = InvalidOid;

	ScanKeyInit(&key, Anum_pg_extension_oid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(extoid));
	scan = systable_beginscan(rel, ExtensionOidIndexId, true, NULL, 1, &key);
	tuple = systable_getnext(scan);
	if (HeapTupleIsValid(tuple))
		nspid = ((Form_pg_extension) GETSTRUCT(tuple))->extnamespace;
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return nspid;
}

/*
 * The OID of one of the extension's own relations: the relation of that
 * name in the extension's schema, if it is a member of the extension and
 * of the expected kind.  With missing_ok, InvalidOid when the extension has
 * no relation of that name (an installation of a version before it was
 * added); anything else is an ERROR: no lease_fence in this database, or
 * something else in its place.
 */
static Oid
own_relation(LfOwnRelation which, bool missing_ok)
{
	const char *name = own_relations[which].name;
	Oid			extoid;
	Oid			nspid;
	Oid			relid;

	if (likely(OidIsValid(cached[which])))
		return cached[which];

	extoid = get_extension_oid(LF_EXTENSION_NAME, true);
	if (!OidIsValid(extoid))
		ereport(ERROR,
				errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				errmsg("extension \"%s\" is not installed in this database", LF_EXTENSION_NAME),
				errhint("Run CREATE EXTENSION lease_fence in this database."));
	nspid = extension_schema(extoid);
	relid = OidIsValid(nspid) ? get_relname_relid(name, nspid) : InvalidOid;
	if (!OidIsValid(relid))
	{
		if (missing_ok)
			return InvalidOid;
		ereport(ERROR,
				errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				errmsg("relation \"%s\" of extension \"%s\" does not exist", name, LF_EXTENSION_NAME),
				errhint("Run ALTER EXTENSION lease_fence UPDATE."));
	}
	if (get_rel_relkind(relid) != own_relations[which].relkind ||
		getExtensionOfObject(RelationRelationId, relid) != extoid)
		ereport(ERROR,
				errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				errmsg("relation \"%s\" in the schema of extension \"%s\" is not the extension's own",
					   name, LF_EXTENSION_NAME),
				errdetail("It is not a member of the extension, or not of the kind the extension created."),
				errhint("Someone replaced it: drop it and run DROP EXTENSION and CREATE EXTENSION lease_fence again."));
	cached[which] = relid;
	return relid;
}

Oid
lf_own_relation(LfOwnRelation which)
{
	return own_relation(which, false);
}

/* ... or InvalidOid when this installation's version has none of that name */
Oid
lf_own_relation_if_present(LfOwnRelation which)
{
	return own_relation(which, true);
}

/*
 * May the current user act for the extension: a superuser, or the role
 * that owns it (the portable edition's installer, say)?
 */
bool
lf_is_extension_owner(void)
{
	Oid			extoid = get_extension_oid(LF_EXTENSION_NAME, false);

	return superuser() || lf_extension_ownercheck(extoid, GetUserId());
}

/*
 * The error fields of a resource fence's rejection: schema and table of
 * lease_fence.resource_generation, and the resource as the constraint name
 * (what psycopg's diag.constraint_name, node-postgres' err.constraint and
 * pgjdbc's ServerErrorMessage.getConstraint() read).  The table is named
 * only once this backend has found it (lf_own_relation()): an error path
 * does not look it up.
 */
int
lf_errresource(const char *resource)
{
	Oid			relid = cached[LF_RESOURCE_GENERATION];

	if (OidIsValid(relid))
	{
		char	   *nsp = get_namespace_name(get_rel_namespace(relid));
		char	   *rel = get_rel_name(relid);

		if (nsp != NULL && rel != NULL)
		{
			err_generic_string(PG_DIAG_SCHEMA_NAME, nsp);
			err_generic_string(PG_DIAG_TABLE_NAME, rel);
		}
	}
	return err_generic_string(PG_DIAG_CONSTRAINT_NAME, resource);
}

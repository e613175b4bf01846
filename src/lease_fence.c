/*-------------------------------------------------------------------------
 *
 * lease_fence.c
 *	  Module entry point, and the current generation: the GUC
 *	  lease_fence.generation with set_generation() and current_generation()
 *	  on top of it.
 *
 * The current generation is what the fence trigger compares with the stored
 * fence.  It is a GUC so that every client can set it with plain
 * "SET LOCAL lease_fence.generation = 42", and so that it follows the GUC
 * rules of transactions and subtransactions for free.  GUCs have no 64-bit
 * integer type, so it is a string GUC whose check hook parses it once; the
 * trigger reads the parsed value from two static variables.
 *
 * IDENTIFICATION
 *	  src/lease_fence.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <errno.h>
#include <stdlib.h>

#include "fmgr.h"
#include "lease_fence.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/guc.h"

PG_MODULE_MAGIC;

bool		lf_generation_is_set = false;
int64		lf_generation = 0;

static char *lf_generation_string = NULL;

/* what the check hook hands to the assign hook */
typedef struct GenerationExtra
{
	bool		is_set;
	int64		value;
} GenerationExtra;

PG_FUNCTION_INFO_V1(lf_set_generation);
PG_FUNCTION_INFO_V1(lf_current_generation);

void		_PG_init(void);

/*
 * Parse a generation: empty means "not set", otherwise a non-negative
 * decimal bigint with optional surrounding blanks.  Returns false on
 * anything else, without throwing (check hooks must not).
 */
static bool
parse_generation(const char *s, bool *is_set, int64 *value)
{
	char	   *end;
	int64		v;

	while (*s == ' ' || *s == '\t')
		s++;
	if (*s == '\0')
	{
		*is_set = false;
		*value = 0;
		return true;
	}
	if (*s < '0' || *s > '9')
		return false;			/* no sign, no hex, no junk */
	errno = 0;
	v = strtoi64(s, &end, 10);
	if (errno != 0 || end == s)
		return false;
	while (*end == ' ' || *end == '\t')
		end++;
	if (*end != '\0')
		return false;
	*is_set = true;
	*value = v;
	return true;
}

/* GUC check hook: reject what is not a generation, hand the parsed value on */
static bool
check_generation(char **newval, void **extra, GucSource source)
{
	GenerationExtra *parsed;
	bool		is_set;
	int64		value;

	if (!parse_generation(*newval ? *newval : "", &is_set, &value))
	{
		GUC_check_errcode(ERRCODE_INVALID_PARAMETER_VALUE);
		GUC_check_errdetail("A generation is a non-negative bigint, or empty for none.");
		return false;
	}
	parsed = (GenerationExtra *) malloc(sizeof(GenerationExtra));
	if (parsed == NULL)
		return false;
	parsed->is_set = is_set;
	parsed->value = value;
	*extra = parsed;
	return true;
}

/* GUC assign hook: publish the parsed value to the fence trigger */
static void
assign_generation(const char *newval, void *extra)
{
	GenerationExtra *parsed = (GenerationExtra *) extra;

	lf_generation_is_set = parsed->is_set;
	lf_generation = parsed->value;
}

/*
 * Define lease_fence.generation.  USERSET: it is the session's claim of which
 * lease it writes under, not a privilege; the fence makes a false claim
 * harmless for everyone holding a higher generation.
 */
void
lf_define_generation_guc(void)
{
	DefineCustomStringVariable(LF_GENERATION_GUC,
							   "Current generation (fencing token) that fenced writes carry.",
							   "Empty means none.  Usually set with SET LOCAL or lease_fence.set_generation().",
							   &lf_generation_string,
							   "",
							   PGC_USERSET,
							   GUC_NOT_IN_SAMPLE,
							   check_generation,
							   assign_generation,
							   NULL);
}

/* Module load: define the GUCs and reserve our prefix. */
void
_PG_init(void)
{
	lf_define_generation_guc();

	MarkGUCPrefixReserved("lease_fence");
}

/*
 * lease_fence.set_generation(generation bigint, is_local boolean DEFAULT true)
 *
 * set_config() for lease_fence.generation, with the types checked.  NULL is
 * an error, not "clear": a caller that passes the generation of a lease it
 * did not get must not silently write unfenced.  RESET clears it.
 */
Datum
lf_set_generation(PG_FUNCTION_ARGS)
{
	int64		generation;
	bool		is_local;
	char		buf[32];

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				errmsg("generation must not be NULL"),
				errhint("To clear the current generation, use RESET %s.", LF_GENERATION_GUC));
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				errmsg("is_local must not be NULL"));

	generation = PG_GETARG_INT64(0);
	is_local = PG_GETARG_BOOL(1);

	if (generation < 0)
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("generation must not be negative"),
				errdetail("The generation given was " INT64_FORMAT ".", generation));

	snprintf(buf, sizeof(buf), INT64_FORMAT, generation);
	(void) set_config_option(LF_GENERATION_GUC, buf,
							 superuser() ? PGC_SUSET : PGC_USERSET,
							 PGC_S_SESSION,
							 is_local ? GUC_ACTION_LOCAL : GUC_ACTION_SET,
							 true, 0, false);

	PG_RETURN_INT64(generation);
}

/* lease_fence.current_generation(): the current generation, or NULL */
Datum
lf_current_generation(PG_FUNCTION_ARGS)
{
	if (!lf_generation_is_set)
		PG_RETURN_NULL();
	PG_RETURN_INT64(lf_generation);
}

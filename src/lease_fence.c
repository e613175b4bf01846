/*-------------------------------------------------------------------------
 *
 * lease_fence.c
 *	  Module entry point: _PG_init, and nothing else.
 *
 * The module's entry, on top of the layers: it calls each module's init
 * function, and no file calls it.
 * Each module defines its own settings, next to their storage, and
 * installs its own hooks.
 *
 * IDENTIFICATION
 *	  src/lease_fence.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fence/fence.h"
#include "fmgr.h"
#include "lease/lease.h"
#include "redis/redis.h"
#include "base/stats.h"
#include "utils/guc.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

/*
 * Module load: each module defines its settings and installs its hooks,
 * lowest layer first; then our prefix is reserved, once every setting is
 * defined.
 */
void
_PG_init(void)
{
	/* layer 0 */
	lf_latency_init();
	lf_stats_init();

	/* layer 1: the fence */
	lf_current_generation_init();
	lf_extension_init();
	lf_generation_init();
	lf_adopt_init();

	/* layer 2: Redis */
	lf_redis_settings_init();
	lf_watch_init();
	lf_scripts_init();

	/* layer 3: leases */
	lf_keepalive_init();
	lf_table_init();
	lf_registry_init();

	/*
	 * Last: reserving the prefix removes every placeholder that is not a
	 * setting by now, also the value postgresql.conf gave a setting that a
	 * module above defines only later.
	 */
	MarkGUCPrefixReserved("lease_fence");
}

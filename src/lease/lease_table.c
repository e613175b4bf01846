/*-------------------------------------------------------------------------
 *
 * lease_table.c
 *	  The cluster-wide lease table: one slot per lease any backend holds, in
 *	  shared memory, which lease_fence.all_leases shows as pg_locks shows
 *	  locks, and holder() reads for the pid and database of a holder.
 *
 * Each backend writes only its own slots (lease_registry.c: one call where a
 * lease is registered, changes state, and is forgotten), but for one atomic
 * field, how far another backend's renew extended the lease
 * (lf_table_note_renewal); readers take no lock.  A slot is claimed with a compare-and-swap of its owner (0: free),
 * from a hint that moves round the table, and written under its change
 * count, as PostgreSQL writes a backend's pg_stat_activity entry: odd while
 * the owner writes, so that a reader copies the slot and keeps the copy
 * only if the count was even and unchanged across it.  The acquire path
 * pays a compare-and-swap and the copy of the resource name.
 *
 * The table exists only when lease_fence is in shared_preload_libraries;
 * it has lease_fence.max_tracked_leases slots (PGC_POSTMASTER).  A lease
 * that finds no free slot is counted (stats: all_leases / overflow) and not
 * shown; the acquire is never refused for it.  Without the table,
 * all_leases shows the calling session's own leases (lease_registry.c).
 *
 * No database and no role may take more than its share of the slots,
 * lease_fence.max_tracked_leases_share percent (half by default): one role
 * that acquires without end, with nothing but the acquire grant, must not
 * push every other database's leases out of all_leases and holder().  The
 * slots each database and each role has are counted in a small shared hash
 * under one LWLock, taken where a slot is claimed and where it is freed; a
 * lease beyond its share is counted (all_leases / capped) and not shown,
 * and its acquire is never refused for it either.
 *
 * IDENTIFICATION
 *	  src/lease/lease_table.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_authid.h"
#include "commands/dbcommands.h"
#include "fence/fence.h"
#include "lease/internal.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "base/stats.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"

/* the table's size: lease_fence.max_tracked_leases */
int			lf_max_tracked_leases = 1024;

/* the most one database, or one role, may take of it, in percent */
int			lf_max_tracked_leases_share = 50;

/* one lease, as the backend that holds it last wrote it */
typedef struct LeaseSlot
{
	pg_atomic_uint32 owner;		/* the owner's pid; 0: free */
	pg_atomic_uint32 changecount;	/* odd while its owner writes it */
	pg_atomic_uint32 taken_by;	/* take_over(): the taker's pid; 0: not taken */
	int			pid;
	Oid			dboid;
	Oid			roleid;			/* the role that acquired it */
	int64		generation;		/* 0: a release of another session's lease */
	uint8		scope;			/* LeaseScope */
	uint8		state;			/* LeaseState */
	TimestampTz acquired_at;
	TimestampTz expires_at;
	char		identity[33];
	char		resource[LF_MAX_RESOURCE + 1];

	/*
	 * lf_now_ms() until which a renew made by another backend extended the
	 * lease (0: none).  The one field any backend writes (an atomic
	 * maximum, lf_table_note_renewal); its owner reads it when it decides
	 * that a lease of its idle transaction ran out (idle_expiry.c).
	 */
	pg_atomic_uint64 renewed_until;
} LeaseSlot;

typedef struct LeaseTable
{
	pg_atomic_uint32 hint;		/* where the next claim starts looking */
	pg_atomic_uint32 used;		/* slots claimed */
	LeaseSlot	slots[FLEXIBLE_ARRAY_MEMBER];
} LeaseTable;

/*
 * The slots one database or one role holds: a key of each kind per slot
 * (SHARE_KEY), so at most two entries per slot, and more only for the
 * moment between a share taken and its slot found.
 */
#define SHARE_DATABASE	UINT64CONST(1)
#define SHARE_ROLE		UINT64CONST(2)
#define SHARE_KEY(kind, oid) (((kind) << 32) | (uint64) (oid))

typedef struct ShareEntry
{
	uint64		key;			/* SHARE_KEY(kind, oid): the hash key */
	int32		slots;			/* slots held (and shares taken) */
} ShareEntry;

/*
 * The table and its shares in shared memory, as this process attached
 * them.  File-scope: set up once per process (the shmem startup hook).
 */
static struct
{
	LeaseTable *table;
	int			size;
	HTAB	   *shares;
	LWLock	   *shares_lock;
} shm;

/* this backend's exit hook is registered (once per process) */
static bool exit_hook_registered = false;

/* the hooks this module chained (once per process, _PG_init) */
static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* constants: what lease_fence.all_leases shows for each scope and state */
/* the names of LeaseScope and LeaseState as the views show them (internal.h) */
const char *const lf_scope_names[] = {"explicit", "session", "transaction"};
const char *const lf_state_names[] = {"held", "unknown", "unconfirmed", "released", "lost", "waiting"};

static Size
table_bytes(void)
{
	return add_size(offsetof(LeaseTable, slots),
					mul_size(sizeof(LeaseSlot), (Size) lf_max_tracked_leases));
}

/* the entries of the share hash: two per slot, and room for claims under way */
static long
share_entries(void)
{
	return 2 * (long) lf_max_tracked_leases + 64;
}

static void
table_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(table_bytes()));
	RequestAddinShmemSpace(hash_estimate_size(share_entries(), sizeof(ShareEntry)));
	RequestNamedLWLockTranche("lease_fence lease table", 1);
}

static void
table_shmem_startup(void)
{
	bool		found;
	int			i;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shm.table = ShmemInitStruct("lease_fence lease table", table_bytes(), &found);
	if (!found)
	{
		pg_atomic_init_u32(&shm.table->hint, 0);
		pg_atomic_init_u32(&shm.table->used, 0);
		for (i = 0; i < lf_max_tracked_leases; i++)
		{
			pg_atomic_init_u32(&shm.table->slots[i].owner, 0);
			pg_atomic_init_u32(&shm.table->slots[i].changecount, 0);
			pg_atomic_init_u32(&shm.table->slots[i].taken_by, 0);
			pg_atomic_init_u64(&shm.table->slots[i].renewed_until, 0);
		}
	}
	shm.size = lf_max_tracked_leases;
	{
		HASHCTL		info;

		memset(&info, 0, sizeof(info));
		info.keysize = sizeof(uint64);
		info.entrysize = sizeof(ShareEntry);
		shm.shares = ShmemInitHash("lease_fence lease table shares", share_entries(), share_entries(),
							   &info, HASH_ELEM | HASH_BLOBS | HASH_FIXED_SIZE);
	}
	shm.shares_lock = &(GetNamedLWLockTranche("lease_fence lease table"))->lock;
	LWLockRelease(AddinShmemInitLock);
}

/*
 * How many slots one database, or one role, may hold:
 * max_tracked_leases_share percent of the table, at least one.
 */
static int32
share_cap(void)
{
	int64		cap = (int64) shm.size * lf_max_tracked_leases_share / 100;

	return (int32) Max(cap, 1);
}

/* The entry of key, or NULL; entered (with 0 slots) when enter is true. */
static ShareEntry *
share_entry(uint64 key, bool enter)
{
	bool		found;
	ShareEntry *se = hash_search(shm.shares, &key, enter ? HASH_ENTER_NULL : HASH_FIND, &found);

	if (se != NULL && !found)
		se->slots = 0;
	return se;
}

/* Give back one slot of the entry key; the entry goes when none is left. */
static void
share_put(uint64 key)
{
	ShareEntry *se = share_entry(key, false);

	if (se == NULL)
		return;
	if (--se->slots <= 0)
		hash_search(shm.shares, &key, HASH_REMOVE, NULL);
}

/*
 * Take one slot's share for database dboid and role roleid, unless either
 * already has max_tracked_leases_share of the table (or the hash has no
 * room: it is sized so that it always has).  Under the LWLock, so that no
 * two backends of one database both take the last share.
 */
static bool
share_take(Oid dboid, Oid roleid)
{
	uint64		dbkey = SHARE_KEY(SHARE_DATABASE, dboid);
	uint64		rolekey = SHARE_KEY(SHARE_ROLE, roleid);
	int32		cap = share_cap();
	ShareEntry *db;
	ShareEntry *role;
	bool		taken = false;

	LWLockAcquire(shm.shares_lock, LW_EXCLUSIVE);
	db = share_entry(dbkey, true);
	role = db != NULL ? share_entry(rolekey, true) : NULL;
	if (db != NULL && role != NULL && db->slots < cap && role->slots < cap)
	{
		db->slots++;
		role->slots++;
		taken = true;
	}
	else
	{
		/* an entry entered just now holds nothing: remove it again */
		if (role != NULL && role->slots == 0)
			hash_search(shm.shares, &rolekey, HASH_REMOVE, NULL);
		if (db != NULL && db->slots == 0)
			hash_search(shm.shares, &dbkey, HASH_REMOVE, NULL);
	}
	LWLockRelease(shm.shares_lock);
	return taken;
}

/* Give back the share of one slot of database dboid and role roleid. */
static void
share_give(Oid dboid, Oid roleid)
{
	LWLockAcquire(shm.shares_lock, LW_EXCLUSIVE);
	share_put(SHARE_KEY(SHARE_DATABASE, dboid));
	share_put(SHARE_KEY(SHARE_ROLE, roleid));
	LWLockRelease(shm.shares_lock);
}

/* Does the cluster-wide table exist (lease_fence preloaded)? */
bool
lf_table_active(void)
{
	return shm.table != NULL;
}

/* Write e's fields into its slot, under the slot's change count. */
static void
write_slot(LeaseSlot *s, const LeaseEntry *e, bool whole)
{
	/* only its owner writes a slot: no read-modify-write needed */
	uint32		count = pg_atomic_read_u32(&s->changecount);

	pg_atomic_write_u32(&s->changecount, count + 1);
	pg_write_barrier();
	if (whole)
	{
		/* a resource is at most LF_MAX_RESOURCE bytes (lease.c refuses longer) */
		size_t		len = Min(strlen(e->resource), (size_t) LF_MAX_RESOURCE);

		s->pid = MyProcPid;
		s->dboid = MyDatabaseId;
		s->roleid = e->role;
		s->acquired_at = e->acquired_at;
		pg_atomic_write_u64(&s->renewed_until, 0);
		memcpy(s->identity, e->identity, sizeof(s->identity));
		memcpy(s->resource, e->resource, len);
		s->resource[len] = '\0';
	}
	s->generation = e->generation;
	s->scope = (uint8) e->scope;
	s->state = (uint8) e->state;
	s->expires_at = e->expires_at;
	pg_write_barrier();
	pg_atomic_write_u32(&s->changecount, count + 2);
}

/* Backend exit: free every slot this backend still has. */
static void
free_own_slots(int code, Datum arg)
{
	int			i;

	if (shm.table == NULL)
		return;
	for (i = 0; i < shm.size; i++)
	{
		LeaseSlot  *s = &shm.table->slots[i];
		uint32		pid = (uint32) MyProcPid;

		/* (its database and role: written by this backend, read before it goes) */
		if (pg_atomic_read_u32(&s->owner) == pid)
		{
			Oid			dboid = s->dboid;
			Oid			roleid = s->roleid;

			if (pg_atomic_compare_exchange_u32(&s->owner, &pid, 0))
			{
				pg_atomic_fetch_sub_u32(&shm.table->used, 1);
				share_give(dboid, roleid);
			}
		}
	}
}

/*
 * A lease was added to this session's registry: give it a slot, or count
 * it as not shown when the table is full or its database or its role has
 * its share of the table already.  Never an error.
 */
void
lf_table_register(LeaseEntry *e)
{
	uint32		start;
	int			i;

	e->table_slot = -1;
	if (shm.table == NULL)
		return;
	if (pg_atomic_read_u32(&shm.table->used) >= (uint32) shm.size)
	{
		lf_count(LF_C_ALL_LEASES_OVERFLOW);
		return;
	}
	if (!exit_hook_registered)
	{
		on_shmem_exit(free_own_slots, (Datum) 0);
		exit_hook_registered = true;
	}
	if (!share_take(MyDatabaseId, e->role))
	{
		lf_count(LF_C_ALL_LEASES_CAPPED);
		return;
	}
	start = pg_atomic_fetch_add_u32(&shm.table->hint, 1);
	for (i = 0; i < shm.size; i++)
	{
		int			n = (int) ((start + (uint32) i) % (uint32) shm.size);
		LeaseSlot  *s = &shm.table->slots[n];
		uint32		free_owner = 0;

		if (pg_atomic_read_u32(&s->owner) != 0 ||
			!pg_atomic_compare_exchange_u32(&s->owner, &free_owner, (uint32) MyProcPid))
			continue;
		pg_atomic_fetch_add_u32(&shm.table->used, 1);
		pg_atomic_write_u32(&s->taken_by, 0);
		write_slot(s, e, true);
		e->table_slot = n;
		return;
	}
	share_give(MyDatabaseId, e->role);
	lf_count(LF_C_ALL_LEASES_OVERFLOW);
}

/* e's state, generation or validity changed: its slot shows it. */
void
lf_table_update(LeaseEntry *e)
{
	if (shm.table == NULL || e->table_slot < 0)
		return;
	write_slot(&shm.table->slots[e->table_slot], e, false);
}

/* e was released or dropped from the registry: its slot is free again. */
void
lf_table_forget(LeaseEntry *e)
{
	LeaseSlot  *s;

	if (shm.table == NULL || e->table_slot < 0)
		return;
	s = &shm.table->slots[e->table_slot];
	e->table_slot = -1;
	pg_atomic_write_u32(&s->owner, 0);
	pg_atomic_fetch_sub_u32(&shm.table->used, 1);
	share_give(MyDatabaseId, e->role);
}

/*
 * May the current user see the identity of a lease that holder_role
 * acquired?  The rule of pg_stat_activity's query column: a member of that
 * role (so the role itself and superusers) or of pg_read_all_stats.  An
 * identity is a capability: it renews and releases the lease.
 */
bool
lf_may_see_identity(Oid holder_role)
{
	Oid			me = GetUserId();

	return has_privs_of_role(me, holder_role) ||
		has_privs_of_role(me, ROLE_PG_READ_ALL_STATS);
}

/* One row of all_leases. */
static void
put_row(ReturnSetInfo *rsinfo, const LeaseSlot *s, const char *ka_state)
{
	Datum		values[11];
	bool		nulls[11];
	char	   *dbname;
	char	   *rolname;
	bool		lost = s->state == STATE_LOST ||
		(s->state == STATE_HELD && ka_state != NULL && strcmp(ka_state, "lost") == 0);

	memset(nulls, 0, sizeof(nulls));
	values[0] = Int32GetDatum(s->pid);
	dbname = get_database_name(s->dboid);
	values[1] = dbname ? CStringGetTextDatum(dbname) : (Datum) 0;
	nulls[1] = dbname == NULL;
	rolname = GetUserNameFromId(s->roleid, true);
	values[2] = rolname ? CStringGetTextDatum(rolname) : (Datum) 0;
	nulls[2] = rolname == NULL;
	values[3] = CStringGetTextDatum(s->resource);
	if (lf_may_see_identity(s->roleid))
		values[4] = CStringGetTextDatum(s->identity);
	else
		nulls[4] = true;
	values[5] = Int64GetDatum(s->generation);
	nulls[5] = s->generation == 0;
	values[6] = CStringGetTextDatum(lf_scope_names[s->scope]);
	values[7] = CStringGetTextDatum(lost ? "lost" : lf_state_names[s->state]);
	values[8] = BoolGetDatum(ka_state != NULL);
	values[9] = TimestampTzGetDatum(s->acquired_at);
	values[10] = TimestampTzGetDatum(s->expires_at);
	nulls[10] = s->state != STATE_HELD && s->state != STATE_LOST;
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/*
 * A consistent copy of slot n into *out, or false when it is free.  Retries
 * while its owner writes it (a few stores: the wait is short).
 */
static bool
read_slot(int n, LeaseSlot *out)
{
	LeaseSlot  *s = &shm.table->slots[n];

	for (;;)
	{
		uint32		before;
		uint32		after;

		if (pg_atomic_read_u32(&s->owner) == 0)
			return false;
		before = pg_atomic_read_u32(&s->changecount);
		pg_read_barrier();
		memcpy(out, s, sizeof(LeaseSlot));
		pg_read_barrier();
		after = pg_atomic_read_u32(&s->changecount);
		if (before == after && (before & 1) == 0)
			break;
		CHECK_FOR_INTERRUPTS();
	}
	out->identity[sizeof(out->identity) - 1] = '\0';
	out->resource[sizeof(out->resource) - 1] = '\0';
	/* freed while we copied it: not a lease any more */
	return pg_atomic_read_u32(&s->owner) != 0;
}

/*
 * The rows of all_leases from the table: every lease of every backend,
 * except an explicit one past its local validity (its key has expired in
 * Redis, or it was renewed by another backend, which shows its own).
 */
void
lf_table_rows(ReturnSetInfo *rsinfo)
{
	LeaseSlot  *copy = palloc(sizeof(LeaseSlot));
	TimestampTz now = GetCurrentTimestamp();
	int			i;

	for (i = 0; i < shm.size; i++)
	{
		if (!read_slot(i, copy))
			continue;
		if (copy->state == STATE_RELEASED ||
			(copy->state == STATE_HELD && copy->scope == SCOPE_EXPLICIT && copy->expires_at < now))
			continue;
		put_row(rsinfo, copy, lf_keepalive_state_of(copy->identity));
	}
	pfree(copy);
}

/*
 * The rows of all_leases without the table: this session's leases, as the
 * registry holds them (lease_registry.c).
 */
void
lf_table_put_entry(ReturnSetInfo *rsinfo, const LeaseEntry *e)
{
	LeaseSlot  *s = palloc0(sizeof(LeaseSlot));

	s->pid = MyProcPid;
	s->dboid = MyDatabaseId;
	s->roleid = e->role;
	s->generation = e->generation;
	s->scope = (uint8) e->scope;
	s->state = (uint8) e->state;
	s->acquired_at = e->acquired_at;
	s->expires_at = e->expires_at;
	strlcpy(s->identity, e->identity, sizeof(s->identity));
	strlcpy(s->resource, e->resource, sizeof(s->resource));
	put_row(rsinfo, s, lf_keepalive_state_of(e->identity));
	pfree(s);
}

/*
 * Does a backend of this cluster hold resource under identity (or wait for
 * it in a fair queue under that identity)?  Its pid, database, role and
 * since when, if so (holder(), leader(), queue()).
 */
bool
lf_table_holder(const char *resource, const char *identity, int *pid, Oid *dboid, Oid *roleid,
				TimestampTz *since)
{
	LeaseSlot  *copy;
	int			i;
	bool		found = false;

	if (shm.table == NULL)
		return false;
	copy = palloc(sizeof(LeaseSlot));
	for (i = 0; i < shm.size && !found; i++)
	{
		/* a first look, unlocked, at the identity only: copy just the candidates */
		if (pg_atomic_read_u32(&shm.table->slots[i].owner) == 0 ||
			strncmp(shm.table->slots[i].identity, identity, sizeof(copy->identity) - 1) != 0)
			continue;
		if (!read_slot(i, copy) || copy->state == STATE_RELEASED ||
			strcmp(copy->identity, identity) != 0 || strcmp(copy->resource, resource) != 0)
			continue;
		*pid = copy->pid;
		*dboid = copy->dboid;
		*roleid = copy->roleid;
		*since = copy->acquired_at;
		found = true;
	}
	pfree(copy);
	return found;
}

/*
 * A renew by this backend extended another backend's lease of this cluster
 * until valid_until (lf_now_ms(), a clock every process shares): its slot
 * says so, so that its owner does not end its idle transaction for a lease
 * that a second connection of the same client keeps renewed
 * (idle_expiry.c).  Without the table, nobody learns it.
 */
void
lf_table_note_renewal(const char *resource, const char *identity, int64 valid_until)
{
	LeaseSlot  *copy;
	int			i;

	if (shm.table == NULL)
		return;
	copy = palloc(sizeof(LeaseSlot));
	for (i = 0; i < shm.size; i++)
	{
		LeaseSlot  *s = &shm.table->slots[i];
		uint64		old;

		if (pg_atomic_read_u32(&s->owner) == 0 ||
			strncmp(s->identity, identity, sizeof(copy->identity) - 1) != 0)
			continue;
		if (!read_slot(i, copy) || copy->state == STATE_RELEASED ||
			strcmp(copy->identity, identity) != 0 || strcmp(copy->resource, resource) != 0)
			continue;
		old = pg_atomic_read_u64(&s->renewed_until);
		while (old < (uint64) valid_until &&
			   !pg_atomic_compare_exchange_u64(&s->renewed_until, &old, (uint64) valid_until))
			;
		break;
	}
	pfree(copy);
}

/*
 * Until when did another backend's renew extend the lease in this
 * backend's slot, while that slot still holds identity (0: not known).
 * Only reads: safe in a signal handler.
 */
int64
lf_table_renewed_until(int slot, const char *identity)
{
	LeaseSlot  *s;

	if (shm.table == NULL || slot < 0 || slot >= shm.size)
		return 0;
	s = &shm.table->slots[slot];
	if (pg_atomic_read_u32(&s->owner) != (uint32) MyProcPid ||
		strncmp(s->identity, identity, sizeof(s->identity)) != 0)
		return 0;
	return (int64) pg_atomic_read_u64(&s->renewed_until);
}

/*
 * What holder() and leader() show of the holder of resource under identity
 * (a backend of this cluster, if the table shows it): its pid and database,
 * and whether the current user may see its identity -- all_leases' rule for
 * a holder in the table, superusers and pg_read_all_stats for any other.
 */
void
lf_show_holder(const char *resource, const char *identity, LfShownHolder *out)
{
	Oid			dboid = InvalidOid;
	Oid			roleid = InvalidOid;

	out->pid = 0;
	out->dbname = NULL;
	out->since = 0;
	out->in_table = lf_table_holder(resource, identity, &out->pid, &dboid, &roleid, &out->since);
	out->identity_visible = out->in_table ? lf_may_see_identity(roleid) :
		has_privs_of_role(GetUserId(), ROLE_PG_READ_ALL_STATS);
	if (out->in_table)
		out->dbname = get_database_name(dboid);
}

/*
 * take_over() took resource from identity: mark the lease lost to its
 * holder, if a backend of this cluster holds it (its next fenced write
 * under it, and its COMMIT after one, see it: lf_table_taken_by).  Returns
 * that backend's pid, or 0.
 */
int
lf_table_take(const char *resource, const char *identity)
{
	LeaseSlot  *copy;
	int			i;
	int			pid = 0;

	if (shm.table == NULL)
		return 0;
	copy = palloc(sizeof(LeaseSlot));
	for (i = 0; i < shm.size && pid == 0; i++)
	{
		LeaseSlot  *s = &shm.table->slots[i];

		if (pg_atomic_read_u32(&s->owner) == 0 ||
			strncmp(s->identity, identity, sizeof(copy->identity) - 1) != 0)
			continue;
		if (!read_slot(i, copy) || copy->state == STATE_RELEASED ||
			strcmp(copy->identity, identity) != 0 || strcmp(copy->resource, resource) != 0)
			continue;
		pg_atomic_write_u32(&s->taken_by, (uint32) MyProcPid);
		pid = copy->pid;
	}
	pfree(copy);
	return pid;
}

/* The pid of the take_over() that took e from this session; 0: none. */
int
lf_table_taken_by(const LeaseEntry *e)
{
	if (shm.table == NULL || e->table_slot < 0)
		return 0;
	return (int) pg_atomic_read_u32(&shm.table->slots[e->table_slot].taken_by);
}

/* Called from _PG_init. */
void
lf_table_init(void)
{
	/*
	 * Defined wherever the library loads, so that it can be read and set
	 * as every other setting; only the table, which needs preloading, uses
	 * it.
	 */
	DefineCustomIntVariable("lease_fence.max_tracked_leases_share",
							"The most of max_tracked_leases, in percent, that the leases of one database, or of one role, may take.",
							"So that one database or role cannot push every other one's leases out of all_leases; a lease beyond it is counted in stats (all_leases / capped), never refused. 100: no limit but the table's.",
							&lf_max_tracked_leases_share, 50, 1, 100,
							PGC_SIGHUP, 0, NULL, NULL, NULL);

	/*
	 * A PGC_POSTMASTER setting can only be defined while the libraries of
	 * shared_preload_libraries load: without preloading it does not exist,
	 * as pg_stat_statements.max does not.
	 */
	if (!process_shared_preload_libraries_in_progress)
		return;
	DefineCustomIntVariable("lease_fence.max_tracked_leases",
							"How many leases lease_fence.all_leases can show, cluster-wide.",
							"Each takes about 1.1 kB of shared memory; a lease beyond it is counted in stats (all_leases / overflow), never refused.",
							&lf_max_tracked_leases, 1024, 1, 1000000,
							PGC_POSTMASTER, 0, NULL, NULL, NULL);
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = table_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = table_shmem_startup;
}

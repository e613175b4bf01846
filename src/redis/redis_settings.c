/*-------------------------------------------------------------------------
 *
 * redis_settings.c
 *	  Every setting of the Redis layer: where Redis is (a server, the
 *	  sentinels, a cluster), how to reach it (TLS, AUTH, the database), how
 *	  long to wait, how many replicas must acknowledge a grant, and the key
 *	  layout; the version that changes when any setting deciding the server
 *	  does, the fingerprint the keep-alive worker compares, and the reader of
 *	  secret files (the password, the TLS key).
 *
 * It calls nothing of lease_fence's.  Where Redis lives is
 * superuser-only, so that no other role can point the server's network
 * connections at a host of its choosing; the timeouts are each user's
 * choice, within bounds.
 *
 * IDENTIFICATION
 *	  src/redis/redis_settings.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include "redis/internal.h"
#include "storage/fd.h"
#include "utils/guc.h"

/* where Redis is (superuser-only settings) */
char	   *lf_redis_host = NULL;
int			lf_redis_port = 6379;
char	   *lf_redis_socket = NULL;
int			lf_redis_db = 0;
char	   *lf_redis_user = NULL;
char	   *lf_redis_password_file = NULL;

/* how long to wait (each user's choice, within bounds) */
int			lf_connect_timeout_ms = 1000;
int			lf_command_timeout_ms = 1000;
int			lf_cleanup_timeout_ms = 500;

/* TLS (superuser-only, named like libpq's) */
const struct config_enum_entry lf_sslmode_options[] = {
	{"disable", LF_SSL_DISABLE, false},
	{"require", LF_SSL_REQUIRE, false},
	{"verify-ca", LF_SSL_VERIFY_CA, false},
	{"verify-full", LF_SSL_VERIFY_FULL, false},
	{NULL, 0, false}
};

int			lf_redis_sslmode = LF_SSL_DISABLE;
char	   *lf_redis_sslrootcert = NULL;
char	   *lf_redis_sslcert = NULL;
char	   *lf_redis_sslkey = NULL;

/* the topology (superuser-only settings) */
char	   *lf_sentinels = NULL;
char	   *lf_sentinel_master = NULL;
char	   *lf_sentinel_user = NULL;
char	   *lf_sentinel_password_file = NULL;
bool		lf_cluster = false;

/* replication safety of a grant (superuser-only, per database) */
int			lf_min_replicas = 0;
int			lf_replica_timeout_ms = 1000;

/* the key layout (superuser-only settings) */
char	   *lf_key_prefix = NULL;
int			lf_gen_key_ttl_s = 604800;

/*
 * Bumped by the assign hook of every setting that decides the server: a
 * cached answer (a connection's cache entry, the master the sentinels
 * named, the slot map) stays good while it stays.
 */
static uint64 settings_version = 1;

static void
redis_string_changed(const char *newval, void *extra)
{
	settings_version++;
}

static void
redis_int_changed(int newval, void *extra)
{
	settings_version++;
}

static void
redis_bool_changed(bool newval, void *extra)
{
	settings_version++;
}

/* changes whenever a setting that decides the server does */
uint64
lf_redis_settings_version(void)
{
	return settings_version;
}

/*
 * Split "host:port" (the port after the last colon; a host may be an IPv6
 * address in brackets) into host and *port.  False if it is not one.
 */
bool
lf_parse_host_port(const char *s, size_t len, char *host, size_t hostlen, int *port)
{
	const char *colon = NULL;
	const char *h = s;
	size_t		hlen;
	long		p = 0;
	size_t		i;

	for (i = 0; i < len; i++)
		if (s[i] == ':')
			colon = s + i;
	if (colon == NULL || colon == s || colon == s + len - 1)
		return false;
	for (i = colon - s + 1; i < len; i++)
	{
		if (s[i] < '0' || s[i] > '9' || p > 65535)
			return false;
		p = p * 10 + (s[i] - '0');
	}
	if (p < 1 || p > 65535)
		return false;
	hlen = colon - s;
	if (hlen >= 2 && h[0] == '[' && h[hlen - 1] == ']')
	{
		h++;
		hlen -= 2;
	}
	if (hlen == 0 || hlen >= hostlen)
		return false;
	memcpy(host, h, hlen);
	host[hlen] = '\0';
	*port = (int) p;
	return true;
}

/*
 * The sentinels of lease_fence.redis_sentinels, in order.  Returns how many;
 * -1 if the list is malformed (the check hook refuses that, so only a
 * placeholder set before the library loaded can be).
 */
int
lf_parse_sentinels(const char *list, LfNode *out)
{
	const char *p = list;
	int			n = 0;

	while (*p)
	{
		const char *end;

		while (*p == ' ' || *p == ',')
			p++;
		if (*p == '\0')
			break;
		end = p;
		while (*end && *end != ',' && *end != ' ')
			end++;
		if (n == LF_MAX_SENTINELS ||
			!lf_parse_host_port(p, end - p, out[n].host, sizeof(out[n].host), &out[n].port))
			return -1;
		n++;
		p = end;
	}
	return n;
}

static bool
check_sentinels(char **newval, void **extra, GucSource source)
{
	LfNode		list[LF_MAX_SENTINELS];

	if (*newval && lf_parse_sentinels(*newval, list) < 0)
	{
		GUC_check_errcode(ERRCODE_INVALID_PARAMETER_VALUE);
		GUC_check_errdetail("The list must be host:port entries separated by commas, at most %d.",
							LF_MAX_SENTINELS);
		return false;
	}
	return true;
}

/*
 * GUC check hook of lease_fence.key_prefix: no braces.  The keys of a
 * resource are <key_prefix>{<resource>}...; a brace in the prefix would move
 * the Redis Cluster hash tag away from the resource, and the lease key and
 * the generation key could land in different slots.
 */
static bool
check_key_prefix(char **newval, void **extra, GucSource source)
{
	if (*newval && strpbrk(*newval, "{}") != NULL)
	{
		GUC_check_errcode(ERRCODE_INVALID_PARAMETER_VALUE);
		GUC_check_errdetail("A key prefix must not contain '{' or '}'.");
		GUC_check_errhint("The resource name in braces is the key's Redis Cluster hash tag.");
		return false;
	}
	return true;
}

/*
 * A fingerprint of the settings that decide where leases live: a lease is
 * renewed where it was acquired only if the worker's are the same.
 */
uint64
lf_redis_settings_fingerprint(void)
{
	static const char *const names[] = {
		"lease_fence.redis_host", "lease_fence.redis_port", "lease_fence.redis_socket",
		"lease_fence.redis_db", "lease_fence.redis_user", "lease_fence.redis_password_file",
		"lease_fence.key_prefix", "lease_fence.redis_sslmode", "lease_fence.redis_sslrootcert",
		"lease_fence.redis_sslcert", "lease_fence.redis_sslkey", "lease_fence.redis_sentinels",
		"lease_fence.redis_sentinel_master", "lease_fence.redis_sentinel_user",
		"lease_fence.redis_sentinel_password_file", "lease_fence.redis_cluster"
	};
	uint64		h = UINT64CONST(14695981039346656037);	/* FNV-1a */
	size_t		i;

	for (i = 0; i < lengthof(names); i++)
	{
		const char *v = GetConfigOption(names[i], true, false);
		const char *p;

		for (p = v ? v : ""; *p; p++)
			h = (h ^ (unsigned char) *p) * UINT64CONST(1099511628211);
		h = (h ^ 0xff) * UINT64CONST(1099511628211);	/* a separator */
	}
	return h == 0 ? 1 : h;
}

/*
 * Read a secret file (the Redis password, the TLS key) into buf, NUL
 * terminated, its length in *len.  The file must be a regular file owned by
 * the server's OS user and not readable by group or others, like a .pgpass
 * file.  Returns false with a message (never the secret) in err.
 *
 * The file is opened with O_NONBLOCK and its type checked on the open
 * descriptor before anything is read: a plain open() of a FIFO waits for a
 * writer, without bound and deaf to cancel and terminate (PostgreSQL's
 * signal handlers restart it).  Opening a FIFO for reading without blocking
 * returns at once, and O_NOCTTY keeps a terminal device from becoming our
 * controlling terminal before it is refused.  O_NONBLOCK does not change
 * how a regular file is read (POSIX: it has no effect there).  Checking the
 * descriptor, not the path, also follows symlinks to what is actually
 * opened.
 */
/* Close a file lf_read_secret_file opened, and count it closed. */
static void
close_secret(int fd)
{
	close(fd);
	ReleaseExternalFD();
}

bool
lf_read_secret_file(const char *path, const char *setting, char *buf, size_t buflen,
					size_t *len, char *err, size_t errlen)
{
	int			fd;
	struct stat st;
	size_t		got = 0;

	/* counted as one of PostgreSQL's open files while it is open */
	if (!AcquireExternalFD())
	{
		snprintf(err, errlen, "could not open %s: this backend has too many open files (see max_files_per_process)", setting);
		return false;
	}
	fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
	{
		snprintf(err, errlen, "could not open %s: %s", setting, strerror(errno));
		ReleaseExternalFD();
		return false;
	}
	if (fstat(fd, &st) != 0)
	{
		snprintf(err, errlen, "could not stat %s: %s", setting, strerror(errno));
		close_secret(fd);
		return false;
	}
	if (!S_ISREG(st.st_mode))
	{
		close_secret(fd);
		snprintf(err, errlen, "%s is not a regular file (it is %s)", setting,
				 S_ISFIFO(st.st_mode) ? "a FIFO" :
				 S_ISDIR(st.st_mode) ? "a directory" :
				 S_ISCHR(st.st_mode) ? "a character device" :
				 S_ISBLK(st.st_mode) ? "a block device" :
				 S_ISSOCK(st.st_mode) ? "a socket" : "of another type");
		return false;
	}
	if (st.st_uid != geteuid() || (st.st_mode & (S_IRWXG | S_IRWXO)) != 0)
	{
		close_secret(fd);
		snprintf(err, errlen, "%s must be a regular file owned by the server's user with no group or world access (chmod 0600)", setting);
		return false;
	}
	while (got < buflen - 1)
	{
		ssize_t		n = read(fd, buf + got, buflen - 1 - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
		{
			close_secret(fd);
			explicit_bzero(buf, buflen);
			snprintf(err, errlen, "could not read %s: %s", setting, strerror(errno));
			return false;
		}
		if (n == 0)
			break;
		got += n;
	}
	close_secret(fd);
	if (got == buflen - 1)
	{
		explicit_bzero(buf, buflen);
		snprintf(err, errlen, "%s is too large (the limit is %zu bytes)", setting, buflen - 2);
		return false;
	}
	buf[got] = '\0';
	*len = got;
	return true;
}

/* Called from _PG_init: every setting of the Redis layer. */
void
lf_redis_settings_init(void)
{
	/*
	 * Where Redis is: superuser-only, so that no other role can point the
	 * server's network connections at a host of its choosing.
	 */
	DefineCustomStringVariable("lease_fence.redis_host",
							   "Host name or IP address of the Redis server for the lease helper.",
							   NULL, &lf_redis_host, "127.0.0.1",
							   PGC_SUSET, GUC_SUPERUSER_ONLY, NULL, redis_string_changed, NULL);
	DefineCustomIntVariable("lease_fence.redis_port",
							"TCP port of the Redis server.",
							NULL, &lf_redis_port, 6379, 1, 65535,
							PGC_SUSET, GUC_SUPERUSER_ONLY, NULL, redis_int_changed, NULL);
	DefineCustomStringVariable("lease_fence.redis_socket",
							   "Unix socket of the Redis server; when set, used instead of host and port.",
							   NULL, &lf_redis_socket, "",
							   PGC_SUSET, GUC_SUPERUSER_ONLY, NULL, redis_string_changed, NULL);
	DefineCustomIntVariable("lease_fence.redis_db",
							"Redis database number (SELECT).",
							NULL, &lf_redis_db, 0, 0, 1000000,
							PGC_SUSET, GUC_SUPERUSER_ONLY, NULL, redis_int_changed, NULL);
	DefineCustomStringVariable("lease_fence.redis_user",
							   "Redis ACL user name for AUTH; empty for the default user.",
							   NULL, &lf_redis_user, "",
							   PGC_SUSET, GUC_SUPERUSER_ONLY, NULL, redis_string_changed, NULL);
	DefineCustomStringVariable("lease_fence.redis_password_file",
							   "File holding the Redis password (owned by the server's user, mode 0600).",
							   "The password itself is never a setting: settings are visible to pg_read_all_settings.",
							   &lf_redis_password_file, "",
							   PGC_SUSET, GUC_SUPERUSER_ONLY, NULL, redis_string_changed, NULL);

	/* how long to wait: each user may choose, within bounds */
	DefineCustomIntVariable("lease_fence.connect_timeout_ms",
							"How long to wait for a connection to Redis, TLS handshake and connection check included.",
							NULL, &lf_connect_timeout_ms, 1000, 1, 60000,
							PGC_USERSET, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("lease_fence.command_timeout_ms",
							"How long to wait for Redis to answer a lease request.",
							NULL, &lf_command_timeout_ms, 1000, 1, 60000,
							PGC_USERSET, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("lease_fence.cleanup_timeout_ms",
							"How long a conditional release after an unknown outcome may take, connect included.",
							NULL, &lf_cleanup_timeout_ms, 500, 1, 60000,
							PGC_USERSET, GUC_UNIT_MS, NULL, NULL, NULL);

	DefineCustomEnumVariable("lease_fence.redis_sslmode",
							 "Whether to use TLS to Redis, and how to verify the server: disable, require, verify-ca, verify-full.",
							 "Not used over lease_fence.redis_socket.",
							 &lf_redis_sslmode, LF_SSL_DISABLE, lf_sslmode_options,
							 PGC_SUSET, GUC_SUPERUSER_ONLY, NULL, redis_int_changed, NULL);
	DefineCustomStringVariable("lease_fence.redis_sslrootcert",
							   "File of the certificate authorities that Redis's certificate must chain to; empty for the system's.",
							   NULL, &lf_redis_sslrootcert, "",
							   PGC_SUSET, GUC_SUPERUSER_ONLY, NULL, redis_string_changed, NULL);
	DefineCustomStringVariable("lease_fence.redis_sslcert",
							   "File of the client certificate sent to Redis (mutual TLS).",
							   NULL, &lf_redis_sslcert, "",
							   PGC_SUSET, GUC_SUPERUSER_ONLY, NULL, redis_string_changed, NULL);
	DefineCustomStringVariable("lease_fence.redis_sslkey",
							   "File of the client certificate's private key (owned by the server's user, mode 0600).",
							   NULL, &lf_redis_sslkey, "",
							   PGC_SUSET, GUC_SUPERUSER_ONLY, NULL, redis_string_changed, NULL);

	DefineCustomStringVariable("lease_fence.redis_sentinels",
							   "Redis Sentinels to ask where the master is, as host:port,...; when set, redis_host, redis_port and redis_socket are not used.",
							   NULL, &lf_sentinels, "",
							   PGC_SUSET, GUC_SUPERUSER_ONLY, check_sentinels, redis_string_changed, NULL);
	DefineCustomStringVariable("lease_fence.redis_sentinel_master",
							   "Name of the master the sentinels monitor.",
							   NULL, &lf_sentinel_master, "",
							   PGC_SUSET, GUC_SUPERUSER_ONLY, NULL, redis_string_changed, NULL);
	DefineCustomStringVariable("lease_fence.redis_sentinel_user",
							   "ACL user name for AUTH on the sentinels; empty for the default user.",
							   NULL, &lf_sentinel_user, "",
							   PGC_SUSET, GUC_SUPERUSER_ONLY, NULL, redis_string_changed, NULL);
	DefineCustomStringVariable("lease_fence.redis_sentinel_password_file",
							   "File holding the sentinels' password (owned by the server's user, mode 0600).",
							   NULL, &lf_sentinel_password_file, "",
							   PGC_SUSET, GUC_SUPERUSER_ONLY, NULL, redis_string_changed, NULL);
	DefineCustomBoolVariable("lease_fence.redis_cluster",
							 "Talk to a Redis Cluster: redis_host and redis_port only seed its slot map.",
							 NULL, &lf_cluster, false,
							 PGC_SUSET, GUC_SUPERUSER_ONLY, NULL, redis_bool_changed, NULL);
	DefineCustomIntVariable("lease_fence.redis_min_replicas",
							"Replicas that must acknowledge a grant (WAIT) before acquire reports it; 0: none.",
							NULL, &lf_min_replicas, 0, 0, 100,
							PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("lease_fence.redis_replica_timeout_ms",
							"How long to wait for lease_fence.redis_min_replicas to acknowledge a grant.",
							NULL, &lf_replica_timeout_ms, 1000, 1, 60000,
							PGC_SUSET, GUC_UNIT_MS, NULL, NULL, NULL);

	DefineCustomStringVariable("lease_fence.key_prefix",
							   "Prefix of the Redis keys of leases; two databases must not share one.",
							   "It must not contain '{' or '}': the resource in braces is the Redis Cluster hash tag.",
							   &lf_key_prefix, "lease_fence:",
							   PGC_SUSET, GUC_SUPERUSER_ONLY, check_key_prefix, NULL, NULL);
	DefineCustomIntVariable("lease_fence.gen_key_ttl_s",
							"Seconds the highest-generation key of a resource outlives its last grant (0: forever).",
							NULL, &lf_gen_key_ttl_s, 604800, 0, INT_MAX,
							PGC_SUSET, GUC_UNIT_S, NULL, NULL, NULL);
}

/*-------------------------------------------------------------------------
 *
 * visible_error.c
 *	  What the current user may see of a Redis problem: the rule of the
 *	  where-to-connect settings, a text with its endpoints hidden, and the
 *	  WARNING that says why a request failed.
 *
 * Invariant: no endpoint (host:port, a socket path, the configured host)
 * reaches a user who may not read the where-to-connect settings
 * (GUC_SUPERUSER_ONLY); the server log keeps the full text.
 *
 * IDENTIFICATION
 *	  src/lease/visible_error.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "lease/internal.h"
#include "miscadmin.h"
#include "redis/redis.h"
#include "utils/acl.h"

/*
 * May the current user see where Redis is?  The rule of the where-to-connect
 * settings (GUC_SUPERUSER_ONLY): superusers and members of
 * pg_read_all_settings.  Outside a valid transaction (the cleanups after
 * COMMIT or ROLLBACK, and at backend exit) the catalogs cannot be read, so
 * the answer is no: the server log has the full text anyway.
 */
bool
lf_may_see_settings(void)
{
	if (!IsTransactionState())
		return false;
	return superuser() || has_privs_of_role(GetUserId(), ROLE_PG_READ_ALL_SETTINGS);
}

/* Is tok (len bytes) an endpoint: host:port, [v6]:port, or a socket path? */
static bool
looks_like_endpoint(const char *tok, size_t len)
{
	size_t		digits = 0;

	/* a colon or full stop that ends a sentence is not part of it */
	while (len > 0 && (tok[len - 1] == ':' || tok[len - 1] == '.'))
		len--;
	if (len == 0)
		return false;
	if (tok[0] == '/')
		return true;
	while (digits < len && tok[len - 1 - digits] >= '0' && tok[len - 1 - digits] <= '9')
		digits++;
	if (digits > 0 && digits < len - 1 && tok[len - 1 - digits] == ':')
		return true;
	/* the configured host, also where it is named without a port */
	return lf_redis_host != NULL && lf_redis_host[0] != '\0' &&
		strlen(lf_redis_host) == len && strncmp(tok, lf_redis_host, len) == 0;
}

/*
 * How long the configured socket path (lease_fence.redis_socket) is where
 * it starts at p, as a whole: followed by the end of the text, a separator,
 * or a colon or full stop; 0 when it does not start there.  A path may hold
 * any byte but NUL, a blank or a parenthesis included, so it is found by
 * comparing the whole string, never by splitting the text into words.
 */
static size_t
configured_socket_at(const char *p, const char *seps)
{
	size_t		len;

	if (lf_redis_socket == NULL || lf_redis_socket[0] == '\0')
		return 0;
	len = strlen(lf_redis_socket);
	if (strncmp(p, lf_redis_socket, len) != 0)
		return 0;
	if (p[len] != '\0' && p[len] != ':' && p[len] != '.' && strchr(seps, p[len]) == NULL)
		return 0;
	return len;
}

/*
 * err as the current user may see it: unchanged for those who may see the
 * where-to-connect settings (lf_may_see_settings), else with every endpoint
 * in it (the configured socket path, host:port, any other socket path, the
 * configured host) written as <hidden>, in buf.  The configured socket path
 * is looked for first, as a whole string, at the start of each word: a path
 * with a blank in it is two words, and the second must not show.  The
 * Redis layer's texts name the server they concern; the server log keeps
 * them whole (the callers' errdetail_log).
 */
const char *
lf_visible_error(const char *err, char *buf, size_t buflen)
{
	static const char seps[] = " \t\n\"'(),;";
	const char *p = err;
	size_t		n = 0;

	if (lf_may_see_settings())
		return err;
	while (*p != '\0' && n + 1 < buflen)
	{
		size_t		len = strcspn(p, seps);
		size_t		sock = (p == err || strchr(seps, p[-1]) != NULL) ?
			configured_socket_at(p, seps) : 0;

		if (sock > 0)
		{
			n += strlcpy(buf + n, "<hidden>", buflen - n);
			if (n >= buflen)
				n = buflen - 1;
			p += sock;
		}
		else if (len == 0)
			buf[n++] = *p++;
		else if (looks_like_endpoint(p, len))
		{
			size_t		keep = len;

			while (keep > 0 && (p[keep - 1] == ':' || p[keep - 1] == '.'))
				keep--;
			n += strlcpy(buf + n, "<hidden>", buflen - n);
			if (n >= buflen)
				n = buflen - 1;
			p += keep;
		}
		else
		{
			size_t		m = Min(len, buflen - 1 - n);

			memcpy(buf + n, p, m);
			n += m;
			p += len;
		}
	}
	buf[n] = '\0';
	return buf;
}

/*
 * Say why Redis was unavailable or the outcome unknown, without secrets:
 * endpoints only to those who may see them (the server log has them).
 */
void
lf_report_redis_problem(const char *what, const char *resource, const char *err)
{
	char		buf[LF_ERRLEN];
	const char *shown = lf_visible_error(err, buf, sizeof(buf));

	ereport(WARNING,
			errmsg("%s of resource \"%s\": %s", what, resource, shown),
			shown != err ? errdetail_log("The full text: %s", err) : 0);
}

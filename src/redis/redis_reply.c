/*-------------------------------------------------------------------------
 *
 * redis_reply.c
 *	  What a lease script's reply means: the one decoder of the lease
 *	  protocol, from a hiredis reply (or a request that got none) to a typed
 *	  answer (LfAnswer, redis.h).
 *
 * It follows scripts/answers.json to the letter, the table every reader of
 * the scripts is tested against (bash test/unit.sh):
 *	- a script's replies ("replies"): each script's own shapes, listed in
 *	  the comment header of scripts/<name>.lua; any other reply, a wrong
 *	  type, a code the script never answers, is "unknown";
 *	- error replies ("errors"), the same for every script, by their code
 *	  (the first word, matched exactly): NOSCRIPT, the codes Redis answers
 *	  before running any of a script (nothing applied: "unavailable"),
 *	  LFOVERSIZED, the scripts' own refusal to return a stored value longer
 *	  than lease_fence ever writes ("corrupt": nothing applied, a person must
 *	  look), and any other error "unknown" (a script may fail after a write);
 *	- a request without a reply ("transport"): not sent is "unavailable",
 *	  sent and unanswered "unknown" (interrupted: the same, with an
 *	  interrupt pending).
 *
 * Pure: no server, no memory context, no error raised.  It depends on
 * hiredis's reply type and c.h-level things only, so that the server-less
 * unit test (test/unit/c.sh) links it as it is.
 *
 * IDENTIFICATION
 *	  src/redis/redis_reply.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <hiredis/hiredis.h>

#include "redis/internal.h"

/* the outcomes' names: those of scripts/answers.json, and the transport's */
static const char *const outcome_names[LF_NUM_ANSWER_OUTCOMES] = {
	[LF_ANS_ACQUIRED] = "acquired",
	[LF_ANS_BUSY] = "busy",
	[LF_ANS_STALE] = "stale",
	[LF_ANS_CORRUPT] = "corrupt",
	[LF_ANS_RENEWED] = "renewed",
	[LF_ANS_LOST] = "lost",
	[LF_ANS_RELEASED] = "released",
	[LF_ANS_NOT_HELD] = "not_held",
	[LF_ANS_HELD] = "held",
	[LF_ANS_CLAIMED] = "claimed",
	[LF_ANS_OURS] = "ours",
	[LF_ANS_OTHERS] = "others",
	[LF_ANS_TAKEN_OVER] = "taken_over",
	[LF_ANS_SEIZED] = "seized",
	[LF_ANS_LEFT] = "left",
	[LF_ANS_NOT_QUEUED] = "not_queued",
	[LF_ANS_WAITERS] = "waiters",
	[LF_ANS_NOSCRIPT] = "noscript",
	[LF_ANS_UNAVAILABLE] = "unavailable",
	[LF_ANS_UNKNOWN] = "unknown",
	[LF_ANS_INTERRUPTED] = "interrupted",
	[LF_ANS_SENT_DEFERRED] = "sent_deferred",
};

static const char *const script_names[LF_NUM_SCRIPTS] = {
	[LF_SCRIPT_ACQUIRE] = "acquire",
	[LF_SCRIPT_RENEW] = "renew",
	[LF_SCRIPT_RELEASE] = "release",
	[LF_SCRIPT_CHECK] = "check",
	[LF_SCRIPT_CLAIM] = "claim",
	[LF_SCRIPT_TAKEOVER] = "takeover",
	[LF_SCRIPT_HOLDER] = "holder",
	[LF_SCRIPT_LEADER] = "leader",
	[LF_SCRIPT_SEIZE] = "seize",
	[LF_SCRIPT_ACQUIRE_FAIR] = "acquire_fair",
	[LF_SCRIPT_LEAVE] = "leave",
	[LF_SCRIPT_QUEUE] = "queue",
};

/*
 * Error codes Redis answers before it runs any of a script: nothing was
 * applied.  NOSCRIPT is one too, but has an outcome of its own.
 */
static const char *const not_applied[] = {
	"LOADING", "BUSY", "NOAUTH", "NOPERM", "WRONGPASS", "READONLY",
	"MASTERDOWN", "OOM", "MISCONF", "CLUSTERDOWN", "MOVED", "ASK",
	"TRYAGAIN", "CROSSSLOT", "NOREPLICAS"
};

const char *
lf_answer_outcome_name(LfAnswerOutcome o)
{
	if ((int) o < 0 || o >= LF_NUM_ANSWER_OUTCOMES)
		return "?";
	return outcome_names[o];
}

/* The outcome as answers.json names it: an interrupted request is unknown. */
const char *
lf_answer_table_name(LfAnswerOutcome o)
{
	return lf_answer_outcome_name(o == LF_ANS_INTERRUPTED ? LF_ANS_UNKNOWN : o);
}

const char *
lf_script_name(LfScript script)
{
	if ((int) script < 0 || script >= LF_NUM_SCRIPTS)
		return "?";
	return script_names[script];
}

/* Is str an error text whose code (its first word) is exactly code? */
bool
lf_error_code_is(const char *str, const char *code)
{
	size_t		n = strlen(code);

	return strncmp(str, code, n) == 0 && (str[n] == ' ' || str[n] == '\0');
}

static void
answer_init(LfAnswer *a, LfAnswerOutcome o)
{
	memset(a, 0, sizeof(*a));
	a->outcome = o;
}

/* (snprintf's truncation is wanted: err and value are for people) */
static void
set_err(LfAnswer *a, const char *what, const char *detail)
{
	if (detail)
		snprintf(a->err, sizeof(a->err), "%s: %s", what, detail);
	else
		snprintf(a->err, sizeof(a->err), "%s", what);
}

static void
unexpected(LfAnswer *a, LfScript script)
{
	a->outcome = LF_ANS_UNKNOWN;
	snprintf(a->err, sizeof(a->err), "unexpected reply to the %s script",
			 lf_script_name(script));
}

/*
 * A generation as the acquire script echoes and stores it: decimal digits,
 * no sign, no blank, no leading zero, at most the largest bigint.  The
 * script compares generations as such strings (shorter is smaller), so
 * anything else ("007", "7 ") is no generation of lease_fence's.
 */
bool
lf_parse_canonical_generation(const char *s, size_t len, int64 *value)
{
	uint64		v = 0;
	size_t		i;

	if (len == 0 || len > 19 || (s[0] == '0' && len > 1))
		return false;
	for (i = 0; i < len; i++)
	{
		if (s[i] < '0' || s[i] > '9')
			return false;
		v = v * 10 + (uint64) (s[i] - '0');	/* 19 digits fit in a uint64 */
	}
	if (v > (uint64) PG_INT64_MAX)
		return false;
	*value = (int64) v;
	return true;
}

/* A PTTL as the acquire script sends it: digits only, >= 0 (else none). */
static bool
parse_pttl(const char *s, size_t len, int64 *value)
{
	int64		v;

	/* leading zeros are harmless in a hint: strip them, keep one digit */
	while (len > 1 && s[0] == '0')
	{
		s++;
		len--;
	}
	if (!lf_parse_canonical_generation(s, len, &v))
		return false;
	*value = v;
	return true;
}

/*
 * Bytes from Redis as text: printable ASCII as it is, every other byte (a
 * control character, NUL, anything of 0x80 and above) as \xNN, so that
 * what lease_fence shows of a stored value or an error reply -- a reason, a
 * holder's identity, a WARNING -- is valid in every server encoding and
 * cannot end a message early; cut to fit dst (never inside an escape).
 * Returns dst.
 */
char *
lf_redis_text(char *dst, size_t dstlen, const char *src, size_t srclen)
{
	static const char hex[] = "0123456789abcdef";
	size_t		o = 0;
	size_t		i;

	if (dstlen == 0)
		return dst;
	for (i = 0; i < srclen; i++)
	{
		unsigned char b = (unsigned char) src[i];

		if (b >= 0x20 && b < 0x7f)
		{
			if (o + 1 >= dstlen)
				break;
			dst[o++] = (char) b;
		}
		else
		{
			if (o + 4 >= dstlen)
				break;
			dst[o++] = '\\';
			dst[o++] = 'x';
			dst[o++] = hex[b >> 4];
			dst[o++] = hex[b & 0xf];
		}
	}
	dst[o] = '\0';
	return dst;
}

/*
 * What a reply may be at most.  Every reply lease_fence reads is small: a
 * script answers a few integers and short strings (scripts/answers.json
 * lists every shape, and the scripts refuse to return a stored value longer
 * than 256 bytes), a set-up command a status, a Sentinel a few dozen
 * fields.  A reply announced larger -- an array of more elements than the
 * bound, or more unparsed bytes than it, which a bulk string or a line
 * longer than the bound makes -- is refused as it arrives, before hiredis
 * allocates it (hiredis 0.14 allocates an array's announced elements at
 * once, and buffers a bulk string whole); the caller closes the connection.
 * The elements are counted over the whole reply (every nested array's
 * announced size), so a reply's memory is bounded whatever its shape.  Only
 * the Cluster's map of slots (CLUSTER SLOTS) and a master's list of
 * replicas (ROLE) grow with the deployment: they get the larger bound.
 */
const LfReplyLimits lf_small_reply = {64 * 1024, 1024};
const LfReplyLimits lf_large_reply = {16 * 1024 * 1024, 1024 * 1024};

/*
 * hiredis's own reply constructors, and ours, which check the reply's bound
 * first: the reader calls them as it parses, with the bound as its
 * privdata.  A constructor that returns NULL makes the reader fail (hiredis
 * calls it out of memory; bound->oversized says what it was), and hiredis
 * frees what it had built of the reply.
 */
static redisReplyObjectFunctions *hiredis_functions = NULL;	/* file-scope: built once */
static redisReplyObjectFunctions bounded_functions; /* (their addresses outlive every reader) */

/* an array's announced size: int in hiredis 0.14 (Debian 12), size_t from 1.0 */
#if HIREDIS_MAJOR >= 1
typedef size_t LfArraySize;
#else
typedef int LfArraySize;
#endif

static void *
bounded_array(const redisReadTask *task, LfArraySize elements)
{
	LfReplyBound *b = (LfReplyBound *) task->privdata;
	long long	n = (long long) elements;

	if (n < 0 || n > b->limits->elements - b->elements)
	{
		snprintf(b->oversized, sizeof(b->oversized), "an array of %lld elements (at most %ld in a reply)",
				 n, b->limits->elements);
		return NULL;
	}
	b->elements += (long) n;
	return hiredis_functions->createArray(task, elements);
}

static void *
bounded_string(const redisReadTask *task, char *str, size_t len)
{
	LfReplyBound *b = (LfReplyBound *) task->privdata;

	/* (lf_reader_has_room refuses such a string before it is read whole) */
	if (len > b->limits->bytes)
	{
		snprintf(b->oversized, sizeof(b->oversized), "a string of %zu bytes (at most %zu)",
				 len, b->limits->bytes);
		return NULL;
	}
	return hiredis_functions->createString(task, str, len);
}

/*
 * A hiredis reader whose constructors check bound (set to the small
 * limits, nothing counted yet); NULL when out of memory.  The bound must
 * live as long as the reader.
 */
redisReader *
lf_bounded_reader(LfReplyBound *bound)
{
	redisReader *reader = redisReaderCreate();

	if (reader == NULL)
		return NULL;
	if (hiredis_functions == NULL)
	{
		hiredis_functions = reader->fn;
		bounded_functions = *hiredis_functions;
		bounded_functions.createArray = bounded_array;
		bounded_functions.createString = bounded_string;
	}
	reader->fn = &bounded_functions;
	reader->privdata = bound;
	bound->limits = &lf_small_reply;
	bound->elements = 0;
	bound->oversized[0] = '\0';
	return reader;
}

/*
 * May a bounded reader take n more bytes?  Not when the bytes it holds
 * unparsed would pass its bound: a reply that long is refused before it is
 * read whole (the bound's oversized says so).
 */
bool
lf_reader_has_room(redisReader *reader, size_t n)
{
	LfReplyBound *b = (LfReplyBound *) reader->privdata;
	size_t		held = reader->len - reader->pos;

	if (held + n <= b->limits->bytes)
		return true;
	snprintf(b->oversized, sizeof(b->oversized), "more than %zu bytes of one reply", b->limits->bytes);
	return false;
}

/*
 * What a reply says, for a message: an error reply's words (as text, see
 * lf_redis_text), otherwise the words given.
 */
const char *
lf_reply_words(const redisReply *r, const char *otherwise, char *buf, size_t buflen)
{
	if (r == NULL || r->type != REDIS_REPLY_ERROR)
		return otherwise;
	return lf_redis_text(buf, buflen, r->str, r->len);
}

/*
 * Is s, of len bytes, a host name or address as a Sentinel or a Cluster
 * names one: printable ASCII, no blank, not empty?  Anything else is not
 * connected to, nor shown.
 */
bool
lf_printable_host(const char *s, size_t len)
{
	size_t		i;

	if (len == 0)
		return false;
	for (i = 0; i < len; i++)
		if ((unsigned char) s[i] <= 0x20 || (unsigned char) s[i] >= 0x7f)
			return false;
	return true;
}

static void
set_value(LfAnswer *a, const redisReply *r)
{
	lf_redis_text(a->value, sizeof(a->value), r->str, r->len);
	a->has_value = true;
}

/* An error reply, by its code: the rows "errors" of answers.json. */
static void
decode_error(const redisReply *reply, LfAnswer *a)
{
	size_t		i;
	char		text[LF_ERRLEN];

	set_err(a, "Redis answered", lf_redis_text(text, sizeof(text), reply->str, reply->len));
	if (lf_error_code_is(reply->str, "NOSCRIPT"))
	{
		a->outcome = LF_ANS_NOSCRIPT;
		return;
	}
	/* a script found a key holding more than lease_fence ever writes there */
	if (lf_error_code_is(reply->str, "LFOVERSIZED"))
	{
		a->outcome = LF_ANS_CORRUPT;
		a->oversized = true;
		return;
	}
	for (i = 0; i < lengthof(not_applied); i++)
		if (lf_error_code_is(reply->str, not_applied[i]))
		{
			a->outcome = LF_ANS_UNAVAILABLE;
			return;
		}
	a->outcome = LF_ANS_UNKNOWN;
}

/* {integer, bulk string}: the shape of acquire's and claim's answers */
static bool
code_and_string(const redisReply *reply, long long *code, const redisReply **str)
{
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
		reply->element[0]->type != REDIS_REPLY_INTEGER ||
		reply->element[1]->type != REDIS_REPLY_STRING)
		return false;
	*code = reply->element[0]->integer;
	*str = reply->element[1];
	return true;
}

/*
 * The generation key's value in a holder's or a leader's answer: none
 * (''), or a generation; anything else makes the answer corrupt.  False
 * when s is not a string at all (an unexpected reply).
 */
static bool
generation_key_value(const redisReply *s, LfAnswer *a)
{
	if (s->type != REDIS_REPLY_STRING)
		return false;
	if (s->len > 0 && !lf_parse_canonical_generation(s->str, s->len, &a->generation))
	{
		a->outcome = LF_ANS_CORRUPT;
		a->has_value = false;
		a->has_election_value = false;
		set_err(a, "the generation key holds something that is not a generation", NULL);
	}
	return true;
}

/*
 * What the reply of script means: the rows of scripts/answers.json.  reply
 * is a complete reply (hiredis's); it is only read.
 */
void
lf_decode_reply(LfScript script, const redisReply *reply, LfAnswer *a)
{
	long long	code;
	const redisReply *s;

	answer_init(a, LF_ANS_UNKNOWN);
	a->replied = true;
	if (reply == NULL)
	{
		set_err(a, "no reply", NULL);
		return;
	}
	if (reply->type == REDIS_REPLY_ERROR)
	{
		decode_error(reply, a);
		return;
	}

	switch (script)
	{
		case LF_SCRIPT_ACQUIRE_FAIR:
			/* acquire's, and busy is {0, PTTL, position} (-1: not queued) */
			if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 3 &&
				reply->element[0]->type == REDIS_REPLY_INTEGER &&
				reply->element[0]->integer == 0 &&
				reply->element[1]->type == REDIS_REPLY_STRING &&
				reply->element[2]->type == REDIS_REPLY_INTEGER &&
				reply->element[2]->integer >= -1)
			{
				a->outcome = LF_ANS_BUSY;
				s = reply->element[1];
				a->has_pttl = parse_pttl(s->str, s->len, &a->pttl_ms);
				a->position = reply->element[2]->integer;
				return;
			}
			/* its busy has a position: {0, PTTL} is no answer of its */
			if (!code_and_string(reply, &code, &s) || code == 0)
				break;
			/* acquired and stale as acquire's */
			/* FALLTHROUGH */
		case LF_SCRIPT_ACQUIRE:
			/* {1, generation} acquired, {0, PTTL} busy, {2, stored} stale */
			if (!code_and_string(reply, &code, &s))
				break;
			if (code == 1)
			{
				if (lf_parse_canonical_generation(s->str, s->len, &a->generation))
					a->outcome = LF_ANS_ACQUIRED;
				else
				{
					a->outcome = LF_ANS_UNKNOWN;
					set_err(a, "the acquire script answered acquired with no generation", NULL);
				}
				return;
			}
			if (code == 0)
			{
				a->outcome = LF_ANS_BUSY;
				a->has_pttl = parse_pttl(s->str, s->len, &a->pttl_ms);
				return;
			}
			if (code == 2)
			{
				if (lf_parse_canonical_generation(s->str, s->len, &a->stored))
					a->outcome = LF_ANS_STALE;
				else
				{
					a->outcome = LF_ANS_CORRUPT;
					set_err(a, "the generation key holds something that is not a generation", NULL);
				}
				return;
			}
			break;
		case LF_SCRIPT_RENEW:
			/* 1 renewed, 0 lost */
			if (reply->type == REDIS_REPLY_INTEGER && reply->integer == 1)
				a->outcome = LF_ANS_RENEWED;
			else if (reply->type == REDIS_REPLY_INTEGER && reply->integer == 0)
				a->outcome = LF_ANS_LOST;
			else
				break;
			return;
		case LF_SCRIPT_RELEASE:
			/* 1 released, 0 not held */
			if (reply->type == REDIS_REPLY_INTEGER && reply->integer == 1)
				a->outcome = LF_ANS_RELEASED;
			else if (reply->type == REDIS_REPLY_INTEGER && reply->integer == 0)
				a->outcome = LF_ANS_NOT_HELD;
			else
				break;
			return;
		case LF_SCRIPT_CHECK:
			/* PTTL when held (-1: no expiry); -3 not held, -2 key gone */
			if (reply->type != REDIS_REPLY_INTEGER)
				break;
			if (reply->integer >= 0 || reply->integer == -1)
			{
				a->outcome = LF_ANS_HELD;
				a->has_pttl = reply->integer >= 0;
				a->pttl_ms = a->has_pttl ? reply->integer : 0;
				return;
			}
			if (reply->integer == -3 || reply->integer == -2)
			{
				a->outcome = LF_ANS_NOT_HELD;
				return;
			}
			break;
		case LF_SCRIPT_CLAIM:
			/* {2, value} claimed, {1, value} ours, {0, value} others */
			if (!code_and_string(reply, &code, &s) || code < 0 || code > 2)
				break;
			a->outcome = code == 2 ? LF_ANS_CLAIMED : code == 1 ? LF_ANS_OURS : LF_ANS_OTHERS;
			set_value(a, s);
			return;
		case LF_SCRIPT_TAKEOVER:
			/* the previous value, or nil */
			if (reply->type == REDIS_REPLY_STRING)
				set_value(a, reply);
			else if (reply->type != REDIS_REPLY_NIL)
				break;
			a->outcome = LF_ANS_TAKEN_OVER;
			return;
		case LF_SCRIPT_HOLDER:
			/* {1, identity, PTTL, generation} held, {0, generation} not held */
			if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 2 ||
				reply->element[0]->type != REDIS_REPLY_INTEGER)
				break;
			code = reply->element[0]->integer;
			if (code == 1 && reply->elements == 4 &&
				reply->element[1]->type == REDIS_REPLY_STRING &&
				reply->element[2]->type == REDIS_REPLY_INTEGER &&
				(reply->element[2]->integer >= 0 || reply->element[2]->integer == -1))
			{
				a->outcome = LF_ANS_HELD;
				set_value(a, reply->element[1]);
				a->has_pttl = reply->element[2]->integer >= 0;
				a->pttl_ms = a->has_pttl ? reply->element[2]->integer : 0;
				s = reply->element[3];
			}
			else if (code == 0 && reply->elements == 2)
			{
				a->outcome = LF_ANS_NOT_HELD;
				s = reply->element[1];
			}
			else
				break;
			if (!generation_key_value(s, a))
				break;
			return;
		case LF_SCRIPT_LEADER:
			/*
			 * {1, identity, PTTL, generation, value, 1 or 0} led (0: the
			 * value key holds no value of this identity), {0, generation}
			 * nobody leads
			 */
			if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 2 ||
				reply->element[0]->type != REDIS_REPLY_INTEGER)
				break;
			code = reply->element[0]->integer;
			if (code == 1 && reply->elements == 6 &&
				reply->element[1]->type == REDIS_REPLY_STRING &&
				reply->element[2]->type == REDIS_REPLY_INTEGER &&
				(reply->element[2]->integer >= 0 || reply->element[2]->integer == -1) &&
				reply->element[4]->type == REDIS_REPLY_STRING &&
				reply->element[4]->len <= LF_ELECTION_VALUE_MAX &&
				reply->element[5]->type == REDIS_REPLY_INTEGER &&
				(reply->element[5]->integer == 0 || reply->element[5]->integer == 1))
			{
				a->outcome = LF_ANS_HELD;
				set_value(a, reply->element[1]);
				a->has_pttl = reply->element[2]->integer >= 0;
				a->pttl_ms = a->has_pttl ? reply->element[2]->integer : 0;
				if (reply->element[5]->integer == 1)
				{
					a->has_election_value = true;
					a->election_value_len = (int) reply->element[4]->len;
					memcpy(a->election_value, reply->element[4]->str, reply->element[4]->len);
					a->election_value[reply->element[4]->len] = '\0';
				}
				s = reply->element[3];
			}
			else if (code == 0 && reply->elements == 2)
			{
				a->outcome = LF_ANS_NOT_HELD;
				s = reply->element[1];
			}
			else
				break;
			if (!generation_key_value(s, a))
				break;
			return;
		case LF_SCRIPT_SEIZE:
			/* {1, generation, previous identity} seized, {2, stored} stale */
			if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 2 ||
				reply->element[0]->type != REDIS_REPLY_INTEGER ||
				reply->element[1]->type != REDIS_REPLY_STRING)
				break;
			code = reply->element[0]->integer;
			s = reply->element[1];
			if (code == 1 && reply->elements == 3 &&
				reply->element[2]->type == REDIS_REPLY_STRING)
			{
				if (!lf_parse_canonical_generation(s->str, s->len, &a->generation))
				{
					set_err(a, "the seize script answered seized with no generation", NULL);
					return;
				}
				a->outcome = LF_ANS_SEIZED;
				if (reply->element[2]->len > 0)
					set_value(a, reply->element[2]);
				return;
			}
			if (code == 2 && reply->elements == 2)
			{
				if (lf_parse_canonical_generation(s->str, s->len, &a->stored))
					a->outcome = LF_ANS_STALE;
				else
				{
					a->outcome = LF_ANS_CORRUPT;
					set_err(a, "the generation key holds something that is not a generation", NULL);
				}
				return;
			}
			break;
		case LF_SCRIPT_LEAVE:
			/* 1 left, 0 not queued */
			if (reply->type == REDIS_REPLY_INTEGER && reply->integer == 1)
				a->outcome = LF_ANS_LEFT;
			else if (reply->type == REDIS_REPLY_INTEGER && reply->integer == 0)
				a->outcome = LF_ANS_NOT_QUEUED;
			else
				break;
			return;
		case LF_SCRIPT_QUEUE:
			/* {identity, PTTL of its waiter key, ...}: the live waiters in order */
			{
				size_t		i;
				int			n;

				if (reply->type != REDIS_REPLY_ARRAY || reply->elements % 2 != 0 ||
					reply->elements > 2 * LF_QUEUE_SHOWN)
					break;
				for (i = 0; i < reply->elements; i += 2)
					if (reply->element[i]->type != REDIS_REPLY_STRING ||
						reply->element[i]->len == 0 ||
						reply->element[i]->len >= sizeof(a->waiters[0].identity) ||
						memchr(reply->element[i]->str, '\0', reply->element[i]->len) != NULL ||
						reply->element[i + 1]->type != REDIS_REPLY_INTEGER ||
						reply->element[i + 1]->integer < -1)
						break;
				if (i < reply->elements)
					break;
				n = (int) (reply->elements / 2);
				a->outcome = LF_ANS_WAITERS;
				a->n_waiters = n;
				a->waiters = n > 0 ? palloc(n * sizeof(LfWaiter)) : NULL;
				for (i = 0; i < (size_t) n; i++)
				{
					const redisReply *id = reply->element[2 * i];

					memcpy(a->waiters[i].identity, id->str, id->len);
					a->waiters[i].identity[id->len] = '\0';
					a->waiters[i].pttl_ms = reply->element[2 * i + 1]->integer;
				}
				return;
			}
		case LF_NUM_SCRIPTS:
			break;
	}
	unexpected(a, script);
}

/*
 * A request that got no reply, by what became of it: the rows "transport"
 * of answers.json (LF_REPLY has a reply: lf_decode_reply).  err says why.
 */
void
lf_decode_send_result(LfSendResult r, const char *err, LfAnswer *a)
{
	switch (r)
	{
		case LF_NOT_SENT:
			answer_init(a, LF_ANS_UNAVAILABLE);
			break;
		case LF_NO_REPLY:
			answer_init(a, LF_ANS_UNKNOWN);
			break;
		case LF_SEND_INTERRUPTED:
			answer_init(a, LF_ANS_INTERRUPTED);
			break;
		case LF_SENT_UNREAD:
			answer_init(a, LF_ANS_SENT_DEFERRED);
			break;
		case LF_REPLY:
		default:
			answer_init(a, LF_ANS_UNKNOWN);
			break;
	}
	set_err(a, err ? err : "no reply", NULL);
}

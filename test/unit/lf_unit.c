/*
 * test/unit/lf_unit.c: the server-less test binary of test/unit/c.sh.
 *
 * Linked with the project's own src/redis/redis_reply.c (the decoder of script
 * replies) and hiredis; includes src/fence/generation_math.h and src/lease/lease.h's
 * arithmetic.  No server, no backend: test/unit/answers.py drives it.
 *
 *   lf_unit --arith          the generation / epoch / heal / validity
 *                            arithmetic: TAP lines "ok - ..." (unnumbered)
 *   lf_unit                  reads requests from stdin, one a line, and
 *                            answers each with one line:
 *     reply SCRIPT HEX       the RESP bytes HEX read by hiredis's reader
 *                            whole, in two pieces (at every split point)
 *                            and byte by byte, each decoded as SCRIPT's
 *                            reply: "outcome=... generation=... stored=...
 *                            pttl=N|null value=HEX|null election_value=HEX|null position=N
 *                            waiters=HEX:N,...|null" when every way
 *                            read and decoded the same, else "error=why"
 *     transport NAME         a request without a reply (not_sent, no_reply,
 *                            interrupted): "outcome=..."
 *     outcomes               the outcome names of the decoder, as the
 *                            table names them
 *     scripts                the scripts' names
 *     statuses               every status acquire, renew and release can
 *                            answer, as src/base/stats.h names them:
 *                            "acquire:acquired acquire:busy ..."
 */
#include "postgres.h"

#include <stdio.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "fence/generation_math.h"
#include "lease/lease.h"
#include "redis/redis.h"
#include "redis/internal.h"
#include "base/stats.h"

static int	failures = 0;

/* the decoder pallocs the queue script's waiters: no backend here */
void *
palloc(Size size)
{
	void	   *p = malloc(size);

	if (p == NULL)
		abort();
	return p;
}

void
pfree(void *pointer)
{
	free(pointer);
}

static void
check(bool ok, const char *what)
{
	printf("%s - %s\n", ok ? "ok" : "not ok", what);
	if (!ok)
		failures++;
}

static int
arith(void)
{
	int64		epoch = -1;
	int64		target = -1;
	int64		g;
	int64		last;

	/* the layout */
	check(LF_EPOCH_SHIFT == 40 && LF_EPOCH_MAX == 8388607,
		  "epoch layout: 40 counter bits, epochs up to 2^23-1");
	g = (INT64CONST(3) << LF_EPOCH_SHIFT) + 5;
	check(LF_EPOCH_OF(g) == 3 && LF_COUNTER_OF(g) == 5,
		  "epoch and counter of (3 << 40) + 5");
	check(LF_COUNTER_LIMIT == (INT64CONST(1) << 40) - (INT64CONST(1) << 24),
		  "the last 2^24 values of an epoch are never handed out");
	check(LF_HEAL_BUDGET == INT64CONST(16777216), "the heal budget is 2^24");

	/* when a timeline starts an epoch */
	check(lf_timeline_fits_epoch(LF_EPOCH_MAX) && !lf_timeline_fits_epoch(LF_EPOCH_MAX + 1),
		  "timelines up to the largest epoch fit");
	check(lf_epoch_step(0, 1, false, &epoch, &target) == LF_EPOCH_KEEP && epoch == 0,
		  "timeline 1, a fresh sequence: the epoch stays 0");
	check(lf_epoch_step(41, 1, false, &epoch, &target) == LF_EPOCH_KEEP && epoch == 0,
		  "timeline 1, sequence written on it: keep epoch 0");
	check(lf_epoch_step(41, 2, false, &epoch, &target) == LF_EPOCH_START && target == 2,
		  "timeline 2, epoch 0 below timeline - 1 (a missing history file): start epoch 0 + 2");
	check(lf_epoch_step((INT64CONST(1) << LF_EPOCH_SHIFT) + 41, 2, false, &epoch, &target) == LF_EPOCH_KEEP,
		  "timeline 2, epoch 1, written on it: keep");
	last = (INT64CONST(5) << LF_EPOCH_SHIFT) + 100;
	check(lf_epoch_step(last, 2, true, &epoch, &target) == LF_EPOCH_START &&
		  epoch == 5 && target == 7,
		  "sequence written before the timeline began: epoch 5 + timeline 2 = 7");
	check(lf_epoch_step(last, 2, false, &epoch, &target) == LF_EPOCH_KEEP && epoch == 5,
		  "sequence written on this timeline: keep epoch 5");
	last = (INT64CONST(5) << LF_EPOCH_SHIFT) + LF_COUNTER_LIMIT;
	check(lf_epoch_step(last, 2, false, &epoch, &target) == LF_EPOCH_EXHAUSTED,
		  "a counter at the limit: the epoch is exhausted");
	check(lf_epoch_step(last - 1, 2, false, &epoch, &target) == LF_EPOCH_KEEP,
		  "a counter one below the limit: not exhausted");
	last = (LF_EPOCH_MAX - 1) << LF_EPOCH_SHIFT;
	check(lf_epoch_step(last, 2, true, &epoch, &target) == LF_EPOCH_NONE_LEFT,
		  "epoch 2^23-2 + timeline 2: no epoch left");
	check(lf_epoch_step(last, 1, true, &epoch, &target) == LF_EPOCH_START &&
		  target == LF_EPOCH_MAX,
		  "epoch 2^23-2 + timeline 1: the last epoch");

	/* a draw */
	g = (INT64CONST(2) << LF_EPOCH_SHIFT) + 7;
	check(!lf_draw_exhausted(g, 2), "a value of the epoch it was drawn in is handed out");
	check(lf_draw_exhausted(g, 1), "a value of another epoch is not");
	check(lf_draw_exhausted((INT64CONST(2) << LF_EPOCH_SHIFT) + LF_COUNTER_LIMIT, 2),
		  "a value at the counter limit is not");

	/* an advance */
	check(lf_floor_leaves_none(LF_COUNTER_LIMIT - 1) && !lf_floor_leaves_none(LF_COUNTER_LIMIT - 2),
		  "advance: a floor must leave floor + 1 to draw");

	/* an adoption */
	check(lf_epoch_above(3, 5000) == 1, "adoption: both in epoch 0: epoch 1");
	check(lf_epoch_above((INT64CONST(4) << LF_EPOCH_SHIFT) + 9, 5000) == 5,
		  "adoption: this database's own epoch 4 is the higher: epoch 5");
	check(lf_epoch_above(7, (INT64CONST(2) << LF_EPOCH_SHIFT) + LF_COUNTER_LIMIT - 1) == 3,
		  "adoption: the old primary's epoch 2, however far in it: epoch 3");
	check(lf_epoch_above(0, LF_EPOCH_MAX << LF_EPOCH_SHIFT) == LF_EPOCH_MAX + 1,
		  "adoption: above the last epoch there is none (the caller refuses it)");

	/* a heal */
	last = (INT64CONST(1) << LF_EPOCH_SHIFT) + 1000;
	check(!lf_heal_not_issued(last, last), "heal: the highest issued value itself");
	check(!lf_heal_not_issued(last + LF_HEAL_BUDGET, last), "heal: exactly the budget above");
	check(lf_heal_not_issued(last + LF_HEAL_BUDGET + 1, last), "heal: one above the budget is refused");
	check(lf_heal_not_issued((INT64CONST(2) << LF_EPOCH_SHIFT) + 1, (INT64CONST(2) << LF_EPOCH_SHIFT) - 5),
		  "heal: another epoch is refused, however close");
	check(lf_heal_not_issued((INT64CONST(1) << LF_EPOCH_SHIFT) + LF_COUNTER_LIMIT - 1,
							 (INT64CONST(1) << LF_EPOCH_SHIFT) + LF_COUNTER_LIMIT - 10),
		  "heal: a floor that leaves nothing to draw is refused");
	check(!lf_heal_over_budget(last + 10, last, LF_HEAL_BUDGET - 10) &&
		  lf_heal_over_budget(last + 11, last, LF_HEAL_BUDGET - 10),
		  "heal: what earlier heals used counts against the budget");
	check(lf_heal_over_budget(last + 1, last, LF_HEAL_BUDGET), "heal: a used-up budget moves nothing");

	/* a generation as the scripts carry it */
	check(lf_parse_canonical_generation("9223372036854775807", 19, &g) && g == PG_INT64_MAX,
		  "generation text: the largest bigint");
	check(lf_parse_canonical_generation("0", 1, &g) && g == 0, "generation text: 0");
	check(!lf_parse_canonical_generation("9223372036854775808", 19, &g) &&
		  !lf_parse_canonical_generation("99999999999999999999", 20, &g),
		  "generation text: above the largest bigint is none");
	check(!lf_parse_canonical_generation("042", 3, &g) && !lf_parse_canonical_generation("", 0, &g) &&
		  !lf_parse_canonical_generation("-5", 2, &g) && !lf_parse_canonical_generation("7 ", 2, &g) &&
		  !lf_parse_canonical_generation("+7", 2, &g),
		  "generation text: leading zero, empty, sign or blank is none");
	check(lf_parse_canonical_generation("12x", 2, &g) && g == 12,
		  "generation text: only len bytes are read");

	/* validity after a request */
	check(lf_validity_after(10000, 100) == 10000 - 100 - 102,
		  "validity: ttl - elapsed - (1% of ttl + 2 ms)");
	check(lf_validity_after(100, 0) == 97, "validity of a 100 ms lease, no time elapsed");

	/* replies beyond their bound, refused as they arrive */
	{
		LfReplyBound b;
		redisReader *r;
		void	   *reply = NULL;
		static char wide[16384];
		size_t		wlen;
		int			i;
		int			j;

		r = lf_bounded_reader(&b);
		redisReaderFeed(r, "*2147483647\r\n", 14);
		check(redisReaderGetReply(r, &reply) != REDIS_OK && reply == NULL &&
			  strstr(b.oversized, "an array of 2147483647 elements") != NULL,
			  "bound: an array header of 2^31-1 elements is refused before it is allocated");
		redisReaderFree(r);

		/* a thousand arrays of a thousand: each small, all together too many */
		r = lf_bounded_reader(&b);
		/* (the outer array and two inner ones: the second is refused) */
		wlen = 0;
		wlen += sprintf(wide + wlen, "*1000\r\n");
		for (i = 0; i < 2; i++)
		{
			wlen += sprintf(wide + wlen, "*1000\r\n");
			for (j = 0; j < (i == 0 ? 1000 : 0); j++)
				wlen += sprintf(wide + wlen, ":1\r\n");
		}
		redisReaderFeed(r, wide, wlen);
		check(redisReaderGetReply(r, &reply) != REDIS_OK && reply == NULL &&
			  strstr(b.oversized, "an array of 1000 elements (at most 1024") != NULL,
			  "bound: nested arrays count together (1,000 + 1,000 elements is too many), the part read is freed");
		redisReaderFree(r);

		/* exactly at the bound, twice: each reply has a bound of its own */
		r = lf_bounded_reader(&b);
		wlen = 0;
		wlen += sprintf(wide + wlen, "*2\r\n*511\r\n");
		for (j = 0; j < 511; j++)
			wlen += sprintf(wide + wlen, ":1\r\n");
		wlen += sprintf(wide + wlen, "*511\r\n");
		for (j = 0; j < 511; j++)
			wlen += sprintf(wide + wlen, ":1\r\n");
		for (i = 0; i < 2; i++)
		{
			redisReaderFeed(r, wide, wlen);
			reply = NULL;
			check(redisReaderGetReply(r, &reply) == REDIS_OK && reply != NULL &&
				  ((redisReply *) reply)->elements == 2 && b.oversized[0] == '\0',
				  i == 0 ? "bound: a reply of 1,024 elements in all is read" :
				  "bound: and so is the next one, once the count starts again");
			if (reply)
				freeReplyObject(reply);
			b.elements = 0;
		}
		redisReaderFree(r);

		/* bytes: a bulk string that announces 200 MB */
		r = lf_bounded_reader(&b);
		redisReaderFeed(r, "*2\r\n:1\r\n$200000000\r\n", 22);
		check(redisReaderGetReply(r, &reply) == REDIS_OK && reply == NULL &&
			  lf_reader_has_room(r, 65536 - (r->len - r->pos)) &&
			  !lf_reader_has_room(r, 65536 - (r->len - r->pos) + 1) &&
			  strstr(b.oversized, "more than 65536 bytes") != NULL,
			  "bound: no more than 64 kB of a reply is held unparsed");
		redisReaderFree(r);

		b.limits = &lf_large_reply;
		check(b.limits->elements == 1024 * 1024 && lf_small_reply.elements == 1024,
			  "bound: CLUSTER SLOTS and ROLE have the larger bound");
	}

	/* bytes from Redis as text (what becomes a reason or an identity) */
	{
		char		t[16];

		check(strcmp(lf_redis_text(t, sizeof(t), "a1b2", 4), "a1b2") == 0,
			  "text from Redis: printable ASCII as it is");
		check(strcmp(lf_redis_text(t, sizeof(t), "a\xff\xc3\x28z", 5), "a\\xff\\xc3(z") == 0,
			  "text from Redis: bytes of 0x80 and above as \\xNN (no invalid UTF-8 is kept)");
		check(strcmp(lf_redis_text(t, sizeof(t), "a\0b\r\n", 5), "a\\x00b\\x0d\\x0a") == 0,
			  "text from Redis: NUL and control characters as \\xNN (a NUL does not end it early)");
		check(strcmp(lf_redis_text(t, 8, "abcd\x80", 5), "abcd") == 0,
			  "text from Redis: cut to fit, never inside an escape");
		check(strcmp(lf_redis_text(t, sizeof(t), "\xc3\xa9", 2), "\\xc3\\xa9") == 0,
			  "text from Redis: valid UTF-8 escaped too (valid in every server encoding)");
		check(lf_printable_host("10.0.0.1", 8) && lf_printable_host("redis-1.example", 15),
			  "host from Redis: a name or an address");
		check(!lf_printable_host("", 0) && !lf_printable_host("a b", 3) &&
			  !lf_printable_host("h\xc3\xa9", 3) && !lf_printable_host("h\n", 2),
			  "host from Redis: empty, a blank, a control character or non-ASCII is none");
	}

	return failures ? 1 : 0;
}

static int
unhex(const char *hex, char *out, size_t max, size_t *len)
{
	size_t		n = strlen(hex);
	size_t		i;

	if (n % 2 != 0 || n / 2 > max)
		return -1;
	for (i = 0; i < n / 2; i++)
	{
		unsigned int b;

		if (sscanf(hex + 2 * i, "%2x", &b) != 1)
			return -1;
		out[i] = (char) b;
	}
	*len = n / 2;
	return 0;
}

/* the answer as a line (value as hex: it may hold blanks) */
static void
format_answer(const LfAnswer *a, char *buf, size_t len)
{
	char		value[2 * LF_VALUELEN + 1] = "null";
	char		pttl[32] = "null";
	char		ev[2 * LF_ELECTION_VALUE_MAX + 1] = "null";
	size_t		i;

	if (a->has_election_value)
	{
		ev[0] = '\0';
		for (i = 0; i < (size_t) a->election_value_len; i++)
			snprintf(ev + 2 * i, 3, "%02x", (unsigned char) a->election_value[i]);
	}
	if (a->has_value)
	{
		value[0] = '\0';
		for (i = 0; a->value[i]; i++)
			snprintf(value + 2 * i, 3, "%02x", (unsigned char) a->value[i]);
	}
	if (a->has_pttl)
		snprintf(pttl, sizeof(pttl), INT64_FORMAT, a->pttl_ms);
	{
		/* waiters: identity hex ':' pttl, comma-separated; "null" when not a queue */
		static char waiters[LF_QUEUE_SHOWN * 150 + 8];
		size_t		w = 0;
		int			k;

		strcpy(waiters, a->outcome == LF_ANS_WAITERS ? "" : "null");
		if (a->outcome == LF_ANS_WAITERS)
			for (k = 0; k < a->n_waiters; k++)
			{
				const char *id = a->waiters[k].identity;

				if (k > 0)
					waiters[w++] = ',';
				for (i = 0; id[i]; i++)
					w += snprintf(waiters + w, 3, "%02x", (unsigned char) id[i]);
				w += snprintf(waiters + w, 24, ":" INT64_FORMAT, a->waiters[k].pttl_ms);
			}
		snprintf(buf, len, "outcome=%s generation=" INT64_FORMAT " stored=" INT64_FORMAT " pttl=%s value=%s election_value=%s position=" INT64_FORMAT " waiters=%s",
				 lf_answer_table_name(a->outcome), a->generation, a->stored, pttl, value, ev,
				 a->position, waiters);
	}
}

/*
 * Feed bytes[0..len) to a new reader in the pieces that cuts[] marks (ncuts
 * cut points, ascending), take one reply, decode it as script's.  False
 * (why in err) when the reader failed, gave no reply, or left bytes over.
 */
static bool
read_and_decode(LfScript script, const char *bytes, size_t len, const size_t *cuts, size_t ncuts,
				char *line, size_t linelen, char *err, size_t errlen)
{
	redisReader *r = redisReaderCreate();
	void	   *reply = NULL;
	void	   *extra = NULL;
	size_t		from = 0;
	size_t		i;
	LfAnswer	ans;
	bool		ok = true;

	for (i = 0; i <= ncuts && ok; i++)
	{
		size_t		to = i < ncuts ? cuts[i] : len;

		/* before the last piece, no reply may be complete yet */
		if (redisReaderFeed(r, bytes + from, to - from) != REDIS_OK)
		{
			snprintf(err, errlen, "the reader refused the bytes");
			ok = false;
		}
		else if (i < ncuts)
		{
			if (redisReaderGetReply(r, &reply) != REDIS_OK || reply != NULL)
			{
				snprintf(err, errlen, "a reply before its last byte (cut at %zu)", to);
				ok = false;
			}
		}
		from = to;
	}
	if (ok && (redisReaderGetReply(r, &reply) != REDIS_OK || reply == NULL))
	{
		snprintf(err, errlen, "no reply from the reader");
		ok = false;
	}
	if (ok && (redisReaderGetReply(r, &extra) != REDIS_OK || extra != NULL))
	{
		snprintf(err, errlen, "bytes left over after the reply");
		ok = false;
	}
	if (ok)
	{
		lf_decode_reply(script, (redisReply *) reply, &ans);
		format_answer(&ans, line, linelen);
		if (ans.waiters)
			pfree(ans.waiters);
	}
	if (reply)
		freeReplyObject(reply);
	if (extra)
		freeReplyObject(extra);
	redisReaderFree(r);
	return ok;
}

static bool
script_by_name(const char *name, LfScript *out)
{
	int			s;

	for (s = 0; s < LF_NUM_SCRIPTS; s++)
		if (strcmp(lf_script_name((LfScript) s), name) == 0)
		{
			*out = (LfScript) s;
			return true;
		}
	return false;
}

static void
reply_request(const char *name, const char *hex)
{
	static char bytes[65536];
	static size_t cuts[65536];
	size_t		len;
	size_t		i;
	LfScript	script;
	char		whole[4096];
	char		other[4096];
	char		err[256];

	if (!script_by_name(name, &script))
	{
		printf("error=no script %s\n", name);
		return;
	}
	if (unhex(hex, bytes, sizeof(bytes), &len) != 0 || len == 0)
	{
		printf("error=bad hex\n");
		return;
	}
	/* whole */
	if (!read_and_decode(script, bytes, len, NULL, 0, whole, sizeof(whole), err, sizeof(err)))
	{
		printf("error=whole: %s\n", err);
		return;
	}
	/* in two pieces, at every split point */
	for (i = 1; i < len; i++)
	{
		cuts[0] = i;
		if (!read_and_decode(script, bytes, len, cuts, 1, other, sizeof(other), err, sizeof(err)))
		{
			printf("error=two pieces cut at %zu: %s\n", i, err);
			return;
		}
		if (strcmp(whole, other) != 0)
		{
			printf("error=two pieces cut at %zu decode as %s, whole as %s\n", i, other, whole);
			return;
		}
	}
	/* byte by byte */
	for (i = 1; i < len; i++)
		cuts[i - 1] = i;
	if (!read_and_decode(script, bytes, len, cuts, len - 1, other, sizeof(other), err, sizeof(err)))
	{
		printf("error=byte by byte: %s\n", err);
		return;
	}
	if (strcmp(whole, other) != 0)
	{
		printf("error=byte by byte decodes as %s, whole as %s\n", other, whole);
		return;
	}
	printf("%s\n", whole);
}

static void
transport_request(const char *name)
{
	static const struct
	{
		const char *name;
		LfSendResult r;
	}			requests[] = {
		{"not_sent", LF_NOT_SENT},
		{"no_reply", LF_NO_REPLY},
		{"interrupted", LF_SEND_INTERRUPTED},
	};
	size_t		i;

	for (i = 0; i < lengthof(requests); i++)
		if (strcmp(requests[i].name, name) == 0)
		{
			LfAnswer	ans;

			lf_decode_send_result(requests[i].r, "test", &ans);
			printf("outcome=%s\n", lf_answer_table_name(ans.outcome));
			return;
		}
	printf("error=no such request %s\n", name);
}

int
main(int argc, char **argv)
{
	static char line[200000];

	if (argc > 1 && strcmp(argv[1], "--arith") == 0)
		return arith();

	setvbuf(stdout, NULL, _IOLBF, 0);
	while (fgets(line, sizeof(line), stdin))
	{
		char	   *cmd = strtok(line, " \n");
		char	   *a1 = strtok(NULL, " \n");
		char	   *a2 = strtok(NULL, " \n");

		if (cmd == NULL)
			continue;
		if (strcmp(cmd, "reply") == 0 && a1 && a2)
			reply_request(a1, a2);
		else if (strcmp(cmd, "transport") == 0 && a1)
			transport_request(a1);
		else if (strcmp(cmd, "outcomes") == 0)
		{
			int			o;

			for (o = 0; o < LF_NUM_ANSWER_OUTCOMES; o++)
				if (o != LF_ANS_INTERRUPTED && o != LF_ANS_SENT_DEFERRED)
					printf("%s%s", o ? " " : "", lf_answer_outcome_name((LfAnswerOutcome) o));
			printf("\n");
		}
		else if (strcmp(cmd, "statuses") == 0)
		{
			const char *sep = "";

#define LF_UNIT_STATUS(id, operation, outcome) \
			if (strcmp(operation, "acquire") == 0 || strcmp(operation, "renew") == 0 || \
				strcmp(operation, "release") == 0) \
			{ \
				printf("%s%s:%s", sep, operation, outcome); \
				sep = " "; \
			}
			LF_COUNTERS(LF_UNIT_STATUS)
#undef LF_UNIT_STATUS
			printf("\n");
		}
		else if (strcmp(cmd, "scripts") == 0)
		{
			int			s;

			for (s = 0; s < LF_NUM_SCRIPTS; s++)
				printf("%s%s", s ? " " : "", lf_script_name((LfScript) s));
			printf("\n");
		}
		else
			printf("error=bad request\n");
	}
	return 0;
}

/*-------------------------------------------------------------------------
 *
 * generation_math.h
 *	  The arithmetic of generations, pure: the epoch layout, when a timeline
 *	  starts a new epoch, when an epoch is exhausted, and how far a heal may
 *	  move the generations.  generation.c decides with these and raises its
 *	  errors; the server-less unit test (test/unit/c.sh) calls them as they
 *	  are.  c.h-level types only.
 *
 * IDENTIFICATION
 *	  src/fence/generation_math.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LF_GENERATION_MATH_H
#define LF_GENERATION_MATH_H

/*
 * generation = (epoch << LF_EPOCH_SHIFT) + counter.  The epoch has the 23
 * bits above the counter's 40 (a bigint is positive), and the last 2^24
 * values of each epoch are never handed out: a counter that reached them is
 * exhausted (an ERROR), it never runs on into the next epoch, which a later
 * timeline may start.  The margin only has to cover draws racing past the
 * check before they see it, at most one per backend.
 */
#define LF_EPOCH_SHIFT 40
#define LF_EPOCH_MAX ((INT64CONST(1) << (63 - LF_EPOCH_SHIFT)) - 1)
#define LF_COUNTER_MASK ((INT64CONST(1) << LF_EPOCH_SHIFT) - 1)
#define LF_COUNTER_LIMIT (LF_COUNTER_MASK + 1 - (INT64CONST(1) << 24))
#define LF_EPOCH_OF(v) ((v) >> LF_EPOCH_SHIFT)
#define LF_COUNTER_OF(v) ((v) & LF_COUNTER_MASK)

/*
 * How far stale answers may move the sequence by themselves, in total, since
 * the install or a superuser's last advance_generation() (generation.c says
 * why): 2^24.
 */
#define LF_HEAL_BUDGET (INT64CONST(1) << 24)

/* what a draw (or an advance) must do first about the epoch */
typedef enum LfEpochStep
{
	LF_EPOCH_KEEP,				/* the current epoch, which has values left */
	LF_EPOCH_EXHAUSTED,			/* the current epoch, which has none left */
	LF_EPOCH_START,				/* a new epoch: *target */
	LF_EPOCH_NONE_LEFT			/* a new epoch is due, and none is left */
} LfEpochStep;

/* Can a generation's epoch be as large as timeline tli? */
static inline bool
lf_timeline_fits_epoch(int64 tli)
{
	return tli <= LF_EPOCH_MAX;
}

/*
 * On timeline tli, with the sequence at last_value: is a new epoch due, and
 * which?  seq_before_timeline: the sequence was last written before the
 * timeline began (a promotion, a point-in-time recovery).  A new epoch is
 * the current one plus the timeline's number; as a second net, for a
 * history file that has gone missing, the epoch is never below tli - 1.
 * *epoch is the current epoch.
 */
static inline LfEpochStep
lf_epoch_step(int64 last_value, int64 tli, bool seq_before_timeline,
			  int64 *epoch, int64 *target)
{
	*epoch = LF_EPOCH_OF(last_value);
	if (!(seq_before_timeline || *epoch < tli - 1))
		return LF_COUNTER_OF(last_value) >= LF_COUNTER_LIMIT ? LF_EPOCH_EXHAUSTED : LF_EPOCH_KEEP;
	*target = *epoch + tli;
	return *target > LF_EPOCH_MAX ? LF_EPOCH_NONE_LEFT : LF_EPOCH_START;
}

/*
 * The epoch an adoption moves to: one above the epochs of own (this
 * database's highest issued) and top (the highest generation of the
 * database it replaced); above LF_EPOCH_MAX when none is left.
 */
static inline int64
lf_epoch_above(int64 own, int64 top)
{
	return Max(LF_EPOCH_OF(own), LF_EPOCH_OF(top)) + 1;
}

/* Is value, drawn in epoch, no generation to hand out? */
static inline bool
lf_draw_exhausted(int64 value, int64 epoch)
{
	return LF_EPOCH_OF(value) != epoch || LF_COUNTER_OF(value) >= LF_COUNTER_LIMIT;
}

/* After floor, is there no generation left to draw (floor + 1)? */
static inline bool
lf_floor_leaves_none(int64 floor)
{
	return LF_COUNTER_OF(floor) >= LF_COUNTER_LIMIT - 1;
}

/*
 * A heal to floor, with last the highest issued (last <= floor): could this
 * database not have issued floor?  Another epoch, more than the whole heal
 * budget above last, or no generation left after it.
 */
static inline bool
lf_heal_not_issued(int64 floor, int64 last)
{
	return LF_EPOCH_OF(floor) != LF_EPOCH_OF(last) ||
		floor - last > LF_HEAL_BUDGET ||
		lf_floor_leaves_none(floor);
}

/* ... and with used of the budget used by earlier heals: too far? */
static inline bool
lf_heal_over_budget(int64 floor, int64 last, int64 used)
{
	return floor - last > LF_HEAL_BUDGET - used;
}

#endif							/* LF_GENERATION_MATH_H */

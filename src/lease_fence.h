/*-------------------------------------------------------------------------
 *
 * lease_fence.h
 *	  Declarations shared by the lease_fence source files.
 *
 * IDENTIFICATION
 *	  src/lease_fence.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LEASE_FENCE_H
#define LEASE_FENCE_H

#include "utils/elog.h"

/* SQLSTATEs of class LF: see README.md */
#define ERRCODE_LF_STALE_GENERATION			MAKE_SQLSTATE('L','F','0','0','1')
#define ERRCODE_LF_MISSING_GENERATION		MAKE_SQLSTATE('L','F','0','0','2')
#define ERRCODE_LF_CONFLICTING_GENERATION	MAKE_SQLSTATE('L','F','0','0','3')
#define ERRCODE_LF_LEASE_LOST_AT_COMMIT		MAKE_SQLSTATE('L','F','0','1','0')

/* name of the GUC that carries the current generation */
#define LF_GENERATION_GUC "lease_fence.generation"

/* lease_fence.c: the current generation, parsed from the GUC */
extern bool lf_generation_is_set;
extern int64 lf_generation;

extern void lf_define_generation_guc(void);

/* generation.c */
extern int64 lf_draw_generation(void);

#endif							/* LEASE_FENCE_H */

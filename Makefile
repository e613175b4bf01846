# lease_fence — PGXS build
#
# make                      build the module
# make install              install it into the PostgreSQL found by $(PG_CONFIG)
# make installcheck         run the pg_regress, isolation and TAP suites against a
#                           running server (test/run.sh does it all on a throwaway one)
# make bench                the benchmarks (test/bench/run.sh)
# make faults               the fault-injection run (test/faults/run.sh): workers
#                           acquire -> fenced write -> release (some stalling
#                           past their TTL) while Sentinel, Cluster and
#                           PostgreSQL fail over and Redis loses leases, the
#                           checks, then the run against two mutant builds
# make dist                 dist/lease_fence-VERSION.zip for PGXN, from the
#                           committed HEAD (git archive; VERSION from META.json)

EXTENSION = lease_fence
MODULE_big = lease_fence
# one folder per layer, lowest first (docs/design.md, "The layers"):
# src/base, src/fence, src/redis, src/lease, then src/lease_fence.c on top.
# test/layers.sh reads a file's layer from its folder and checks that every
# call goes down
LAYERS = base fence redis lease
OBJS = $(foreach l,$(LAYERS),$(patsubst %.c,%.o,$(sort $(wildcard src/$(l)/*.c)))) \
	src/lease_fence.o
PG_CPPFLAGS += -I$(CURDIR)/src

DATA = lease_fence--1.0.sql lease_fence--1.0--1.1.sql lease_fence--1.1--1.2.sql lease_fence--1.2--1.3.sql \
	lease_fence--1.3--1.4.sql lease_fence--1.4--1.5.sql
PGFILEDESC = "lease_fence - fencing tokens for Redis leases"

# every file of sql/, in name order (each runs alone: see --load-extension
# below); a new sql/NAME.sql with its expected/NAME.out is in the suite
REGRESS = $(sort $(basename $(notdir $(wildcard sql/*.sql))))
REGRESS_OPTS = --inputdir=.

# every spec of test/specs/, in name order, but fence_concurrency first: it
# creates and drops the extension in each permutation (CREATE EXTENSION, not
# IF NOT EXISTS), and the others leave it installed in the one database
# pg_isolation_regress makes
ISOLATION = fence_concurrency $(filter-out fence_concurrency,$(sort $(basename $(notdir $(wildcard test/specs/*.spec)))))
ISOLATION_OPTS = --inputdir=test

# pg_regress creates the extension in its database before the first file, so
# that each file runs alone (LF_REGRESS=stats); a file that drops the
# extension leaves it installed again
REGRESS_OPTS += --load-extension=lease_fence

TAP_TESTS = 1
PROVE_TESTS = test/t/*.pl

# hiredis for the Redis protocol (its reader and formatter only), OpenSSL
# for TLS to Redis
SHLIB_LINK = -lhiredis -lssl -lcrypto

PG_CONFIG ?= pg_config

# Warnings are errors in CI and in test/run.sh (WERROR=1); a plain build on a
# newer compiler should not fail on a new warning.
PG_CFLAGS += -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers
ifeq ($(WERROR),1)
PG_CFLAGS += -Werror
endif

# the Lua scripts, one file each (scripts/README.md), which the client
# libraries run too: embedded into src/redis/lua_scripts.h with their SHA1s at
# build time (scripts/embed.sh), for src/redis/redis_script.c only
LUA_SCRIPTS = scripts/acquire.lua scripts/renew.lua scripts/release.lua \
	scripts/check.lua scripts/claim.lua scripts/takeover.lua \
	scripts/holder.lua scripts/leader.lua scripts/seize.lua \
	scripts/acquire_fair.lua scripts/leave.lua scripts/queue.lua

EXTRA_CLEAN = output_iso tmp_check src/redis/lua_scripts.h src/redis/lua_scripts.h.tmp

PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# (after the include, so that "all" stays the default goal; the .bc is the
# JIT's bitcode, compiled from the same source when PostgreSQL has LLVM)
src/redis/lua_scripts.h: scripts/embed.sh scripts/answers.json $(LUA_SCRIPTS)
	$(SHELL) scripts/embed.sh $(LUA_SCRIPTS) >$@.tmp || { rm -f $@.tmp; exit 1; }
	mv $@.tmp $@
src/redis/redis_script.o src/redis/redis_script.bc: src/redis/lua_scripts.h

# make bench: throwaway servers, interleaved runs, a table of ratios and a plot
# in test/bench/results/ (about 19 minutes on 2 CPUs, 8 of them section 7)
.PHONY: bench
bench:
	bash test/bench/run.sh

# make faults: throwaway servers, five fault scenarios of about
# LF_FAULTS_SECONDS each (default 20), the checks with their evidence and the
# availability per fault, then the self-test: a fence that accepts a lower
# generation and an acquire without NX must each fail it (settings at the
# head of test/faults/run.sh)
.PHONY: faults
faults:
	bash test/faults/run.sh

# make dist: the release archive, as pgvector makes it — what is committed
# at HEAD (uncommitted changes are not in it), under lease_fence-VERSION/;
# .gitattributes leaves out what only this repository's CI uses
EXTVERSION = $(shell sed -nE '0,/"version"/s/^ *"version": *"([^"]+)".*/\1/p' META.json)
.PHONY: dist
dist:
	mkdir -p dist
	git archive --format zip --prefix=$(EXTENSION)-$(EXTVERSION)/ --output dist/$(EXTENSION)-$(EXTVERSION).zip HEAD

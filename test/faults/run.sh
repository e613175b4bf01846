#!/usr/bin/env bash
# test/faults/run.sh — `make faults`: the fault-injection run of lease_fence
# (test/faults/faults.py, with test/faults/worker.py as its workers), from a
# fresh machine.
#
# As root it installs the Debian packages it needs, builds the extension as
# the postgres user in a private copy of the tree and of PostgreSQL (as
# test/run.sh does), then runs the five scenarios — Sentinel, Cluster,
# PostgreSQL failover with a synchronous standby, Redis losing leases
# (redis_min_replicas = 0, a replication cut), PostgreSQL failover to a
# cut-off asynchronous standby — each on servers of its own in the temp dir,
# stops everything, and prints the checks ("ok - ..." / "not ok - ...",
# each with the evidence it saw), the availability per fault and "N passed,
# N failed"; then its self-test (test/faults/mutants.py): the run against a
# build whose fence accepts a lower generation and one whose acquire has no
# NX must fail, naming the broken property ("ok - mutant ... caught by ...").
#
# Settings (environment):
#   LF_FAULTS_SECONDS=20      per scenario (longer when a fault must wait
#                             for the servers to settle first)
#   LF_FAULTS_WORKERS=6       worker processes, one connection each
#   LF_FAULTS_RESOURCES=3     resources (one item row each)
#   LF_FAULTS_SCENARIOS="sentinel cluster postgres lossy postgres-async"
#   LF_FAULTS_TTL_MS=3000 LF_FAULTS_WAIT_MS=2000 LF_FAULTS_SEED=N
#   LF_FAULTS_STALL=0.05      the fraction of jobs that stall past their TTL
#   LF_FAULTS_STALL_TTL_MS=200  their TTL (they sleep it plus 100 ms)
#   LF_FAULTS_MUTANTS="fence-accepts-lower acquire-without-nx"  (none: skip)
#   LF_FAULTS_MUTANT_SECONDS=6 LF_FAULTS_MUTANT_SCENARIO=lossy
#   LF_PG=15                  the PostgreSQL (as for test/run.sh)
#   LF_KEEP=1                 keep the temp dir (worker logs, server logs)
set -uo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
. "$top/test/lib.sh"

lf_need_packages python3-psycopg python3-redis || exit 1
trap lf_cleanup EXIT
lf_make_workdir "$top" || exit 1
lf_build_install || exit 1
lf_log "$("$PG_BIN/postgres" --version); work dir $LF_WORK"
lf_faults
rc=$?
# the self-test: the run must fail against each mutant build
lf_faults_mutants || rc=1
exit $rc

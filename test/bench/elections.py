#!/usr/bin/python3
"""test/bench/elections.py — failover and the split-brain window of
lease_fence.campaign() (section 8 of test/bench/run.sh).

Usage: elections.py ROUNDS TTL_MS

Connects with libpq's environment (PGHOST, PGPORT, PGUSER, PGDATABASE: the
bench's own server) and prints one CSV line per sample on stdout, as
run.sh's samples.csv has them (section,variant,round,value,unit); progress
and notes go to stderr.  It measures, ROUNDS times each, on one election:

  frozen     a leader campaigns with ttl_ms TTL_MS and then never renews (its
             client is not stopped: it simply sends nothing more, and its
             backend stays idle and healthy, which is what a SIGSTOPped or
             GC-paused client looks like to the server); a follower already
             waits in campaign(election, TTL_MS) with wait_ms NULL.  The
             sample is the follower's campaign returning minus (the time
             taken just before the leader's campaign was sent + TTL_MS): the
             excess over the TTL, an upper bound (the lease was granted, and
             ran out in Redis, a little after that time).
  resign     the leader calls resign() while the follower waits: from resign
             returning to the follower's campaign returning (the follower
             may win before the resigner has read resign's answer: then the
             sample is negative); resign_sent: from just before resign was
             sent (an upper bound).
  close      the leader's client closes its connection (its backend exits
             and releases the session-scoped lease): from the close.
  terminate  pg_terminate_backend() of the leader's backend from a third
             session: from pg_terminate_backend returning.
  (the handover variants campaign with a TTL of 10 x TTL_MS: a follower that
  won only by the TTL would show it.)
  split      the split-brain window: the old leader campaigns with TTL_MS,
             never renews, and writes in a loop under its term, each write a
             transaction: SELECT lease_fence.set_generation(term, election);
             then one statement that takes the next value of a commit-order
             counter and inserts a row (term, counter value).  The new leader
             waits in campaign() inside a transaction that, once campaign
             returns, takes the next counter value too, and commits.  The
             counter is one row updated by each transaction as its last
             statement: the row lock is held to COMMIT, so the counter's
             values are in the order the transactions committed.  An
             old-term row whose counter value is above the new leader's
             committed after the new leader's campaign did: old_after counts
             them (the guarantee: 0).  Also: old-term rows accepted in the
             round, those committed after the old lease ran out by the old
             leader's clock (legitimate: no newer term had fenced the
             election yet), and the writes refused (LF001 / LF010).
"""
import sys
import threading
import time

import psycopg

ELECTION = "bench:election"
SETTLE_S = 0.1          # a follower active this long is in its wait


def out(section, variant, rnd, value, unit):
    print(f"{section},{variant},{rnd},{value},{unit}", flush=True)


def connect():
    return psycopg.connect("", autocommit=True)


def campaign_now(conn, ttl_ms):
    """Win the (free) election: wait_ms 0, once more on 'stale'."""
    for _ in range(3):
        status, identity, term = conn.execute(
            "SELECT status, identity, term FROM lease_fence.campaign(%s, %s::bigint, 0)",
            (ELECTION, ttl_ms)).fetchone()
        if status == "acquired":
            return identity, term
        if status != "stale":
            break
    sys.exit(f"elections: the leader's campaign answered {status}")


class Follower(threading.Thread):
    """A session waiting in campaign(election, ttl, wait_ms NULL)."""

    def __init__(self, ttl_ms, in_transaction=False, after=None):
        super().__init__(daemon=True)
        self.conn = connect()
        self.pid = self.conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        # never forever: a lost wake-up would hang the bench
        self.conn.execute("SELECT set_config('statement_timeout', %s, false)",
                          (str(10 * ttl_ms + 60000),))
        self.ttl_ms = ttl_ms
        self.in_transaction = in_transaction
        self.after = after
        self.result = None
        self.returned = None
        self.error = None

    def run(self):
        try:
            if self.in_transaction:
                with self.conn.transaction():
                    self.result = self.conn.execute(
                        "SELECT status, identity, term FROM lease_fence.campaign(%s, %s::bigint)",
                        (ELECTION, self.ttl_ms)).fetchone()
                    self.returned = time.monotonic()
                    if self.after:
                        self.after(self.conn)
                self.committed = time.monotonic()
            else:
                self.result = self.conn.execute(
                    "SELECT status, identity, term FROM lease_fence.campaign(%s, %s::bigint)",
                    (ELECTION, self.ttl_ms)).fetchone()
                self.returned = time.monotonic()
        except Exception as e:          # reported by the main thread
            self.error = e

    def won(self):
        self.join()
        if self.error is not None:
            sys.exit(f"elections: the follower's campaign failed: {self.error!r}")
        if self.result[0] != "acquired":
            sys.exit(f"elections: the follower's campaign answered {self.result[0]}")
        return self.result


def wait_active(monitor, pid):
    """Until the backend pid runs its statement (the campaign), then SETTLE_S."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        st = monitor.execute("SELECT state FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
        if st and st[0] == "active":
            time.sleep(SETTLE_S)
            return time.monotonic()
        time.sleep(0.002)
    sys.exit(f"elections: the follower (pid {pid}) never started its campaign")


def resign(conn, identity):
    released, status = conn.execute(
        "SELECT released, status FROM lease_fence.resign(%s, %s)", (ELECTION, identity)).fetchone()
    return status


def frozen(monitor, rounds, ttl_ms):
    r = 1
    while r <= rounds:
        leader = connect()
        t0 = time.monotonic()            # before the campaign is sent
        identity, term = campaign_now(leader, ttl_ms)
        f = Follower(ttl_ms)
        f.start()
        seen = wait_active(monitor, f.pid)
        if seen - SETTLE_S >= t0 + ttl_ms / 1000.0:
            # the follower was not waiting before the lease ran out: redo
            print(f"elections: frozen round {r}: the follower started late, round again", file=sys.stderr)
            f.won()
            resign(f.conn, f.result[1])
            f.conn.close()
            leader.close()
            continue
        # the leader sends nothing more: no renew
        _, new_identity, new_term = f.won()
        if new_term <= term:
            sys.exit(f"elections: the new term {new_term} is not above the old one {term}")
        out("election_frozen", "excess", r, f"{(f.returned - (t0 + ttl_ms / 1000.0)) * 1000:.3f}", "ms")
        resign(f.conn, new_identity)
        f.conn.close()
        leader.close()
        r += 1


def handover(monitor, r, ttl_ms, how):
    """One round of a handover: resign, close or terminate."""
    leader = connect()
    lpid = leader.execute("SELECT pg_backend_pid()").fetchone()[0]
    identity, term = campaign_now(leader, ttl_ms)
    f = Follower(ttl_ms)
    f.start()
    wait_active(monitor, f.pid)
    sent = time.monotonic()
    if how == "resign":
        status = resign(leader, identity)
        if status != "released":
            sys.exit(f"elections: resign answered {status}")
    elif how == "close":
        leader.close()
    else:
        if not monitor.execute("SELECT pg_terminate_backend(%s)", (lpid,)).fetchone()[0]:
            sys.exit("elections: pg_terminate_backend failed")
    done = time.monotonic()
    _, new_identity, new_term = f.won()
    if new_term <= term:
        sys.exit(f"elections: the new term {new_term} is not above the old one {term}")
    out("election_handover", how, r, f"{(f.returned - done) * 1000:.3f}", "ms")
    if how == "resign":
        out("election_handover", "resign_sent", r, f"{(f.returned - sent) * 1000:.3f}", "ms")
    resign(f.conn, new_identity)
    f.conn.close()
    if not leader.closed:
        leader.close()


def split(monitor, rounds, ttl_ms):
    monitor.execute("""
        DROP TABLE IF EXISTS bench_election_order, bench_election_writes;
        CREATE TABLE bench_election_order (n bigint NOT NULL);
        INSERT INTO bench_election_order VALUES (0);
        CREATE TABLE bench_election_writes (round int NOT NULL, term bigint NOT NULL,
                                            n bigint NOT NULL, late boolean NOT NULL)""")
    for r in range(1, rounds + 1):
        old = connect()
        t0 = time.monotonic()
        expiry = t0 + ttl_ms / 1000.0    # the old lease's end, by the old leader's clock
        identity, term = campaign_now(old, ttl_ms)
        stop = threading.Event()
        counts = {"accepted": 0, "late": 0, "refused": 0, "other": 0}

        def writer():
            while not stop.is_set():
                try:
                    with old.transaction():
                        old.execute("SELECT lease_fence.set_generation(%s::bigint, %s)", (term, ELECTION))
                        late = time.monotonic() > expiry
                        old.execute("WITH c AS (UPDATE bench_election_order SET n = n + 1 RETURNING n)"
                                    " INSERT INTO bench_election_writes SELECT %s, %s::bigint, n, %s FROM c",
                                    (r, term, late))
                    counts["accepted"] += 1
                    # (late: the statement began after the lease ran out by
                    # this clock, so its commit did too)
                    counts["late"] += late
                except psycopg.Error as e:
                    if e.sqlstate in ("LF001", "LF010"):
                        counts["refused"] += 1
                        continue
                    counts["other"] += 1
                    print(f"elections: split round {r}: the old leader's write failed: {e!r}", file=sys.stderr)
                    stop.set()

        marker = {}

        def take_marker(conn):
            marker["n"] = conn.execute(
                "UPDATE bench_election_order SET n = n + 1 RETURNING n").fetchone()[0]

        w = threading.Thread(target=writer, daemon=True)
        w.start()
        f = Follower(ttl_ms, in_transaction=True, after=take_marker)
        f.start()
        _, new_identity, new_term = f.won()
        # the old leader goes on writing after the new leader's COMMIT, until
        # it has been refused 20 times or 200 ms passed
        refused0 = counts["refused"]
        end = time.monotonic() + 0.2
        while time.monotonic() < end and counts["refused"] - refused0 < 20 and not stop.is_set():
            time.sleep(0.005)
        stop.set()
        w.join()
        if counts["other"]:
            sys.exit("elections: the old leader's writes failed otherwise than LF001 / LF010")
        if new_term <= term:
            sys.exit(f"elections: the new term {new_term} is not above the old one {term}")
        after = monitor.execute(
            "SELECT count(*) FROM bench_election_writes WHERE round = %s AND term = %s::bigint AND n > %s",
            (r, term, marker["n"])).fetchone()[0]
        out("election_split", "old_after", r, after, "rows")
        out("election_split", "old_accepted", r, counts["accepted"], "rows")
        out("election_split", "old_late", r, counts["late"], "rows")
        out("election_split", "refused", r, counts["refused"], "writes")
        resign(f.conn, new_identity)
        f.conn.close()
        old.close()


def main():
    rounds, ttl_ms = int(sys.argv[1]), int(sys.argv[2])
    monitor = connect()
    for what in ("frozen", "handover", "split"):
        print(f"elections: {what}, {rounds} rounds", file=sys.stderr)
        if what == "frozen":
            frozen(monitor, rounds, ttl_ms)
        elif what == "handover":
            # the three ways interleaved, the order rotated every round
            ways = ("resign", "close", "terminate")
            for r in range(1, rounds + 1):
                for how in ways[r % 3:] + ways[:r % 3]:
                    handover(monitor, r, 10 * ttl_ms, how)
        else:
            split(monitor, rounds, ttl_ms)
    monitor.close()


if __name__ == "__main__":
    main()

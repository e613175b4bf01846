"""lease_fence.leadership / aio.leadership and take_over, against a real
PostgreSQL + Redis.

The story: two candidates; the leader (a process of its own,
leader_candidate.py) is frozen with a real SIGSTOP; the other, waiting in
campaign, wins once the frozen one's lease runs out (nobody renews it);
the frozen one is thawed and its writes are refused, its rows stand as the
new leader wrote them. Then: resign hands the election on before the TTL;
the value is what leader() shows; a take_over sets the lost signal; a
take_over that finds the holder's fencing transaction open times out and
takes nothing; bad arguments are refused before anything is sent.
"""

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time

import psycopg
import pytest

import lease_fence
from lease_fence import (LeadershipLost, LeaseBusy, LeaseLost, LeaseUnavailable, StaleGeneration,
                         TakeOverTimeout, aio, acquire, fenced, leadership, release, renew,
                         take_over)
from lf_testlib import (NOREDIS_USER, aconnect, connect, lease_key, new_row, read_row, redis,
                        resource_name, wait_until)

HERE = os.path.dirname(os.path.abspath(__file__))
LEADER_SQL = ("SELECT held, term, value, ttl_ms, identity, pid, database "
              "FROM lease_fence.leader(%s)")


def leader(conn, election):
    cur = conn.execute(LEADER_SQL, (election,))
    return dict(zip([c.name for c in cur.description], cur.fetchone()))


@pytest.fixture
def conns():
    opened = []

    def open_(**kw):
        c = connect(**kw)
        opened.append(c)
        return c
    yield open_
    for c in opened:
        c.close()


def campaigning(conn, pid):
    """Whether backend ``pid`` is running its campaign statement now."""
    row = conn.execute("SELECT state, query FROM pg_stat_activity WHERE pid = %s",
                       (pid,)).fetchone()
    return row is not None and row[0] == "active" and "lease_fence.campaign" in row[1]


class Candidate:
    """leadership() in a thread: ``lead`` once it won, ``error`` if it raised;
    ``release`` (an Event) ends its block."""

    def __init__(self, conn, election, **kw):
        self.conn, self.lead, self.error = conn, None, None
        self.won, self.release = threading.Event(), threading.Event()
        self.exit_error = None
        self.thread = threading.Thread(target=self._run, args=(election, kw), daemon=True)
        self.thread.start()

    def _run(self, election, kw):
        try:
            with leadership(self.conn, election, **kw) as lead:
                self.lead = lead
                self.won.set()
                self.release.wait(120)
        except Exception as exc:                 # noqa: BLE001 - the test looks at it
            if self.lead is None:
                self.error = exc
            else:
                self.exit_error = exc
        finally:
            self.won.set()


# ------------------------------------------------------------------ the story

def test_frozen_leader_loses_and_its_writes_are_refused(conns):
    """A leads (a process of its own) and writes; SIGSTOP freezes it; B,
    waiting in campaign, wins once A's lease runs out (nobody renews it)
    with a higher term, and writes. A is thawed: its write through
    lead.fenced raises LeadershipLost — A's own check, before anything is
    sent: no renew was confirmed before the lease's validity ran out, which
    A reads off its monotonic clock on waking (lead.check() itself, and the
    deadline thread that sets lead.lost; the heartbeat's renew, answered
    'lost', would say so one round trip later) — and the same write through
    the bare fenced(conn, term, election) reaches the server and is refused
    there: StaleGeneration (LF001) on the election's resource fence, which
    B's win raised to B's term. lead.lost is set; the block's end raises
    LeadershipLost. The row holds B's write under B's term."""
    check = conns()
    election = resource_name("story")
    row_id = new_row(check)
    ttl_ms = 1500
    env = dict(os.environ)
    package_dir = os.path.dirname(os.path.dirname(lease_fence.__file__))
    env["PYTHONPATH"] = os.pathsep.join([package_dir, HERE, env.get("PYTHONPATH", "")])
    a = subprocess.Popen([sys.executable, os.path.join(HERE, "leader_candidate.py"), election,
                          str(ttl_ms), str(row_id)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, env=env)
    try:
        first = a.stdout.readline().split()
        assert first[0] == "leader", first
        a_term = int(first[1])
        assert read_row(check, row_id) == ("a", 100, a_term)
        assert leader(check, election)["term"] == a_term

        os.kill(a.pid, signal.SIGSTOP)
        b_conn, b_work = conns(), conns()
        b_conn.execute("SET statement_timeout = '120s'")    # a safety net, not a bound
        with leadership(b_conn, election, ttl_ms=10000, value="b") as b:
            assert b.term > a_term
            seen = leader(check, election)
            assert (seen["held"], seen["term"], seen["value"]) == (True, b.term, "b")
            with b.fenced(b_work):
                b_work.execute("UPDATE account SET owner = 'b' WHERE id = %s", (row_id,))

            os.kill(a.pid, signal.SIGCONT)
            a.stdin.write("go\n")
            a.stdin.flush()
            lines = [a.stdout.readline().strip() for _ in range(4)]
            assert lines[0] == "fenced LeadershipLost None", lines
            assert lines[1] == f"bare StaleGeneration {election}", lines
            assert lines[2].startswith("lost True "), lines
            assert lines[3] == "exit LeadershipLost", lines

            # B still leads: its writes stand, A's did not land
            assert not b.lost.is_set()
            b.check()
            assert read_row(check, row_id) == ("b", 100, b.term)
            with b.fenced(b_work):
                b_work.execute("UPDATE account SET balance = balance + 1 WHERE id = %s",
                               (row_id,))
        assert read_row(check, row_id) == ("b", 101, b.term)
        assert a.wait(60) == 0
    finally:
        if a.poll() is None:
            os.kill(a.pid, signal.SIGCONT)
            a.kill()
            a.wait()


# ------------------------------------------------------------------ handing on

def test_resign_hands_the_election_on_before_the_ttl(conns):
    """B waits in campaign while A leads with a TTL of ten minutes; A's block
    ends (resign) and B wins at once: its campaign returned while A's lease
    had most of its TTL left (the monotonic time since A won is below A's
    TTL), with a higher term, and leader() shows B."""
    check, a_conn, b_conn = conns(), conns(), conns()
    election = resource_name("resign")
    ttl_ms = 600000
    with leadership(a_conn, election, ttl_ms=ttl_ms, value="a") as a:
        a_won = time.monotonic()
        b = Candidate(b_conn, election, ttl_ms=10000, value="b")
        wait_until("B to campaign", lambda: campaigning(check, b_conn.info.backend_pid))
        assert not b.won.is_set()               # A leads: B waits
        a_term = a.term
    assert b.won.wait(60)
    b_won = time.monotonic()
    try:
        assert b.error is None, b.error
        assert b_won - a_won < ttl_ms / 1000.0
        assert b.lead.term > a_term
        seen = leader(check, election)
        assert (seen["held"], seen["term"], seen["value"]) == (True, b.lead.term, "b")
    finally:
        b.release.set()
        b.thread.join(60)
    assert b.exit_error is None
    after = leader(check, election)
    assert (after["held"], after["term"], after["value"]) == (False, b.lead.term, None)


def test_value_is_what_leader_shows(conns):
    """value (newlines, quotes, multibyte) is leader()'s value while this
    identity leads, with its term and identity; after the block nobody
    leads and the last term is kept."""
    check, conn = conns(), conns()
    election = resource_name("value")
    value = "host-a\n'quoted' \"x\" \u00e9\u6f22 \\"
    with leadership(conn, election, ttl_ms=10000, value=value) as lead:
        assert (lead.election, lead.value, lead.ttl_ms) == (election, value, 10000)
        assert len(lead.identity) == 32
        seen = leader(check, election)
        assert seen["held"] is True
        assert (seen["term"], seen["value"], seen["identity"]) == (lead.term, value,
                                                                   lead.identity)
        assert seen["pid"] == conn.info.backend_pid
        assert redis("GET", lease_key(election)) == lead.identity
    seen = leader(check, election)
    assert (seen["held"], seen["term"], seen["value"]) == (False, lead.term, None)


def test_idle_leader_keeps_leading_past_its_ttl(conns):
    """The heartbeat renews: a leader whose block does nothing for three TTLs
    still leads (lost unset, leader() shows its term), and another candidate
    with wait_ms gets LeaseBusy."""
    check, conn, other = conns(), conns(), conns()
    election = resource_name("idle")
    ttl_ms = 600
    with leadership(conn, election, ttl_ms=ttl_ms) as lead:
        start = time.monotonic()
        wait_until("three TTLs", lambda: time.monotonic() - start > 3 * ttl_ms / 1000.0)
        assert not lead.lost.is_set(), lead.lost_reason
        assert leader(check, election)["term"] == lead.term
        with pytest.raises(LeaseBusy):
            with leadership(other, election, ttl_ms=ttl_ms, wait_ms=0):
                pass


def test_take_over_sets_the_lost_signal(conns):
    """Another session's take_over of the election: the leader's next renew
    answers lost, lead.lost is set, check() and lead.fenced raise
    LeadershipLost, the bare fenced write StaleGeneration (the take_over's
    generation is in the resource fence), and the block's end raises
    LeadershipLost."""
    conn, work, operator = conns(), conns(), conns()
    election = resource_name("taken")
    with pytest.raises(LeadershipLost):
        with leadership(conn, election, ttl_ms=1500) as lead:
            taken = take_over(operator, election, ttl_ms=10000)
            assert taken.generation > lead.term
            assert redis("GET", lease_key(election)) == taken.identity
            assert lead.lost.wait(60)
            assert lead.lost_reason == "renew answered lost"
            with pytest.raises(LeadershipLost):
                lead.check()
            with pytest.raises(LeadershipLost):
                with lead.fenced(work):
                    pass
            with pytest.raises(StaleGeneration) as refused:
                with fenced(work, lead.term, election):
                    pass
            assert refused.value.resource == election
    assert release(operator, taken) == "released"


def test_take_over_times_out_while_the_holder_fences(conns):
    """The holder's transaction that fenced the resource stays open: a
    take_over with timeout_ms waits for it, then raises TakeOverTimeout and
    takes nothing (the holder's lease is still in Redis, its write commits).
    Once the transaction ended the take_over succeeds above the holder's
    generation, and the holder's renew answers lost."""
    holder, other, check = conns(), conns(), conns()
    res = resource_name("timeout")
    row_id = new_row(check)
    lease = acquire(holder, res, ttl_ms=60000)
    with fenced(holder, lease):
        holder.execute("UPDATE account SET owner = 'holder' WHERE id = %s", (row_id,))
        with pytest.raises(TakeOverTimeout) as timed_out:
            take_over(other, res, ttl_ms=10000, timeout_ms=200)
        assert timed_out.value.sqlstate == "55P03"
        assert isinstance(timed_out.value.__cause__, psycopg.Error)
        assert redis("GET", lease_key(res)) == lease.identity
    assert read_row(check, row_id) == ("holder", 100, lease.generation)
    taken = take_over(other, res, ttl_ms=10000)
    assert (taken.acquired, taken.status, taken.resource) == (True, "acquired", res)
    assert taken.generation > lease.generation
    with pytest.raises(LeaseLost):
        renew(holder, lease, ttl_ms=10000)
    assert release(other, taken) == "released"


def test_unavailable_redis(conns):
    """Redis unreachable: a campaign whose wait ran out raises
    LeaseUnavailable (never a silent follower; the server tries again while
    it may wait, so wait_ms=0 answers at once), take_over too (08006)."""
    conn = conns(user=NOREDIS_USER)
    election = resource_name("unavailable")
    with pytest.raises(LeaseUnavailable) as cm:
        with leadership(conn, election, ttl_ms=1000, wait_ms=0):
            pytest.fail("the block ran")
    assert cm.value.status == "unavailable"
    with pytest.raises(LeaseUnavailable):
        take_over(conn, election, ttl_ms=1000)


def test_bad_arguments_before_anything_is_sent():
    """Bad arguments raise TypeError / ValueError before anything is sent:
    on a closed connection (where any statement would raise psycopg's
    OperationalError)."""
    closed = connect()
    closed.close()
    bad_leadership = [
        (TypeError, (None, 1000), {}), (ValueError, ("", 1000), {}),
        (ValueError, ("e" * 1025, 1000), {}), (ValueError, ("a\x00b", 1000), {}),
        (TypeError, ("e", "1000"), {}), (TypeError, ("e", True), {}),
        (ValueError, ("e", 0), {}), (ValueError, ("e", -5), {}),
        (TypeError, ("e", 1000), {"value": 5}),
        (ValueError, ("e", 1000), {"value": "\u00e9" * 513}),
        (ValueError, ("e", 1000), {"wait_ms": -1}), (TypeError, ("e", 1000), {"wait_ms": 1.5}),
        (ValueError, ("e", 1000), {"scope": "transaction"}),
    ]
    for exc, args, kw in bad_leadership:
        with pytest.raises(exc):
            with leadership(closed, *args, **kw):
                pytest.fail("the block ran")
    bad_take_over = [
        (TypeError, (None, 1000), {}), (ValueError, ("", 1000), {}),
        (ValueError, ("r", 0), {}), (TypeError, ("r", 1000), {"timeout_ms": None}),
        (ValueError, ("r", 1000), {"timeout_ms": -1}),
        (ValueError, ("r", 1000), {"scope": "transaction"}),
    ]
    for exc, args, kw in bad_take_over:
        with pytest.raises(exc):
            take_over(closed, *args, **kw)
    # a value of exactly 1024 bytes is no bad argument: it wins, leader() shows it
    conn, check = connect(), connect()
    try:
        election = resource_name("limit")
        with leadership(conn, election, 5000, value="\u00e9" * 512) as lead:
            assert lead.value == "\u00e9" * 512
            assert leader(check, election)["value"] == "\u00e9" * 512
    finally:
        conn.close()
        check.close()


def test_fenced_refuses_the_election_connection(conns):
    """lead.fenced on the election's own connection (its heartbeat's) is a
    ValueError, before anything is sent."""
    conn = conns()
    with leadership(conn, resource_name("own"), ttl_ms=5000) as lead:
        with pytest.raises(ValueError):
            with lead.fenced(conn):
                pytest.fail("the block ran")


def test_exported():
    for name in ("leadership", "take_over", "Leadership", "LeadershipLost", "TakeOverTimeout"):
        assert name in lease_fence.__all__
    for name in ("leadership", "take_over", "AsyncLeadership"):
        assert name in aio.__all__
    assert issubclass(LeadershipLost, LeaseLost)
    assert LeadershipLost("lost", None, "m").status == "lost"


# ------------------------------------------------------------------ aio

def test_aio_leadership_take_over_and_resign():
    """aio.leadership: wins, shows its value, writes under its term through
    lead.fenced; aio.take_over from another session sets the asyncio.Event
    lost and lead.fenced raises LeadershipLost; after the operator's
    release a new aio candidate wins with a higher term; its block's end
    resigns (nobody leads)."""
    async def main():
        conn, work, operator, check = (await aconnect(), await aconnect(), await aconnect(),
                                       connect())
        try:
            election = resource_name("aio")
            row_id = new_row(check)
            with pytest.raises(LeadershipLost):
                async with aio.leadership(conn, election, ttl_ms=1500, value="x") as lead:
                    assert isinstance(lead.lost, asyncio.Event)
                    seen = leader(check, election)
                    assert (seen["held"], seen["term"], seen["value"]) == (True, lead.term, "x")
                    async with lead.fenced(work):
                        await work.execute("UPDATE account SET owner = 'aio' WHERE id = %s",
                                           (row_id,))
                    taken = await aio.take_over(operator, election, ttl_ms=10000)
                    assert taken.generation > lead.term
                    await asyncio.wait_for(lead.lost.wait(), 60)
                    with pytest.raises(LeadershipLost):
                        async with lead.fenced(work):
                            pass
            assert read_row(check, row_id) == ("aio", 100, lead.term)
            assert await aio.release(operator, taken) == "released"
            async with aio.leadership(conn, election, ttl_ms=1500) as again:
                assert again.term > taken.generation
            assert leader(check, election)["held"] is False
        finally:
            for c in (conn, work, operator):
                await c.close()
            check.close()
    asyncio.run(main())

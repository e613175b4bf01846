"""fair=True (lease_fence 1.5, the extension's fair waiting), against a real
PostgreSQL + Redis.

Two fair waiters of a held lease are granted in the order they came: the
first queued gets the lease when the holder releases it, the second stays
in the queue (position 1) until the first releases. Every verb that
acquires or campaigns passes fair through: its waiting statement shows in
``lease_fence.queue(resource)`` (an unfair wait never does), and is granted
once the holder releases. A fair that is not a bool is a TypeError before
anything is sent. ``lease_fence.queue`` is an operator's function (EXECUTE
revoked from PUBLIC): the tests read it as postgres.
"""

import asyncio
import threading

import psycopg
import pytest

from lease_fence import (Lease, acquire, aio, django as lf_django, job, kept_alive_lease,
                         leadership, release, transaction_lease, try_acquire)
from lf_testlib import (DATABASE, PGHOST, PGPORT, aconnect, connect, resource_name,
                        setup_django, wait_until)

TTL_MS = 60000
WAIT_MS = 120000        # a safety net: the waits end on the holder's release, not on this


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


@pytest.fixture
def su():
    with psycopg.connect(host=PGHOST, port=PGPORT, dbname=DATABASE, user="postgres",
                         autocommit=True) as c:
        yield c


def queue(su, resource):
    """[(position, pid)] of the resource's queue, as Redis holds it."""
    return su.execute("SELECT position, pid FROM lease_fence.queue(%s) ORDER BY position",
                      (resource,)).fetchall()


def queued(su, resource, pid):
    return any(p == pid for _, p in queue(su, resource))


class Waiter:
    """``call(conn)`` in a thread of its own: ``lease`` once it returned,
    ``error`` if it raised; ``done`` is set either way."""

    def __init__(self, conn, call):
        self.conn, self.lease, self.error = conn, None, None
        self.pid = conn.info.backend_pid
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self.thread.start()

    def _run(self, call):
        try:
            self.lease = call(self.conn)
        except Exception as exc:                 # noqa: BLE001 - the test looks at it
            self.error = exc
        finally:
            self.done.set()

    def result(self):
        assert self.done.wait(WAIT_MS / 1000.0), "the waiter never returned"
        self.thread.join()
        assert self.error is None, repr(self.error)
        return self.lease


# ------------------------------------------------------------------ the order

def test_fair_waiters_are_granted_in_arrival_order(conns, su):
    """A holds the lease. B calls acquire(fair=True) and is queued (the
    queue has one entry, B's backend); only then C does, behind B. A
    releases: B gets the lease, C is still waiting — the only entry of the
    queue, at position 1. B releases: C gets it, with a higher generation."""
    res = resource_name("order")
    holder, b_conn, c_conn = conns(), conns(), conns()
    a = acquire(holder, res, ttl_ms=TTL_MS)

    def fair_acquire(conn):
        return acquire(conn, res, ttl_ms=TTL_MS, wait_ms=WAIT_MS, fair=True)

    b = Waiter(b_conn, fair_acquire)
    wait_until("B queued", lambda: queue(su, res) == [(1, b.pid)])
    c = Waiter(c_conn, fair_acquire)
    wait_until("C queued behind B", lambda: queue(su, res) == [(1, b.pid), (2, c.pid)])
    assert not b.done.is_set() and not c.done.is_set()

    assert release(holder, a) == "released"
    b_lease = b.result()
    assert b_lease.acquired is True and b_lease.generation > a.generation
    assert not c.done.is_set(), "C was granted before B released"
    assert queue(su, res) == [(1, c.pid)]

    assert release(b_conn, b_lease) == "released"
    c_lease = c.result()
    assert c_lease.acquired is True and c_lease.generation > b_lease.generation
    assert queue(su, res) == []
    assert release(c_conn, c_lease) == "released"


# ------------------------------------------------------------------ each verb

def _first(cm_factory):
    """A context-manager verb as a call: enter, take what it yields, leave."""
    def call(conn):
        with cm_factory(conn) as got:
            return got
    return call


SYNC_VERBS = {
    "try_acquire": lambda res: lambda c: try_acquire(c, res, ttl_ms=TTL_MS, wait_ms=WAIT_MS,
                                                     fair=True),
    "transaction_lease": lambda res: _first(lambda c: transaction_lease(
        c, res, ttl_ms=TTL_MS, wait_ms=WAIT_MS, fair=True)),
    "job": lambda res: _first(lambda c: job(c, res, ttl_ms=TTL_MS, wait_ms=WAIT_MS, fair=True)),
    "kept_alive_lease": lambda res: _first(lambda c: kept_alive_lease(
        c, res, ttl_ms=TTL_MS, wait_ms=WAIT_MS, fair=True)),
    "leadership": lambda res: _first(lambda c: leadership(c, res, ttl_ms=TTL_MS, fair=True)),
}


@pytest.mark.parametrize("verb", sorted(SYNC_VERBS))
def test_each_sync_verb_waits_in_the_queue(conns, su, verb):
    """With fair=True the verb's wait is in the resource's queue (its backend
    shows there while the holder holds), and it is granted on the release."""
    res = resource_name("verb_" + verb)
    holder, conn = conns(), conns()
    a = acquire(holder, res, ttl_ms=TTL_MS)
    w = Waiter(conn, SYNC_VERBS[verb](res))
    wait_until(f"{verb} queued", lambda: queued(su, res, w.pid))
    assert release(holder, a) == "released"
    got = w.result()
    term = got.term if verb == "leadership" else got.generation
    assert term > a.generation
    assert queue(su, res) == []


def test_django_verbs_wait_in_the_queue(conns, su):
    """lease_fence.django's acquire and job take fair too (the Django
    connection of a thread of its own)."""
    setup_django()
    from django.db import connection

    for name in ("acquire", "job"):
        res = resource_name("django_" + name)
        holder = conns()
        a = acquire(holder, res, ttl_ms=TTL_MS)
        out = {}

        def run(name=name, res=res):
            try:
                with connection.cursor() as cur:
                    cur.execute("SELECT pg_backend_pid()")
                    out["pid"] = cur.fetchone()[0]
                if name == "acquire":
                    lease = lf_django.acquire(res, ttl_ms=TTL_MS, wait_ms=WAIT_MS, fair=True)
                    lf_django.release(lease)
                else:
                    with lf_django.job(res, ttl_ms=TTL_MS, wait_ms=WAIT_MS, fair=True) as lease:
                        pass
                out["lease"] = lease
            except Exception as exc:             # noqa: BLE001 - the test looks at it
                out["error"] = exc
            finally:
                connection.close()
        t = threading.Thread(target=run, daemon=True)
        t.start()
        wait_until(f"django {name} queued",
                   lambda: "pid" in out and queued(su, res, out["pid"]))
        assert release(holder, a) == "released"
        t.join(WAIT_MS / 1000.0)
        assert "error" not in out, repr(out.get("error"))
        assert out["lease"].generation > a.generation


@pytest.mark.asyncio
@pytest.mark.parametrize("verb", ["acquire", "try_acquire", "transaction_lease", "job",
                                  "kept_alive_lease", "leadership"])
async def test_each_aio_verb_waits_in_the_queue(su, verb):
    """lease_fence.aio: the same, for every verb."""
    res = resource_name("aio_" + verb)
    holder = connect()
    conn = await aconnect()
    try:
        a = acquire(holder, res, ttl_ms=TTL_MS)
        kw = dict(ttl_ms=TTL_MS, fair=True)
        if verb != "leadership":
            kw["wait_ms"] = WAIT_MS

        async def call():
            if verb in ("acquire", "try_acquire"):
                lease = await getattr(aio, verb)(conn, res, **kw)
                await aio.release(conn, lease)
                return lease
            async with getattr(aio, verb)(conn, res, **kw) as got:
                return got
        task = asyncio.ensure_future(call())
        pid = conn.info.backend_pid
        while not queued(su, res, pid):
            assert not task.done(), repr(task.exception() if task.done() else None)
            await asyncio.sleep(0.05)
        assert release(holder, a) == "released"
        got = await asyncio.wait_for(task, WAIT_MS / 1000.0)
        term = got.term if verb == "leadership" else got.generation
        assert term > a.generation
    finally:
        await conn.close()
        holder.close()


# ------------------------------------------------------------------ bad input

@pytest.mark.parametrize("bad", ["yes", 1, 0, None])
def test_fair_not_a_bool_is_a_type_error_before_anything_is_sent(conns, bad):
    """fair must be a bool: anything else is a TypeError that names fair,
    raised before a statement is sent (on a closed connection, where any
    statement would raise psycopg's error instead)."""
    closed = connect()
    closed.close()
    res = resource_name("bad_fair")
    calls = {
        "acquire": lambda: acquire(closed, res, ttl_ms=1000, fair=bad),
        "try_acquire": lambda: try_acquire(closed, res, ttl_ms=1000, fair=bad),
        "transaction_lease": lambda: _first(lambda c: transaction_lease(
            c, res, ttl_ms=1000, fair=bad))(closed),
        "job": lambda: _first(lambda c: job(c, res, ttl_ms=1000, fair=bad))(closed),
        "kept_alive_lease": lambda: _first(lambda c: kept_alive_lease(
            c, res, ttl_ms=1000, fair=bad))(closed),
        "leadership": lambda: _first(lambda c: leadership(c, res, ttl_ms=1000,
                                                          fair=bad))(closed),
    }
    for name, call in calls.items():
        with pytest.raises(TypeError, match=r"^fair is a bool"):
            call()
    # and a live connection answers the same, with nothing sent: no lease taken
    live = conns()
    with pytest.raises(TypeError, match=r"^fair is a bool"):
        acquire(live, res, ttl_ms=1000, fair=bad)
    lease = acquire(live, res, ttl_ms=1000)
    assert isinstance(lease, Lease) and lease.acquired is True
    assert release(live, lease) == "released"


@pytest.mark.asyncio
@pytest.mark.parametrize("bad", ["yes", 1, None])
async def test_aio_fair_not_a_bool_is_a_type_error_before_anything_is_sent(bad):
    closed = await aconnect()
    await closed.close()
    res = resource_name("bad_fair_aio")
    with pytest.raises(TypeError, match=r"^fair is a bool"):
        await aio.acquire(closed, res, ttl_ms=1000, fair=bad)
    with pytest.raises(TypeError, match=r"^fair is a bool"):
        await aio.try_acquire(closed, res, ttl_ms=1000, fair=bad)
    for verb in ("transaction_lease", "job", "kept_alive_lease", "leadership"):
        with pytest.raises(TypeError, match=r"^fair is a bool"):
            async with getattr(aio, verb)(closed, res, ttl_ms=1000, fair=bad):
                pass

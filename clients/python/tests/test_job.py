"""lease_fence.job / lease_fence.aio.job over psycopg 3: the fenced job.

The transaction-scoped lease of ``transaction_lease`` with BEGIN and the
acquire sent in one pipeline. Each test pins one outcome: the write
committed under the lease's generation and the lease released; busy (the
block never runs, nothing written, the connection idle); the block's
exception (rolled back, released, propagated unchanged); a stale write
(StaleGeneration, rolled back); the lease lost before COMMIT
(LeaseLostAtCommit); stale retried in the same transaction; and the round
trips, read off libpq's protocol trace.
"""

import asyncio
import time

import psycopg
import pytest

import lease_fence
from lease_fence import (LeaseBusy, LeaseDenied, LeaseLostAtCommit, LeaseUnavailable,
                         LeaseUnknown, StaleGeneration, TransactionRolledBack, acquire, aio,
                         fenced, job, release, transaction_lease)
from lf_testlib import (APP_USER, DATABASE, NOREDIS_USER, PGHOST, PGPORT, aconnect, connect,
                        lease_key, new_row, next_generation, read_row, redis, resource_name)

IDLE = psycopg.pq.TransactionStatus.IDLE


class Boom(Exception):
    """The block's own exception."""


def free_right_away(conn, res):
    """Another session takes the resource at once (no wait): the job's lease
    is gone. Returns that lease's generation."""
    lease = acquire(conn, res, ttl_ms=10000)          # LeaseBusy if still held
    assert release(conn, lease) == "released"
    return lease.generation


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


# ------------------------------------------------------------------ sync

def test_exported():
    assert lease_fence.job is job
    assert "job" in lease_fence.__all__
    assert "job" in aio.__all__


@pytest.mark.parametrize("autocommit", [True, False])
def test_job_commits_under_the_lease_generation_and_releases(conns, autocommit):
    """the block's write commits with fence = lease.generation (also the
    transaction's current generation); after COMMIT the lease is released
    (another session acquires at once, above the job's generation) and the
    connection is idle, its autocommit as it was."""
    check = conns()
    conn = psycopg.connect(host=PGHOST, port=PGPORT, dbname=DATABASE, user=APP_USER,
                           autocommit=autocommit)
    try:
        row_id = new_row(check)
        res = resource_name(f"job_commits_{autocommit}")
        with job(conn, res, ttl_ms=10000, min_validity_ms=500) as lease:
            assert (lease.acquired, lease.status, lease.resource) == (True, "acquired", res)
            assert lease.validity_ms >= 500
            assert conn.execute("SELECT lease_fence.current_generation()").fetchone()[0] == \
                lease.generation
            assert redis("GET", lease_key(res)) == lease.identity
            conn.execute("UPDATE account SET owner = 'job', balance = balance + 1 "
                         "WHERE id = %s", (row_id,))
        assert read_row(check, row_id) == ("job", 101, lease.generation)
        assert redis("EXISTS", lease_key(res)) == "0"
        assert free_right_away(check, res) > lease.generation
        assert conn.info.transaction_status == IDLE
        assert conn.autocommit is autocommit
        assert conn.execute("SELECT lease_fence.current_generation()").fetchone()[0] is None
        if not autocommit:
            conn.rollback()
    finally:
        conn.close()


def test_job_busy_never_runs_the_block(conns):
    """another session holds the resource: LeaseBusy (a LeaseDenied, not
    unknown) before the block, nothing written, the holder's lease intact,
    and the connection usable and outside any transaction."""
    conn, holder_conn = conns(), conns()
    row_id = new_row(conn)
    res = resource_name("job_busy")
    holder = acquire(holder_conn, res, ttl_ms=10000)
    ran = []
    with pytest.raises(LeaseBusy) as info:
        with job(conn, res, ttl_ms=10000):
            ran.append(True)
            conn.execute("UPDATE account SET owner = 'busy' WHERE id = %s", (row_id,))
    assert ran == []
    assert isinstance(info.value, LeaseDenied) and not isinstance(info.value, LeaseUnknown)
    assert (info.value.status, info.value.lease.acquired) == ("busy", False)
    assert conn.info.transaction_status == IDLE
    assert conn.execute("SELECT 1").fetchone() == (1,)
    assert read_row(conn, row_id) == ("nobody", 100, 0)
    assert redis("GET", lease_key(res)) == holder.identity
    assert release(holder_conn, holder) == "released"
    # and the same connection runs a job right after
    with job(conn, res, ttl_ms=10000) as lease:
        conn.execute("UPDATE account SET owner = 'after busy' WHERE id = %s", (row_id,))
    assert read_row(conn, row_id) == ("after busy", 100, lease.generation)


def test_job_unavailable_is_raised_before_the_block(conns):
    """Redis unreachable: LeaseUnavailable before the block, the connection idle."""
    conn = conns(user=NOREDIS_USER)
    with pytest.raises(LeaseUnavailable):
        with job(conn, resource_name("job_unavailable"), ttl_ms=10000):
            pytest.fail("the block must not run")
    assert conn.info.transaction_status == IDLE


def test_job_block_exception_rolls_back_and_releases(conns):
    """the block raises: its write is rolled back, the lease released
    (another session acquires at once), the exception is the block's own,
    unchanged, and the connection is idle."""
    conn, other = conns(), conns()
    row_id = new_row(conn)
    res = resource_name("job_raises")
    boom = Boom("the block failed")
    with pytest.raises(Boom) as info:
        with job(conn, res, ttl_ms=10000) as lease:
            conn.execute("UPDATE account SET owner = 'rolled back' WHERE id = %s", (row_id,))
            raise boom
    assert info.value is boom
    assert read_row(conn, row_id) == ("nobody", 100, 0)
    assert redis("EXISTS", lease_key(res)) == "0"
    assert free_right_away(other, res) > lease.generation
    assert conn.info.transaction_status == IDLE


def test_job_stale_write_raises_stale_generation(conns):
    """a newer generation wrote the row while the job ran: the job's write
    of it is StaleGeneration (LF001, naming the row), its transaction is
    rolled back (its other write too) and the lease released."""
    conn, other = conns(), conns()
    row_id, mine = new_row(conn), new_row(conn)
    res = resource_name("job_stale")
    with pytest.raises(StaleGeneration) as info:
        with job(conn, res, ttl_ms=10000) as lease:
            conn.execute("UPDATE account SET owner = 'job' WHERE id = %s", (mine,))
            newer = next_generation(other)
            assert newer > lease.generation
            with fenced(other, newer):                    # rows only
                other.execute("UPDATE account SET owner = 'newer' WHERE id = %s", (row_id,))
            conn.execute("UPDATE account SET owner = 'stale' WHERE id = %s", (row_id,))
    err = info.value
    assert err.sqlstate == "LF001"
    assert (err.schema, err.table, err.column) == ("public", "account", "fence")
    assert isinstance(err.__cause__, psycopg.Error)
    assert read_row(conn, row_id) == ("newer", 100, newer)
    assert read_row(conn, mine) == ("nobody", 100, 0)
    assert free_right_away(other, res) > lease.generation
    assert conn.info.transaction_status == IDLE


def _caught_refused_write(conn, other, row_id, mine):
    """The block's body: a write, then a refused one (a newer generation
    wrote the row meanwhile) whose StaleGeneration the block catches before
    going on as if nothing happened. Returns what it caught."""
    conn.execute("UPDATE account SET owner = 'job' WHERE id = %s", (mine,))
    with fenced(other, next_generation(other)):           # rows only
        other.execute("UPDATE account SET owner = 'newer' WHERE id = %s", (row_id,))
    try:
        with lease_fence.fence_errors():
            conn.execute("UPDATE account SET owner = 'stale' WHERE id = %s", (row_id,))
    except StaleGeneration as e:
        return e
    raise AssertionError("the stale write was not refused")


@pytest.mark.parametrize("verb", ["job", "transaction_lease", "fenced"])
@pytest.mark.parametrize("autocommit", [True, False])
def test_caught_refused_write_raises_transaction_rolled_back(conns, verb, autocommit):
    """the block catches a refused write and goes on: its transaction is
    failed, PostgreSQL would answer COMMIT with ROLLBACK, so the helper
    raises TransactionRolledBack instead of returning; nothing of the
    transaction was committed, the lease was released, the connection is
    idle."""
    other = conns()
    conn = psycopg.connect(host=PGHOST, port=PGPORT, dbname=DATABASE, user=APP_USER,
                           autocommit=autocommit)
    try:
        row_id, mine = new_row(other), new_row(other)
        res = resource_name(f"caught_{verb}_{autocommit}")
        caught = []
        explicit = acquire(other, res, ttl_ms=10000) if verb == "fenced" else None
        scope = {"job": lambda: job(conn, res, ttl_ms=10000),
                 "transaction_lease": lambda: transaction_lease(conn, res, ttl_ms=10000),
                 "fenced": lambda: fenced(conn, explicit)}[verb]
        with pytest.raises(TransactionRolledBack) as info:
            with scope():
                caught.append(_caught_refused_write(conn, other, row_id, mine))
        assert caught and caught[0].sqlstate == "LF001", "the block caught the refused write"
        assert not isinstance(info.value, lease_fence.FenceError)
        assert "rolled back" in str(info.value)
        assert read_row(other, mine) == ("nobody", 100, 0), "nothing was committed"
        assert conn.info.transaction_status == IDLE
        assert conn.autocommit is autocommit
        if explicit is not None:
            assert release(other, explicit) == "released"
        else:
            free_right_away(other, res)                # the lease went with the transaction
    finally:
        conn.close()


def test_job_lease_lost_before_commit_raises_lease_lost_at_commit(conns):
    """the lease key is deleted in Redis while the block runs: COMMIT fails
    with LF010 (LeaseLostAtCommit) and the write is rolled back. The block
    outlives half the TTL before COMMIT, so a server that asks Redis at
    COMMIT only for an older lease (remaining < min_validity + ttl/2) asks."""
    conn = conns()
    row_id = new_row(conn)
    res = resource_name("job_lost")
    with pytest.raises(LeaseLostAtCommit) as info:
        with job(conn, res, ttl_ms=2000):
            conn.execute("UPDATE account SET owner = 'doomed' WHERE id = %s", (row_id,))
            assert redis("DEL", lease_key(res)) == "1"
            time.sleep(1.1)
    assert info.value.sqlstate == "LF010"
    assert isinstance(info.value.__cause__, psycopg.Error)
    assert read_row(conn, row_id) == ("nobody", 100, 0)
    assert conn.info.transaction_status == IDLE


def test_job_stale_acquire_is_retried_in_the_same_transaction(conns):
    """Redis remembers a higher generation than the database hands out: the
    pipelined acquire answers stale, and the job tries once more in the same
    transaction, getting a generation above the stored one; the write
    carries it."""
    conn = conns()
    row_id = new_row(conn)
    res = resource_name("job_stale_acquire")
    stored = next_generation(conn) + 1000
    redis("SET", lease_key(res) + ":gen", stored)
    with job(conn, res, ttl_ms=10000) as lease:
        conn.execute("UPDATE account SET owner = 'healed' WHERE id = %s", (row_id,))
    assert lease.generation > stored
    assert read_row(conn, row_id) == ("healed", 100, lease.generation)
    assert redis("EXISTS", lease_key(res)) == "0"


def test_job_refuses_a_connection_in_a_transaction():
    conn = psycopg.connect(host=PGHOST, port=PGPORT, dbname=DATABASE, user=APP_USER)
    try:
        conn.execute("SELECT 1")                          # autocommit off: in a transaction
        with pytest.raises(RuntimeError):
            with job(conn, resource_name("job_in_tx"), ttl_ms=10000):
                pytest.fail("the block must not run")
        conn.rollback()
    finally:
        conn.close()


# ---------------------------------------------------------- round trips

def _round_trips(trace_text):
    """The frontend messages of a libpq trace that end a round trip (Sync,
    simple Query), each with the statements sent before it."""
    trips, pending = [], []
    for line in trace_text.splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or parts[0] != "F":
            continue
        if parts[2] == "Parse":
            pending.append(parts[3] if len(parts) > 3 else "")
        elif parts[2] in ("Sync", "Query"):
            trips.append(pending + ([parts[3]] if parts[2] == "Query" else []))
            pending = []
    return trips


def _begin_then_acquire(trip):
    """One round trip's statements (Parse texts, quoted in the trace): a
    BEGIN, then the acquire."""
    begin, acquire_at = trip.find('"BEGIN'), trip.find("lease_fence.acquire(")
    return 0 <= begin < acquire_at


def _traced(conn, path, fn):
    with open(path, "w") as f:
        conn.pgconn.trace(f.fileno())
        conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            fn()
        finally:
            conn.pgconn.untrace()
    return [" ".join(t) for t in _round_trips(path.read_text())]


@pytest.mark.skipif(not psycopg.Pipeline.is_supported(), reason="libpq without pipeline mode")
@pytest.mark.parametrize("autocommit", [True, False])
def test_job_sends_begin_and_acquire_in_one_round_trip(tmp_path, autocommit):
    """libpq's protocol trace of a job: BEGIN and lease_fence.acquire before
    the first Sync (one round trip), then the block's UPDATE, then COMMIT:
    three in all, with autocommit on or off (psycopg's own BEGIN would add a
    Sync: the job sends its own). A busy job: BEGIN + acquire, then ROLLBACK."""
    conn = psycopg.connect(host=PGHOST, port=PGPORT, dbname=DATABASE, user=APP_USER,
                           autocommit=autocommit)
    check = connect()
    try:
        row_id = new_row(check)
        res = resource_name(f"job_one_round_trip_{autocommit}")
        out = {}

        def run():
            with job(conn, res, ttl_ms=10000) as lease:
                conn.execute("UPDATE account SET owner = 'rt' WHERE id = %s", (row_id,))
            out["lease"] = lease
        sent = _traced(conn, tmp_path / "job.txt", run)
        assert len(sent) == 3, sent
        assert _begin_then_acquire(sent[0]), sent
        assert "UPDATE account" in sent[1] and "COMMIT" in sent[2], sent
        assert read_row(check, row_id) == ("rt", 100, out["lease"].generation)
        assert conn.autocommit is autocommit

        holder = acquire(check, res, ttl_ms=10000)

        def busy():
            with pytest.raises(LeaseBusy):
                with job(conn, res, ttl_ms=10000):
                    pytest.fail("the block must not run")
        sent = _traced(conn, tmp_path / "busy.txt", busy)
        assert len(sent) == 2, sent
        assert _begin_then_acquire(sent[0]), sent
        assert "ROLLBACK" in sent[1], sent
        assert release(check, holder) == "released"
    finally:
        conn.close()
        check.close()


def test_job_keeps_the_connection_transaction_characteristics():
    """a connection's isolation_level / read_only apply to the job's
    transaction, as psycopg's own BEGIN would have them (autocommit off:
    the job sends that BEGIN itself)."""
    conn = psycopg.connect(host=PGHOST, port=PGPORT, dbname=DATABASE, user=APP_USER)
    try:
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        with job(conn, resource_name("job_isolation"), ttl_ms=10000):
            level = conn.execute("SHOW transaction_isolation").fetchone()[0]
        assert level == "repeatable read"
        assert conn.autocommit is False
        conn.rollback()
    finally:
        conn.close()


# --------------------------------------------------------------- asyncio

@pytest.mark.asyncio
async def test_aio_job_commits_busy_raises_and_lost_at_commit():
    """aio.job: the write commits under the lease's generation and the lease
    is released; busy raises before the block with nothing written; the
    block's exception rolls back and propagates; a stale write is
    StaleGeneration; the key deleted before COMMIT is LeaseLostAtCommit."""
    check = connect()
    conn = await aconnect()
    try:
        row_id = new_row(check)
        res = resource_name("aio_job")
        async with aio.job(conn, res, ttl_ms=10000) as lease:
            cur = await conn.execute("SELECT lease_fence.current_generation()")
            assert (await cur.fetchone())[0] == lease.generation
            await conn.execute("UPDATE account SET owner = 'aio job' WHERE id = %s", (row_id,))
        assert read_row(check, row_id) == ("aio job", 100, lease.generation)
        assert free_right_away(check, res) > lease.generation

        holder = acquire(check, res, ttl_ms=10000)
        ran = []
        with pytest.raises(LeaseBusy):
            async with aio.job(conn, res, ttl_ms=10000):
                ran.append(True)
        assert ran == []
        assert conn.info.transaction_status == IDLE
        assert release(check, holder) == "released"

        boom = Boom("async block failed")
        with pytest.raises(Boom) as info:
            async with aio.job(conn, res, ttl_ms=10000):
                await conn.execute("UPDATE account SET owner = 'gone' WHERE id = %s", (row_id,))
                raise boom
        assert info.value is boom
        assert read_row(check, row_id) == ("aio job", 100, lease.generation)
        free_right_away(check, res)

        with pytest.raises(StaleGeneration) as stale:
            async with aio.job(conn, res, ttl_ms=10000) as mine:
                newer = next_generation(check)
                assert newer > mine.generation
                with fenced(check, newer):
                    check.execute("UPDATE account SET owner = 'newer' WHERE id = %s", (row_id,))
                await conn.execute("UPDATE account SET owner = 'stale' WHERE id = %s",
                                   (row_id,))
        assert stale.value.sqlstate == "LF001"
        assert read_row(check, row_id) == ("newer", 100, newer)
        free_right_away(check, res)

        with pytest.raises(LeaseLostAtCommit) as lost:
            async with aio.job(conn, res, ttl_ms=2000):
                await conn.execute("UPDATE account SET owner = 'doomed' WHERE id = %s",
                                   (row_id,))
                assert redis("DEL", lease_key(res)) == "1"
                await asyncio.sleep(1.1)
        assert lost.value.sqlstate == "LF010"
        assert read_row(check, row_id) == ("newer", 100, newer)
        assert conn.info.transaction_status == IDLE
    finally:
        await conn.close()
        check.close()


@pytest.mark.asyncio
@pytest.mark.skipif(not psycopg.AsyncPipeline.is_supported(),
                    reason="libpq without pipeline mode")
async def test_aio_job_sends_begin_and_acquire_in_one_round_trip(tmp_path):
    """the same trace for aio.job on an AsyncConnection with autocommit off:
    BEGIN + acquire, the UPDATE, COMMIT; autocommit restored."""
    check = connect()
    conn = await psycopg.AsyncConnection.connect(host=PGHOST, port=PGPORT, dbname=DATABASE,
                                                 user=APP_USER)
    try:
        row_id = new_row(check)
        res = resource_name("aio_job_round_trip")
        path = tmp_path / "trace.txt"
        with open(path, "w") as f:
            conn.pgconn.trace(f.fileno())
            conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
            async with aio.job(conn, res, ttl_ms=10000) as lease:
                await conn.execute("UPDATE account SET owner = 'aio rt' WHERE id = %s",
                                   (row_id,))
            conn.pgconn.untrace()
        sent = [" ".join(t) for t in _round_trips(path.read_text())]
        assert len(sent) == 3, sent
        assert _begin_then_acquire(sent[0]), sent
        assert "UPDATE account" in sent[1] and "COMMIT" in sent[2], sent
        assert read_row(check, row_id) == ("aio rt", 100, lease.generation)
        assert conn.autocommit is False
    finally:
        await conn.close()
        check.close()

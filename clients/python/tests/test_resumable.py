"""lease_fence.resumable_job over psycopg 3: a job under an explicit lease
whose progress commits with fenced checkpoints.

Each test pins one outcome: the first run starts from nothing, commits its
writes with each checkpoint and at its end, and releases; the next run
resumes from the last committed checkpoint; busy / unavailable raise before
the block; the block's exception rolls back what followed the last
checkpoint; a holder frozen inside its transaction past its lease is ended
by the server and its successor resumes from its checkpoint; a holder that
a successor fenced between two of its transactions gets StaleGeneration
(LF001) from checkpoint() and writes nothing more.
"""

import psycopg
import pytest

import lease_fence
from lease_fence import (LeaseBusy, LeaseLost, LeaseUnavailable, ResumableJob, StaleGeneration,
                         TransactionRolledBack, acquire, aio, fenced, release, resumable_job)
from lf_testlib import (APP_USER, DATABASE, NOREDIS_USER, PGHOST, PGPORT, aconnect, connect,
                        freeze_between_transactions, lease_key, new_row, next_generation,
                        read_row, redis, resource_name, wait_until)

IDLE = psycopg.pq.TransactionStatus.IDLE


class Boom(Exception):
    """The block's own exception."""


# what a holder the server ended gets (FATAL 25P03, its connection closed:
# psycopg 3.1 says OperationalError, 3.2 the class of SQLSTATE 25P03), or
# StaleGeneration when it was between transactions
ENDED_OR_STALE = (psycopg.OperationalError, psycopg.errors.lookup("25P03"), StaleGeneration)


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


def last_checkpoint(conn, res):
    return conn.execute("SELECT state, generation FROM lease_fence.last_checkpoint(%s)",
                        (res,)).fetchone()


def test_exported():
    assert lease_fence.resumable_job is resumable_job
    assert {"resumable_job", "ResumableJob"} <= set(lease_fence.__all__)


@pytest.mark.parametrize("autocommit", [True, False])
def test_checkpoints_commit_and_the_next_run_resumes(conns, autocommit):
    """run 1 starts from nothing (resume_from None), its write commits with
    its checkpoint (seen from another session before the run ends), its
    last write at its end; the lease is released. Run 2 resumes from run
    1's checkpoint (state and generation) and writes under a newer
    generation; the connection is idle again, its autocommit as it was."""
    check = conns()
    conn = psycopg.connect(host=PGHOST, port=PGPORT, dbname=DATABASE, user=APP_USER,
                           autocommit=autocommit)
    try:
        a, b = new_row(check), new_row(check)
        res = resource_name(f"resumable_{autocommit}")
        with resumable_job(conn, res, 10000) as job:
            assert isinstance(job, ResumableJob)
            assert (job.resume_from, job.resumed_generation) == (None, None)
            assert (job.resource, job.conn) == (res, conn)
            assert job.generation == job.lease.generation and job.identity == job.lease.identity
            assert redis("GET", lease_key(res)) == job.identity
            conn.execute("UPDATE account SET owner = 'step 1' WHERE id = %s", (a,))
            assert read_row(check, a) == ("nobody", 100, 0)      # not committed yet
            assert job.checkpoint({"step": 1, "done": [a]}) == job.generation
            assert read_row(check, a) == ("step 1", 100, job.generation)
            assert last_checkpoint(check, res) == ({"step": 1, "done": [a]}, job.generation)
            conn.execute("UPDATE account SET owner = 'step 2' WHERE id = %s", (b,))
        first = job.generation
        assert read_row(check, b) == ("step 2", 100, first)
        assert redis("EXISTS", lease_key(res)) == "0"
        assert conn.info.transaction_status == IDLE and conn.autocommit is autocommit

        with resumable_job(conn, res, 10000) as job2:
            assert job2.resume_from == {"step": 1, "done": [a]}
            assert job2.resumed_generation == first
            assert job2.generation > first
            conn.execute("UPDATE account SET owner = 'run 2' WHERE id = %s", (b,))
            job2.checkpoint({"step": 3})
        assert read_row(check, b) == ("run 2", 100, job2.generation)
        assert last_checkpoint(check, res) == ({"step": 3}, job2.generation)
        assert conn.autocommit is autocommit
    finally:
        conn.close()


def test_busy_and_unavailable_raise_before_the_block(conns):
    """another session holds the lease: LeaseBusy, the block never runs,
    nothing read or written; Redis unreachable: LeaseUnavailable."""
    conn, holder_conn = conns(), conns()
    res = resource_name("resumable_busy")
    holder = acquire(holder_conn, res, ttl_ms=10000)
    with pytest.raises(LeaseBusy):
        with resumable_job(conn, res, 10000):
            pytest.fail("the block must not run")
    assert conn.info.transaction_status == IDLE
    assert redis("GET", lease_key(res)) == holder.identity
    assert release(holder_conn, holder) == "released"
    with pytest.raises(LeaseUnavailable):
        with resumable_job(conns(user=NOREDIS_USER), res, 10000):
            pytest.fail("the block must not run")


def test_block_exception_rolls_back_after_the_last_checkpoint(conns):
    """the block raises after a checkpoint: what it wrote before the
    checkpoint stands, what it wrote after is rolled back, the exception is
    the block's own and the lease is released."""
    conn, check = conns(), conns()
    a, b = new_row(check), new_row(check)
    res = resource_name("resumable_raises")
    boom = Boom("failed at step 2")
    with pytest.raises(Boom) as info:
        with resumable_job(conn, res, 10000) as job:
            conn.execute("UPDATE account SET owner = 'kept' WHERE id = %s", (a,))
            job.checkpoint({"step": 1})
            conn.execute("UPDATE account SET owner = 'lost' WHERE id = %s", (b,))
            raise boom
    assert info.value is boom
    assert read_row(check, a) == ("kept", 100, job.generation)
    assert read_row(check, b) == ("nobody", 100, 0)
    assert last_checkpoint(check, res) == ({"step": 1}, job.generation)
    assert redis("EXISTS", lease_key(res)) == "0"
    assert conn.info.transaction_status == IDLE


def test_lost_lease_checkpoint_raises_before_writing(conns):
    """the lease key is gone when checkpoint() renews: LeaseLost, nothing of
    the transaction committed, the previous checkpoint stays."""
    conn, check = conns(), conns()
    a = new_row(check)
    res = resource_name("resumable_lost")
    with pytest.raises(LeaseLost):
        with resumable_job(conn, res, 10000) as job:
            job.checkpoint({"step": 1})
            conn.execute("UPDATE account SET owner = 'lost' WHERE id = %s", (a,))
            assert redis("DEL", lease_key(res)) == "1"
            job.checkpoint({"step": 2})
    assert read_row(check, a) == ("nobody", 100, 0)
    assert last_checkpoint(check, res) == ({"step": 1}, job.generation)


def test_stalled_holder_is_ended_and_its_successor_resumes(conns):
    """run 1 checkpoints, writes, then stalls inside its open transaction
    past its lease. Once the lease key is gone from Redis, run 2 takes the
    lease, resumes from run 1's committed checkpoint, does the rest and
    commits. Run 1, let go, can neither write nor move the checkpoint (the
    server ended its session): the table and the checkpoint are run 2's."""
    c1, c2, check = conns(), conns(), conns()
    a, b = new_row(check), new_row(check)
    res = resource_name("resumable_stalled")
    with pytest.raises(ENDED_OR_STALE):
        with resumable_job(c1, res, 1000) as run1:
            c1.execute("UPDATE account SET owner = 'run 1' WHERE id = %s", (a,))
            run1.checkpoint({"done": ["a"]})
            c1.execute("UPDATE account SET owner = 'run 1' WHERE id = %s", (b,))
            # run 1 stalls here, idle in its transaction
            wait_until("run 1's lease key expired",
                       lambda: redis("EXISTS", lease_key(res)) == "0")
            with resumable_job(c2, res, 10000) as run2:
                assert run2.resume_from == {"done": ["a"]}
                assert run2.resumed_generation == run1.generation
                c2.execute("UPDATE account SET owner = 'run 2' WHERE id = %s", (b,))
                run2.checkpoint({"done": ["a", "b"]})
            # run 1 is let go
            c1.execute("UPDATE account SET owner = 'run 1 late' WHERE id = %s", (b,))
            run1.checkpoint({"done": ["a", "b", "late"]})
    assert read_row(check, a) == ("run 1", 100, run1.generation)
    assert read_row(check, b) == ("run 2", 100, run2.generation)
    assert last_checkpoint(check, res) == ({"done": ["a", "b"]}, run2.generation)


def test_checkpoint_of_a_holder_fenced_between_its_transactions_is_stale(conns, monkeypatch):
    """a holder frozen between two of its transactions (after a checkpoint's
    COMMIT) while a successor fences the resource with a newer generation:
    checkpoint() raises StaleGeneration (LF001, naming the resource) from
    the next fence; the checkpoint and the writes before it, made while the
    holder's fence kept the successor waiting, are committed; what the
    block writes afterwards is refused, the job ends with
    TransactionRolledBack and releases."""
    conn, other, check = conns(), conns(), conns()
    a, b = new_row(check), new_row(check)
    res = resource_name("resumable_fenced_between")
    newer = []

    def successor():
        g = next_generation(other)
        with fenced(other, g, res):
            newer.append(g)
    freeze_between_transactions(monkeypatch, res, successor)
    with pytest.raises(TransactionRolledBack):
        with resumable_job(conn, res, 10000) as job:
            conn.execute("UPDATE account SET owner = 'before' WHERE id = %s", (a,))
            with pytest.raises(StaleGeneration) as info:
                job.checkpoint({"step": 1})
            # the block goes on regardless: refused, nothing of it commits
            with pytest.raises(psycopg.errors.InFailedSqlTransaction):
                conn.execute("UPDATE account SET owner = 'after' WHERE id = %s", (b,))
    err = info.value
    assert err.sqlstate == "LF001" and err.resource == res
    assert newer[0] > job.generation
    assert read_row(check, a) == ("before", 100, job.generation)
    assert read_row(check, b) == ("nobody", 100, 0)
    assert last_checkpoint(check, res) == ({"step": 1}, job.generation)
    assert redis("EXISTS", lease_key(res)) == "0"
    assert conn.info.transaction_status == IDLE


@pytest.mark.asyncio
async def test_aio_resumable_job_checkpoints_resumes_and_refuses_a_stalled_holder():
    """aio.resumable_job: run 1's write commits with its checkpoint; busy
    raises before the block; run 1 stalled in its transaction past its
    lease is ended by the server, and run 2 resumes from its checkpoint and
    its writes stand; an exception in the block rolls back after the last
    checkpoint."""
    check = connect()
    c1, c2 = await aconnect(), await aconnect()
    try:
        a, b = new_row(check), new_row(check)
        res = resource_name("aio_resumable")
        with pytest.raises(ENDED_OR_STALE):
            async with aio.resumable_job(c1, res, 1000) as run1:
                assert (run1.resume_from, run1.resumed_generation) == (None, None)
                await c1.execute("UPDATE account SET owner = 'run 1' WHERE id = %s", (a,))
                assert await run1.checkpoint({"done": ["a"]}) == run1.generation
                assert read_row(check, a) == ("run 1", 100, run1.generation)
                with pytest.raises(LeaseBusy):
                    async with aio.resumable_job(c2, res, 10000):
                        pytest.fail("the block must not run")
                await c1.execute("UPDATE account SET owner = 'run 1' WHERE id = %s", (b,))
                wait_until("run 1's lease key expired",
                           lambda: redis("EXISTS", lease_key(res)) == "0")
                async with aio.resumable_job(c2, res, 10000) as run2:
                    assert run2.resume_from == {"done": ["a"]}
                    assert run2.resumed_generation == run1.generation
                    await c2.execute("UPDATE account SET owner = 'run 2' WHERE id = %s", (b,))
                    await run2.checkpoint({"done": ["a", "b"]})
                await c1.execute("UPDATE account SET owner = 'late' WHERE id = %s", (b,))
                await run1.checkpoint({"done": ["late"]})
        assert read_row(check, b) == ("run 2", 100, run2.generation)
        assert last_checkpoint(check, res) == ({"done": ["a", "b"]}, run2.generation)

        with pytest.raises(Boom):
            async with aio.resumable_job(c2, res, 10000) as run3:
                assert run3.resume_from == {"done": ["a", "b"]}
                await c2.execute("UPDATE account SET owner = 'run 3' WHERE id = %s", (a,))
                raise Boom()
        assert read_row(check, a) == ("run 1", 100, run1.generation)
        assert redis("EXISTS", lease_key(res)) == "0"
        assert c2.info.transaction_status == IDLE
    finally:
        await c1.close()
        await c2.close()
        check.close()

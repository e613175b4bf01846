"""lease_fence.aio over psycopg 3's AsyncConnection."""

import asyncio
import time

import psycopg
import pytest

import lease_fence
from lease_fence import (FenceError, LeaseBusy, LeaseDenied, LeaseLost, LeaseLostAtCommit,
                         LeaseUnavailable, LeaseUnknown, MissingGeneration, StaleGeneration,
                         TransactionRolledBack, aio)
from lf_testlib import (NOREDIS_USER, aconnect, connect, lease_key, new_row, next_generation,
                        read_row, redis, resource_name)


@pytest.mark.asyncio
async def test_two_holders_stale_write_raises_stale_generation():
    """acceptance (async psycopg): A's lease expires, B acquires and writes;
    A's fenced write raises lease_fence.StaleGeneration, B's write stands."""
    check = connect()
    a_conn, b_conn = await aconnect(), await aconnect()
    try:
        row_id = new_row(check)
        res = resource_name("two_holders_aio")
        a = await aio.acquire(a_conn, res, ttl_ms=300)
        await asyncio.sleep(0.6)
        b = await aio.acquire(b_conn, res, ttl_ms=10000)
        assert b.generation > a.generation
        async with aio.fenced(b_conn, b) as conn:
            assert conn is b_conn
            await b_conn.execute("UPDATE account SET owner = 'B' WHERE id = %s", (row_id,))
        ran = []
        with pytest.raises(lease_fence.StaleGeneration) as info:
            async with aio.fenced(a_conn, a):
                ran.append(True)
                await a_conn.execute("UPDATE account SET owner = 'A' WHERE id = %s", (row_id,))
        assert ran == [], "refused at set_generation, before the block"
        assert (info.value.sqlstate, info.value.resource) == ("LF001", res)
        assert isinstance(info.value.__cause__, psycopg.Error)
        # rows only: the row fence refuses it, naming the row
        with pytest.raises(StaleGeneration) as info:
            async with aio.fenced(a_conn, a.generation):
                await a_conn.execute("UPDATE account SET owner = 'A' WHERE id = %s", (row_id,))
        assert (info.value.schema, info.value.table, info.value.column) == \
            ("public", "account", "fence")
        assert read_row(check, row_id) == ("B", 100, b.generation)
        with pytest.raises(LeaseLost):
            await aio.renew(a_conn, a, ttl_ms=10000)
        assert await aio.release(a_conn, a) == "not_held"
        assert await aio.renew(b_conn, b, ttl_ms=10000) > 0
        assert await aio.release(b_conn, b) == "released"
    finally:
        await a_conn.close()
        await b_conn.close()
        check.close()


@pytest.mark.asyncio
async def test_transaction_lease_commits_and_lost_at_commit():
    """aio.transaction_lease: the write carries the lease's generation and
    COMMIT releases it; a key deleted before COMMIT is LeaseLostAtCommit
    and nothing is committed; someone else's lease is LeaseBusy and the
    block does not run."""
    check = connect()
    conn = await aconnect()
    try:
        row_id = new_row(check)
        res = resource_name("aio_tx")
        async with aio.transaction_lease(conn, res, ttl_ms=10000, min_validity_ms=500) as lease:
            cur = await conn.execute("SELECT lease_fence.current_generation()")
            assert (await cur.fetchone())[0] == lease.generation
            await conn.execute("UPDATE account SET owner = 'tx' WHERE id = %s", (row_id,))
        assert read_row(check, row_id) == ("tx", 100, lease.generation)
        assert redis("EXISTS", lease_key(res)) == "0"

        with pytest.raises(LeaseLostAtCommit) as info:
            async with aio.transaction_lease(conn, res, ttl_ms=2000):
                await conn.execute("UPDATE account SET owner = 'lost' WHERE id = %s", (row_id,))
                redis("DEL", lease_key(res))
                await asyncio.sleep(1.1)       # past ttl/2: COMMIT asks Redis
        assert isinstance(info.value, FenceError)
        assert read_row(check, row_id) == ("tx", 100, lease.generation)

        holder = lease_fence.acquire(check, res, ttl_ms=10000)
        try:
            assert await aio.try_acquire(conn, res, ttl_ms=10000) is None    # busy
            with pytest.raises(LeaseBusy):
                async with aio.transaction_lease(conn, res, ttl_ms=10000):
                    pytest.fail("block must not run")
            t0 = time.monotonic()
            with pytest.raises(LeaseBusy) as busy:
                await aio.acquire(conn, res, ttl_ms=10000, wait_ms=300)
            assert time.monotonic() - t0 >= 0.3
            assert not isinstance(busy.value, LeaseUnknown)
        finally:
            lease_fence.release(check, holder)
    finally:
        await conn.close()
        check.close()


@pytest.mark.asyncio
async def test_unavailable_is_a_definite_no_with_a_reason():
    """Redis unreachable: aio.acquire and aio.try_acquire raise
    LeaseUnavailable (a LeaseDenied, acquired false) with the reason;
    release says unavailable."""
    conn = await aconnect(user=NOREDIS_USER)
    try:
        res = resource_name("aio_unavailable")
        with pytest.raises(LeaseUnavailable):
            await aio.try_acquire(conn, res, ttl_ms=10000)
        with pytest.raises(LeaseUnavailable) as info:
            await aio.acquire(conn, res, ttl_ms=10000)
        assert isinstance(info.value, LeaseDenied)
        assert info.value.lease.acquired is False
        assert "Redis" in info.value.reason
        ghost = lease_fence.Lease(True, "acquired", res, "0" * 32, 1, 0)
        status = await aio.release(conn, ghost)
        assert status == "unavailable" and "Redis" in status.reason
    finally:
        await conn.close()


@pytest.mark.asyncio
async def test_missing_generation_and_fence_errors():
    """aio.fence_errors maps a strict-table write without a generation to
    MissingGeneration naming ledger.fence; nothing is written."""
    conn = await aconnect()
    try:
        note = resource_name("aio_unfenced")
        with pytest.raises(MissingGeneration) as info:
            async with aio.fence_errors():
                async with conn.transaction():
                    await conn.execute("INSERT INTO ledger (note) VALUES (%s)", (note,))
        assert (info.value.table, info.value.column) == ("ledger", "fence")
        cur = await conn.execute("SELECT count(*) FROM ledger WHERE note = %s", (note,))
        assert (await cur.fetchone())[0] == 0
    finally:
        await conn.close()


@pytest.mark.asyncio
async def test_kept_alive_lease_outlives_its_ttl():
    """aio.kept_alive_lease, TTL 1 s: a 2.5 s statement keeps it alive
    (watched on another connection: active); a fenced write under it
    commits; the end releases it; the owner is refused as its own watch."""
    check = connect()
    conn, watch = await aconnect(), await aconnect()
    try:
        row_id = new_row(check)
        res = resource_name("aio_kept_alive")
        async with aio.kept_alive_lease(conn, res, ttl_ms=1000, watch=watch) as lease:
            assert await lease.state == "active"
            await conn.execute("SELECT pg_sleep(2.5)")
            assert redis("GET", lease_key(res)) == lease.identity
            assert await lease.lost is False
            await lease.check()
            async with aio.fenced(conn, lease):
                await conn.execute("UPDATE account SET owner = 'kept' WHERE id = %s", (row_id,))
        assert read_row(check, row_id) == ("kept", 100, lease.generation)
        assert redis("EXISTS", lease_key(res)) == "0"
        assert await aio.keepalive_state(watch, lease) is None
        with pytest.raises(ValueError):
            async with aio.kept_alive_lease(conn, res, ttl_ms=1000, watch=conn):
                pytest.fail("block must not run")
    finally:
        await conn.close()
        await watch.close()
        check.close()


@pytest.mark.asyncio
async def test_sync_and_async_connections_are_not_mixed():
    """a sync connection given to lease_fence.aio, or an async one given to
    lease_fence, is a TypeError (not a hang or a coroutine never awaited)."""
    sync_conn = connect()
    async_conn = await aconnect()
    try:
        with pytest.raises(TypeError):
            await aio.acquire(sync_conn, "x", ttl_ms=1000)
        with pytest.raises(TypeError):
            lease_fence.acquire(async_conn, "x", ttl_ms=1000)
    finally:
        sync_conn.close()
        await async_conn.close()


@pytest.mark.asyncio
@pytest.mark.parametrize("verb", ["job", "transaction_lease"])
async def test_caught_refused_write_raises_transaction_rolled_back(verb):
    """aio.job / aio.transaction_lease whose block catches a refused write
    and goes on: TransactionRolledBack, nothing of the transaction committed."""
    check = connect()
    conn = await aconnect()
    try:
        row_id, mine = new_row(check), new_row(check)
        res = resource_name(f"aio_caught_{verb}")
        caught = []
        scope = aio.job if verb == "job" else aio.transaction_lease
        with pytest.raises(TransactionRolledBack):
            async with scope(conn, res, ttl_ms=10000):
                await conn.execute("UPDATE account SET owner = 'job' WHERE id = %s", (mine,))
                with lease_fence.fenced(check, next_generation(check)):     # rows only
                    check.execute("UPDATE account SET owner = 'newer' WHERE id = %s", (row_id,))
                try:
                    async with aio.fence_errors():
                        await conn.execute("UPDATE account SET owner = 'stale' WHERE id = %s",
                                           (row_id,))
                except StaleGeneration as e:
                    caught.append(e)
        assert [e.sqlstate for e in caught] == ["LF001"]
        assert read_row(check, mine) == ("nobody", 100, 0)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        lease = await aio.acquire(conn, res, ttl_ms=10000)     # the lease went with it
        assert await aio.release(conn, lease) == "released"
    finally:
        await conn.close()
        check.close()

"""lease_fence.client_side.AsyncClientSideLeases: redis.asyncio + psycopg's
AsyncConnection on the portable edition, writes fenced with lease_fence.aio.

Same environment as test_client_side (skips without it, fails under ci.sh).
"""

import asyncio
import os
import re

import psycopg
import pytest
from redis.asyncio import Redis as AsyncRedis

from lease_fence import (LeaseBusy, LeaseDenied, LeaseLost, LeaseUnavailable, LeaseUnknown,
                         StaleGeneration, aio)
from lease_fence.client_side import (AsyncClientSideLeases, ClientSideLease, generation_key,
                                     lease_key)
from lf_testlib import (APP_USER, PGHOST, PORTABLE_DB, PORTABLE_PORT, REDIS_SOCK, new_row,
                        portable_connect, read_row, redis, resource_name, wait_for_redis)

EXPECT = bool(os.environ.get("LF_EXPECT_INSTALLED"))
IDENTITY = re.compile(r"^[0-9a-f]{32}$")


def require_environment():
    missing = [name for name, value in (("LF_PORTABLE_PGPORT", PORTABLE_PORT),
                                        ("LF_REDIS_SOCK", REDIS_SOCK)) if not value]
    if missing:
        msg = f"{', '.join(missing)} not set"
        if EXPECT:
            pytest.fail(msg + " (ci.sh runs every test: the harness must set it)")
        pytest.skip(msg)


async def aportable():
    return await psycopg.AsyncConnection.connect(host=PGHOST, port=int(PORTABLE_PORT),
                                                 dbname=PORTABLE_DB, user=APP_USER,
                                                 autocommit=True)


def aredis(sock=None, timeout=3.0):
    return AsyncRedis(unix_socket_path=sock or REDIS_SOCK, socket_timeout=timeout,
                      socket_connect_timeout=timeout)


@pytest.mark.asyncio
async def test_async_two_holders_stale_writer_refused():
    """A's lease expires; B acquires higher and writes; A's write is
    StaleGeneration (LF001); B's stands; renew LeaseLost, release not_held."""
    require_environment()
    check = portable_connect()
    a_conn, b_conn = await aportable(), await aportable()
    client = aredis()
    leases = AsyncClientSideLeases(client)
    try:
        row_id = new_row(check)
        res = resource_name("aio_client_side_two_holders")
        # a TTL long enough to read the key on a busy machine; then the key
        # is made to expire now, as the TTL would have
        a = await leases.acquire(a_conn, res, ttl_ms=30000)
        assert (a.acquired, a.status) == (True, "acquired")
        assert redis("GET", lease_key(res)) == a.identity
        redis("PEXPIRE", lease_key(res), "1")
        while redis("EXISTS", lease_key(res)) != "0":
            await asyncio.sleep(0.05)
        b = await leases.acquire(b_conn, res, ttl_ms=30000)
        assert b.generation > a.generation
        async with aio.fenced(b_conn, b):
            await b_conn.execute("UPDATE account SET owner = 'B' WHERE id = %s", (row_id,))
        with pytest.raises(StaleGeneration) as info:
            async with aio.fenced(a_conn, a):
                await a_conn.execute("UPDATE account SET owner = 'A' WHERE id = %s", (row_id,))
        assert info.value.sqlstate == "LF001"
        assert read_row(check, row_id) == ("B", 100, b.generation)
        with pytest.raises(LeaseLost):
            await leases.renew(a_conn, a, ttl_ms=30000)
        assert await leases.release(a_conn, a) == "not_held"
        assert await leases.renew(None, b, ttl_ms=30000) > 0
        with pytest.raises(LeaseBusy):
            await leases.acquire(a_conn, res, ttl_ms=30000)
        assert await leases.release(None, b) == "released"
        assert await leases.release(None, b) == "not_held"
    finally:
        await a_conn.close()
        await b_conn.close()
        await client.close()
        check.close()


@pytest.mark.asyncio
async def test_async_unknown_outcome_stays_unknown():
    """Under CLIENT PAUSE: LeaseUnknown (not a LeaseDenied), cleanup bounded
    and unconfirmed; afterwards the key is absent or holds that identity."""
    require_environment()
    conn = await aportable()
    client = aredis(timeout=0.15)
    leases = AsyncClientSideLeases(client, cleanup_timeout_ms=150)
    res = resource_name("aio_client_side_unknown")
    try:
        await client.ping()   # connected before the pause (see test_client_side.py)
        redis("CLIENT", "PAUSE", 3000, "ALL")
        try:
            with pytest.raises(LeaseUnknown) as info:
                await leases.acquire(conn, res, ttl_ms=60000)
        finally:
            wait_for_redis()
        e = info.value
        assert not isinstance(e, LeaseDenied)
        assert isinstance(e.lease, ClientSideLease)
        assert e.lease.acquired is None and e.lease.status == "unknown"
        assert IDENTITY.match(e.lease.identity)
        assert e.lease.cleanup == "unconfirmed"
        assert redis("GET", lease_key(res)) in ("", e.lease.identity)
        assert await leases.release(conn, e.lease) in ("released", "not_held")
    finally:
        await conn.close()
        await client.close()


@pytest.mark.asyncio
async def test_async_stale_heal_and_unavailable():
    """A :gen above the sequence is healed; no Redis: unavailable."""
    require_environment()
    conn = await aportable()
    client = aredis()
    absent = aredis(sock=REDIS_SOCK + ".absent")
    leases = AsyncClientSideLeases(client)
    try:
        res = resource_name("aio_client_side_stale")
        cur = await conn.execute("SELECT lease_fence.highest_issued()")
        stored = (await cur.fetchone())[0] + 700
        redis("SET", generation_key(res), stored)
        lease = await leases.acquire(conn, res, ttl_ms=10000)
        assert lease.generation > stored
        assert await leases.release(conn, lease) == "released"
        with pytest.raises(LeaseUnavailable) as tried:
            await AsyncClientSideLeases(absent).try_acquire(conn, res, ttl_ms=1000)
        assert (tried.value.lease.acquired, tried.value.lease.status) == (False, "unavailable")
        with pytest.raises(LeaseUnavailable):
            await AsyncClientSideLeases(absent).acquire(conn, res, ttl_ms=1000)
        with pytest.raises(TypeError):
            AsyncClientSideLeases(object())
        with pytest.raises(ValueError):
            await leases.try_acquire(conn, "", ttl_ms=1000)
    finally:
        await conn.close()
        await client.close()
        await absent.close()


@pytest.mark.asyncio
async def test_async_fair_refused_before_any_side_effect():
    """As the sync test: fair=True is a ValueError, a fair that is not a bool
    a TypeError, before a generation is drawn or Redis is asked (a client of
    a socket that does not exist would answer LeaseUnavailable)."""
    require_environment()
    check = portable_connect()
    conn = await aportable()
    clients = [aredis(), aredis(sock=REDIS_SOCK + ".none")]
    res = resource_name("aio_client_side_fair")
    try:
        before = check.execute("SELECT lease_fence.highest_issued()").fetchone()[0]
        for client in clients:
            leases = AsyncClientSideLeases(client)
            for verb in (leases.acquire, leases.try_acquire):
                for wait_ms in (0, 1000):
                    with pytest.raises(ValueError, match=r"^fair=True is not offered by the "
                                                         r"client-side mode"):
                        await verb(conn, res, ttl_ms=1000, wait_ms=wait_ms, fair=True)
                for bad in ("yes", 1, None):
                    with pytest.raises(TypeError, match=r"^fair is a bool"):
                        await verb(conn, res, ttl_ms=1000, fair=bad)
        assert check.execute("SELECT lease_fence.highest_issued()").fetchone()[0] == before
        assert redis("EXISTS", lease_key(res), generation_key(res)) == "0"
        with pytest.raises(LeaseUnavailable):   # what a request there would have answered
            await AsyncClientSideLeases(clients[1]).acquire(conn, res, ttl_ms=1000)
        leases = AsyncClientSideLeases(clients[0])
        lease = await leases.acquire(conn, res, ttl_ms=1000, fair=False)
        assert lease.acquired is True
        assert await leases.release(conn, lease) == "released"
    finally:
        for client in clients:
            await client.close()
        await conn.close()
        check.close()

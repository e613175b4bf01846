"""lease_fence.aio over SQLAlchemy's asyncio extension: AsyncConnection and
AsyncSession, with every async driver available (asyncpg on SQLAlchemy 1.4
and 2.0; psycopg on 2.0). The error fields come from the driver underneath
(asyncpg: the error's own attributes; psycopg: ``diag``)."""

import asyncio

import pytest
import sqlalchemy
from sqlalchemy import BigInteger, Column, Integer, Text, text
from sqlalchemy.orm import declarative_base

import lease_fence
from lease_fence import LeaseLostAtCommit, MissingGeneration, StaleGeneration, aio
from lf_testlib import (async_drivers, async_engine_for, connect, lease_key, new_row, read_row,
                        redis, resource_name)

DRIVERS = async_drivers()
pytestmark = pytest.mark.skipif(not DRIVERS, reason="no SQLAlchemy async driver installed "
                                                    "(python3-asyncpg)")

Base = declarative_base()


class Account(Base):
    __tablename__ = "account"
    id = Column(Integer, primary_key=True)
    owner = Column(Text)
    balance = Column(Integer)
    fence = Column(BigInteger)


def _session(engine, **kw):
    from sqlalchemy.ext.asyncio import AsyncSession
    return AsyncSession(engine, **kw)


@pytest.mark.asyncio
@pytest.mark.parametrize("driver", DRIVERS or ["none"])
async def test_two_holders_stale_orm_write_raises_stale_generation(driver):
    """acceptance (async SQLAlchemy ORM): A's lease expires, B acquires and
    flushes its change; A's fenced flush raises lease_fence.StaleGeneration
    naming public.account.fence (rows only) and, with the lease, the
    resource; B's write stands."""
    engine = async_engine_for(driver)
    check = connect()
    try:
        row_id = new_row(check)
        res = resource_name(f"two_holders_sa_{driver}")
        async with _session(engine) as a_session, _session(engine) as b_session:
            a = await aio.acquire(a_session, res, ttl_ms=300)
            await asyncio.sleep(0.6)
            b = await aio.acquire(b_session, res, ttl_ms=10000)
            assert b.generation > a.generation
            async with aio.fenced(b_session, b):
                (await b_session.get(Account, row_id)).owner = "B"
            with pytest.raises(StaleGeneration) as info:
                async with aio.fenced(a_session, a.generation):      # rows only
                    (await a_session.get(Account, row_id)).owner = "A late"
                    await a_session.flush()
            err = info.value
            assert (err.sqlstate, err.schema, err.table, err.column, err.resource) == \
                ("LF001", "public", "account", "fence", None)
            assert isinstance(err.__cause__, sqlalchemy.exc.DBAPIError)
            a_session.expire_all()
            with pytest.raises(lease_fence.StaleGeneration) as info:
                async with aio.fenced(a_session, a):                 # the resource
                    pytest.fail("block must not run")
            assert (info.value.schema, info.value.table, info.value.resource) == \
                ("lease_fence", "resource_generation", res)
            assert await aio.release(b_session, b) == "released"
        assert read_row(check, row_id) == ("B", 100, b.generation)
    finally:
        check.close()
        await engine.dispose()


@pytest.mark.asyncio
@pytest.mark.parametrize("driver", DRIVERS or ["none"])
async def test_async_connection_transaction_lease(driver):
    """AsyncConnection + aio.transaction_lease: the write commits with the
    lease's generation; a key deleted before COMMIT is LeaseLostAtCommit;
    a strict-table write without a generation is MissingGeneration."""
    engine = async_engine_for(driver)
    check = connect()
    try:
        row_id = new_row(check)
        res = resource_name(f"sa_aio_tx_{driver}")
        async with engine.connect() as conn:
            async with aio.transaction_lease(conn, res, ttl_ms=10000) as lease:
                await conn.execute(text("UPDATE account SET owner = 'sa tx' WHERE id = :id"),
                                   {"id": row_id})
            assert read_row(check, row_id) == ("sa tx", 100, lease.generation)
            assert redis("EXISTS", lease_key(res)) == "0"
            with pytest.raises(LeaseLostAtCommit):
                async with aio.transaction_lease(conn, res, ttl_ms=2000):
                    await conn.execute(text("UPDATE account SET owner = 'lost' WHERE id = :id"),
                                       {"id": row_id})
                    redis("DEL", lease_key(res))
                    await asyncio.sleep(1.1)          # past ttl/2: COMMIT asks Redis
            assert read_row(check, row_id) == ("sa tx", 100, lease.generation)
            with pytest.raises(MissingGeneration) as info:
                async with aio.fence_errors():
                    async with conn.begin():
                        await conn.execute(text("INSERT INTO ledger (note) VALUES ('x')"))
            assert (info.value.table, info.value.column) == ("ledger", "fence")
    finally:
        check.close()
        await engine.dispose()


@pytest.mark.asyncio
@pytest.mark.parametrize("driver", DRIVERS or ["none"])
async def test_kept_alive_lease_needs_one_server_session(driver):
    """aio.kept_alive_lease on an AsyncConnection, watched on another: a
    fenced write under it commits; an AsyncSession bound to the Engine is
    refused (TypeError) before anything is acquired."""
    engine = async_engine_for(driver)
    check = connect()
    try:
        row_id = new_row(check)
        res = resource_name(f"sa_aio_kept_{driver}")
        async with engine.connect() as owner, engine.connect() as watch:
            async with aio.kept_alive_lease(owner, res, ttl_ms=3000, watch=watch) as lease:
                assert await lease.state == "active"
                async with aio.fenced(owner, lease):
                    await owner.execute(text("UPDATE account SET owner = 'kept' WHERE id = :id"),
                                        {"id": row_id})
        assert read_row(check, row_id) == ("kept", 100, lease.generation)
        assert redis("EXISTS", lease_key(res)) == "0"
        async with _session(engine) as session:
            with pytest.raises(TypeError):
                async with aio.kept_alive_lease(session, res, ttl_ms=1000):
                    pytest.fail("block must not run")
        assert redis("EXISTS", lease_key(res)) == "0"
    finally:
        check.close()
        await engine.dispose()


@pytest.mark.asyncio
async def test_asyncpg_error_maps_by_its_fields():
    """fence_error_from reads an asyncpg error itself (no SQLAlchemy):
    sqlstate and schema/table/column attributes, not the message."""
    asyncpg = pytest.importorskip("asyncpg")
    from lf_testlib import APP_USER, DATABASE, PGHOST, PGPORT
    conn = await asyncpg.connect(host=PGHOST, port=PGPORT, database=DATABASE, user=APP_USER)
    try:
        with pytest.raises(asyncpg.PostgresError) as info:
            async with conn.transaction():
                await conn.execute("INSERT INTO ledger (note) VALUES ('asyncpg unfenced')")
        err = lease_fence.fence_error_from(info.value)
        assert isinstance(err, MissingGeneration)
        assert (err.sqlstate, err.schema, err.table, err.column) == \
            ("LF002", "public", "ledger", "fence")
    finally:
        await conn.close()

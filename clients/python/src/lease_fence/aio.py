"""lease_fence for asyncio: psycopg 3 ``AsyncConnection`` and SQLAlchemy's
``AsyncConnection`` / ``AsyncSession`` (asyncpg or psycopg underneath).

The same functions as ``lease_fence``, as coroutines and async context
managers, with the same exceptions::

    from lease_fence import aio, StaleGeneration

    lease = await aio.acquire(conn, "account:1", ttl_ms=30000)
    async with aio.fenced(conn, lease):      # BEGIN + set_generation: one pipeline
        await conn.execute("UPDATE account SET owner = 'me' WHERE id = 1")
    await aio.release(conn, lease)

``AsyncKeptAliveLease.state`` / ``.lost`` are awaitables (``await
lease.state``) and ``check()`` a coroutine. ``aio.leadership`` heartbeats
from a task; its ``lead.lost`` is an asyncio.Event.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, fields
from typing import (Any, AsyncContextManager, AsyncIterator, Awaitable, Dict, Mapping, Optional,
                    Sequence, TypeVar, Union)

from ._errors import (Lease, LeaseLost, ReleaseStatus, TransactionRolledBack, _acquired,
                      _lease_from_row, _released, _renewed, _try_acquired, fence_error_from)
from ._sync import (ACQUIRE_SQL, KEEPALIVE_STATE_SQL, RELEASE_SQL, RENEW_SQL,
                    SET_GENERATION_SQL, _acquire_params, _begin_sql, _dbapi_failed, _fence_args,
                    _is_psycopg, _one_server_session, _sa_inactive, _sa_text)
from ._resumable import CHECKPOINT_SQL, LAST_CHECKPOINT_SQL, ResumableJob
from ._election import (CAMPAIGN_SQL, RESIGN_SQL, TAKE_OVER_SQL, _campaign_lease,
                        _campaign_params, _leader_state, _LeaderState, _take_over_error,
                        _take_over_params)

__all__ = [
    "AsyncKeptAliveLease", "try_acquire", "acquire", "transaction_lease", "job", "kept_alive_lease",
    "keepalive_state", "fenced", "renew", "release", "fence_errors", "AsyncLeadership",
    "leadership", "take_over", "AsyncResumableJob", "resumable_job",
]

C = TypeVar("C")


@asynccontextmanager
async def fence_errors() -> AsyncIterator[None]:
    """``async with`` form of ``lease_fence.fence_errors``: driver errors with
    SQLSTATE LF001-LF004/LF010 become FenceError subclasses."""
    try:
        yield
    except Exception as exc:
        mapped = fence_error_from(exc)
        if mapped is None or mapped is exc:
            raise
        raise mapped from exc


class _AsyncAdapter:
    conn: Any

    async def failed(self) -> bool:
        """Whether the transaction is failed (COMMIT would answer ROLLBACK)."""
        return False

    async def check_committable(self) -> None:
        """TransactionRolledBack, inside the transaction, when it has failed."""
        if await self.failed():
            raise TransactionRolledBack()

    def begin(self) -> AsyncContextManager[Any]:
        raise NotImplementedError

    async def query_one(self, sql: str,
                        params: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
        raise NotImplementedError

    async def alone(self, sql: str,
                    params: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
        """As the sync adapter's: one statement of a verb (autocommit: alone;
        else psycopg: a transaction of its own; SQLAlchemy: a transaction of
        its own)."""
        async with self.begin():
            return await self.query_one(sql, params)

    async def own(self, sql: str,
                  params: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
        """One statement in a transaction of its own (alone under autocommit)."""
        async with self.begin():
            return await self.query_one(sql, params)

    @asynccontextmanager
    async def fenced_tx(self, args: Mapping[str, Any]) -> AsyncIterator[None]:
        async with self.begin():
            await self.query_one(SET_GENERATION_SQL, args)
            yield
            await self.check_committable()

    @asynccontextmanager
    async def lease_tx(self, params: Mapping[str, Any],
                       retry_stale: bool) -> AsyncIterator[Lease]:
        """BEGIN; the checked acquire; the block; COMMIT, one after the other."""
        async with self.begin():
            yield await _acquire_row_checked(self, params, retry_stale)
            await self.check_committable()


class _AsyncPsycopg(_AsyncAdapter):
    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def _check_idle(self) -> None:
        from psycopg import pq
        if self.conn.info.transaction_status != pq.TransactionStatus.IDLE:
            raise RuntimeError("lease_fence needs a connection that is not in a transaction "
                               "(use autocommit=True, or commit first)")

    async def failed(self) -> bool:
        return bool(_dbapi_failed(self.conn))

    def begin(self) -> AsyncContextManager[Any]:
        self._check_idle()
        return self.conn.transaction()  # type: ignore[no-any-return]

    async def query_one(self, sql: str,
                        params: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
        cur = await self.conn.execute(sql, params)
        row = await cur.fetchone()
        return dict(zip([c.name for c in cur.description], row))

    async def alone(self, sql: str,
                    params: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
        # as the sync adapter: alone under autocommit, else its own transaction
        return await self.own(sql, params)

    async def own(self, sql: str,
                  params: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
        self._check_idle()
        if self.conn.autocommit:
            return await self.query_one(sql, params)
        return await super().own(sql, params)

    @asynccontextmanager
    async def fenced_tx(self, args: Mapping[str, Any]) -> AsyncIterator[None]:
        import psycopg
        self._check_idle()
        if not psycopg.Pipeline.is_supported():
            async with super().fenced_tx(args):
                yield
            return
        conn = self.conn
        try:
            async with conn.pipeline():
                if conn.autocommit:
                    await conn.execute("BEGIN")
                await conn.execute(SET_GENERATION_SQL, args)
        except BaseException:
            await self._rollback()
            raise
        try:
            yield
            await self.check_committable()
        except BaseException:
            await self._rollback()
            raise
        await conn.commit()

    async def _rollback(self) -> None:
        if self.conn.closed or self.conn.broken:
            return
        await self.conn.rollback()

    @asynccontextmanager
    async def lease_tx(self, params: Mapping[str, Any],
                       retry_stale: bool) -> AsyncIterator[Lease]:
        """BEGIN and the acquire in one pipeline (one round trip), as the
        sync adapter does (autocommit switched on for the job if it was
        off, and restored)."""
        import psycopg
        self._check_idle()
        if not psycopg.AsyncPipeline.is_supported():
            async with super().lease_tx(params, retry_stale) as lease:
                yield lease
            return
        conn = self.conn
        restore = not conn.autocommit
        begin = _begin_sql(conn)
        if restore:
            await conn.set_autocommit(True)
        try:
            try:
                async with conn.pipeline():
                    await conn.execute(begin)
                    cur = await conn.execute(ACQUIRE_SQL, params)
                row = await cur.fetchone()
                first = _lease_from_row(dict(zip([c.name for c in cur.description], row)))
                lease = await _check_acquired(self, first, params, retry_stale)
            except BaseException:
                await self._rollback()
                raise
            try:
                yield lease
                await self.check_committable()
            except BaseException:
                await self._rollback()
                raise
            await conn.commit()
        finally:
            if restore and not (conn.closed or conn.broken):
                try:
                    await conn.set_autocommit(False)
                except psycopg.Error:
                    pass


class _AsyncSQLAlchemy(_AsyncAdapter):
    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def begin(self) -> AsyncContextManager[Any]:
        if self.conn.in_transaction():
            raise RuntimeError("lease_fence needs a SQLAlchemy AsyncConnection/AsyncSession "
                               "that is not in a transaction (commit first)")
        return self.conn.begin()  # type: ignore[no-any-return]

    async def query_one(self, sql: str,
                        params: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
        result = await self.conn.execute(_sa_text(sql), dict(params or {}))
        return dict(result.mappings().one())

    async def failed(self) -> bool:
        if _sa_inactive(self.conn):
            return True
        conn = self.conn
        if hasattr(conn, "get_bind"):               # an AsyncSession: its transaction's connection
            conn = await conn.connection()
        raw = await conn.get_raw_connection()
        adapted = getattr(raw, "dbapi_connection", None) or getattr(raw, "connection", None)
        driver = getattr(adapted, "_connection", adapted)   # SQLAlchemy's async adaptor's driver
        known = _dbapi_failed(driver)
        if known is not None:
            return known
        # asyncpg does not say: a statement tells (25P02 in a failed
        # transaction); one more round trip, on this driver only
        try:
            await conn.execute(_sa_text("SELECT 1"))
        except Exception as exc:                     # noqa: BLE001 - the driver's error
            err = getattr(exc, "orig", exc)
            if (getattr(err, "sqlstate", None) or getattr(err, "pgcode", None)) == "25P02":
                return True
            raise
        return False


def _adapter(conn: Any) -> _AsyncAdapter:
    module = type(conn).__module__
    if _is_psycopg(conn) and hasattr(conn, "pipeline"):
        if not type(conn).__name__.startswith("Async") and not module.endswith("_async"):
            raise TypeError("a sync psycopg connection: use lease_fence, not lease_fence.aio")
        return _AsyncPsycopg(conn)
    if module.startswith("sqlalchemy.ext.asyncio") and hasattr(conn, "in_transaction"):
        return _AsyncSQLAlchemy(conn)
    raise TypeError(f"expected a psycopg AsyncConnection or a SQLAlchemy "
                    f"AsyncConnection/AsyncSession, got {type(conn).__name__}")


async def _check_acquired(db: _AsyncAdapter, lease: Lease, params: Mapping[str, Any],
                          retry_stale: bool) -> Lease:
    if lease.status == "stale" and retry_stale:
        lease = _lease_from_row(await db.query_one(ACQUIRE_SQL, params))
    return _acquired(lease)


async def _acquire_row_checked(db: _AsyncAdapter, params: Mapping[str, Any],
                               retry_stale: bool) -> Lease:
    return await _check_acquired(db, _lease_from_row(await db.query_one(ACQUIRE_SQL, params)),
                                 params, retry_stale)


async def _acquire_alone(db: _AsyncAdapter, params: Mapping[str, Any],
                         retry_stale: bool) -> Lease:
    lease = _lease_from_row(await db.alone(ACQUIRE_SQL, params))
    if lease.status == "stale" and retry_stale:
        lease = _lease_from_row(await db.alone(ACQUIRE_SQL, params))
    return lease


async def try_acquire(conn: Any, resource: str, ttl_ms: int, *, min_validity_ms: int = 0,
                      wait_ms: int = 0, retry_stale: bool = True,
                      fair: bool = False) -> Optional[Lease]:
    """``lease_fence.try_acquire``, awaited: the Lease, **None** when busy, and
    the exceptions of ``acquire`` for everything else."""
    db = _adapter(conn)
    return _try_acquired(await _acquire_alone(db, _acquire_params(
        resource, ttl_ms, min_validity_ms, "explicit", wait_ms, False, fair), retry_stale))


async def acquire(conn: Any, resource: str, ttl_ms: int, *, min_validity_ms: int = 0,
                  retry_stale: bool = True, wait_ms: int = 0, fair: bool = False) -> Lease:
    """``lease_fence.acquire``, awaited: LeaseBusy / LeaseUnavailable / LeaseDenied
    for a definite no, LeaseUnknown when Redis may have granted it. One
    statement (autocommit: alone; else in a transaction of its own). ``fair``
    as in ``lease_fence.acquire``."""
    db = _adapter(conn)
    return _acquired(await _acquire_alone(db, _acquire_params(
        resource, ttl_ms, min_validity_ms, "explicit", wait_ms, False, fair), retry_stale))


@asynccontextmanager
async def transaction_lease(conn: Any, resource: str, ttl_ms: int, *, min_validity_ms: int = 0,
                            retry_stale: bool = True, wait_ms: int = 0,
                            keepalive: bool = False, fair: bool = False) -> AsyncIterator[Lease]:
    """``async with``: the block in one transaction holding a transaction-scoped
    lease; COMMIT verifies (else LeaseLostAtCommit) and releases it."""
    db = _adapter(conn)
    params = _acquire_params(resource, ttl_ms, min_validity_ms, "transaction", wait_ms,
                             keepalive, fair)
    async with fence_errors():
        async with db.begin():
            yield await _acquire_row_checked(db, params, retry_stale)
            await db.check_committable()


@asynccontextmanager
async def job(conn: Any, resource: str, ttl_ms: int, *, min_validity_ms: int = 0,
              wait_ms: int = 0, fair: bool = False) -> AsyncIterator[Lease]:
    """``async with``: ``lease_fence.job`` for async connections (see there).

    With psycopg's AsyncConnection BEGIN and the transaction-scoped acquire
    go out in one pipeline (one round trip); SQLAlchemy's AsyncConnection /
    AsyncSession run them one after the other, as ``transaction_lease``.
    The same outcomes and exceptions as ``transaction_lease``.
    """
    db = _adapter(conn)
    params = _acquire_params(resource, ttl_ms, min_validity_ms, "transaction", wait_ms, False,
                             fair)
    async with fence_errors():
        async with db.lease_tx(params, True) as lease:
            yield lease


@dataclass(frozen=True)
class AsyncKeptAliveLease(Lease):
    """The Lease of ``aio.kept_alive_lease``. ``await lease.state``, ``await
    lease.lost`` and ``await lease.check()`` ask ``lease_fence.keepalive_state``
    on the watch connection (never the owner's)."""

    watch: object = field(default=None, repr=False, compare=False)

    def _watch(self) -> Any:
        if self.watch is None:
            raise RuntimeError("this kept-alive lease has no watch connection: pass "
                               "watch=<another connection> to kept_alive_lease")
        return self.watch

    @property
    def state(self) -> Awaitable[Optional[str]]:
        """Awaitable: ``'active'``, ``'lost'``, or None (no longer kept alive)."""
        return keepalive_state(self._watch(), self)

    @property
    def lost(self) -> Awaitable[bool]:
        """Awaitable: True unless the keep-alive worker still keeps it."""
        watch = self._watch()

        async def _lost() -> bool:
            return await keepalive_state(watch, self) != "active"
        return _lost()

    async def check(self) -> None:
        """Raise LeaseLost (status 'lost') unless the lease is still kept alive."""
        state = await keepalive_state(self._watch(), self)
        if state != "active":
            raise LeaseLost("lost", self, f"kept-alive lease {self.resource!r}: "
                                          f"{state or 'no longer kept alive'}")


@asynccontextmanager
async def kept_alive_lease(conn: Any, resource: str, ttl_ms: int, *, min_validity_ms: int = 0,
                           wait_ms: int = 0, watch: Any = None, retry_stale: bool = True,
                           fair: bool = False) -> AsyncIterator[AsyncKeptAliveLease]:
    """``lease_fence.kept_alive_lease`` for async connections (see there)."""
    if watch is not None and watch is conn:
        raise ValueError("watch must be another connection than the lease owner's: queries "
                         "on the owner's connection make it look active")
    _one_server_session(conn)
    db = _adapter(conn)
    if watch is not None:
        _adapter(watch)
    params = _acquire_params(resource, ttl_ms, min_validity_ms, "session", wait_ms, True, fair)
    first = _lease_from_row(await db.own(ACQUIRE_SQL, params))
    if first.status == "stale" and retry_stale:
        first = _lease_from_row(await db.own(ACQUIRE_SQL, params))
    row = _acquired(first)
    lease = AsyncKeptAliveLease(**{f.name: getattr(row, f.name) for f in fields(Lease)},
                                watch=watch)
    try:
        yield lease
    except BaseException:
        try:
            await _release_own(db, lease)
        except Exception:
            pass
        raise
    if await _release_own(db, lease) == "not_held":
        raise LeaseLost("lost", lease, f"kept-alive lease {resource!r} was lost before the "
                                       f"block ended (release: not_held)")


async def keepalive_state(watch: Any, lease: Union[Lease, str]) -> Optional[str]:
    """``lease_fence.keepalive_state`` on ``watch``: 'active', 'lost' or None."""
    identity = lease.identity if isinstance(lease, Lease) else lease
    db = _adapter(watch)
    row = await db.own(KEEPALIVE_STATE_SQL, {"identity": identity})
    return row["state"]  # type: ignore[no-any-return]


@asynccontextmanager
async def fenced(conn: C, generation: Union[Lease, int],
                 resource: Optional[str] = None) -> AsyncIterator[C]:
    """``async with``: BEGIN; set_generation(g, resource); the block; COMMIT.

    With psycopg's AsyncConnection in autocommit mode BEGIN and
    set_generation go in one pipeline (one round trip). Refused writes
    raise FenceError subclasses; the transaction is rolled back.
    """
    args = _fence_args(generation, resource)
    db = _adapter(conn)
    async with fence_errors():
        async with db.fenced_tx(args):
            yield conn


async def renew(conn: Any, lease: Lease, ttl_ms: int, *, min_validity_ms: int = 0) -> int:
    """``lease_fence.renew``, awaited: the validity in ms, or a LeaseError."""
    db = _adapter(conn)
    row = await db.alone(RENEW_SQL, {"resource": lease.resource, "identity": lease.identity,
                                     "ttl_ms": ttl_ms, "min_validity_ms": min_validity_ms})
    return _renewed(row["status"], lease, row["validity_ms"], row["reason"], row["renewed"])


async def release(conn: Any, lease: Lease) -> ReleaseStatus:
    """``lease_fence.release``, awaited: a ReleaseStatus, never raises for an outcome."""
    db = _adapter(conn)
    row = await db.alone(RELEASE_SQL, {"resource": lease.resource, "identity": lease.identity})
    return _released(row["status"], row["reason"])


async def _release_own(db: _AsyncAdapter, lease: Lease) -> ReleaseStatus:
    """release in a transaction of its own (the end of kept_alive_lease)."""
    row = await db.own(RELEASE_SQL, {"resource": lease.resource, "identity": lease.identity})
    return _released(row["status"], row["reason"])



# --------------------------------------------------------------------------
# Leader election and take_over (lease_fence._election has the sync API and
# what both share: the SQL, the argument checks, the validity bookkeeping)
# --------------------------------------------------------------------------

class AsyncLeadership:
    """``aio.leadership``'s leadership: as ``lease_fence.Leadership``, with
    ``lost`` an asyncio.Event, ``check()`` a plain method and ``fenced(conn)``
    an async context manager."""

    def __init__(self, state: _LeaderState, conn: Any) -> None:
        self._state = state
        self._conn = conn
        self.lost = asyncio.Event()

    @property
    def election(self) -> str:
        return self._state.election

    @property
    def identity(self) -> str:
        return self._state.identity

    @property
    def term(self) -> int:
        """The generation of the election's lease: this leader's term."""
        return self._state.term

    @property
    def value(self) -> Optional[str]:
        return self._state.value

    @property
    def ttl_ms(self) -> int:
        return self._state.ttl_ms

    @property
    def lost_reason(self) -> Optional[str]:
        """Why the leadership was lost; None while it is not."""
        return self._state.lost_reason

    def __repr__(self) -> str:
        return (f"AsyncLeadership(election={self.election!r}, term={self.term}, "
                f"identity={self.identity!r}, lost={self.lost.is_set()})")

    def _lose(self, reason: str) -> None:
        if self._state.lost_reason is None:
            self._state.lost_reason = reason
        self.lost.set()

    def check(self) -> None:
        """Raise LeadershipLost if the leadership is lost (or its lease's
        validity ran out without a confirmed renew)."""
        if not self.lost.is_set() and self._state.expired():
            self._lose("no renew was confirmed before the lease ran out")
        if self.lost.is_set():
            raise self._state.error()

    @asynccontextmanager
    async def fenced(self, conn: C) -> AsyncIterator[C]:
        """``aio.fenced(conn, lead.term, lead.election)``, checked before BEGIN
        and before COMMIT (LeadershipLost); see ``Leadership.fenced``."""
        if conn is self._conn:
            raise ValueError("lead.fenced needs another connection than the election's: that "
                             "one is dedicated to the election (its heartbeat)")
        self.check()
        async with fenced(conn, self._state.term, self._state.election) as c:
            yield c
            self.check()


async def _heartbeat(lead: AsyncLeadership, db: _AsyncAdapter, wake: asyncio.Event) -> None:
    """renew at once, then every ttl_ms / 3, on the election's connection."""
    state = lead._state
    params = {"resource": state.election, "identity": state.identity,
              "ttl_ms": state.ttl_ms, "min_validity_ms": 0}
    interval = max(state.ttl_ms / 3.0, 1.0) / 1000.0
    while True:
        sent = time.monotonic()
        row: Optional[Dict[str, Any]] = None
        failure: Optional[BaseException] = None
        try:
            row = await db.alone(RENEW_SQL, params)
        except Exception as exc:            # noqa: BLE001 - not confirmed; tried again
            failure = exc
        lost = state.renewed(sent, row, failure)
        wake.set()
        if lost is not None:
            lead._lose(lost)
            return
        await asyncio.sleep(interval)


async def _deadline_watch(lead: AsyncLeadership, wake: asyncio.Event) -> None:
    """The loss at the deadline, whether or not a renew answered."""
    state = lead._state
    while not lead.lost.is_set():
        left = state.deadline - time.monotonic()
        if left <= 0:
            lead._lose("no renew was confirmed before the lease ran out")
            return
        wake.clear()
        try:
            await asyncio.wait_for(wake.wait(), left)
        except asyncio.TimeoutError:
            pass


async def _stop(tasks: Sequence["asyncio.Task[None]"]) -> None:
    for t in tasks:
        t.cancel()
    for t in tasks:
        try:
            await t
        except (asyncio.CancelledError, Exception):
            pass


@asynccontextmanager
async def leadership(conn: Any, election: str, ttl_ms: int, *, value: Optional[str] = None,
                     wait_ms: Optional[int] = None, scope: str = "session",
                     fair: bool = False) -> AsyncIterator[AsyncLeadership]:
    """``async with``: ``lease_fence.leadership`` for async connections (see
    there): campaign on ``conn``, renew it from a task on that same
    connection every ttl_ms / 3, resign at the end. ``lead.lost`` is an
    asyncio.Event."""
    params = _campaign_params(election, ttl_ms, value, wait_ms, scope, fair)
    _one_server_session(conn)
    db = _adapter(conn)
    first = _campaign_lease(election, await db.own(CAMPAIGN_SQL, params))
    if first.status == "stale":
        first = _campaign_lease(election, await db.own(CAMPAIGN_SQL, params))
    state = _leader_state(_acquired(first), value, ttl_ms)
    lead = AsyncLeadership(state, conn)
    wake = asyncio.Event()
    tasks = [asyncio.ensure_future(_heartbeat(lead, db, wake)),
             asyncio.ensure_future(_deadline_watch(lead, wake))]
    resign = {"election": election, "identity": state.identity}
    try:
        yield lead
    except BaseException:
        await _stop(tasks)
        try:
            await db.own(RESIGN_SQL, resign)
        except Exception:
            pass
        raise
    finally:
        for t in tasks:
            t.cancel()
    await _stop(tasks)
    row = await db.own(RESIGN_SQL, resign)
    if row["status"] == "not_held":
        lead._lose("resign found the election no longer held")
    lead.check()


async def take_over(conn: Any, resource: str, ttl_ms: int, *, timeout_ms: int = 5000,
                    scope: str = "explicit") -> Lease:
    """``lease_fence.take_over``, awaited (see there): the Lease, or
    TakeOverTimeout / LeaseUnavailable / LeaseUnknown."""
    params = _take_over_params(resource, ttl_ms, timeout_ms, scope)
    db = _adapter(conn)
    try:
        row = await db.alone(TAKE_OVER_SQL, params)
    except Exception as exc:
        mapped = _take_over_error(exc, resource)
        if mapped is None:
            raise
        raise mapped from exc
    return _acquired(_lease_from_row(row))


# --------------------------------------------------------------------------
# resumable_job (psycopg's AsyncConnection)
# --------------------------------------------------------------------------

class AsyncResumableJob(ResumableJob):
    """The job of ``aio.resumable_job``: ``ResumableJob``'s attributes;
    ``await job.checkpoint(state)``."""

    async def _aopen(self, read_checkpoint: bool) -> None:
        """BEGIN; set_generation(g, resource) [; last_checkpoint]: one pipeline."""
        import psycopg
        conn = self.conn
        args = {"generation": self.generation, "resource": self.resource}
        if psycopg.AsyncPipeline.is_supported():
            async with conn.pipeline():
                await conn.execute(self._begin)
                await conn.execute(SET_GENERATION_SQL, args)
                cur = await conn.execute(LAST_CHECKPOINT_SQL, {"resource": self.resource}) \
                    if read_checkpoint else None
        else:
            await conn.execute(self._begin)
            await conn.execute(SET_GENERATION_SQL, args)
            cur = await conn.execute(LAST_CHECKPOINT_SQL, {"resource": self.resource}) \
                if read_checkpoint else None
        if cur is not None:
            row = await cur.fetchone()
            if row is not None:
                self.resume_from, self.resumed_generation, self.written_at = row

    async def checkpoint(self, state: Any) -> int:  # type: ignore[override]
        """``ResumableJob.checkpoint``, awaited: renew, checkpoint, COMMIT,
        the next fenced transaction; the same exceptions."""
        import json
        import psycopg
        text = json.dumps(state)
        db = _AsyncPsycopg(self.conn)
        conn = self.conn
        async with fence_errors():
            await db.check_committable()
            row = await db.query_one(RENEW_SQL, {"resource": self.resource,
                                                 "identity": self.identity,
                                                 "ttl_ms": self.ttl_ms, "min_validity_ms": 0})
            _renewed(row["status"], self.lease, row["validity_ms"], row["reason"],
                     row["renewed"])
            if psycopg.AsyncPipeline.is_supported():
                async with conn.pipeline():
                    cur = await conn.execute(CHECKPOINT_SQL, {"resource": self.resource,
                                                              "state": text})
                    await conn.execute("COMMIT")
            else:
                cur = await conn.execute(CHECKPOINT_SQL, {"resource": self.resource,
                                                          "state": text})
                await conn.execute("COMMIT")
            generation: int = (await cur.fetchone())[0]
            await self._aopen(False)
        return generation


@asynccontextmanager
async def resumable_job(conn: Any, resource: str, ttl_ms: int, *, wait_ms: int = 0,
                        fair: bool = False) -> AsyncIterator[AsyncResumableJob]:
    """``lease_fence.resumable_job`` on a psycopg ``AsyncConnection``:
    ``async with aio.resumable_job(conn, resource, ttl_ms) as job``, then
    ``await job.checkpoint(state)``. The same statements, pipelines and
    outcomes."""
    if not (_is_psycopg(conn) and type(conn).__name__.startswith("Async")):
        raise TypeError(f"aio.resumable_job needs a psycopg AsyncConnection, got "
                        f"{type(conn).__name__}")
    from psycopg import pq
    db = _AsyncPsycopg(conn)
    params = _acquire_params(resource, ttl_ms, 0, "explicit", wait_ms, False, fair)
    lease = _acquired(await _acquire_alone(db, params, True))
    job = AsyncResumableJob(conn, lease, ttl_ms)
    job._begin = _begin_sql(conn)
    restore = not conn.autocommit
    if restore:
        await conn.set_autocommit(True)

    def usable() -> bool:
        return not (conn.closed or conn.broken)
    try:
        try:
            async with fence_errors():
                await job._aopen(True)
                yield job
                await db.check_committable()
                await conn.execute("COMMIT")
        except BaseException:
            if usable() and conn.info.transaction_status != pq.TransactionStatus.IDLE:
                await conn.execute("ROLLBACK")
            raise
        finally:
            if usable():
                try:
                    await conn.execute(RELEASE_SQL, {"resource": lease.resource,
                                                     "identity": lease.identity})
                except Exception:
                    pass            # the answer does not change the outcome
    finally:
        if restore and usable():
            try:
                await conn.set_autocommit(False)
            except Exception:
                pass

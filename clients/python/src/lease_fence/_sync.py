"""The synchronous API: psycopg 3 Connection, SQLAlchemy Connection / Session, Django."""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from typing import Any, ContextManager, Dict, Iterator, Mapping, Optional, TypeVar, Union

from ._errors import (Lease, LeaseLost, ReleaseStatus, TransactionRolledBack, _acquired,
                      _lease_from_row, _released, _renewed, _try_acquired, fence_errors)

__all__ = [
    "KeptAliveLease", "try_acquire", "acquire", "transaction_lease", "job", "kept_alive_lease",
    "keepalive_state", "fenced", "renew", "release",
]

C = TypeVar("C")

# --------------------------------------------------------------------------
# SQL: one parameterized statement each; %(name)s placeholders, rewritten
# to :name for SQLAlchemy's text()
# --------------------------------------------------------------------------

ACQUIRE_SQL = ("SELECT acquired, status, resource, identity, generation, validity_ms, reason "
               "FROM lease_fence.acquire(CAST(%(resource)s AS text), "
               "CAST(%(ttl_ms)s AS bigint), CAST(%(min_validity_ms)s AS bigint), "
               "CAST(%(scope)s AS text), CAST(%(wait_ms)s AS bigint), "
               "CAST(%(keepalive)s AS boolean), CAST(%(fair)s AS boolean))")
SET_GENERATION_SQL = ("SELECT lease_fence.set_generation(CAST(%(generation)s AS bigint), "
                      "CAST(%(resource)s AS text)) AS g")
RENEW_SQL = ("SELECT renewed, status, validity_ms, reason FROM lease_fence.renew("
             "CAST(%(resource)s AS text), CAST(%(identity)s AS text), "
             "CAST(%(ttl_ms)s AS bigint), CAST(%(min_validity_ms)s AS bigint))")
RELEASE_SQL = ("SELECT released, status, reason FROM lease_fence.release("
               "CAST(%(resource)s AS text), CAST(%(identity)s AS text))")
KEEPALIVE_STATE_SQL = ("SELECT lease_fence.keepalive_state(CAST(%(identity)s AS text)) "
                       "AS state")

_NAMED = re.compile(r"%\((\w+)\)s")


def _sa_text(sql: str) -> Any:
    from sqlalchemy import text
    return text(_NAMED.sub(r":\1", sql))


def _generation(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"a generation is a non-negative int, got {value!r}")
    return value


def _fence_args(generation: Union[Lease, int], resource: Optional[str]) -> Dict[str, Any]:
    """{generation, resource} for set_generation, from a Lease or an int."""
    if isinstance(generation, Lease):
        if resource is None:
            resource = generation.resource
        generation = generation.generation  # type: ignore[assignment]
    gen = _generation(generation)
    if resource is not None and not isinstance(resource, str):
        raise TypeError(f"a resource is a str, got {type(resource).__name__}")
    return {"generation": gen, "resource": resource}


def _check_fair(fair: object) -> bool:
    """``fair`` is a bool (TypeError otherwise, before anything is sent)."""
    if not isinstance(fair, bool):
        raise TypeError(f"fair is a bool, got {type(fair).__name__}")
    return fair


def _acquire_params(resource: str, ttl_ms: int, min_validity_ms: int, scope: str,
                    wait_ms: int, keepalive: bool, fair: object = False) -> Dict[str, Any]:
    return {"resource": resource, "ttl_ms": ttl_ms, "min_validity_ms": min_validity_ms,
            "scope": scope, "wait_ms": wait_ms, "keepalive": bool(keepalive),
            "fair": _check_fair(fair)}


_BUSY_MSG = ("lease_fence needs a connection that is not in a transaction "
             "(use autocommit=True, or commit first)")


# --------------------------------------------------------------------------
# Driver adapters
# --------------------------------------------------------------------------

_PQTRANS_INERROR = 3    # libpq: idle, in a failed transaction block (psycopg 3 and psycopg2)


def _dbapi_failed(dbapi: Any) -> Optional[bool]:
    """Whether a DBAPI connection is in a failed transaction (a statement in
    it raised: COMMIT would roll it back): psycopg 3 and psycopg2 say; None
    for a driver that does not."""
    info = getattr(dbapi, "info", None)
    status = getattr(info, "transaction_status", None)          # psycopg 3
    if status is None:
        get = getattr(dbapi, "get_transaction_status", None)    # psycopg2
        status = get() if callable(get) else None
    return None if status is None else int(status) == _PQTRANS_INERROR


def _sa_dbapi(conn: Any) -> Any:
    """The DBAPI connection under a SQLAlchemy Connection (or a Session's
    Connection of its transaction)."""
    if not hasattr(conn, "get_bind"):       # a Connection
        fairy = conn.connection
    else:                                   # a Session
        fairy = conn.connection().connection
    return getattr(fairy, "dbapi_connection", None) or getattr(fairy, "connection", None)


def _sa_inactive(conn: Any) -> bool:
    """A SQLAlchemy transaction that is no longer active (a Session whose
    flush failed rolled it back): it cannot commit."""
    tx = conn.get_transaction()
    return tx is not None and not tx.is_active


class _Adapter:
    conn: Any

    def failed(self) -> bool:
        """Whether the transaction is failed: a statement in it raised (and
        the block caught it), so COMMIT would answer ROLLBACK."""
        return False

    def check_committable(self) -> None:
        """TransactionRolledBack, inside the transaction (which then rolls
        back), when it has failed: never let the block look committed."""
        if self.failed():
            raise TransactionRolledBack()

    def begin(self) -> ContextManager[Any]:
        raise NotImplementedError

    def query_one(self, sql: str, params: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
        raise NotImplementedError

    def alone(self, sql: str, params: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
        """One statement of a verb (acquire, renew, release): under autocommit
        that statement alone. Otherwise psycopg: a transaction of its own
        (the connection idle); Django: the caller's atomic() block, if any.
        SQLAlchemy: in a transaction of its own (one statement on the wire
        with isolation_level='AUTOCOMMIT')."""
        with self.begin():
            return self.query_one(sql, params)

    def own(self, sql: str, params: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
        """One statement in a transaction of its own: the statement alone
        under autocommit, else BEGIN; it; COMMIT (the connection idle)."""
        with self.begin():
            return self.query_one(sql, params)

    @contextmanager
    def fenced_tx(self, args: Mapping[str, Any]) -> Iterator[None]:
        """BEGIN; set_generation(g, resource); the block; COMMIT (ROLLBACK on
        error, and TransactionRolledBack when the transaction failed)."""
        with self.begin():
            self.query_one(SET_GENERATION_SQL, args)
            yield
            self.check_committable()

    @contextmanager
    def lease_tx(self, params: Mapping[str, Any], retry_stale: bool) -> Iterator[Lease]:
        """BEGIN; the acquire (checked: stale retried once, a failure raised
        before the block); the block; COMMIT (ROLLBACK on error, and
        TransactionRolledBack when the transaction failed): one statement
        after the other, as transaction_lease runs them."""
        with self.begin():
            yield _acquire_row_checked(self, params, retry_stale)
            self.check_committable()


def _begin_sql(conn: Any) -> str:
    """The BEGIN psycopg would send for ``conn`` (its isolation_level,
    read_only and deferrable), built from the public attributes."""
    parts = ["BEGIN"]
    if conn.isolation_level is not None:
        from psycopg import IsolationLevel
        parts.append("ISOLATION LEVEL "
                     + IsolationLevel(conn.isolation_level).name.replace("_", " "))
    if conn.read_only is not None:
        parts.append("READ ONLY" if conn.read_only else "READ WRITE")
    if conn.deferrable is not None:
        parts.append("DEFERRABLE" if conn.deferrable else "NOT DEFERRABLE")
    return " ".join(parts)


class _Psycopg(_Adapter):
    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def _check_idle(self) -> None:
        from psycopg import pq
        if self.conn.info.transaction_status != pq.TransactionStatus.IDLE:
            raise RuntimeError(_BUSY_MSG)

    def failed(self) -> bool:
        return bool(_dbapi_failed(self.conn))

    def begin(self) -> ContextManager[Any]:
        self._check_idle()
        return self.conn.transaction()  # type: ignore[no-any-return]

    def query_one(self, sql: str, params: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
        cur = self.conn.execute(sql, params)
        row = cur.fetchone()
        return dict(zip([c.name for c in cur.description], row))

    def alone(self, sql: str, params: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
        # autocommit: the statement alone. Without it, a transaction of its
        # own, as in 1.3: left in psycopg's implicit one, the connection
        # would stay in a transaction after acquire, and fenced() (which
        # needs an idle connection) would refuse it.
        return self.own(sql, params)

    def own(self, sql: str, params: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
        self._check_idle()
        if self.conn.autocommit:
            return self.query_one(sql, params)
        return super().own(sql, params)

    @contextmanager
    def fenced_tx(self, args: Mapping[str, Any]) -> Iterator[None]:
        """BEGIN and set_generation in one pipeline (one round trip), when
        libpq supports pipeline mode; then the block; then COMMIT."""
        import psycopg
        self._check_idle()
        if not psycopg.Pipeline.is_supported():
            with super().fenced_tx(args):
                yield
            return
        conn = self.conn
        try:
            with conn.pipeline():
                if conn.autocommit:
                    conn.execute("BEGIN")
                # without autocommit psycopg queues its own BEGIN first
                conn.execute(SET_GENERATION_SQL, args)
        except BaseException:
            self._rollback()
            raise
        try:
            yield
            self.check_committable()
        except BaseException:
            self._rollback()
            raise
        conn.commit()

    def _rollback(self) -> None:
        """ROLLBACK after an error; a connection that broke meanwhile keeps
        the original exception (it has no transaction left to end)."""
        if self.conn.closed or self.conn.broken:
            return
        self.conn.rollback()

    @contextmanager
    def lease_tx(self, params: Mapping[str, Any], retry_stale: bool) -> Iterator[Lease]:
        """BEGIN and the acquire in one pipeline: one round trip (libpq with
        pipeline mode). psycopg with autocommit off would sync its own BEGIN
        first, so the connection is switched to autocommit (a client-side
        flag, allowed while idle) and sends the BEGIN psycopg would have
        sent; autocommit is restored when the transaction has ended."""
        import psycopg
        self._check_idle()
        if not psycopg.Pipeline.is_supported():
            with super().lease_tx(params, retry_stale) as lease:
                yield lease
            return
        conn = self.conn
        restore = not conn.autocommit
        begin = _begin_sql(conn)
        if restore:
            conn.autocommit = True
        try:
            try:
                with conn.pipeline():
                    conn.execute(begin)
                    cur = conn.execute(ACQUIRE_SQL, params)
                row = cur.fetchone()
                first = _lease_from_row(dict(zip([c.name for c in cur.description], row)))
                # stale: the transaction is fine (the acquire answered a row);
                # the retry runs in it
                lease = _check_acquired(self, first, params, retry_stale)
            except BaseException:
                self._rollback()
                raise
            try:
                yield lease
                self.check_committable()
            except BaseException:
                self._rollback()
                raise
            conn.commit()
        finally:
            if restore and not (conn.closed or conn.broken):
                try:
                    conn.autocommit = False
                except psycopg.Error:
                    pass        # still in a transaction (a failed ROLLBACK): keep its error


class _SQLAlchemy(_Adapter):
    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def begin(self) -> ContextManager[Any]:
        if self.conn.in_transaction():
            raise RuntimeError("lease_fence needs a SQLAlchemy Connection/Session that is not "
                               "in a transaction (commit first)")
        return self.conn.begin()  # type: ignore[no-any-return]

    def query_one(self, sql: str, params: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
        return dict(self.conn.execute(_sa_text(sql), dict(params or {})).mappings().one())

    def failed(self) -> bool:
        return _sa_inactive(self.conn) or bool(_dbapi_failed(_sa_dbapi(self.conn)))


class _Django(_Adapter):
    """A Django ``DatabaseWrapper`` (``django.db.connections[alias]``)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def begin(self) -> ContextManager[Any]:
        from django.db import transaction
        if self.conn.in_atomic_block:
            raise RuntimeError("lease_fence needs a Django connection outside "
                               "transaction.atomic() (its own transaction)")
        atomic: ContextManager[Any] = transaction.atomic(using=self.conn.alias)
        return atomic

    def query_one(self, sql: str, params: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
        with self.conn.cursor() as cur:
            cur.execute(sql, dict(params or {}))
            row = cur.fetchone()
            return dict(zip([c[0] for c in cur.description], row))

    def failed(self) -> bool:
        # Django marks the atomic block for rollback when a model save fails
        # (and would roll back at its end without a word); the driver says
        # whether a raw statement failed
        return bool(self.conn.needs_rollback) or bool(_dbapi_failed(self.conn.connection))

    def alone(self, sql: str, params: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
        return self.query_one(sql, params)      # autocommit, or the caller's atomic()

    def own(self, sql: str, params: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
        if not self.conn.in_atomic_block and self.conn.get_autocommit():
            return self.query_one(sql, params)
        return super().own(sql, params)


def _is_psycopg(conn: Any) -> bool:
    module = type(conn).__module__
    return module == "psycopg" or module.startswith("psycopg.")


def _adapter(conn: Any) -> _Adapter:
    module = type(conn).__module__
    if _is_psycopg(conn):
        if module.endswith("_async") or type(conn).__name__.startswith("Async"):
            raise TypeError("an async psycopg connection: use lease_fence.aio")
        return _Psycopg(conn)
    if module.startswith("sqlalchemy.ext.asyncio"):
        raise TypeError("a SQLAlchemy async connection/session: use lease_fence.aio")
    if module.startswith("sqlalchemy.") and hasattr(conn, "in_transaction"):
        return _SQLAlchemy(conn)
    if module.startswith("django.db.backends") and hasattr(conn, "in_atomic_block"):
        return _Django(conn)
    raise TypeError(f"expected a psycopg 3 Connection, a SQLAlchemy Connection/Session or a "
                    f"Django connection, got {type(conn).__name__}")


# --------------------------------------------------------------------------
# The API
# --------------------------------------------------------------------------

def _check_acquired(db: _Adapter, lease: Lease, params: Mapping[str, Any],
                    retry_stale: bool) -> Lease:
    """The first answer checked: stale retried once (if asked), anything but
    a grant raised as its LeaseError."""
    if lease.status == "stale" and retry_stale:
        # stale left nothing in Redis and moved next_generation() past the
        # stored one: one more try with a fresh generation is safe
        lease = _lease_from_row(db.query_one(ACQUIRE_SQL, params))
    return _acquired(lease)


def _acquire_row_checked(db: _Adapter, params: Mapping[str, Any], retry_stale: bool) -> Lease:
    return _check_acquired(db, _lease_from_row(db.query_one(ACQUIRE_SQL, params)), params,
                           retry_stale)


def _acquire_alone(db: _Adapter, params: Mapping[str, Any], retry_stale: bool) -> Lease:
    """The explicit acquire of acquire / try_acquire: one statement (a
    second one only to retry a stale answer), unchecked."""
    lease = _lease_from_row(db.alone(ACQUIRE_SQL, params))
    if lease.status == "stale" and retry_stale:
        lease = _lease_from_row(db.alone(ACQUIRE_SQL, params))
    return lease


def try_acquire(conn: Any, resource: str, ttl_ms: int, *, min_validity_ms: int = 0,
                wait_ms: int = 0, retry_stale: bool = True, fair: bool = False) -> Optional[Lease]:
    """``acquire``, but **None** when the lease is busy.

    Returns the Lease when acquired, None when another identity holds it
    (``wait_ms`` > 0: still held at the deadline); raises as ``acquire``
    for everything else: LeaseUnavailable, LeaseDenied (stale,
    insufficient_validity, unreplicated), LeaseUnknown (the request may
    have been applied). One statement, as ``acquire``. ``fair`` as there.
    """
    db = _adapter(conn)
    return _try_acquired(_acquire_alone(db, _acquire_params(
        resource, ttl_ms, min_validity_ms, "explicit", wait_ms, False, fair), retry_stale))


def acquire(conn: Any, resource: str, ttl_ms: int, *, min_validity_ms: int = 0,
            retry_stale: bool = True, wait_ms: int = 0, fair: bool = False) -> Lease:
    """Take an explicit-scope lease and return it.

    Raises LeaseBusy / LeaseUnavailable / LeaseDenied (stale,
    insufficient_validity) for a definite no, LeaseUnknown when Redis may
    have granted it. ``stale`` is retried once unless ``retry_stale`` is
    false. ``wait_ms`` > 0: while the lease is busy, wait up to that long;
    LeaseBusy if it is still busy then. ``fair=True``: the wait joins the
    resource's queue and is granted in arrival order (``wait_ms`` 0: busy
    while anyone is queued). Release it yourself.

    One statement, ``SELECT ... FROM lease_fence.acquire(...)``: with a
    connection in autocommit mode that statement alone; with autocommit off
    in a transaction of its own (the connection idle before and after). A
    SQLAlchemy Connection / Session runs it in a transaction of its own.
    """
    db = _adapter(conn)
    return _acquired(_acquire_alone(db, _acquire_params(
        resource, ttl_ms, min_validity_ms, "explicit", wait_ms, False, fair), retry_stale))


@contextmanager
def transaction_lease(conn: Any, resource: str, ttl_ms: int, *, min_validity_ms: int = 0,
                      retry_stale: bool = True, wait_ms: int = 0,
                      keepalive: bool = False, fair: bool = False) -> Iterator[Lease]:
    """Run the block in one transaction holding a transaction-scoped lease.

    BEGIN; acquire(..., scope => 'transaction') — its generation becomes the
    transaction's current generation; COMMIT verifies the lease is still
    ours with at least ``min_validity_ms`` left and releases it. Raises the
    LeaseError of a failed acquire before the block runs, FenceError
    subclasses for refused writes, and LeaseLostAtCommit (LF010) when COMMIT
    finds the lease gone. Any exception rolls the transaction back. A block
    that catches a failed statement's error (a refused write) and goes on
    gets TransactionRolledBack at its end: the transaction was rolled back,
    nothing of it committed.
    ``keepalive=True`` has the server renew the lease while the transaction
    runs (needs ``shared_preload_libraries = 'lease_fence'``). ``fair`` as
    in ``acquire``.
    """
    db = _adapter(conn)
    params = _acquire_params(resource, ttl_ms, min_validity_ms, "transaction", wait_ms,
                             keepalive, fair)
    with fence_errors():
        with db.begin():
            yield _acquire_row_checked(db, params, retry_stale)
            db.check_committable()


@contextmanager
def job(conn: Any, resource: str, ttl_ms: int, *, min_validity_ms: int = 0,
        wait_ms: int = 0, fair: bool = False) -> Iterator[Lease]:
    """A fenced job: ``transaction_lease``'s guarantees in the fewest round trips.

    ``with job(conn, resource, ttl_ms) as lease:`` runs the block in one
    transaction holding a transaction-scoped lease on ``resource``: its
    generation fences every write of the block (run them on ``conn``), and
    COMMIT verifies the lease and releases it.

    With a psycopg 3 connection (libpq with pipeline mode) BEGIN and
    ``lease_fence.acquire(..., scope => 'transaction')`` go out in one
    pipeline: one round trip before the block, then the block's statements,
    then COMMIT. A connection with autocommit off is switched to autocommit
    for the job (psycopg would sync its own BEGIN first: one more round
    trip) and sends the BEGIN psycopg would have sent, with its
    isolation_level / read_only / deferrable; autocommit is restored at the
    end. SQLAlchemy and Django connections (and psycopg without pipeline
    mode) run the same statements one after the other, as
    ``transaction_lease`` does.

    Outcomes, as ``transaction_lease``: a failed acquire raises LeaseBusy /
    LeaseUnavailable / LeaseDenied / LeaseUnknown before the block runs,
    the transaction rolled back (``stale`` is retried once, in the same
    transaction); an exception in the block rolls back (the lease is
    released) and propagates, SQLSTATE LF001-LF004 as FenceError
    subclasses; a lease lost before COMMIT raises LeaseLostAtCommit (LF010),
    rolled back; a block that caught a failed statement's error raises
    TransactionRolledBack, rolled back. ``wait_ms`` > 0 waits that long at
    most for a busy lease (``fair=True``: in the resource's queue, as in
    ``acquire``).
    """
    db = _adapter(conn)
    params = _acquire_params(resource, ttl_ms, min_validity_ms, "transaction", wait_ms, False,
                             fair)
    with fence_errors():
        with db.lease_tx(params, True) as lease:
            yield lease


@dataclass(frozen=True)
class KeptAliveLease(Lease):
    """The Lease of ``kept_alive_lease``: scope session, renewed by the server.

    ``state``, ``lost`` and ``check()`` ask ``lease_fence.keepalive_state``
    on ``watch``, the connection given to ``kept_alive_lease`` — never on the
    owner's connection (that would make the owner look active). Without a
    watch connection they raise RuntimeError.
    """

    watch: object = field(default=None, repr=False, compare=False)

    @property
    def state(self) -> Optional[str]:
        """``'active'``, ``'lost'``, or None (no longer kept alive)."""
        if self.watch is None:
            raise RuntimeError("this kept-alive lease has no watch connection: pass "
                               "watch=<another connection> to kept_alive_lease")
        return keepalive_state(self.watch, self)

    @property
    def lost(self) -> bool:
        """True unless the keep-alive worker still keeps it (``state`` is not 'active')."""
        return self.state != "active"

    def check(self) -> None:
        """Raise LeaseLost (status 'lost') unless the lease is still kept alive."""
        state = self.state
        if state != "active":
            raise LeaseLost("lost", self, f"kept-alive lease {self.resource!r}: "
                                          f"{state or 'no longer kept alive'}")


def _one_server_session(conn: Any) -> None:
    """TypeError for an ORM Session that is not bound to one Connection."""
    module = type(conn).__module__
    if module.startswith("sqlalchemy.ext.asyncio"):
        conn = getattr(conn, "sync_session", conn)
        module = type(conn).__module__
    if not module.startswith("sqlalchemy.orm"):
        return
    from sqlalchemy.engine import Connection
    if not isinstance(conn.get_bind(), Connection):
        raise TypeError("kept_alive_lease needs one server session for the whole block: an ORM "
                        "Session bound to an Engine returns its connection to the pool after "
                        "each transaction. Pass a Connection (engine.connect()), or a Session "
                        "bound to one (Session(bind=connection))")


@contextmanager
def kept_alive_lease(conn: Any, resource: str, ttl_ms: int, *, min_validity_ms: int = 0,
                     wait_ms: int = 0, watch: Any = None,
                     retry_stale: bool = True, fair: bool = False) -> Iterator[KeptAliveLease]:
    """Hold a session-scoped lease that the server keeps alive while the block runs.

    acquire(..., scope => 'session', keepalive => true) in its own
    transaction on ``conn``, then the block, then ``release``. Write under it
    with ``fenced(conn, lease)``: once the lease is lost those writes (and
    their COMMIT) raise LeaseLostAtCommit (LF010). ``watch`` is *another*
    idle connection, used by ``lease.state`` / ``lease.lost`` /
    ``lease.check()``. At the end the lease is released; ``not_held`` there
    raises LeaseLost (it was lost while the block ran). If the block raised,
    its exception propagates unchanged. ``conn`` must stay on one server
    session: an ORM Session bound to an Engine is refused (TypeError).
    ``wait_ms`` and ``fair`` as in ``acquire``.
    """
    if watch is not None and watch is conn:
        raise ValueError("watch must be another connection than the lease owner's: queries "
                         "on the owner's connection make it look active")
    _one_server_session(conn)
    db = _adapter(conn)
    if watch is not None:
        _adapter(watch)                  # a type error now rather than at the first check
    params = _acquire_params(resource, ttl_ms, min_validity_ms, "session", wait_ms, True, fair)
    first = _lease_from_row(db.own(ACQUIRE_SQL, params))
    if first.status == "stale" and retry_stale:
        first = _lease_from_row(db.own(ACQUIRE_SQL, params))
    row = _acquired(first)
    lease = KeptAliveLease(**{f.name: getattr(row, f.name) for f in fields(Lease)}, watch=watch)
    try:
        yield lease
    except BaseException:
        try:
            _release_own(db, lease)
        except Exception:
            pass
        raise
    if _release_own(db, lease) == "not_held":
        raise LeaseLost("lost", lease, f"kept-alive lease {resource!r} was lost before the "
                                       f"block ended (release: not_held)")


def keepalive_state(watch: Any, lease: Union[Lease, str]) -> Optional[str]:
    """``lease_fence.keepalive_state``: 'active', 'lost' or None, asked on ``watch``.

    ``lease`` is a Lease or an identity. Call it on a connection other than
    the lease owner's.
    """
    identity = lease.identity if isinstance(lease, Lease) else lease
    db = _adapter(watch)
    state = db.own(KEEPALIVE_STATE_SQL, {"identity": identity})["state"]
    return state  # type: ignore[no-any-return]


@contextmanager
def fenced(conn: C, generation: Union[Lease, int],
           resource: Optional[str] = None) -> Iterator[C]:
    """One transaction whose writes carry ``generation``, fencing ``resource``.

    BEGIN; SELECT lease_fence.set_generation(<generation>, <resource or
    NULL>); the block; COMMIT. With a psycopg 3 connection in autocommit
    mode, BEGIN and set_generation go in one pipeline (one round trip);
    with autocommit off psycopg sends its own BEGIN first (one more). ``generation`` is an int, or a
    ``Lease``: then its generation, and its resource unless ``resource``
    names another. The resource fence fails (StaleGeneration, ``e.resource``)
    when a newer holder fenced the resource, before the block runs. Refused
    writes are raised as FenceError subclasses; the transaction is rolled
    back. A block that catches a failed statement's error and goes on
    raises TransactionRolledBack (rolled back, nothing committed). Yields
    ``conn``.
    """
    args = _fence_args(generation, resource)
    db = _adapter(conn)
    with fence_errors():
        with db.fenced_tx(args):
            yield conn


def renew(conn: Any, lease: Lease, ttl_ms: int, *, min_validity_ms: int = 0) -> int:
    """Extend an explicit lease to ``ttl_ms``; returns the validity in ms.

    Raises LeaseLost (key gone or someone else's: never recreated),
    LeaseDenied (insufficient_validity, unreplicated), LeaseUnavailable,
    LeaseUnknown; ``e.reason`` says why for unavailable, unknown and
    unreplicated.
    """
    db = _adapter(conn)
    row = db.alone(RENEW_SQL, {"resource": lease.resource, "identity": lease.identity,
                               "ttl_ms": ttl_ms, "min_validity_ms": min_validity_ms})
    return _renewed(row["status"], lease, row["validity_ms"], row["reason"], row["renewed"])


def release(conn: Any, lease: Lease) -> ReleaseStatus:
    """Release an explicit lease if it still holds ``lease.identity``.

    Returns the status: ``released``, ``not_held``, ``unavailable`` or
    ``unknown`` — a ReleaseStatus, a str whose ``reason`` says why for the
    last two. Never raises for an outcome.
    """
    db = _adapter(conn)
    row = db.alone(RELEASE_SQL, {"resource": lease.resource, "identity": lease.identity})
    return _released(row["status"], row["reason"])


def _release_own(db: _Adapter, lease: Lease) -> ReleaseStatus:
    """release in a transaction of its own (the end of kept_alive_lease)."""
    row = db.own(RELEASE_SQL, {"resource": lease.resource, "identity": lease.identity})
    return _released(row["status"], row["reason"])

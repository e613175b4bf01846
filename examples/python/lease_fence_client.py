"""lease_fence_client — use lease_fence from a Python application.

Works with a psycopg 3 ``Connection`` and with a SQLAlchemy 1.4 ``Connection``
or ORM ``Session`` (any driver; Debian's SQLAlchemy 1.4 uses psycopg2).
Nothing here talks to Redis: the extension does, from inside PostgreSQL. The
helper only calls ``lease_fence.acquire / renew / release``, sets the
generation, and turns the extension's answers into Python exceptions:

Fence errors (raised by a write, or by COMMIT), all ``FenceError``:

====================  ========  ===============================================
exception             SQLSTATE  meaning
====================  ========  ===============================================
StaleGeneration       LF001     a newer holder wrote the row, or fenced the
                                resource: you lost the lease. Never retry
                                with the same generation.
MissingGeneration     LF002     a strict table was written (or a resource
                                fenced) without a generation, or a NULL fence
ConflictingGeneration LF003     the statement wrote a fence value different
                                from the current generation (an UPDATE: one
                                above the stored value)
UnissuedGeneration    LF004     the generation was never issued by this
                                database (a typo, a timestamp, another
                                database's): fix the caller, do not retry
LeaseLostAtCommit     LF010     a transaction-scoped lease was gone (or could
                                not be verified) at COMMIT, or a kept-alive
                                lease was lost: its owner's next fenced write
                                under its generation, and the COMMIT of a
                                transaction that made one, are refused.
                                Rolled back
====================  ========  ===============================================

Every FenceError carries the error's fields, as the server set them (never
parsed from text): ``sqlstate``; for a refused row ``schema``, ``table`` and
``column``, the fence column (e.g. ``'public'``, ``'account'``, ``'fence'``);
for a refused resource fence ``resource`` (the resource's name, sent as the
error's constraint name), with ``schema`` ``'lease_fence'`` and ``table``
``'resource_generation'``; None where a field was not sent (an LF010 at
COMMIT names nothing). ``message`` and ``detail`` are the server's text, for
humans and logs: the stored and supplied generations (LF001) and the highest
issued one (LF004) are in DETAIL only, and code must not parse it.
``fence_error_from`` / ``fence_errors`` read psycopg 3 and psycopg2 errors,
SQLAlchemy's (the driver's error is ``.orig``) and Django's (``django.db.utils``
errors, the driver's error is ``__cause__``).

Lease outcomes (raised by ``acquire`` / ``transaction_lease`` / ``kept_alive_lease`` / ``renew``),
all ``LeaseError``. The split that matters is *no* versus *don't know*:

- ``LeaseDenied`` — a definite no (``acquired`` / ``renewed`` is false):
  ``LeaseBusy`` (someone else holds it), ``LeaseUnavailable`` (nothing was
  sent: Redis down or refusing), ``LeaseLost`` (renew: the key is gone or
  someone else's), and plain ``LeaseDenied`` for ``stale`` and
  ``insufficient_validity``. Safe to treat as "not mine".
- ``LeaseUnknown`` — ``acquired IS NULL``: the request may have been applied.
  It is *not* a subclass of ``LeaseDenied``, so ``except LeaseDenied`` does
  not swallow it. Do not proceed, and do not treat the resource as free: the
  lease may be held under ``e.lease.identity`` until its TTL runs out. The
  backend has already tried a bounded conditional release; you may call
  ``release(conn, e.lease)`` again (it only deletes the key if it still holds
  that identity). Retry later with a *new* acquire, never with a forced DEL.

``reason`` says why for ``unavailable``, ``unknown`` and ``unreplicated``
(``could not connect to Redis at ...``, ``timed out waiting for Redis``, ...),
and is None otherwise: ``Lease.reason``, ``LeaseError.reason`` (also in its
message), and the ``.reason`` of the status ``release`` returns.

Transaction scope — one transaction, the lease's generation fences every
write in it, COMMIT verifies the lease (else LF010) and releases it::

    with transaction_lease(conn, "account:1", ttl_ms=5000, min_validity_ms=500) as lease:
        conn.execute("UPDATE account SET balance = balance + 1 WHERE id = 1")

A transaction-scoped lease also fences its resource (``fence_resource``):
a later holder's acquire waits for this transaction to end.

Explicit scope — acquire once, write in later transactions, renew, release.
This is the scope to use behind PgBouncer in transaction pooling mode::

    try:
        lease = acquire(conn, "account:1", ttl_ms=30000)
    except LeaseUnknown as e:         # maybe held: do not work, do not assume free
        release(conn, e.lease)        # conditional; the TTL ends it otherwise
        raise
    except LeaseDenied:               # busy / unavailable / stale: definitely not ours
        return
    with fenced(conn, lease):              # BEGIN; SELECT lease_fence.set_generation(g, resource);
        conn.execute("UPDATE account SET owner = 'me' WHERE id = 1")  # ...; COMMIT
    renew(conn, lease, ttl_ms=30000)       # LeaseLost: stop working under it
    release(conn, lease)

``fenced(conn, lease)`` fences the lease's resource as well as the rows:
a stale holder's transaction then fails (StaleGeneration) whatever it
writes — rows the newer holder has not touched, new rows — and one that
fenced it first makes the newer holder's wait. ``fenced(conn, generation)``
fences rows only; ``fenced(conn, generation, resource="...")`` names the
resource. It is one parameterized statement, ``SELECT
lease_fence.set_generation(%s, %s)``, so the fenced transaction can also be
sent by hand in one psycopg pipeline::

    with conn.pipeline():
        conn.execute("BEGIN")
        conn.execute("SELECT lease_fence.set_generation(%s, %s)",
                     (lease.generation, lease.resource))
        conn.execute("UPDATE account SET owner = 'me' WHERE id = 1")
        conn.execute("COMMIT")

ORMs that write every column back (Django ``save()``, SQLAlchemy with the
fence forced into the UPDATE) need nothing more: with a current generation a
fence written at or below the stored one counts as leaving it alone, so saving
an object twice in one fenced transaction works, and a stale holder's save is
StaleGeneration (``examples/python/test_orm.py``).

Waiting for a busy lease — ``wait_ms`` (``acquire``, ``try_acquire``,
``transaction_lease``, ``kept_alive_lease``): while someone else holds the
lease the backend waits, woken by the holder's release (or its TTL running
out), for at most ``wait_ms``; still busy then is ``LeaseBusy`` as before.
The wait is one statement: ``statement_timeout`` or a cancel ends it with the
driver's QueryCanceled (SQLSTATE 57014), not a LeaseError. 0 (the default)
answers at once; at most 2147483647.

Keep-alive — a background worker in the server renews the lease at a third
of its TTL while the owning session is *active*: running a statement, or
idle for less than the TTL; never past ``lease_fence.keepalive_max_ms``
(default 10 minutes). It needs ``shared_preload_libraries = 'lease_fence'``
(else the acquire fails with 55000) and a session or transaction scope::

    with kept_alive_lease(conn, "report:daily", ttl_ms=3000, watch=watch_conn) as lease:
        conn.execute("SELECT build_report()")            # may run for many TTLs
        lease.check()                                    # LeaseLost if it was lost
        with fenced(conn, lease):                        # LF010 if it was lost
            conn.execute("UPDATE report SET done = true WHERE name = 'daily'")

    with transaction_lease(conn, "account:1", ttl_ms=3000, keepalive=True):
        ...                                              # one long transaction

A kept-alive lease is lost when a renewal finds the key gone or someone
else's (or cannot be confirmed in time), when the session stays idle longer
than the TTL (Python work between statements counts as idle), or at
``keepalive_max_ms``. Then the owner's next fenced write under its generation
— and the COMMIT of a transaction that made one — raises
``LeaseLostAtCommit`` (LF010): the fence, not the watch, is what keeps a
lost holder's writes out. ``lease.state`` / ``lease.lost`` / ``lease.check()``
ask ``lease_fence.keepalive_state`` on the *watch* connection, which must be
another connection than the owner's: a query on the owner's connection makes
its session look active, which would keep an idle owner's lease alive.
``kept_alive_lease`` needs ``conn`` on one server session throughout: a
psycopg or SQLAlchemy Connection, or an ORM Session bound to a Connection
(one bound to an Engine is refused: it changes connections between
transactions).

Use a psycopg connection with ``autocommit=True`` (or one that is idle): each
helper runs its own transaction and refuses to start inside one you opened.
Behind PgBouncer (transaction pooling, before 1.21) also pass
``prepare_threshold=None`` to ``psycopg.connect``.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from typing import Iterator, Optional

__all__ = [
    "FenceError", "StaleGeneration", "MissingGeneration", "ConflictingGeneration",
    "UnissuedGeneration", "LeaseLostAtCommit", "LeaseError", "LeaseDenied", "LeaseBusy", "LeaseUnavailable",
    "LeaseLost", "LeaseUnknown", "Lease", "KeptAliveLease", "ReleaseStatus", "fence_error_from",
    "fence_errors",
    "try_acquire", "acquire", "transaction_lease", "kept_alive_lease", "keepalive_state",
    "fenced", "renew", "release",
]


# --------------------------------------------------------------------------
# Fence errors: SQLSTATE class LF
# --------------------------------------------------------------------------

class FenceError(Exception):
    """A write or COMMIT that lease_fence refused (SQLSTATE class LF).

    ``sqlstate``, ``message`` and ``detail`` come from the server; the
    driver's exception is ``__cause__``. ``schema``, ``table`` and ``column``
    name the refused row's table and fence column; ``resource`` names a
    refused resource fence (then ``schema`` / ``table`` are
    ``lease_fence`` / ``resource_generation``). Each is None when the server
    did not send it. They are the error's fields, not parsed from
    ``detail``: DETAIL is for humans. Not retryable with the same
    generation — that is why the extension does not use 40001.
    """

    sqlstate = "LF000"

    def __init__(self, message: str, detail: Optional[str] = None, *,
                 schema: Optional[str] = None, table: Optional[str] = None,
                 column: Optional[str] = None, resource: Optional[str] = None):
        super().__init__(message if not detail else f"{message} ({detail})")
        self.message = message
        self.detail = detail
        self.schema = schema
        self.table = table
        self.column = column
        self.resource = resource


class StaleGeneration(FenceError):
    """LF001: the row (or the resource) holds a newer generation than the one supplied.

    ``table`` / ``column`` (and ``schema``) for a row, ``resource`` for a
    resource fence. The stored and supplied generations are in ``detail``,
    for humans.
    """

    sqlstate = "LF001"


class MissingGeneration(FenceError):
    """LF002: strict table written without a current generation, or a NULL fence."""

    sqlstate = "LF002"


class ConflictingGeneration(FenceError):
    """LF003: the statement wrote a fence value other than the current generation.

    An UPDATE that writes back a value at or below the stored one (an ORM
    saving the whole row) does not count as writing the fence: that row is
    checked against the current generation instead (StaleGeneration when it
    is lower).
    """

    sqlstate = "LF003"


class UnissuedGeneration(FenceError):
    """LF004: the supplied generation was never issued by this database.

    The highest generation issued is in ``detail``, for humans.
    """

    sqlstate = "LF004"


class LeaseLostAtCommit(FenceError):
    """LF010: the lease this transaction wrote under is lost: write or COMMIT refused.

    Raised when a transaction-scoped lease was gone (or unverifiable) at
    COMMIT, and when a kept-alive lease (``keepalive``) was lost — then the
    owner's next fenced write under its generation fails, before it reaches a
    row, and so does the COMMIT of a transaction that made one earlier. The
    transaction was rolled back. Acquire again (a new generation) and redo it.
    """

    sqlstate = "LF010"


_FENCE_ERRORS = {cls.sqlstate: cls for cls in
                 (StaleGeneration, MissingGeneration, ConflictingGeneration, UnissuedGeneration,
                  LeaseLostAtCommit)}


def _driver_error(exc: BaseException) -> Optional[BaseException]:
    """The psycopg / psycopg2 error in ``exc``: itself, SQLAlchemy's ``.orig``,
    or the ``__cause__`` of a Django ``django.db.utils`` error; else None."""
    for _ in range(3):                   # a wrapper of a wrapper, at most
        if getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None):
            return exc
        orig = getattr(exc, "orig", None)        # sqlalchemy.exc.DBAPIError
        if isinstance(orig, BaseException):
            exc = orig
        elif type(exc).__module__ == "django.db.utils" and \
                isinstance(exc.__cause__, BaseException):
            exc = exc.__cause__                  # raised "from" the driver's error
        else:
            return None
    return None


def fence_error_from(exc: BaseException) -> Optional[FenceError]:
    """The FenceError for a driver exception carrying SQLSTATE LF001/2/3/4/LF010, else None.

    ``exc`` is a psycopg 3 or psycopg2 error, or one SQLAlchemy or Django
    raised for it. Reads the SQLSTATE and the error's fields, never DETAIL.
    """
    if isinstance(exc, FenceError):
        return exc
    err = _driver_error(exc)
    if err is None:
        return None
    sqlstate = getattr(err, "sqlstate", None) or getattr(err, "pgcode", None)
    cls = _FENCE_ERRORS.get(sqlstate)
    if cls is None:
        return None
    diag = getattr(err, "diag", None)
    message = getattr(diag, "message_primary", None) or str(err).strip().splitlines()[0]
    return cls(message, getattr(diag, "message_detail", None),
               schema=getattr(diag, "schema_name", None),
               table=getattr(diag, "table_name", None),
               column=getattr(diag, "column_name", None),
               resource=getattr(diag, "constraint_name", None))


@contextmanager
def fence_errors() -> Iterator[None]:
    """Re-raise driver errors with SQLSTATE LF001/LF002/LF003/LF004/LF010 as FenceError
    subclasses (the driver's exception becomes ``__cause__``); anything else passes."""
    try:
        yield
    except Exception as exc:
        mapped = fence_error_from(exc)
        if mapped is None or mapped is exc:
            raise
        raise mapped from exc


# --------------------------------------------------------------------------
# Lease outcomes
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class Lease:
    """One row of ``lease_fence.acquire``: ``acquired`` is True, False or None (unknown).

    ``reason`` says why for ``unavailable``, ``unknown`` and ``unreplicated``
    (None otherwise): text for humans and logs, not for code to parse.
    """

    acquired: Optional[bool]
    status: str
    resource: str
    identity: Optional[str]
    generation: Optional[int]
    validity_ms: Optional[int]
    reason: Optional[str] = None


@dataclass(frozen=True)
class KeptAliveLease(Lease):
    """The Lease of ``kept_alive_lease``: scope session, renewed by the server.

    ``state``, ``lost`` and ``check()`` ask ``lease_fence.keepalive_state``
    on ``watch``, the connection given to ``kept_alive_lease`` — one query
    each time, never on the owner's connection (that would make the owner
    look active and keep an idle owner's lease alive). Without a watch
    connection they raise RuntimeError. It is a Lease: ``fenced(conn, lease)``
    fences its generation and resource.
    """

    watch: object = field(default=None, repr=False, compare=False)

    @property
    def state(self) -> Optional[str]:
        """``'active'``, ``'lost'``, or None (no longer kept alive: released,
        or the owner's session ended)."""
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


class LeaseError(Exception):
    """A lease operation that did not succeed. ``status`` is the extension's
    status; ``lease`` is the Lease concerned (for acquire, the row returned);
    ``reason`` why, for ``unavailable``, ``unknown`` and ``unreplicated``
    (None otherwise; the message ends with it)."""

    def __init__(self, status: str, lease: Optional[Lease], message: str,
                 reason: Optional[str] = None):
        super().__init__(message if not reason else f"{message} ({reason})")
        self.status = status
        self.lease = lease
        self.reason = reason


class LeaseDenied(LeaseError):
    """A definite no: busy, unavailable, stale, insufficient_validity, lost."""


class LeaseBusy(LeaseDenied):
    """Someone else holds the lease."""


class LeaseUnavailable(LeaseDenied):
    """Nothing was sent (Redis unreachable or refusing): definitely not applied."""


class LeaseLost(LeaseDenied):
    """The lease is no longer ours: stop working under it.

    renew: the key is gone or holds another identity. A kept-alive lease:
    ``check()`` found it lost, or ``kept_alive_lease`` found at its end
    (release: ``not_held``) that it was lost while the block ran.
    """


class LeaseUnknown(LeaseError):
    """acquired/renewed IS NULL: the request may have been applied. Not a LeaseDenied."""


def _lease_error(status: str, lease: Optional[Lease], what: str, resource: str,
                 reason: Optional[str] = None) -> LeaseError:
    cls = {"busy": LeaseBusy, "unavailable": LeaseUnavailable, "lost": LeaseLost,
           "unknown": LeaseUnknown}.get(status, LeaseDenied)
    return cls(status, lease, f"{what} of lease {resource!r}: {status}", reason)


class ReleaseStatus(str):
    """What ``release`` returns: the status (a str: ``'released'``,
    ``'not_held'``, ``'unavailable'``, ``'unknown'``) with ``reason``, why
    for ``unavailable`` and ``unknown`` (None otherwise)."""

    reason: Optional[str]

    def __new__(cls, status: str, reason: Optional[str] = None):
        self = super().__new__(cls, status)
        self.reason = reason
        return self


# --------------------------------------------------------------------------
# Driver adapters: psycopg 3 Connection, SQLAlchemy Connection / Session
# --------------------------------------------------------------------------

_NAMED = re.compile(r"%\((\w+)\)s")


class _Psycopg:
    def __init__(self, conn):
        self.conn = conn

    def begin(self):
        from psycopg import pq
        if self.conn.info.transaction_status != pq.TransactionStatus.IDLE:
            raise RuntimeError("lease_fence_client needs a connection that is not in a "
                               "transaction (use autocommit=True, or commit first)")
        return self.conn.transaction()

    def query_one(self, sql: str, params=None) -> dict:
        cur = self.conn.execute(sql, params)
        row = cur.fetchone()
        return dict(zip([c.name for c in cur.description], row))


class _SQLAlchemy:
    def __init__(self, conn):
        self.conn = conn

    def begin(self):
        if self.conn.in_transaction():
            raise RuntimeError("lease_fence_client needs a Connection/Session that is not "
                               "in a transaction (commit first)")
        return self.conn.begin()

    def _text(self, sql: str):
        from sqlalchemy import text
        return text(_NAMED.sub(r":\1", sql))

    def query_one(self, sql: str, params=None) -> dict:
        return dict(self.conn.execute(self._text(sql), params or {}).mappings().one())


def _adapter(conn):
    module = type(conn).__module__
    if module == "psycopg" or module.startswith("psycopg."):
        return _Psycopg(conn)
    if module.startswith("sqlalchemy.") and hasattr(conn, "in_transaction"):
        return _SQLAlchemy(conn)
    raise TypeError(f"expected a psycopg 3 Connection or a SQLAlchemy Connection/Session, "
                    f"got {type(conn).__name__}")


def _generation(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"a generation is a non-negative int, got {value!r}")
    return value


# --------------------------------------------------------------------------
# The API
# --------------------------------------------------------------------------

_ACQUIRE = ("SELECT acquired, status, resource, identity, generation, validity_ms, reason "
            "FROM lease_fence.acquire(CAST(%(resource)s AS text), CAST(%(ttl_ms)s AS bigint), "
            "CAST(%(min_validity_ms)s AS bigint), CAST(%(scope)s AS text), "
            "CAST(%(wait_ms)s AS bigint), CAST(%(keepalive)s AS boolean))")


def _acquire_row(db, resource, ttl_ms, min_validity_ms, scope, wait_ms=0,
                 keepalive=False) -> Lease:
    return Lease(**db.query_one(_ACQUIRE, {"resource": resource, "ttl_ms": ttl_ms,
                                           "min_validity_ms": min_validity_ms, "scope": scope,
                                           "wait_ms": wait_ms, "keepalive": bool(keepalive)}))


def _acquire_checked(db, resource, ttl_ms, min_validity_ms, scope, retry_stale, wait_ms=0,
                     keepalive=False) -> Lease:
    lease = _acquire_row(db, resource, ttl_ms, min_validity_ms, scope, wait_ms, keepalive)
    if lease.status == "stale" and retry_stale:
        # stale left nothing in Redis and moved next_generation() past the
        # stored one: one more try with a fresh generation is safe
        lease = _acquire_row(db, resource, ttl_ms, min_validity_ms, scope, wait_ms, keepalive)
    if lease.acquired is not True:
        raise _lease_error(lease.status, lease, "acquire", resource, lease.reason)
    return lease


def try_acquire(conn, resource: str, ttl_ms: int, min_validity_ms: int = 0,
                wait_ms: int = 0) -> Lease:
    """Explicit-scope acquire that never raises for an outcome: returns the row.

    ``lease.acquired`` is True (``acquired``), False (``busy``, ``stale``,
    ``unavailable``, ``insufficient_validity``) or **None** (``unknown``).
    ``wait_ms`` > 0 waits that long at most while the lease is busy (woken by
    the holder's release) before answering ``busy``.
    """
    db = _adapter(conn)
    with db.begin():
        return _acquire_row(db, resource, ttl_ms, min_validity_ms, "explicit", wait_ms)


def acquire(conn, resource: str, ttl_ms: int, min_validity_ms: int = 0,
            retry_stale: bool = True, wait_ms: int = 0) -> Lease:
    """Take an explicit-scope lease in its own transaction and return it.

    Raises LeaseBusy / LeaseUnavailable / LeaseDenied (stale,
    insufficient_validity) for a definite no, LeaseUnknown when Redis may
    have granted it. ``stale`` is retried once unless ``retry_stale`` is
    false. ``wait_ms`` > 0: while the lease is busy, wait up to that long
    (woken by the holder's release or its TTL's end); LeaseBusy if it is
    still busy then. Keep ``lease.identity`` and ``lease.generation``;
    release yourself.
    """
    db = _adapter(conn)
    with db.begin():
        return _acquire_checked(db, resource, ttl_ms, min_validity_ms, "explicit", retry_stale,
                                wait_ms)


@contextmanager
def transaction_lease(conn, resource: str, ttl_ms: int, min_validity_ms: int = 0,
                      retry_stale: bool = True, wait_ms: int = 0,
                      keepalive: bool = False) -> Iterator[Lease]:
    """Run the block in one transaction holding a transaction-scoped lease.

    BEGIN; acquire(..., scope => 'transaction') — its generation becomes the
    transaction's current generation, so every fenced write in the block
    carries it; COMMIT verifies the lease is still ours with at least
    ``min_validity_ms`` left and releases it. Raises the LeaseError of a
    failed acquire before the block runs, FenceError subclasses for refused
    writes, and LeaseLostAtCommit (LF010) when COMMIT finds the lease gone.
    Any exception rolls the transaction back (and releases the lease).

    ``wait_ms`` > 0 waits up to that long for a busy lease (LeaseBusy after).
    ``keepalive=True`` has the server's keep-alive worker renew the lease
    while the transaction runs (statements, or idle less than the TTL), so
    ``ttl_ms`` need not cover the whole transaction; if it is lost, the next
    fenced write or the COMMIT raises LeaseLostAtCommit. Needs
    ``shared_preload_libraries = 'lease_fence'``.
    """
    db = _adapter(conn)
    with fence_errors():
        with db.begin():
            yield _acquire_checked(db, resource, ttl_ms, min_validity_ms, "transaction",
                                   retry_stale, wait_ms, keepalive)


@contextmanager
def kept_alive_lease(conn, resource: str, ttl_ms: int, min_validity_ms: int = 0,
                     wait_ms: int = 0, watch=None,
                     retry_stale: bool = True) -> Iterator[KeptAliveLease]:
    """Hold a session-scoped lease that the server keeps alive while the block runs.

    acquire(..., scope => 'session', keepalive => true) in its own
    transaction on ``conn`` (LeaseError before the block runs, as
    ``acquire``; ``wait_ms`` as there), then the block, then ``release``.
    The lease outlives ``ttl_ms`` as long as ``conn``'s session is active —
    running a statement, or idle for less than ``ttl_ms`` — up to
    ``lease_fence.keepalive_max_ms``. Write under it with
    ``fenced(conn, lease)``: once the lease is lost those writes (and their
    COMMIT) raise LeaseLostAtCommit (LF010).

    ``watch`` is *another* connection (psycopg or SQLAlchemy, idle), used by
    ``lease.state`` / ``lease.lost`` / ``lease.check()`` to ask
    ``lease_fence.keepalive_state``: asking on ``conn`` itself would make the
    owner look active and keep an idle owner's lease alive, and ``conn`` is
    busy while the block runs a statement. ``watch`` may be None if the
    block does not ask.

    At the end:

    - the block succeeded: the lease is released; if release answers
      ``not_held`` the lease was lost while the block ran, and LeaseLost is
      raised — whatever the block committed before the loss stays committed
      (fenced writes after it were refused), but it did not hold the lease
      to the end. ``unavailable`` / ``unknown`` are not raised: the lease is
      no longer kept alive and expires by its TTL.
    - the block raised: the lease is released as far as possible (a failed
      release is ignored: the idle session's lease lapses by its TTL) and
      the block's exception propagates unchanged.

    ``conn`` must stay on one server session for the whole block: a psycopg
    Connection, a SQLAlchemy Connection, or an ORM Session bound to one
    (``Session(bind=engine.connect())``). An ORM Session bound to an Engine
    is refused (TypeError): it gives its connection back to the pool at the
    end of every transaction, so the lease would belong to a session that
    may be closed or lent to someone else. For the same reason, not for use
    behind a transaction-pooling proxy. Do not release the lease yourself
    inside the block.
    """
    if watch is not None and watch is conn:
        raise ValueError("watch must be another connection than the lease owner's: queries "
                         "on the owner's connection make it look active")
    _one_server_session(conn)
    db = _adapter(conn)
    if watch is not None:
        _adapter(watch)                  # a type error now rather than at the first check
    with db.begin():
        row = _acquire_checked(db, resource, ttl_ms, min_validity_ms, "session", retry_stale,
                               wait_ms, keepalive=True)
    lease = KeptAliveLease(**{f.name: getattr(row, f.name) for f in fields(Lease)}, watch=watch)
    try:
        yield lease
    except BaseException:
        try:
            release(conn, lease)
        except Exception:
            pass
        raise
    if release(conn, lease) == "not_held":
        raise LeaseLost("lost", lease, f"kept-alive lease {resource!r} was lost before the "
                                       f"block ended (release: not_held)")


def _one_server_session(conn) -> None:
    """TypeError for an ORM Session that is not bound to one Connection."""
    module = type(conn).__module__
    if not module.startswith("sqlalchemy.orm"):
        return
    from sqlalchemy.engine import Connection
    if not isinstance(conn.get_bind(), Connection):
        raise TypeError("kept_alive_lease needs one server session for the whole block: an ORM "
                        "Session bound to an Engine returns its connection to the pool after "
                        "each transaction. Pass a Connection (engine.connect()), or a Session "
                        "bound to one (Session(bind=connection))")


def keepalive_state(watch, lease) -> Optional[str]:
    """``lease_fence.keepalive_state``: 'active', 'lost' or None, asked on ``watch``.

    ``lease`` is a Lease or an identity. None: no kept-alive lease has that
    identity (released, its session ended, or never kept alive). Call it on
    a connection other than the lease owner's (see ``kept_alive_lease``).
    """
    identity = lease.identity if isinstance(lease, Lease) else lease
    db = _adapter(watch)
    with db.begin():
        return db.query_one("SELECT lease_fence.keepalive_state(CAST(%(identity)s AS text)) "
                            "AS state", {"identity": identity})["state"]


@contextmanager
def fenced(conn, generation, resource: Optional[str] = None) -> Iterator[object]:
    """One transaction whose writes carry ``generation``, fencing ``resource``.

    BEGIN; SELECT lease_fence.set_generation(<generation>, <resource or
    NULL>); the block; COMMIT — one statement with bind parameters sets the
    transaction's generation and, with a resource, fences it as
    ``lease_fence.fence_resource`` does (which needs EXECUTE on it).
    ``generation`` is an int, or a ``Lease``: then its generation, and its
    resource unless ``resource`` names another. The resource fence fails
    (StaleGeneration, ``e.resource``) when a newer holder fenced the
    resource, before the block runs, and otherwise holds the resource to
    COMMIT, so that a newer holder waits: the whole transaction is fenced,
    not only the rows it updates. The generation ends with the transaction,
    so nothing outlives it — the form that is safe behind a
    transaction-pooling proxy. Refused writes are raised as FenceError
    subclasses; the transaction is rolled back.
    """
    if isinstance(generation, Lease):
        if resource is None:
            resource = generation.resource
        generation = generation.generation
    gen = _generation(generation)
    if resource is not None and not isinstance(resource, str):
        raise TypeError(f"a resource is a str, got {type(resource).__name__}")
    db = _adapter(conn)
    with fence_errors():
        with db.begin():
            db.query_one("SELECT lease_fence.set_generation(CAST(%(generation)s AS bigint), "
                         "CAST(%(resource)s AS text)) AS g",
                         {"generation": gen, "resource": resource})
            yield conn


def renew(conn, lease: Lease, ttl_ms: int, min_validity_ms: int = 0) -> int:
    """Extend an explicit lease to ``ttl_ms``; returns the validity in ms.

    Raises LeaseLost (key gone or someone else's: never recreated),
    LeaseDenied (insufficient_validity, unreplicated), LeaseUnavailable,
    LeaseUnknown; ``e.reason`` says why for unavailable, unknown and
    unreplicated.
    """
    db = _adapter(conn)
    with db.begin():
        row = db.query_one(
            "SELECT renewed, status, validity_ms, reason FROM lease_fence.renew("
            "CAST(%(resource)s AS text), CAST(%(identity)s AS text), "
            "CAST(%(ttl_ms)s AS bigint), CAST(%(min_validity_ms)s AS bigint))",
            {"resource": lease.resource, "identity": lease.identity, "ttl_ms": ttl_ms,
             "min_validity_ms": min_validity_ms})
    if row["renewed"] is not True:
        raise _lease_error(row["status"], lease, "renew", lease.resource, row["reason"])
    return row["validity_ms"]


def release(conn, lease: Lease) -> ReleaseStatus:
    """Release an explicit lease if it still holds ``lease.identity``.

    Returns the status: ``released``, ``not_held`` (expired or someone
    else's: left alone), ``unavailable`` or ``unknown`` (it then expires by
    its TTL; calling release again is safe) — a ReleaseStatus, a str whose
    ``reason`` says why for the last two. Never raises for an outcome.
    """
    db = _adapter(conn)
    with db.begin():
        row = db.query_one(
            "SELECT released, status, reason FROM lease_fence.release("
            "CAST(%(resource)s AS text), CAST(%(identity)s AS text))",
            {"resource": lease.resource, "identity": lease.identity})
    return ReleaseStatus(row["status"], row["reason"])

"""Fence errors (SQLSTATE class LF) and lease outcomes, and the driver-error mapping."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Dict, Iterator, Optional, Type, TypeVar

__all__ = [
    "FenceError", "StaleGeneration", "MissingGeneration", "ConflictingGeneration",
    "UnissuedGeneration", "LeaseLostAtCommit", "LeaseError", "LeaseDenied", "LeaseBusy",
    "LeaseUnavailable", "LeaseLost", "LeaseUnknown", "Lease", "ReleaseStatus", "DataCorrupted",
    "TransactionRolledBack", "fence_error_from", "fence_errors", "LeadershipLost",
    "TakeOverTimeout",
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
    generation.
    """

    sqlstate: str = "LF000"

    def __init__(self, message: str, detail: Optional[str] = None, *,
                 schema: Optional[str] = None, table: Optional[str] = None,
                 column: Optional[str] = None, resource: Optional[str] = None) -> None:
        super().__init__(message if not detail else f"{message} ({detail})")
        self.message = message
        self.detail = detail
        self.schema = schema
        self.table = table
        self.column = column
        self.resource = resource

    def __reduce__(self) -> Any:
        # pickled whole (a job system's result backend, multiprocessing):
        # made again with the same arguments, its fields restored
        return (type(self), (self.message, self.detail), self.__dict__)


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
    checked against the current generation instead.
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
    COMMIT, and when a kept-alive lease was lost — then the owner's next
    fenced write under its generation fails, and so does the COMMIT of a
    transaction that made one earlier. The transaction was rolled back.
    Acquire again (a new generation) and redo it.
    """

    sqlstate = "LF010"


_FENCE_ERRORS: Dict[str, Type[FenceError]] = {
    cls.sqlstate: cls for cls in (StaleGeneration, MissingGeneration, ConflictingGeneration,
                                  UnissuedGeneration, LeaseLostAtCommit)}


def _sqlstate(exc: BaseException) -> Optional[str]:
    state = getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None)
    return state if isinstance(state, str) else None


def _has_fields(exc: BaseException) -> bool:
    """psycopg / psycopg2 (``diag``) or asyncpg (``schema_name`` on the error)."""
    return getattr(exc, "diag", None) is not None or hasattr(exc, "schema_name")


def _driver_error(exc: BaseException) -> Optional[BaseException]:
    """The driver's error in ``exc``: itself, SQLAlchemy's ``.orig``, the
    ``__cause__`` of a Django ``django.db.utils`` error, or — for SQLAlchemy's
    asyncpg adapter, whose error carries the SQLSTATE but not the fields —
    the asyncpg error it was raised from; else None."""
    for _ in range(4):                   # a wrapper of a wrapper, at most
        if _sqlstate(exc):
            cause = exc.__cause__
            if (not _has_fields(exc) and isinstance(cause, BaseException)
                    and _sqlstate(cause) == _sqlstate(exc) and _has_fields(cause)):
                return cause             # sqlalchemy's AsyncAdapt_asyncpg_dbapi.Error
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


def _field(err: BaseException, name: str) -> Optional[str]:
    diag = getattr(err, "diag", None)
    if diag is not None:                         # psycopg 3, psycopg2
        value = getattr(diag, name, None)
    else:                                        # asyncpg
        value = getattr(err, name, None)
    return value if isinstance(value, str) else None


def fence_error_from(exc: BaseException) -> Optional[FenceError]:
    """The FenceError for a driver exception carrying SQLSTATE LF001/2/3/4/LF010, else None.

    ``exc`` is a psycopg 3, psycopg2 or asyncpg error, or one SQLAlchemy
    (sync or async) or Django raised for it. Reads the SQLSTATE and the
    error's fields, never the message text.
    """
    if isinstance(exc, FenceError):
        return exc
    err = _driver_error(exc)
    if err is None:
        return None
    cls = _FENCE_ERRORS.get(_sqlstate(err) or "")
    if cls is None:
        return None
    if getattr(err, "diag", None) is not None:
        message = _field(err, "message_primary")
        detail = _field(err, "message_detail")
    else:
        message = getattr(err, "message", None)
        detail = getattr(err, "detail", None)
        message = message if isinstance(message, str) else None
        detail = detail if isinstance(detail, str) else None
    if not message:
        text = str(err).strip()
        message = text.splitlines()[0] if text else cls.__name__
    return cls(message, detail,
               schema=_field(err, "schema_name"),
               table=_field(err, "table_name"),
               column=_field(err, "column_name"),
               resource=_field(err, "constraint_name"))


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


class TransactionRolledBack(Exception):
    """The transaction did not commit: a statement in it failed, the block
    caught its error and went on, and PostgreSQL would answer COMMIT with
    ROLLBACK. The transaction was rolled back — nothing of it was committed,
    a transaction-scoped lease was released with it — so never treat the
    work as done. Raised by ``job``, ``transaction_lease`` and ``fenced``
    instead of returning. Not a FenceError: the refused write (a
    StaleGeneration, say) was the block's to see; the library does not see
    the error the block caught, so ``__cause__`` is None."""

    def __init__(self, message: str = "lease_fence: the transaction was rolled back at COMMIT: "
                 "a statement in it failed and its error was caught; nothing of it was "
                 "committed") -> None:
        super().__init__(message)


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


class LeaseError(Exception):
    """A lease operation that did not succeed. ``status`` is the extension's
    status; ``lease`` is the Lease concerned (for acquire, the row returned);
    ``reason`` why, for ``unavailable``, ``unknown`` and ``unreplicated``
    (None otherwise; the message ends with it)."""

    def __init__(self, status: str, lease: Optional[Lease], message: str,
                 reason: Optional[str] = None) -> None:
        super().__init__(message if not reason else f"{message} ({reason})")
        self.status = status
        self.lease = lease
        self.reason = reason
        self._message = message

    def __reduce__(self) -> Any:
        # pickled whole (Celery's result backend, multiprocessing): made
        # again with the same arguments, not only its text
        return (type(self), (self.status, self.lease, self._message, self.reason), self.__dict__)


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


class LeadershipLost(LeaseLost):
    """The leadership of ``leadership()`` is lost: stop acting as the leader.

    Raised by ``lead.check()`` and ``lead.fenced()`` once ``lead.lost`` is
    set — a renew answered ``lost`` (another candidate won, or a take_over
    took the election) or ``insufficient_validity``, or no renew was
    confirmed before the lease's validity ran out (a frozen process, Redis
    unreachable) — and at the end of the ``with`` block when it was lost
    while the block ran. No SQLSTATE: the library decides it, from what the
    server answered and the lease's validity. ``lease`` is the election's
    Lease (``generation`` the term). Campaign again to lead again (a new
    term).
    """


class TakeOverTimeout(LeaseDenied):
    """take_over: a transaction that fenced the resource (the holder's job,
    or its ``fence_resource``) did not end within ``timeout_ms`` (SQLSTATE
    55P03). Nothing was taken: the holder keeps its lease. ``status`` is
    ``'timeout'``, ``lease`` None; the driver's error is ``__cause__``."""

    sqlstate = "55P03"


class LeaseUnknown(LeaseError):
    """acquired/renewed IS NULL: the request may have been applied. Not a LeaseDenied.

    Do not proceed and do not treat the resource as free: the lease may be
    held under ``e.lease.identity`` until its TTL runs out. ``release`` of
    ``e.lease`` is safe (conditional); retry later with a new acquire.
    """


def _lease_error(status: str, lease: Optional[Lease], what: str, resource: str,
                 reason: Optional[str] = None) -> LeaseError:
    cls: Type[LeaseError] = {"busy": LeaseBusy, "unavailable": LeaseUnavailable,
                             "lost": LeaseLost, "unknown": LeaseUnknown}.get(status, LeaseDenied)
    return cls(status, lease, f"{what} of lease {resource!r}: {status}", reason)


class DataCorrupted(RuntimeError):
    """Data corrupted (the C edition raises SQLSTATE XX001 for it): the
    generation key of ``resource`` in Redis holds something that is not a
    generation, so something other than lease_fence wrote it. No retry can
    help: a person must delete the key. A RuntimeError, not a LeaseError."""

    sqlstate = "XX001"

    def __init__(self, resource: str, detail: Optional[str] = None) -> None:
        super().__init__(f"lease_fence: the generation key of resource {resource!r} does not "
                         f"hold a generation" + (f" ({detail})" if detail else "")
                         + ": something other than lease_fence wrote it; delete it")
        self.resource = resource
        self.detail = detail

    def __reduce__(self) -> Any:
        return (type(self), (self.resource, self.detail), self.__dict__)


# --------------------------------------------------------------------------
# What each verb does with each status (scripts/answers.json, "statuses"):
# one translation for the SQL functions' rows (sync and aio) and the
# client-side leases
# --------------------------------------------------------------------------

L = TypeVar("L", bound=Lease)


def _acquired(lease: L) -> L:
    """acquire: the lease when acquired; else its LeaseError (acquired NULL
    is LeaseUnknown whatever the status says)."""
    if lease.acquired is True:
        return lease
    status = "unknown" if lease.acquired is None else lease.status
    raise _lease_error(status, lease, "acquire", lease.resource, lease.reason)


def _try_acquired(lease: L) -> Optional[L]:
    """try_acquire: None when busy, else as acquire."""
    if lease.acquired is False and lease.status == "busy":
        return None
    return _acquired(lease)


def _renewed(status: str, lease: Lease, validity_ms: Optional[int],
             reason: Optional[str] = None, renewed: Optional[bool] = True) -> int:
    """renew: the validity when renewed; else its LeaseError."""
    if renewed is True and status == "renewed":
        return validity_ms  # type: ignore[return-value]
    if renewed is None:
        status = "unknown"
    raise _lease_error(status, lease, "renew", lease.resource, reason)


def _released(status: str, reason: Optional[str] = None) -> "ReleaseStatus":
    """release: the status, never raised."""
    return ReleaseStatus(status, reason)


class ReleaseStatus(str):
    """What ``release`` returns: the status (a str: ``'released'``,
    ``'not_held'``, ``'unavailable'``, ``'unknown'``) with ``reason``, why
    for ``unavailable`` and ``unknown`` (None otherwise)."""

    reason: Optional[str]

    def __new__(cls, status: str, reason: Optional[str] = None) -> "ReleaseStatus":
        self = super().__new__(cls, status)
        self.reason = reason
        return self


def _lease_from_row(row: Dict[str, Any]) -> Lease:
    return Lease(acquired=row["acquired"], status=row["status"], resource=row["resource"],
                 identity=row["identity"], generation=row["generation"],
                 validity_ms=row["validity_ms"], reason=row.get("reason"))

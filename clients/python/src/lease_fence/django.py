"""lease_fence for Django: fenced transactions and leases on ``django.db.connections``.

::

    from lease_fence import django as lf, StaleGeneration

    lease = lf.acquire("account:1", ttl_ms=30000)            # one statement
    try:
        with lf.fenced(lease):            # transaction.atomic() + set_generation(g, resource)
            item = Item.objects.get(pk=1)
            item.owner = "me"
            item.save()                   # LF001 -> StaleGeneration
    finally:
        lf.release(lease)

Every function takes ``using`` (the database alias, default ``'default'``).
``fenced``, ``transaction_lease`` and ``job`` run their own transaction:
calling one inside ``transaction.atomic()`` raises RuntimeError (the
generation and the lease belong to one transaction; a savepoint would not
end them). ``acquire``, ``try_acquire``, ``renew`` and ``release`` send one
statement: under Django's autocommit alone, inside ``transaction.atomic()``
in that transaction. Errors with SQLSTATE
LF001-LF004/LF010 (Django's ``django.db.utils`` errors, the driver's error
as ``__cause__``) are raised as FenceError subclasses.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Optional, Union

from . import _sync
from ._errors import Lease, ReleaseStatus

__all__ = ["fenced", "transaction_lease", "job", "acquire", "try_acquire", "renew", "release",
           "connection_for"]


def connection_for(using: str = "default") -> Any:
    """``django.db.connections[using]``: the connection the helpers use."""
    from django.db import connections
    return connections[using]


@contextmanager
def fenced(lease_or_generation: Union[Lease, int], resource: Optional[str] = None,
           using: str = "default") -> Iterator[Any]:
    """``transaction.atomic(using)`` whose first statement is
    ``SELECT lease_fence.set_generation(g, resource)`` (one statement); the
    block's writes carry the generation, and a Lease's resource is fenced.
    Yields the Django connection. FenceError subclasses for refused writes
    and for a refused COMMIT; the transaction is rolled back."""
    with _sync.fenced(connection_for(using), lease_or_generation, resource) as conn:
        yield conn


@contextmanager
def transaction_lease(resource: str, ttl_ms: int, *, min_validity_ms: int = 0,
                      retry_stale: bool = True, wait_ms: int = 0, keepalive: bool = False,
                      fair: bool = False, using: str = "default") -> Iterator[Lease]:
    """``transaction.atomic(using)`` holding a transaction-scoped lease (see
    ``lease_fence.transaction_lease``)."""
    with _sync.transaction_lease(connection_for(using), resource, ttl_ms,
                                 min_validity_ms=min_validity_ms, retry_stale=retry_stale,
                                 wait_ms=wait_ms, keepalive=keepalive, fair=fair) as lease:
        yield lease


@contextmanager
def job(resource: str, ttl_ms: int, *, min_validity_ms: int = 0, wait_ms: int = 0,
        fair: bool = False, using: str = "default") -> Iterator[Lease]:
    """``lease_fence.job`` on the Django connection ``using``: Django runs
    BEGIN and the acquire one after the other (no pipeline), so this is
    ``transaction_lease`` with the job's arguments."""
    with _sync.job(connection_for(using), resource, ttl_ms, min_validity_ms=min_validity_ms,
                   wait_ms=wait_ms, fair=fair) as lease:
        yield lease


def acquire(resource: str, ttl_ms: int, *, min_validity_ms: int = 0, retry_stale: bool = True,
            wait_ms: int = 0, fair: bool = False, using: str = "default") -> Lease:
    """``lease_fence.acquire`` on the Django connection ``using``."""
    return _sync.acquire(connection_for(using), resource, ttl_ms,
                         min_validity_ms=min_validity_ms, retry_stale=retry_stale,
                         wait_ms=wait_ms, fair=fair)


def try_acquire(resource: str, ttl_ms: int, *, min_validity_ms: int = 0, wait_ms: int = 0,
                using: str = "default", retry_stale: bool = True,
                fair: bool = False) -> Optional[Lease]:
    """``lease_fence.try_acquire`` on the Django connection ``using``: the
    Lease, None when busy, the exceptions of ``acquire`` otherwise."""
    return _sync.try_acquire(connection_for(using), resource, ttl_ms,
                             min_validity_ms=min_validity_ms, wait_ms=wait_ms,
                             retry_stale=retry_stale, fair=fair)


def renew(lease: Lease, ttl_ms: int, *, min_validity_ms: int = 0, using: str = "default") -> int:
    """``lease_fence.renew`` on the Django connection ``using``."""
    return _sync.renew(connection_for(using), lease, ttl_ms, min_validity_ms=min_validity_ms)


def release(lease: Lease, using: str = "default") -> ReleaseStatus:
    """``lease_fence.release`` on the Django connection ``using``."""
    return _sync.release(connection_for(using), lease)

"""lease_fence — the Python client of the lease_fence PostgreSQL extension.

A Redis lease (taken by the extension, from inside PostgreSQL) gives its
holder an identity and a generation; every fenced write carries the
generation (``lease_fence.set_generation(generation, resource)`` in the
transaction) and the extension refuses a lower one than a row or resource
has seen (SQLSTATE LF001: ``StaleGeneration``).

Works with psycopg 3 connections, SQLAlchemy Connections and ORM Sessions
(any driver) and Django connections; ``lease_fence.aio`` has the same API
for psycopg's ``AsyncConnection`` and SQLAlchemy's ``AsyncConnection`` /
``AsyncSession``; ``lease_fence.django`` has helpers that take a database
alias.

Fence errors (``FenceError``): ``StaleGeneration`` (LF001),
``MissingGeneration`` (LF002), ``ConflictingGeneration`` (LF003),
``UnissuedGeneration`` (LF004), ``LeaseLostAtCommit`` (LF010), with the
error's fields ``sqlstate``, ``schema``, ``table``, ``column``,
``resource`` (never parsed from the message). Lease outcomes
(``LeaseError``): ``LeaseDenied`` (a definite no: ``LeaseBusy``,
``LeaseUnavailable``, ``LeaseLost``, and plain for ``stale`` /
``insufficient_validity``) and ``LeaseUnknown`` (maybe applied; *not* a
LeaseDenied).

The verbs, as in the other libraries (Node, Java, Go, Ruby): ``acquire``
(the Lease, or a LeaseError), ``try_acquire`` (the Lease, **None** when
busy, acquire's exceptions otherwise), ``job``, ``transaction_lease``,
``kept_alive_lease``, ``fenced``, ``renew``, ``release``, ``leadership``
(campaign, heartbeat, resign: a context manager), ``take_over``; every argument
after ``ttl_ms`` is keyword-only. ``acquire``, ``try_acquire``, ``renew``
and ``release`` send one statement: alone under autocommit, in a
transaction of its own otherwise.

``job(conn, resource, ttl_ms)`` is ``transaction_lease`` in the fewest round
trips: with psycopg 3, BEGIN and the acquire go out in one pipeline.
``resumable_job(conn, resource, ttl_ms)`` runs a long job under an explicit
lease in fenced transactions that ``job.checkpoint(state)`` commits with a
checkpoint; a successor resumes from ``job.resume_from``
(``lease_fence.celery`` and ``lease_fence.rq`` run Celery and RQ tasks in
it).
``TransactionRolledBack``: ``job``, ``transaction_lease`` or ``fenced``
found the transaction failed at its end (the block caught the error of a
statement, a refused write say, and went on): PostgreSQL rolled it back,
nothing was committed. ``DataCorrupted`` (a RuntimeError, XX001): the
client-side mode found a generation key that holds no generation.
"""

from ._errors import (ConflictingGeneration, DataCorrupted, FenceError, Lease, LeaseBusy,
                      LeaseDenied, LeaseError, LeaseLost, LeaseLostAtCommit, LeaseUnavailable,
                      LeaseUnknown, MissingGeneration, ReleaseStatus, StaleGeneration,
                      TransactionRolledBack, UnissuedGeneration, fence_error_from, fence_errors,
                      LeadershipLost, TakeOverTimeout)
from ._election import Leadership, leadership, take_over
from ._resumable import ResumableJob, resumable_job
from ._sync import (KeptAliveLease, acquire, fenced, job, keepalive_state, kept_alive_lease,
                    release, renew, transaction_lease, try_acquire)

__version__ = "1.5.0"

__all__ = [
    "FenceError", "StaleGeneration", "MissingGeneration", "ConflictingGeneration",
    "UnissuedGeneration", "LeaseLostAtCommit", "LeaseError", "LeaseDenied", "LeaseBusy",
    "LeaseUnavailable", "LeaseLost", "LeaseUnknown", "Lease", "KeptAliveLease", "ReleaseStatus",
    "DataCorrupted", "TransactionRolledBack", "fence_error_from", "fence_errors",
    "try_acquire", "acquire", "transaction_lease", "job", "kept_alive_lease", "keepalive_state",
    "fenced", "renew", "release", "Leadership", "LeadershipLost", "leadership", "take_over",
    "TakeOverTimeout", "ResumableJob", "resumable_job",
]

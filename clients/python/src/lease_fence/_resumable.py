"""resumable_job: a job under an explicit lease that commits its progress
with fenced checkpoints (``lease_fence.checkpoint``), and resumes from the
last one (``lease_fence.last_checkpoint``). psycopg 3 connections."""

from __future__ import annotations

import json
from contextlib import contextmanager, nullcontext
from datetime import datetime
from typing import Any, Iterator, Optional

from ._errors import Lease, _acquired, _renewed, fence_errors
from ._sync import (RELEASE_SQL, RENEW_SQL, SET_GENERATION_SQL, _acquire_alone, _acquire_params,
                    _begin_sql, _is_psycopg, _Psycopg)

__all__ = ["ResumableJob", "resumable_job"]

CHECKPOINT_SQL = ("SELECT lease_fence.checkpoint(CAST(%(resource)s AS text), "
                  "CAST(%(state)s AS jsonb)) AS g")
LAST_CHECKPOINT_SQL = ("SELECT state, generation, written_at FROM "
                       "lease_fence.last_checkpoint(CAST(%(resource)s AS text))")


def _pipeline(conn: Any) -> Any:
    """One round trip when libpq has pipeline mode; else one after the other."""
    import psycopg
    return conn.pipeline() if psycopg.Pipeline.is_supported() else nullcontext()


class ResumableJob:
    """The job of ``resumable_job``: run its writes on ``conn`` (they are in
    the job's open transaction, fenced at ``generation``), call
    ``checkpoint(state)`` to commit them with the progress made.

    ``resume_from`` is the state of the resource's last committed
    checkpoint (decoded JSON; None when there is none) and
    ``resumed_generation`` the generation that wrote it (None when none);
    ``written_at`` when. ``lease`` is the explicit Lease, ``resource``,
    ``generation`` and ``identity`` its fields; ``ttl_ms`` what each
    checkpoint renews it to.
    """

    def __init__(self, conn: Any, lease: Lease, ttl_ms: int) -> None:
        self.conn = conn
        self.lease = lease
        self.resource: str = lease.resource
        self.generation: int = lease.generation  # type: ignore[assignment]
        self.identity: str = lease.identity  # type: ignore[assignment]
        self.ttl_ms = ttl_ms
        self.resume_from: Any = None
        self.resumed_generation: Optional[int] = None
        self.written_at: Optional[datetime] = None
        self._db = _Psycopg(conn)
        self._begin = "BEGIN"

    def __repr__(self) -> str:
        return (f"ResumableJob(resource={self.resource!r}, generation={self.generation}, "
                f"resumed_generation={self.resumed_generation})")

    # the statements; the caller maps the errors (fence_errors)

    def _open(self, read_checkpoint: bool) -> None:
        """BEGIN; set_generation(g, resource) [; last_checkpoint]: one pipeline."""
        args = {"generation": self.generation, "resource": self.resource}
        conn = self.conn
        with _pipeline(conn):
            conn.execute(self._begin)
            conn.execute(SET_GENERATION_SQL, args)
            cur = conn.execute(LAST_CHECKPOINT_SQL, {"resource": self.resource}) \
                if read_checkpoint else None
        if cur is not None:
            row = cur.fetchone()
            if row is not None:
                self.resume_from, self.resumed_generation, self.written_at = row

    def checkpoint(self, state: Any) -> int:
        """Renew the lease, store ``state`` (anything ``json.dumps`` takes) as
        the resource's checkpoint under the job's generation and COMMIT it
        with the writes made since the last checkpoint; then open the next
        transaction (fenced again). Returns the generation.

        Raises, the transaction rolled back (nothing since the last
        checkpoint committed): LeaseLost / LeaseUnknown / LeaseUnavailable
        when the renew fails (before anything is written); a FenceError
        when the checkpoint is refused; TransactionRolledBack when a
        statement of the transaction failed and its error was caught.
        StaleGeneration (LF001, ``e.resource``) from the next transaction's
        fence: a newer holder fenced the resource between this checkpoint's
        COMMIT and that fence (the holder paused there) -- this checkpoint
        and the writes before it are committed (the job's fence made the
        newer holder wait for them), the job is no longer the holder: stop.
        """
        text = json.dumps(state)                 # TypeError before anything is sent
        db = self._db
        with fence_errors():
            db.check_committable()
            row = db.query_one(RENEW_SQL, {"resource": self.resource, "identity": self.identity,
                                           "ttl_ms": self.ttl_ms, "min_validity_ms": 0})
            _renewed(row["status"], self.lease, row["validity_ms"], row["reason"],
                     row["renewed"])
            conn = self.conn
            with _pipeline(conn):
                cur = conn.execute(CHECKPOINT_SQL, {"resource": self.resource, "state": text})
                conn.execute("COMMIT")
            generation: int = cur.fetchone()[0]
            self._open(False)
        return generation


def _rollback(conn: Any) -> None:
    """ROLLBACK if a transaction is open; a broken connection keeps the
    original exception (the server ended its transaction)."""
    from psycopg import pq
    if conn.closed or conn.broken:
        return
    if conn.info.transaction_status != pq.TransactionStatus.IDLE:
        conn.execute("ROLLBACK")


@contextmanager
def resumable_job(conn: Any, resource: str, ttl_ms: int, *, wait_ms: int = 0,
                  fair: bool = False) -> Iterator[ResumableJob]:
    """A job that survives a takeover: an explicit lease, fenced transactions
    and checkpoints, all on ``conn`` (an idle psycopg 3 Connection).

    1. ``lease_fence.acquire(resource, ttl_ms, scope => 'explicit')`` alone:
       LeaseBusy / LeaseUnavailable / LeaseDenied / LeaseUnknown before
       anything else (stale retried once).
    2. BEGIN; ``set_generation(generation, resource)``; ``last_checkpoint``
       (one pipeline): ``job.resume_from`` / ``job.resumed_generation``.
    3. The block runs with the job; its writes on ``job.conn`` are in the
       open transaction, fenced at the lease's generation.
    4. ``job.checkpoint(state)`` renews the lease, writes the checkpoint,
       COMMITs and opens the next fenced transaction.
    5. The block returns: COMMIT, then release. It raises: ROLLBACK,
       release, the exception propagates (SQLSTATE LF001-LF004 / LF010 as
       FenceError subclasses).

    A holder frozen inside its open transaction past the lease is ended by
    the server (FATAL 25P03); one frozen between transactions gets
    StaleGeneration at its next fence once a successor has fenced. So
    ``ttl_ms`` must exceed the longest stretch between two checkpoints. A
    connection with autocommit off is switched to autocommit for the job
    (the job sends BEGIN / COMMIT itself, with the connection's isolation
    level) and restored at the end.
    """
    if not _is_psycopg(conn) or type(conn).__name__.startswith("Async"):
        raise TypeError(f"resumable_job needs a psycopg 3 Connection, got "
                        f"{type(conn).__name__}")
    db = _Psycopg(conn)
    params = _acquire_params(resource, ttl_ms, 0, "explicit", wait_ms, False, fair)
    lease = _acquired(_acquire_alone(db, params, True))
    job = ResumableJob(conn, lease, ttl_ms)
    job._begin = _begin_sql(conn)
    restore = not conn.autocommit
    if restore:
        conn.autocommit = True
    try:
        try:
            with fence_errors():
                job._open(True)
                yield job
                db.check_committable()
                conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise
        finally:
            if not (conn.closed or conn.broken):
                try:
                    conn.execute(RELEASE_SQL, {"resource": lease.resource,
                                               "identity": lease.identity})
                except Exception:
                    pass            # the answer does not change the outcome
    finally:
        if restore and not (conn.closed or conn.broken):
            try:
                conn.autocommit = False
            except Exception:
                pass

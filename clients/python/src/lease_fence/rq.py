"""RQ jobs whose effects happen at most once: the ``fenced`` decorator.

::

    from lease_fence.rq import fenced

    @fenced(connect="host=/run/postgresql dbname=app", ttl_ms=60000)
    def charge(job, order_id):
        ...                      # job: the ResumableJob; job.conn, job.checkpoint()

    queue.enqueue(charge, 42)    # the caller passes the job's own arguments only

Each run is a ``lease_fence.resumable_job`` on a connection of its own; the
function gets the ``ResumableJob`` as its first argument. Options:

``connect``   a callable returning a new psycopg 3 connection, or a
              conninfo string (required)
``ttl_ms``    the lease's TTL (default 60000)
``on_busy``   ``"skip"`` (default: the job runs elsewhere; this run ends
              without error and logs a line) or ``"retry"`` (RQ's retry)
``resource``  a callable ``(args, kwargs) -> str``; default
              ``rq:<func_name>:<sha256 of [args, kwargs] as canonical JSON>``
``max_retries``, ``retry_interval``  RQ's retry for busy (on_busy="retry")
              and unknown when the job was enqueued without a ``Retry`` of
              its own (default 3 retries, 1 s; an unknown outcome waits at
              least the lease's TTL). With a ``Retry`` of the job's own, RQ
              follows it. Intervals need a worker with its scheduler
              (``rq worker --with-scheduler``); 0 requeues at once.
``wait_ms``, ``fair``   as for ``acquire``

An unknown outcome is always retried (never run without a lease); Redis
unreachable (LeaseUnavailable) and a stale or lost holder (StaleGeneration,
LeaseLost, LeaseLostAtCommit) fail the job with that exception.
"""

from __future__ import annotations

import functools
import logging
import math
from typing import Any, Callable, Dict, Optional, Tuple, TypeVar

from . import _integrations
from ._errors import LeaseBusy, LeaseUnknown
from ._resumable import resumable_job

__all__ = ["fenced"]

log = logging.getLogger("lease_fence.rq")

F = TypeVar("F", bound=Callable[..., Any])


def _schedule_retry(interval_s: float, max_retries: int) -> None:
    """Have RQ retry the current job when it fails now: its own Retry if it
    has one, else ``max_retries`` at ``interval_s``."""
    from rq import get_current_job
    job = get_current_job()
    if job is None:
        return                    # not run by a worker: nothing to retry
    if job.retries_left is None:
        job.retries_left = max_retries
        job.retry_intervals = [math.ceil(interval_s)]


def fenced(connect: _integrations.Connect, *, ttl_ms: int = 60000, on_busy: str = "skip",
           resource: Optional[Callable[[Tuple[Any, ...], Dict[str, Any]], str]] = None,
           max_retries: int = 3, retry_interval: float = 1, wait_ms: int = 0,
           fair: bool = False) -> Callable[[F], F]:
    """Decorate an RQ job function: it runs in ``resumable_job``, its first
    argument the ResumableJob."""
    _integrations.check_on_busy(on_busy)

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            from rq import get_current_job
            current = get_current_job()
            name = current.func_name if current is not None else \
                f"{fn.__module__}.{fn.__qualname__}"
            res = resource(args, kwargs) if resource is not None else \
                _integrations.default_resource("rq", name, [list(args), kwargs])
            job_id = current.id if current is not None else None
            conn = _integrations.open_connection(connect)
            started = False
            try:
                with resumable_job(conn, res, ttl_ms, wait_ms=wait_ms, fair=fair) as job:
                    started = True
                    return fn(job, *args, **kwargs)
            except LeaseBusy:
                if started:
                    raise
                if on_busy == "retry":
                    log.info("lease_fence: job %s (%s): lease %r busy, retried", job_id, name,
                             res)
                    _schedule_retry(retry_interval, max_retries)
                    raise
                log.info("lease_fence: job %s (%s) skipped: lease %r busy (the same job "
                         "runs elsewhere)", job_id, name, res)
                return None
            except LeaseUnknown:
                if started:
                    raise
                log.warning("lease_fence: job %s (%s): the outcome of the acquire of %r is "
                            "unknown, retried", job_id, name, res)
                _schedule_retry(max(retry_interval, ttl_ms / 1000), max_retries)
                raise
            finally:
                conn.close()
        return run  # type: ignore[return-value]
    return decorate

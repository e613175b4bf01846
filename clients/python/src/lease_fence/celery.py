"""Celery tasks whose effects happen at most once: ``FencedTask``.

::

    from lease_fence.celery import FencedTask

    @app.task(base=FencedTask, connect="host=/run/postgresql dbname=app",
              ttl_ms=60000, on_busy="skip")
    def charge(job, order_id):
        done = set(job.resume_from or [])
        for line in lines(order_id):
            if line in done:
                continue
            job.conn.execute("UPDATE ...", ...)
            done.add(line)
            job.checkpoint(sorted(done))

Each run of the task is a ``lease_fence.resumable_job`` on a connection of
its own: the task function gets the ``ResumableJob`` as its first argument
(with ``bind=True``: after the task). Options (task attributes, given to
``app.task`` or set on a subclass):

``connect``   a callable returning a new psycopg 3 connection, or a
              conninfo string (required)
``ttl_ms``    the lease's TTL (default 60000): longer than the longest
              stretch between two checkpoints
``on_busy``   ``"skip"`` (default: the same job runs elsewhere, its effect
              happens there; this run ends without error and logs a line)
              or ``"retry"`` (Celery's retry: ``default_retry_delay``,
              ``max_retries``)
``resource``  a callable ``(args, kwargs) -> str``; default
              ``celery:<task name>:<sha256 of [args, kwargs] as canonical JSON>``
              (``connect`` and ``resource`` are plain callables, never bound
              to the task; override ``lease_resource(args, kwargs)`` for a
              method)
``wait_ms``, ``fair``   as for ``acquire`` (default 0, False)

An unknown lease outcome is always retried through Celery's retry, after
the lease's TTL (a lease the acquire may have taken has expired by then;
never run without a lease; ``max_retries`` applies); Redis unreachable
(LeaseUnavailable) and a stale or lost holder (StaleGeneration, LeaseLost, LeaseLostAtCommit) fail the task
with that exception.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any, Callable, Dict, Optional, Tuple

from celery import Task

from . import _integrations
from ._errors import LeaseBusy, LeaseUnknown
from ._resumable import resumable_job

__all__ = ["FencedTask"]

log = logging.getLogger("lease_fence.celery")


def _header_without_job(run: Any) -> Optional[Callable[..., None]]:
    """Celery checks a call's arguments against the task function's
    signature (``__header__``): the ResumableJob (and a bound task) are not
    the caller's to give."""
    fun = run.__func__ if isinstance(run, staticmethod) else run
    try:
        sig = inspect.signature(fun)
    except (TypeError, ValueError):
        return None
    skip = 1 if isinstance(run, staticmethod) else 2
    params = list(sig.parameters.values())
    while skip and params and params[0].kind in (inspect.Parameter.POSITIONAL_ONLY,
                                                 inspect.Parameter.POSITIONAL_OR_KEYWORD):
        params.pop(0)
        skip -= 1
    caller = sig.replace(parameters=params)

    def header(*args: Any, **kwargs: Any) -> None:
        caller.bind(*args, **kwargs)
    return header


class FencedTask(Task):  # type: ignore[misc]
    """A Celery task that runs in ``lease_fence.resumable_job``."""

    connect: Any = None
    ttl_ms: int = 60000
    on_busy: str = "skip"
    resource: Optional[Callable[[Tuple[Any, ...], Dict[str, Any]], str]] = None
    wait_ms: int = 0
    fair: bool = False

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        for attr in ("connect", "resource"):
            # plain callables, not methods: never bound to the task
            value = cls.__dict__.get(attr)
            if inspect.isfunction(value):
                setattr(cls, attr, staticmethod(value))
        run = cls.__dict__.get("run")
        if run is not None:
            header = _header_without_job(run)
            if header is not None:
                cls.__header__ = staticmethod(header)

    def lease_resource(self, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> str:
        """The resource of one call: the ``resource`` option's, or the default."""
        if self.resource is not None:
            return self.resource(args, kwargs)
        return _integrations.default_resource("celery", self.name, [list(args), kwargs])

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.request_stack.top is None:
            # called directly, not by a worker: a request of its own, as Task.__call__
            from celery.app.task import _task_stack
            _task_stack.push(self)
            self.push_request(args=args, kwargs=kwargs)
            try:
                return self._run_fenced(args, kwargs)
            finally:
                self.pop_request()
                _task_stack.pop()
        return self._run_fenced(args, kwargs)

    def _run_fenced(self, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        on_busy = _integrations.check_on_busy(self.on_busy)
        resource = self.lease_resource(args, kwargs)
        conn = _integrations.open_connection(self.connect)
        started = False
        try:
            with resumable_job(conn, resource, self.ttl_ms, wait_ms=self.wait_ms,
                               fair=self.fair) as job:
                started = True
                return self.run(job, *args, **kwargs)
        except LeaseBusy as e:
            if started:
                raise
            if on_busy == "retry":
                log.info("lease_fence: task %s[%s]: lease %r busy, retried", self.name,
                         self.request.id, resource)
                raise self.retry(exc=e)
            log.info("lease_fence: task %s[%s] skipped: lease %r busy (the same job runs "
                     "elsewhere)", self.name, self.request.id, resource)
            return None
        except LeaseUnknown as e:
            if started:
                raise
            log.warning("lease_fence: task %s[%s]: the outcome of the acquire of %r is "
                        "unknown, retried after the lease's TTL", self.name, self.request.id,
                        resource)
            # a lease the acquire may have taken has expired by then
            raise self.retry(exc=e, countdown=self.ttl_ms / 1000)
        finally:
            conn.close()

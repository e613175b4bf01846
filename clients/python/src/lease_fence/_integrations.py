"""What the job-system integrations (lease_fence.celery, lease_fence.rq)
share: the default resource name, the connection, the options."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Callable, Union

__all__ = ["ON_BUSY", "args_digest", "default_resource", "open_connection", "check_on_busy"]

ON_BUSY = ("skip", "retry")

Connect = Union[str, Callable[[], Any]]


def args_digest(value: Any) -> str:
    """sha256 (hex) of ``value`` as canonical JSON: keys sorted, no
    whitespace, UTF-8 (not ASCII-escaped). TypeError for arguments that are
    not JSON: give the integration a resource callable then."""
    try:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False)
    except (TypeError, ValueError) as e:
        raise TypeError(f"lease_fence: the job's arguments are not JSON ({e}): pass a "
                        f"resource callable that names the job's resource") from e
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def default_resource(system: str, name: str, value: Any) -> str:
    """``<system>:<name>:<sha256 hex of value as canonical JSON>``."""
    return f"{system}:{name}:{args_digest(value)}"


def check_on_busy(on_busy: object) -> str:
    if on_busy not in ON_BUSY:
        raise ValueError(f"lease_fence: on_busy is 'skip' or 'retry', got {on_busy!r}")
    return on_busy  # type: ignore[return-value]


def open_connection(connect: Connect) -> Any:
    """A new psycopg 3 connection: ``connect()``, or ``psycopg.connect(connect)``
    for a conninfo string."""
    if connect is None:
        raise ValueError("lease_fence: no connect option (a callable returning a new psycopg "
                         "connection, or a conninfo string)")
    if isinstance(connect, str):
        import psycopg
        return psycopg.connect(connect, autocommit=True)
    if not callable(connect):
        raise TypeError(f"lease_fence: connect is a callable or a conninfo string, got "
                        f"{type(connect).__name__}")
    return connect()

"""Client-side mode: the application takes the Redis lease itself (redis-py).

For a database that cannot load the C library (managed PostgreSQL with the
portable edition, ``portable/lease_fence_portable.sql``): the lease is taken
in Redis by this process, with the very Lua scripts the C library runs
(shipped in the package, ``lease_fence/scripts/*.lua``, copied from the
repository's ``scripts/`` at build time), on the same keys; the database is
used only to draw generations (``lease_fence.next_generation()``, and
``next_generation(above)`` to heal a stale answer). The Lease it returns
fences writes exactly as one of the C edition: ``lease_fence.fenced(conn,
lease)``.

    import redis, lease_fence
    from lease_fence.client_side import ClientSideLeases

    leases = ClientSideLeases(redis.Redis(host="redis", socket_timeout=0.5,
                                          socket_connect_timeout=0.5))
    lease = leases.acquire(conn, "account:1", ttl_ms=30000)
    try:
        with lease_fence.fenced(conn, lease):
            conn.execute("UPDATE account SET owner = 'me' WHERE id = 1")
    finally:
        leases.release(conn, lease)

``AsyncClientSideLeases`` is the same with a ``redis.asyncio.Redis`` and
the connections ``lease_fence.aio`` takes.

Outcomes, as in the C edition: a request that failed before anything was
sent (no connection) is ``unavailable``, a definite no; a request that may
have reached Redis (a timeout or a connection lost after sending, an
unexpected answer) is ``unknown``: never a no, nothing proceeds on it. An
unknown acquire is released at once, conditionally (release.lua with its
identity, on a fresh connection, within ``cleanup_timeout_ms``), and the
Lease says whether that was confirmed (``cleanup``).
"""

from __future__ import annotations

import hashlib
import inspect
import os
import random
import secrets
import time
from dataclasses import dataclass
from typing import Any, Dict, Generator, NamedTuple, Optional, Sequence, Tuple

import redis
import redis.sentinel

from ._errors import (DataCorrupted, Lease, LeaseDenied, ReleaseStatus, _acquired, _released,
                      _renewed, _try_acquired)
from ._protocol import Answer, decode, error_text, transport
from ._sync import _adapter

__all__ = ["ClientSideLeases", "AsyncClientSideLeases", "ClientSideLease", "Script", "SCRIPTS", "DEFAULT_KEY_PREFIX",
           "DEFAULT_GEN_KEY_TTL_S", "lease_key", "generation_key"]

DEFAULT_KEY_PREFIX = "lease_fence:"          # lease_fence.key_prefix's default
DEFAULT_GEN_KEY_TTL_S = 604800               # lease_fence.gen_key_ttl_s's default
DEFAULT_CLEANUP_TIMEOUT_MS = 500
MAX_RESOURCE_BYTES = 1024                    # LF_MAX_RESOURCE
MAX_TTL_MS = 1000 * 60 * 60 * 24 * 365 * 100  # the C acquire's limit
INT_MAX = 2 ** 31 - 1
MAX_STALE_RETRIES = 3                        # LF_WAIT_MAX_STALE
_POLL_MAX_S = 0.25                           # LF_WAIT_POLL_MAX_MS


# --------------------------------------------------------------------------
# The scripts: the package's copy of the repository's scripts/*.lua
# --------------------------------------------------------------------------

class Script(NamedTuple):
    """A Lua script as shipped: its bytes and the SHA1 Redis names it by."""
    name: str
    text: bytes
    sha1: str


def _load_scripts() -> Dict[str, Script]:
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts")
    out = {}
    for name in ("acquire", "renew", "release", "check"):
        path = os.path.join(here, name + ".lua")
        try:
            with open(path, "rb") as f:
                text = f.read()
        except OSError as e:
            raise ImportError(f"lease_fence.client_side: the package has no {name}.lua ({e}); "
                              f"it was built without the repository's scripts/") from e
        out[name] = Script(name, text, hashlib.sha1(text).hexdigest())
    return out


SCRIPTS: Dict[str, Script] = _load_scripts()


# --------------------------------------------------------------------------
# Keys (as the C library's resource_key() names them)
# --------------------------------------------------------------------------

def _key(prefix: str, resource: str, gen: bool) -> str:
    if not resource.startswith("}"):
        return f"{prefix}{{{resource}}}" + (":gen" if gen else "")
    hexed = resource.encode("utf-8").hex()
    return f"{prefix}{{{hexed}}}" + ("#gen" if gen else "#lease")


def lease_key(resource: str, key_prefix: str = DEFAULT_KEY_PREFIX) -> str:
    """The Redis key of a resource's lease, as the C library names it."""
    return _key(_check_prefix(key_prefix), _check_resource(resource), False)


def generation_key(resource: str, key_prefix: str = DEFAULT_KEY_PREFIX) -> str:
    """The Redis key of a resource's highest granted generation."""
    return _key(_check_prefix(key_prefix), _check_resource(resource), True)


# --------------------------------------------------------------------------
# Argument checks (the C acquire's, before anything is sent or drawn)
# --------------------------------------------------------------------------

def _check_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} is an int, got {type(value).__name__}")
    return value


def _check_prefix(prefix: object) -> str:
    if not isinstance(prefix, str):
        raise TypeError(f"key_prefix is a str, got {type(prefix).__name__}")
    if "{" in prefix or "}" in prefix:
        raise ValueError(f"key_prefix must not contain '{{' or '}}' (the resource in braces is "
                         f"the key's Redis Cluster hash tag), got {prefix!r}")
    return prefix


def _check_resource(resource: object) -> str:
    if not isinstance(resource, str):
        raise TypeError(f"resource is a str, got {type(resource).__name__}")
    if resource == "":
        raise ValueError("resource must not be empty")
    if "\x00" in resource:
        raise ValueError("resource must not contain NUL")
    n = len(resource.encode("utf-8"))
    if n > MAX_RESOURCE_BYTES:
        raise ValueError(f"resource is too long: it has {n} bytes; the limit is "
                         f"{MAX_RESOURCE_BYTES}")
    return resource


def _check_ttl(ttl_ms: object) -> int:
    ttl = _check_int("ttl_ms", ttl_ms)
    if ttl <= 0:
        raise ValueError(f"ttl_ms must be positive, got {ttl}")
    if ttl > MAX_TTL_MS:
        raise ValueError(f"ttl_ms is too large, got {ttl}")
    return ttl


def _check_min_validity(min_validity_ms: object, ttl: int) -> int:
    minv = _check_int("min_validity_ms", min_validity_ms)
    if minv < 0 or minv > ttl:
        raise ValueError(f"min_validity_ms must be between 0 and ttl_ms ({ttl}), got {minv}")
    return minv


def _check_wait(wait_ms: object) -> int:
    wait = _check_int("wait_ms", wait_ms)
    if wait < 0 or wait > INT_MAX:
        raise ValueError(f"wait_ms must be between 0 and {INT_MAX}, got {wait}")
    return wait


def _check_not_fair(fair: object) -> None:
    """The client-side mode has no fair waiting: ``fair=True`` is refused
    (ValueError), a non-bool is a TypeError, before anything is sent."""
    if not isinstance(fair, bool):
        raise TypeError(f"fair is a bool, got {type(fair).__name__}")
    if fair:
        raise ValueError("fair=True is not offered by the client-side mode (it runs acquire.lua, "
                         "which has no queue): take fair leases with the C edition "
                         "(lease_fence.acquire(..., fair => true))")


def _check_lease(lease: object) -> Tuple[str, str]:
    if not isinstance(lease, Lease):
        raise TypeError(f"expected a Lease, got {type(lease).__name__}")
    identity = lease.identity
    if not isinstance(identity, str) or len(identity) != 32 or \
            any(c not in "0123456789abcdef" for c in identity):
        raise ValueError(f"this lease has no identity (status {lease.status!r}): only an "
                         f"acquired or unknown lease can be renewed or released")
    return _check_resource(lease.resource), identity


def _validity_after(ttl: int, elapsed_ms: int) -> int:
    """lf_validity_after(): ttl - elapsed - drift (1% of ttl + 2 ms)."""
    return ttl - elapsed_ms - (ttl // 100 + 2)


# --------------------------------------------------------------------------
# One script run: an Answer (_protocol.decode, the one decoder)
# --------------------------------------------------------------------------

def _describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def _exchange(conn: Any, script: Script, args: Sequence[Any]) -> Answer:
    """Send one command on a connected connection and decode its answer.

    Once anything may have been sent, a failure is unknown; the connection
    is dropped so that a late reply is never read as another's answer."""
    try:
        conn.send_command(*args, check_health=False)
    except BaseException as e:
        conn.disconnect()
        if not isinstance(e, Exception):
            raise
        return transport("no_reply", f"lost while sending: {_describe(e)}")
    try:
        reply = conn.read_response()
    except BaseException as e:
        if error_text(e) is not None:   # an error reply: the connection is in step
            return decode(script.name, e)
        conn.disconnect()               # a timeout, a connection lost: maybe applied
        if not isinstance(e, Exception):
            raise
        return transport("no_reply", f"no answer: {_describe(e)}")
    return decode(script.name, reply)


async def _aexchange(conn: Any, script: Script, args: Sequence[Any]) -> Answer:
    """_exchange on a redis.asyncio connection."""
    try:
        await conn.send_command(*args, check_health=False)
    except BaseException as e:
        await conn.disconnect()
        if not isinstance(e, Exception):
            raise
        return transport("no_reply", f"lost while sending: {_describe(e)}")
    try:
        reply = await conn.read_response()
    except BaseException as e:
        if error_text(e) is not None:
            return decode(script.name, e)
        await conn.disconnect()
        if not isinstance(e, Exception):
            raise
        return transport("no_reply", f"no answer: {_describe(e)}")
    return decode(script.name, reply)


def _commands(script: Script, keys: Sequence[bytes],
              args: Sequence[bytes]) -> Tuple[Tuple[Any, ...], Tuple[Any, ...]]:
    tail = (str(len(keys)).encode(), *keys, *args)
    return (b"EVALSHA", script.sha1.encode(), *tail), (b"EVAL", script.text, *tail)


def _after_eval(out: Answer) -> Answer:
    if out.outcome == "noscript":       # EVAL carries the text: Redis refused it unrun
        return Answer("unavailable", reason="Redis answered NOSCRIPT to EVAL")
    return out


def _not_sent(e: BaseException) -> Answer:
    return transport("not_sent", f"could not reach Redis: {_describe(e)}")


def _run_on(conn: Any, script: Script, keys: Sequence[bytes], args: Sequence[bytes]) -> Answer:
    """EVALSHA, and EVAL of the text on NOSCRIPT, on one connection."""
    try:
        conn.connect()                  # (a no-op when connected) nothing sent yet
        conn.check_health()
    except Exception as e:
        conn.disconnect()
        return _not_sent(e)
    evalsha, eval_ = _commands(script, keys, args)
    out = _exchange(conn, script, evalsha)
    return _after_eval(_exchange(conn, script, eval_)) if out.outcome == "noscript" else out


async def _arun_on(conn: Any, script: Script, keys: Sequence[bytes],
                   args: Sequence[bytes]) -> Answer:
    try:
        await conn.connect()
        await conn.check_health()
    except Exception as e:
        await conn.disconnect()
        return _not_sent(e)
    evalsha, eval_ = _commands(script, keys, args)
    out = await _aexchange(conn, script, evalsha)
    return _after_eval(await _aexchange(conn, script, eval_)) if out.outcome == "noscript" \
        else out


def _get_connection(pool: Any) -> Any:
    """pool.get_connection(): redis-py before 5.3 wants a command name, later
    ones deprecate it."""
    try:
        param = inspect.signature(pool.get_connection).parameters.get("command_name")
    except (TypeError, ValueError):
        param = None
    if param is not None and param.default is inspect.Parameter.empty:
        return pool.get_connection("EVALSHA")
    return pool.get_connection()


# --------------------------------------------------------------------------
# The outcomes, shared by the sync and the async class
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class ClientSideLease(Lease):
    """A Lease taken client-side: the fields of ``Lease``, and ``cleanup``.

    ``cleanup`` says whether the conditional release that follows an
    ``unknown`` acquire (or an ``insufficient_validity`` grant) was
    confirmed by Redis: ``'confirmed'`` (the key does not hold this
    identity now) or ``'unconfirmed'`` (it may, until its TTL runs out);
    None when no such release was needed.
    """

    cleanup: Optional[str] = None


def _status_only(status: str, resource: str, reason: Optional[str] = None) -> ClientSideLease:
    return ClientSideLease(acquired=False, status=status, resource=resource, identity=None,
                           generation=None, validity_ms=None, reason=reason)


def _cleanup_result(out: Answer) -> str:
    return "confirmed" if out.outcome in ("released", "not_held") else "unconfirmed"


# What the acquire plan asks its driver for (a generator: it yields these
# and is sent the answers; the driver does the I/O, sync or async):
#   ("draw", above)             -> a generation (next_generation[(above)])
#   ("acquire", identity, args) -> the Answer of acquire.lua
#   ("cleanup", identity)       -> 'confirmed' | 'unconfirmed'
#   ("sleep", seconds)          -> None
def _acquire_plan(resource: str, ttl: int, minv: int, wait: int, stale_retries: int,
                  gen_key_ttl_s: int) -> Generator[Tuple[Any, ...], Any, ClientSideLease]:
    deadline = time.monotonic() + wait / 1000.0
    spare: Optional[int] = None     # a busy answer stored nothing: the generation is reusable
    stale = 0
    poll = 0.01

    def pause(hint_s: Optional[float]) -> Optional[float]:
        """How long to sleep before the next attempt; None at the deadline."""
        nonlocal poll
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        s = random.uniform(poll / 2, poll)
        poll = min(poll * 2, _POLL_MAX_S)
        if hint_s is not None:
            s = min(s, max(hint_s, 0.001))
        return min(s, left)

    while True:
        generation = spare if spare is not None else (yield ("draw", None))
        spare = None
        identity = secrets.token_hex(16)
        args = (identity.encode(), str(ttl).encode(), str(generation).encode(),
                str(gen_key_ttl_s).encode())
        start = time.monotonic()        # validity is measured from before the request
        out: Answer = yield ("acquire", identity, args)
        validity = _validity_after(ttl, int((time.monotonic() - start) * 1000))

        if out.outcome == "acquired" and out.generation != generation:
            # the script echoes the generation it was sent: this answers another request
            out = Answer("unknown", reason=f"the acquire script answered generation "
                                           f"{out.generation}, not the {generation} sent")
        if out.outcome == "unavailable":
            s = pause(None)
            if s is not None:
                yield ("sleep", s)
                continue
            return _status_only("unavailable", resource, out.reason)
        if out.outcome == "corrupt":
            raise DataCorrupted(resource, out.reason)
        if out.outcome == "stale":
            # heal: a generation above the stored one (the database bounds it)
            healed = yield ("draw", out.stored)
            if stale < stale_retries:
                stale += 1
                spare = healed
                continue
            return _status_only("stale", resource)
        if out.outcome == "busy":
            spare = generation
            s = pause(out.pttl_ms / 1000.0 if out.pttl_ms is not None else None)
            if s is not None:
                yield ("sleep", s)
                continue
            return _status_only("busy", resource)
        if out.outcome != "acquired":   # unknown, and anything the table adds
            cleanup = yield ("cleanup", identity)
            return ClientSideLease(acquired=None, status="unknown", resource=resource,
                                   identity=identity, generation=generation, validity_ms=None,
                                   reason=out.reason, cleanup=cleanup)
        if validity < minv:
            cleanup = yield ("cleanup", identity)
            return ClientSideLease(acquired=False, status="insufficient_validity",
                                   resource=resource, identity=None, generation=None,
                                   validity_ms=validity, cleanup=cleanup)
        return ClientSideLease(acquired=True, status="acquired", resource=resource,
                               identity=identity, generation=generation, validity_ms=validity)


def _renew_result(out: Answer, lease: Lease, resource: str, minv: int, validity: int) -> int:
    if out.outcome == "renewed" and validity < minv:
        raise LeaseDenied("insufficient_validity", lease,
                          f"renew of lease {resource!r}: insufficient_validity "
                          f"({validity} ms left)")
    status = out.outcome if out.outcome in ("renewed", "lost", "unavailable") else "unknown"
    return _renewed(status, lease, validity, out.reason)


def _release_result(out: Answer) -> ReleaseStatus:
    status = out.outcome if out.outcome in ("released", "not_held", "unavailable") \
        else "unknown"
    return _released(status, out.reason if status in ("unavailable", "unknown") else None)


_DRAW_SQL = "SELECT lease_fence.next_generation() AS g"
_DRAW_ABOVE_SQL = "SELECT lease_fence.next_generation(CAST(%(above)s AS bigint)) AS g"


def _drawn(row: Dict[str, Any]) -> int:
    g: object = row["g"]
    if isinstance(g, bool) or not isinstance(g, int) or g <= 0:
        raise RuntimeError(f"lease_fence.next_generation() returned {g!r}")
    return g


def _fresh_kwargs(pool: Any, timeout_ms: int) -> Dict[str, Any]:
    """The pool's connection settings, with timeout_ms for every step and no retries."""
    kwargs = dict(pool.connection_kwargs)
    timeout = timeout_ms / 1000.0
    wanted = {"socket_timeout": timeout, "socket_connect_timeout": timeout,
              "retry_on_timeout": False, "retry_on_error": [], "retry": None,
              "health_check_interval": 0}
    accepted = inspect.signature(pool.connection_class.__init__).parameters
    kwargs.update({k: v for k, v in wanted.items() if k in accepted})
    return kwargs


def _refuse_managed(client: Any, sentinel_pool: type) -> None:
    """Refuse a client that follows a Sentinel or Cluster topology by itself.

    Such a client switches servers on its own: after a failover a reply may
    come from a master that was demoted, and a grant or a release there is
    not one of the named master (a lease reported released while the key
    stays on the new master; two holders at once). This mode talks to one
    server and cannot tell; the C edition checks the server's role after
    every switch and waits for replicas (lease_fence.redis_sentinels,
    lease_fence.redis_cluster)."""
    if isinstance(getattr(client, "connection_pool", None), sentinel_pool):
        raise TypeError("a Sentinel-managed client (Sentinel.master_for()) is not supported by the "
                        "client-side mode: after a failover it may answer from a demoted master; "
                        "take leases with the C edition (lease_fence.redis_sentinels), or give a "
                        "client of one Redis server")


class _Settings:
    def __init__(self, key_prefix: str, gen_key_ttl_s: int, cleanup_timeout_ms: int) -> None:
        self.key_prefix = _check_prefix(key_prefix)
        ttl = _check_int("gen_key_ttl_s", gen_key_ttl_s)
        if ttl < 0 or ttl > INT_MAX:
            raise ValueError(f"gen_key_ttl_s must be between 0 and {INT_MAX}, got {ttl}")
        self.gen_key_ttl_s = ttl
        cto = _check_int("cleanup_timeout_ms", cleanup_timeout_ms)
        if cto <= 0:
            raise ValueError(f"cleanup_timeout_ms must be positive, got {cto}")
        self.cleanup_timeout_ms = cto

    def _keys(self, resource: str) -> Tuple[bytes, bytes]:
        return (_key(self.key_prefix, resource, False).encode("utf-8"),
                _key(self.key_prefix, resource, True).encode("utf-8"))

    def _plan(self, resource: str, ttl_ms: int, min_validity_ms: int, wait_ms: int,
              stale_retries: int,
              fair: object = False) -> Generator[Tuple[Any, ...], Any, ClientSideLease]:
        """The checked arguments' plan (ValueError / TypeError before anything)."""
        _check_not_fair(fair)
        resource = _check_resource(resource)
        ttl = _check_ttl(ttl_ms)
        minv = _check_min_validity(min_validity_ms, ttl)
        wait = _check_wait(wait_ms)
        return _acquire_plan(resource, ttl, minv, wait, stale_retries, self.gen_key_ttl_s)


# --------------------------------------------------------------------------
# The API
# --------------------------------------------------------------------------

class ClientSideLeases(_Settings):
    """Leases taken by this process in Redis, generations drawn from the database.

    ``client`` is a sync ``redis.Redis`` of one server (a Sentinel-managed or
    cluster client is refused: see ``_refuse_managed``); give it a
    ``socket_timeout`` (and ``socket_connect_timeout``): without one a
    request to a stalled Redis waits for ever, with one a request that
    times out is ``unknown``. Its retry settings are not used (a request is
    never sent twice: the scripts are run here, one request per attempt).

    ``key_prefix`` must be the C edition's ``lease_fence.key_prefix`` when
    both take leases on the same resources (default ``'lease_fence:'``).
    ``gen_key_ttl_s``: the generation key's TTL (``0``: none), as
    ``lease_fence.gen_key_ttl_s``. ``cleanup_timeout_ms``: how long the
    conditional release after an unknown acquire may take.

    The methods take the arguments of the module's functions;
    ``acquire`` / ``try_acquire`` draw generations on ``conn`` (a psycopg 3
    connection, a SQLAlchemy Connection / Session or a Django connection;
    each draw a statement of its own, alone under autocommit, else in a
    transaction of its own: ``conn`` must not be in one);
    ``renew`` and ``release`` talk to Redis only (``conn`` is not used; it
    may be None).
    """

    def __init__(self, client: Any, key_prefix: str = DEFAULT_KEY_PREFIX,
                 gen_key_ttl_s: int = DEFAULT_GEN_KEY_TTL_S,
                 cleanup_timeout_ms: int = DEFAULT_CLEANUP_TIMEOUT_MS) -> None:
        if not isinstance(client, redis.Redis):
            raise TypeError(f"expected a redis.Redis client, got {type(client).__name__} "
                            f"(redis.asyncio.Redis: use AsyncClientSideLeases; a Redis Cluster "
                            f"client is not supported)")
        _refuse_managed(client, redis.sentinel.SentinelConnectionPool)
        super().__init__(key_prefix, gen_key_ttl_s, cleanup_timeout_ms)
        self.client = client

    # ---------------------------------------------------------------- Redis

    def _run(self, script: Script, keys: Sequence[bytes], args: Sequence[bytes]) -> Answer:
        """On a connection of the client's pool (or its single connection)."""
        own = self.client.connection
        if own is not None:
            return _run_on(own, script, keys, args)
        pool = self.client.connection_pool
        try:
            conn = _get_connection(pool)                # connects: nothing of ours sent yet
        except Exception as e:
            return transport("not_sent", f"could not connect to Redis: {_describe(e)}")
        try:
            return _run_on(conn, script, keys, args)
        finally:
            pool.release(conn)

    def _cleanup(self, resource: str, identity: str) -> str:
        """The bounded conditional release after an unknown acquire: release.lua
        with that identity, once, on a fresh connection (the one that lost
        the answer may still deliver it late). Never a plain DEL."""
        pool = self.client.connection_pool
        try:
            conn = pool.connection_class(**_fresh_kwargs(pool, self.cleanup_timeout_ms))
        except Exception:
            return "unconfirmed"
        try:
            return _cleanup_result(_run_on(conn, SCRIPTS["release"], self._keys(resource)[:1],
                                           (identity.encode(), b"PUBLISH")))
        finally:
            try:
                conn.disconnect()
            except Exception:
                pass

    # ---------------------------------------------------------------- acquire

    def _acquire(self, conn: Any, resource: str, ttl_ms: int, min_validity_ms: int,
                 wait_ms: int, stale_retries: int, fair: object) -> ClientSideLease:
        plan = self._plan(resource, ttl_ms, min_validity_ms, wait_ms, stale_retries, fair)
        db = _adapter(conn)
        keys = self._keys(resource)
        answer: Any = None
        try:
            while True:
                req = plan.send(answer)
                if req[0] == "draw":
                    answer = _drawn(db.own(_DRAW_SQL) if req[1] is None else
                                    db.own(_DRAW_ABOVE_SQL, {"above": req[1]}))
                elif req[0] == "acquire":
                    try:
                        answer = self._run(SCRIPTS["acquire"], keys, req[2])
                    except BaseException:   # interrupted: maybe applied; release it, bounded
                        self._cleanup(resource, req[1])
                        raise
                elif req[0] == "cleanup":
                    answer = self._cleanup(resource, req[1])
                else:
                    time.sleep(req[1])
                    answer = None
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        finally:
            plan.close()

    def try_acquire(self, conn: Any, resource: str, ttl_ms: int, *, min_validity_ms: int = 0,
                    wait_ms: int = 0, retry_stale: bool = True,
                    fair: bool = False) -> Optional[ClientSideLease]:
        """``acquire``, but **None** when the lease is busy (``wait_ms`` > 0:
        still busy at the deadline); every other outcome as ``acquire``: the
        lease, or LeaseUnavailable, LeaseDenied (stale, insufficient_validity),
        LeaseUnknown (``e.lease.cleanup``)."""
        return _try_acquired(self._acquire(conn, resource, ttl_ms, min_validity_ms, wait_ms,
                                           MAX_STALE_RETRIES if retry_stale else 0, fair))

    def acquire(self, conn: Any, resource: str, ttl_ms: int, *, min_validity_ms: int = 0,
                retry_stale: bool = True, wait_ms: int = 0,
                fair: bool = False) -> ClientSideLease:
        """Take the lease and return it, or raise: LeaseBusy, LeaseUnavailable,
        LeaseDenied (stale, insufficient_validity), LeaseUnknown (``e.lease``
        is the ClientSideLease, its ``cleanup`` says whether the conditional
        release that followed was confirmed). ``stale`` is healed (a
        generation above the stored one, drawn with
        ``next_generation(above)``) and tried again, at most 3 times;
        ``retry_stale=False``: healed but not tried again. ``wait_ms`` > 0
        polls a busy (or unreachable) lease until then. Release it yourself.
        A generation key that holds no generation raises DataCorrupted
        (SQLSTATE XX001 in the C edition): delete the key. ``fair=True`` is
        refused (ValueError, nothing sent): this mode has no fair waiting."""
        return _acquired(self._acquire(conn, resource, ttl_ms, min_validity_ms, wait_ms,
                                       MAX_STALE_RETRIES if retry_stale else 0, fair))

    # ---------------------------------------------------------------- renew, release

    def renew(self, conn: Any, lease: Lease, ttl_ms: int, *, min_validity_ms: int = 0) -> int:
        """Extend the lease to ``ttl_ms`` if it still holds its identity (renew.lua);
        returns the validity in ms. LeaseLost (gone or someone else's: never
        recreated), LeaseDenied (insufficient_validity), LeaseUnavailable,
        LeaseUnknown. ``conn`` is not used."""
        resource, identity = _check_lease(lease)
        ttl = _check_ttl(ttl_ms)
        minv = _check_min_validity(min_validity_ms, ttl)
        start = time.monotonic()
        out = self._run(SCRIPTS["renew"], self._keys(resource)[:1],
                        (identity.encode(), str(ttl).encode()))
        validity = _validity_after(ttl, int((time.monotonic() - start) * 1000))
        return _renew_result(out, lease, resource, minv, validity)

    def release(self, conn: Any, lease: Lease) -> ReleaseStatus:
        """Release the lease if it still holds its identity (release.lua, which
        wakes waiters): ``released``, ``not_held``, ``unavailable`` or
        ``unknown`` (a ReleaseStatus; ``reason`` for the last two). Never
        raises for an outcome. ``conn`` is not used."""
        resource, identity = _check_lease(lease)
        return _release_result(self._run(SCRIPTS["release"], self._keys(resource)[:1],
                                         (identity.encode(), b"PUBLISH")))


class AsyncClientSideLeases(_Settings):
    """``ClientSideLeases`` for asyncio: a ``redis.asyncio.Redis`` client, and
    for ``conn`` what ``lease_fence.aio`` takes (psycopg ``AsyncConnection``,
    SQLAlchemy ``AsyncConnection`` / ``AsyncSession``). The same methods as
    coroutines, the same outcomes. Fence writes with ``lease_fence.aio.fenced``."""

    def __init__(self, client: Any, key_prefix: str = DEFAULT_KEY_PREFIX,
                 gen_key_ttl_s: int = DEFAULT_GEN_KEY_TTL_S,
                 cleanup_timeout_ms: int = DEFAULT_CLEANUP_TIMEOUT_MS) -> None:
        import redis.asyncio
        if not isinstance(client, redis.asyncio.Redis):
            raise TypeError(f"expected a redis.asyncio.Redis client, got "
                            f"{type(client).__name__} (redis.Redis: use ClientSideLeases; a "
                            f"Redis Cluster client is not supported)")
        import redis.asyncio.sentinel
        _refuse_managed(client, redis.asyncio.sentinel.SentinelConnectionPool)
        super().__init__(key_prefix, gen_key_ttl_s, cleanup_timeout_ms)
        self.client = client

    async def _run(self, script: Script, keys: Sequence[bytes],
                   args: Sequence[bytes]) -> Answer:
        own = self.client.connection
        if own is not None:
            return await _arun_on(own, script, keys, args)
        pool = self.client.connection_pool
        try:
            conn = await _get_connection(pool)
        except Exception as e:
            return transport("not_sent", f"could not connect to Redis: {_describe(e)}")
        try:
            return await _arun_on(conn, script, keys, args)
        finally:
            await pool.release(conn)

    async def _cleanup(self, resource: str, identity: str) -> str:
        import asyncio

        pool = self.client.connection_pool
        try:
            conn = pool.connection_class(**_fresh_kwargs(pool, self.cleanup_timeout_ms))
        except Exception:
            return "unconfirmed"
        try:
            # bounded as a whole: redis.asyncio's connection set-up (the
            # CLIENT SETINFO of redis-py 5 and later) does not always honour
            # the socket timeouts
            return _cleanup_result(await asyncio.wait_for(
                _arun_on(conn, SCRIPTS["release"], self._keys(resource)[:1],
                         (identity.encode(), b"PUBLISH")),
                self.cleanup_timeout_ms / 1000.0))
        except asyncio.TimeoutError:
            return "unconfirmed"
        finally:
            try:
                await conn.disconnect()
            except Exception:
                pass

    async def _acquire(self, conn: Any, resource: str, ttl_ms: int, min_validity_ms: int,
                       wait_ms: int, stale_retries: int, fair: object) -> ClientSideLease:
        import asyncio

        from .aio import _adapter as _aio_adapter
        plan = self._plan(resource, ttl_ms, min_validity_ms, wait_ms, stale_retries, fair)
        db = _aio_adapter(conn)
        keys = self._keys(resource)
        answer: Any = None
        try:
            while True:
                req = plan.send(answer)
                if req[0] == "draw":
                    answer = _drawn(await db.own(_DRAW_SQL) if req[1] is None else
                                    await db.own(_DRAW_ABOVE_SQL, {"above": req[1]}))
                elif req[0] == "acquire":
                    try:
                        answer = await self._run(SCRIPTS["acquire"], keys, req[2])
                    except BaseException:   # cancelled: maybe applied; release it, bounded
                        await self._cleanup(resource, req[1])
                        raise
                elif req[0] == "cleanup":
                    answer = await self._cleanup(resource, req[1])
                else:
                    await asyncio.sleep(req[1])
                    answer = None
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        finally:
            plan.close()

    async def try_acquire(self, conn: Any, resource: str, ttl_ms: int, *,
                          min_validity_ms: int = 0, wait_ms: int = 0,
                          retry_stale: bool = True,
                          fair: bool = False) -> Optional[ClientSideLease]:
        """As ``ClientSideLeases.try_acquire``: None when busy."""
        return _try_acquired(await self._acquire(conn, resource, ttl_ms, min_validity_ms,
                                                 wait_ms,
                                                 MAX_STALE_RETRIES if retry_stale else 0, fair))

    async def acquire(self, conn: Any, resource: str, ttl_ms: int, *, min_validity_ms: int = 0,
                      retry_stale: bool = True, wait_ms: int = 0,
                      fair: bool = False) -> ClientSideLease:
        """As ``ClientSideLeases.acquire``."""
        return _acquired(await self._acquire(conn, resource, ttl_ms, min_validity_ms, wait_ms,
                                             MAX_STALE_RETRIES if retry_stale else 0, fair))

    async def renew(self, conn: Any, lease: Lease, ttl_ms: int, *, min_validity_ms: int = 0) -> int:
        """As ``ClientSideLeases.renew``."""
        resource, identity = _check_lease(lease)
        ttl = _check_ttl(ttl_ms)
        minv = _check_min_validity(min_validity_ms, ttl)
        start = time.monotonic()
        out = await self._run(SCRIPTS["renew"], self._keys(resource)[:1],
                              (identity.encode(), str(ttl).encode()))
        validity = _validity_after(ttl, int((time.monotonic() - start) * 1000))
        return _renew_result(out, lease, resource, minv, validity)

    async def release(self, conn: Any, lease: Lease) -> ReleaseStatus:
        """As ``ClientSideLeases.release``."""
        resource, identity = _check_lease(lease)
        return _release_result(await self._run(SCRIPTS["release"], self._keys(resource)[:1],
                                               (identity.encode(), b"PUBLISH")))

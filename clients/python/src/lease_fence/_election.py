"""Leader election (``lease_fence.campaign`` / ``renew`` / ``resign``) and
``take_over``: the synchronous API, and what the async one shares with it
(the SQL, the argument checks, the heartbeat's bookkeeping, the errors).

``leadership(conn, election, ttl_ms, value=...)`` campaigns on ``conn`` (it
blocks until it wins), renews the election's lease from a background thread
on that same connection every ttl_ms / 3 — the process's heartbeat: the
server never renews it on its own, so a frozen process loses the election
once the lease runs out — and resigns at the end. ``conn`` is dedicated to
the election for the block; the block's work runs on other connections,
through ``lead.fenced(work_conn)``.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, Mapping, Optional, TypeVar

from ._errors import (Lease, LeadershipLost, LeaseUnavailable, LeaseUnknown, TakeOverTimeout,
                      _acquired, _driver_error, _lease_from_row, _sqlstate)
from ._sync import RENEW_SQL, _adapter, _Adapter, _check_fair, _one_server_session, fenced

__all__ = ["Leadership", "leadership", "take_over"]

C = TypeVar("C")

CAMPAIGN_SQL = ("SELECT status, identity, term, validity_ms, reason "
                "FROM lease_fence.campaign(CAST(%(election)s AS text), "
                "CAST(%(ttl_ms)s AS bigint), CAST(%(wait_ms)s AS bigint), "
                "CAST(%(value)s AS text), CAST(%(scope)s AS text), "
                "CAST(%(fair)s AS boolean))")
RESIGN_SQL = ("SELECT released, status, reason FROM lease_fence.resign("
              "CAST(%(election)s AS text), CAST(%(identity)s AS text))")
TAKE_OVER_SQL = ("SELECT acquired, status, resource, identity, generation, validity_ms, reason "
                 "FROM lease_fence.take_over(CAST(%(resource)s AS text), "
                 "CAST(%(ttl_ms)s AS bigint), CAST(%(timeout_ms)s AS bigint), "
                 "CAST(%(scope)s AS text))")

# the C edition's limits: LF_MAX_RESOURCE, a campaign value, the acquire's TTL bound
MAX_RESOURCE_BYTES = 1024
MAX_VALUE_BYTES = 1024
MAX_TTL_MS = 1000 * 60 * 60 * 24 * 365 * 100
MAX_BIGINT = 2 ** 63 - 1


# --------------------------------------------------------------------------
# Arguments: checked before anything is sent
# --------------------------------------------------------------------------

def _check_int(name: str, value: object, low: int, high: int = MAX_BIGINT) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} is an int, got {type(value).__name__}")
    if value < low or value > high:
        raise ValueError(f"{name} must be between {low} and {high}, got {value}")
    return value


def _check_name(what: str, name: object) -> str:
    if not isinstance(name, str):
        raise TypeError(f"{what} is a str, got {type(name).__name__}")
    if name == "":
        raise ValueError(f"{what} must not be empty")
    if "\x00" in name:
        raise ValueError(f"{what} must not contain NUL")
    n = len(name.encode("utf-8"))
    if n > MAX_RESOURCE_BYTES:
        raise ValueError(f"{what} is too long: it has {n} bytes; the limit is "
                         f"{MAX_RESOURCE_BYTES}")
    return name


def _campaign_params(election: object, ttl_ms: object, value: object, wait_ms: object,
                     scope: object, fair: object = False) -> Dict[str, Any]:
    _check_name("election", election)
    _check_int("ttl_ms", ttl_ms, 1, MAX_TTL_MS)
    if value is not None:
        if not isinstance(value, str):
            raise TypeError(f"value is a str or None, got {type(value).__name__}")
        if "\x00" in value:
            raise ValueError("value must not contain NUL")
        n = len(value.encode("utf-8"))
        if n > MAX_VALUE_BYTES:
            raise ValueError(f"value is too long: it has {n} bytes; the limit is "
                             f"{MAX_VALUE_BYTES}")
    if wait_ms is not None:
        _check_int("wait_ms", wait_ms, 0)
    if scope not in ("session", "explicit"):
        raise ValueError(f"scope is 'session' or 'explicit', got {scope!r}")
    return {"election": election, "ttl_ms": ttl_ms, "wait_ms": wait_ms, "value": value,
            "scope": scope, "fair": _check_fair(fair)}


def _take_over_params(resource: object, ttl_ms: object, timeout_ms: object,
                      scope: object) -> Dict[str, Any]:
    _check_name("resource", resource)
    _check_int("ttl_ms", ttl_ms, 1, MAX_TTL_MS)
    _check_int("timeout_ms", timeout_ms, 0)
    if scope not in ("explicit", "session"):
        raise ValueError(f"scope is 'explicit' or 'session', got {scope!r}")
    return {"resource": resource, "ttl_ms": ttl_ms, "timeout_ms": timeout_ms, "scope": scope}


# --------------------------------------------------------------------------
# Answers
# --------------------------------------------------------------------------

def _campaign_lease(election: str, row: Mapping[str, Any]) -> Lease:
    """A campaign row as the election's Lease (generation: the term)."""
    status = row["status"]
    acquired: Optional[bool] = (True if status == "acquired"
                                else None if status == "unknown" else False)
    return Lease(acquired=acquired, status=status, resource=election, identity=row["identity"],
                 generation=row["term"], validity_ms=row["validity_ms"], reason=row["reason"])


def _take_over_error(exc: BaseException, resource: str) -> Optional[Exception]:
    """The library's error for take_over's ERROR, or None (raise it as it is:
    42501, 22023 and the rest stay the driver's)."""
    err = _driver_error(exc)
    state = _sqlstate(err) if err is not None else None
    text = str(err if err is not None else exc).strip().splitlines()
    why = text[0] if text else None
    if state == "55P03":
        return TakeOverTimeout("timeout", None, f"take_over of {resource!r}: a transaction that "
                                                f"fenced it did not end in time; nothing taken",
                               why)
    if state == "08006":
        return LeaseUnavailable("unavailable", None, f"take_over of {resource!r}: unavailable",
                                why)
    if state == "08007":
        return LeaseUnknown("unknown", None, f"take_over of {resource!r}: unknown", why)
    return None


# --------------------------------------------------------------------------
# The leadership's state: shared by the sync and the async heartbeat
# --------------------------------------------------------------------------

def _leader_state(won: Lease, value: Optional[str], ttl_ms: int) -> "_LeaderState":
    """The state of a won campaign. Its first deadline counts the validity
    from the answer's arrival (a campaign waits: its send time says nothing):
    later than the lease's end by the answer's way back at most, which the
    validity's drift allowance (ttl / 100 + 2 ms) covers; the heartbeat's
    first renew, sent at once, replaces it with a bound from its send time."""
    assert won.identity is not None and won.generation is not None
    return _LeaderState(won.resource, won.identity, won.generation, value, ttl_ms,
                        time.monotonic() + (won.validity_ms or 0) / 1000.0)


class _LeaderState:
    """The term, the lease's validity as the client knows it, and the loss.

    ``deadline`` (time.monotonic()) is when the lease runs out unless a renew
    is confirmed before: the moment the last confirmed request (the campaign,
    then each renew) was *sent*, plus the validity it answered — the lease
    was granted or extended after that moment, so it lives at least that
    long. Past the deadline without a confirmed renew, the leadership is
    lost, whether or not anything answered.
    """

    def __init__(self, election: str, identity: str, term: int, value: Optional[str],
                 ttl_ms: int, deadline: float) -> None:
        self.election = election
        self.identity = identity
        self.term = term
        self.value = value
        self.ttl_ms = ttl_ms
        self.deadline = deadline
        self.lost_reason: Optional[str] = None

    def lease(self) -> Lease:
        return Lease(acquired=True, status="acquired", resource=self.election,
                     identity=self.identity, generation=self.term, validity_ms=None)

    def expired(self) -> bool:
        return time.monotonic() >= self.deadline

    def error(self) -> LeadershipLost:
        return LeadershipLost("lost", self.lease(), f"leadership of {self.election!r} (term "
                                                    f"{self.term}) is lost: "
                                                    f"{self.lost_reason or 'lost'}")

    def renewed(self, sent: float, row: Optional[Mapping[str, Any]],
                failure: Optional[BaseException]) -> Optional[str]:
        """One renew's outcome: moves the deadline on when renewed; the loss's
        reason when the leadership is lost, else None (not confirmed:
        unavailable, unknown, unreplicated, an error; tried again until the
        deadline)."""
        if row is not None and row["renewed"] is True and row["status"] == "renewed":
            self.deadline = sent + int(row["validity_ms"]) / 1000.0
            return None
        if row is not None and row["status"] in ("lost", "insufficient_validity"):
            return f"renew answered {row['status']}"
        if self.expired():
            why = (f"renew answered {row['status']}" if row is not None
                   else f"renew failed: {failure!r}")
            return f"no renew was confirmed before the lease ran out ({why})"
        return None


# --------------------------------------------------------------------------
# Sync
# --------------------------------------------------------------------------

class Leadership:
    """The leadership ``leadership()`` won, for the ``with`` block.

    ``election``, ``identity``, ``term`` (the generation the election's
    lease was granted with: it fences the leader's writes), ``value`` (shown
    by ``lease_fence.leader``), ``ttl_ms``. ``lost`` is a threading.Event,
    set once the leadership is lost (a renew answered ``lost`` or
    ``insufficient_validity``, or no renew was confirmed before the lease's
    validity ran out); ``lost_reason`` says why. ``check()`` raises
    LeadershipLost once it is (it also reads the validity itself, so a
    process that was frozen learns it at once on waking). ``fenced(conn)``:
    one transaction on ``conn`` (another connection than the election's)
    whose writes carry the term and check the election's resource fence.
    """

    def __init__(self, state: _LeaderState, conn: Any) -> None:
        self._state = state
        self._conn = conn
        self._lock = threading.Lock()
        self.lost = threading.Event()

    @property
    def election(self) -> str:
        return self._state.election

    @property
    def identity(self) -> str:
        return self._state.identity

    @property
    def term(self) -> int:
        """The generation of the election's lease: this leader's term."""
        return self._state.term

    @property
    def value(self) -> Optional[str]:
        return self._state.value

    @property
    def ttl_ms(self) -> int:
        return self._state.ttl_ms

    @property
    def lost_reason(self) -> Optional[str]:
        """Why the leadership was lost; None while it is not."""
        return self._state.lost_reason

    def __repr__(self) -> str:
        return (f"Leadership(election={self.election!r}, term={self.term}, "
                f"identity={self.identity!r}, lost={self.lost.is_set()})")

    def _lose(self, reason: str) -> None:
        with self._lock:
            if self._state.lost_reason is None:
                self._state.lost_reason = reason
        self.lost.set()

    def check(self) -> None:
        """Raise LeadershipLost if the leadership is lost (or its lease's
        validity ran out without a confirmed renew)."""
        if not self.lost.is_set() and self._state.expired():
            self._lose("no renew was confirmed before the lease ran out")
        if self.lost.is_set():
            raise self._state.error()

    @contextmanager
    def fenced(self, conn: C) -> Iterator[C]:
        """``lease_fence.fenced(conn, lead.term, lead.election)``, checked.

        LeadershipLost before BEGIN if the leadership is lost, and before
        COMMIT if it was lost while the block ran (rolled back). A newer
        leader's term in the election's resource fence raises
        StaleGeneration (LF001) before the block runs; the resource fence is
        held to COMMIT, so a newer leader's win waits for this transaction.
        ``conn`` must be another connection than the election's.
        """
        if conn is self._conn:
            raise ValueError("lead.fenced needs another connection than the election's: that "
                             "one is dedicated to the election (its heartbeat)")
        self.check()
        with fenced(conn, self._state.term, self._state.election) as c:
            yield c
            self.check()


class _Heartbeat:
    """renew every ttl_ms / 3 on the election's connection (one thread), and
    the loss at the deadline (another: a renew that hangs does not hold the
    loss back)."""

    def __init__(self, lead: Leadership, db: _Adapter) -> None:
        self.lead = lead
        self.db = db
        self.stop_event = threading.Event()
        self.cond = threading.Condition()
        state = lead._state
        self.interval = max(state.ttl_ms / 3.0, 1.0) / 1000.0
        self.params = {"resource": state.election, "identity": state.identity,
                       "ttl_ms": state.ttl_ms, "min_validity_ms": 0}
        self.threads = [threading.Thread(target=self._beat, daemon=True,
                                         name=f"lease_fence heartbeat {state.election}"),
                        threading.Thread(target=self._watch, daemon=True,
                                         name=f"lease_fence deadline {state.election}")]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def stop(self) -> None:
        self.stop_event.set()
        with self.cond:
            self.cond.notify_all()
        for t in self.threads:
            t.join()

    def _beat(self) -> None:
        lead, state = self.lead, self.lead._state
        wait = 0.0      # the first renew at once: its send time bounds the lease from below
        while not self.stop_event.wait(wait):
            wait = self.interval
            if lead.lost.is_set():
                return
            sent = time.monotonic()
            row: Optional[Dict[str, Any]] = None
            failure: Optional[BaseException] = None
            try:
                row = self.db.alone(RENEW_SQL, self.params)
            except Exception as exc:        # noqa: BLE001 - not confirmed; tried again
                failure = exc
            if self.stop_event.is_set():
                return
            with self.cond:
                lost = state.renewed(sent, row, failure)
                self.cond.notify_all()
            if lost is not None:
                lead._lose(lost)
                return

    def _watch(self) -> None:
        lead, state = self.lead, self.lead._state
        with self.cond:
            while not self.stop_event.is_set() and not lead.lost.is_set():
                left = state.deadline - time.monotonic()
                if left <= 0:
                    break
                self.cond.wait(left)
        if not self.stop_event.is_set() and not lead.lost.is_set():
            lead._lose("no renew was confirmed before the lease ran out")


def _campaign(election: str, params: Mapping[str, Any],
              query: Callable[[Mapping[str, Any]], Dict[str, Any]]) -> Lease:
    """campaign (stale retried once): the won Lease, or the campaign's LeaseError."""
    won = _campaign_lease(election, query(params))
    if won.status == "stale":
        won = _campaign_lease(election, query(params))
    return _acquired(won)


def _thread_sharing(conn: Any, on: bool) -> None:
    """Django: a connection used by the heartbeat's thread must allow it."""
    name = "inc_thread_sharing" if on else "dec_thread_sharing"
    if type(conn).__module__.startswith("django.db.backends") and hasattr(conn, name):
        getattr(conn, name)()


@contextmanager
def leadership(conn: Any, election: str, ttl_ms: int, *, value: Optional[str] = None,
               wait_ms: Optional[int] = None, scope: str = "session",
               fair: bool = False) -> Iterator[Leadership]:
    """Lead ``election`` for the ``with`` block: campaign, heartbeat, resign.

    ``with lease_fence.leadership(conn, "scheduler", ttl_ms=3000, value="host-a") as lead:``

    ``conn`` is dedicated to the election for the block (as etcd's election
    session): ``lease_fence.campaign`` runs on it and blocks until this
    candidate wins (``wait_ms``: at most that long, then LeaseBusy; None:
    until it wins or the statement is cancelled); ``unavailable``,
    ``unknown`` and ``unreplicated`` raise as ``acquire`` does (LeaseUnavailable,
    LeaseUnknown, LeaseDenied), ``stale`` is retried once. Then a background
    thread renews the election's lease on ``conn`` every ttl_ms / 3
    (``lease_fence.renew``): leadership lives while this process heartbeats;
    a frozen process stops renewing and loses it once the TTL runs out, and
    another candidate wins. Run the block's work on other connections,
    through ``lead.fenced(work_conn)``: its writes carry the term and are
    refused once a newer leader won (StaleGeneration), or before they are
    sent once this one knows it lost (LeadershipLost).

    ``lead.lost`` (a threading.Event) is set once the leadership is lost: a
    renew answered ``lost`` / ``insufficient_validity``, or no renew was
    confirmed before the lease's validity ran out; the heartbeat stops then.
    At the end the heartbeat stops and ``lease_fence.resign`` hands the
    election on at once; if the block ended normally but the leadership was
    lost (or resign found it no longer held), LeadershipLost is raised
    there. ``scope``: 'session' (the lease also ends with the server session)
    or 'explicit' (behind a transaction pooler: kept until resign or the
    TTL). ``fair=True``: the campaign waits in the election's queue and
    candidates win in the order they came (``lease_fence.campaign(...,
    fair => true)``). Arguments are checked before anything is sent
    (TypeError, ValueError).
    """
    params = _campaign_params(election, ttl_ms, value, wait_ms, scope, fair)
    _one_server_session(conn)
    db = _adapter(conn)
    won = _campaign(election, params, lambda p: db.own(CAMPAIGN_SQL, p))
    state = _leader_state(won, value, ttl_ms)
    lead = Leadership(state, conn)
    _thread_sharing(conn, True)
    beat = _Heartbeat(lead, db)
    try:
        beat.start()
        try:
            yield lead
        except BaseException:
            beat.stop()
            try:
                db.own(RESIGN_SQL, {"election": election, "identity": state.identity})
            except Exception:
                pass
            raise
        beat.stop()
        row = db.own(RESIGN_SQL, {"election": election, "identity": state.identity})
        if row["status"] == "not_held":
            lead._lose("resign found the election no longer held")
        lead.check()
    finally:
        beat.stop_event.set()
        _thread_sharing(conn, False)


def take_over(conn: Any, resource: str, ttl_ms: int, *, timeout_ms: int = 5000,
              scope: str = "explicit") -> Lease:
    """Take ``resource``'s lease whether or not someone holds it (operators, supervisors).

    ``lease_fence.take_over``: a new generation above every one granted for
    the resource, and the resource's fence raised to it; the holder's renew
    then answers ``lost``, its later fenced writes are refused. Returns the
    Lease (release it yourself; ``scope`` 'explicit' or 'session'). Raises
    TakeOverTimeout (55P03) when a transaction that fenced the resource did
    not end within ``timeout_ms`` (nothing taken), LeaseUnavailable (08006),
    LeaseUnknown (08007: the server releases what it may have taken); a role
    without EXECUTE gets the driver's permission error (42501). Arguments are
    checked before anything is sent.
    """
    params = _take_over_params(resource, ttl_ms, timeout_ms, scope)
    db = _adapter(conn)
    try:
        row = db.alone(TAKE_OVER_SQL, params)
    except Exception as exc:
        mapped = _take_over_error(exc, resource)
        if mapped is None:
            raise
        raise mapped from exc
    return _acquired(_lease_from_row(row))

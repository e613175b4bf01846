"""What a reply of a lease_fence Redis script means: the one decoder of the
client-side mode (sync and async), following the repository's answer table,
``scripts/answers.json``, row by row; the unit tests read that file.

``decode(script, reply)`` takes what redis-py hands over for one script run
(an int, bytes or str, None, a list — or the error reply, as the exception
redis-py made of it) and returns an ``Answer``: its ``outcome`` and the
fields that outcome names. Every reply the table does not list is
``unknown``. ``transport(request, why)`` is the answer to a request that got
no reply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

__all__ = ["Answer", "SCRIPTS", "decode", "decode_error", "error_text", "transport",
           "parse_generation", "UNAVAILABLE_CODES"]

SCRIPTS = ("acquire", "renew", "release", "check", "claim", "takeover")

# Error codes (the first word of an error reply) Redis answers before running
# any of a script: nothing applied. NOSCRIPT is its own outcome (send EVAL).
# Every other code is unknown: a script may have written before it failed.
UNAVAILABLE_CODES = frozenset((
    "LOADING", "BUSY", "NOAUTH", "NOPERM", "WRONGPASS", "READONLY", "MASTERDOWN", "OOM",
    "MISCONF", "CLUSTERDOWN", "MOVED", "ASK", "TRYAGAIN", "CROSSSLOT", "NOREPLICAS"))

BIGINT_MAX = 2 ** 63 - 1


@dataclass(frozen=True)
class Answer:
    """One decoded reply. ``outcome`` is a name of the table's ``outcomes``;
    ``generation`` (acquired), ``stored`` (stale), ``pttl_ms`` (busy, held;
    None when the reply gave no usable hint) and ``value`` (claim, takeover)
    are set for the outcomes that name them; ``reason`` says why, for
    humans, for unavailable, unknown, noscript and corrupt."""

    outcome: str
    generation: Optional[int] = None
    stored: Optional[int] = None
    pttl_ms: Optional[int] = None
    value: Optional[str] = None
    reason: Optional[str] = None


def parse_generation(value: object) -> Optional[int]:
    """A generation as a script carries it: decimal digits, no sign, no
    leading zero, at most the largest bigint; else None."""
    if isinstance(value, bytes):
        try:
            value = value.decode("ascii")
        except UnicodeDecodeError:
            return None
    if not isinstance(value, str) or not value.isascii() or not value.isdigit() or \
            len(value) > 19 or (value[0] == "0" and len(value) > 1):
        return None
    g = int(value)
    return g if g <= BIGINT_MAX else None


def _pttl(value: object) -> Optional[int]:
    """A busy answer's PTTL (a string): its milliseconds, None for -1 (no
    expiry) and anything that is no count."""
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    return None


def _int(reply: object) -> Optional[int]:
    """An integer reply (redis-py: int; never a bool)."""
    return reply if isinstance(reply, int) and not isinstance(reply, bool) else None


def _text(reply: object) -> Optional[str]:
    """A bulk string reply (redis-py: bytes, or str with decode_responses)."""
    if isinstance(reply, bytes):
        return reply.decode("utf-8", "replace")
    return reply if isinstance(reply, str) else None


def _pair(reply: object) -> Tuple[Optional[int], Optional[object]]:
    """{integer, bulk}: the code and the (raw) string, else (None, None)."""
    if isinstance(reply, list) and len(reply) == 2 and _int(reply[0]) is not None and \
            isinstance(reply[1], (bytes, str)):
        return reply[0], reply[1]
    return None, None


def _unknown(script: str, reply: object) -> Answer:
    return Answer("unknown", reason=f"unexpected reply to the {script} script: {reply!r}")


def decode(script: str, reply: Any) -> Answer:
    """The Answer of ``script``'s reply (an error reply as the exception redis-py made)."""
    if script not in SCRIPTS:
        raise ValueError(f"no such script: {script!r}")
    if isinstance(reply, BaseException):
        text = error_text(reply)
        if text is None:
            raise TypeError(f"not an error reply: {reply!r}")
        return decode_error(text)
    if script == "acquire":
        code, raw = _pair(reply)
        if code == 1:
            g = parse_generation(raw)
            return Answer("acquired", generation=g) if g is not None else \
                _unknown(script, reply)
        if code == 0:
            return Answer("busy", pttl_ms=_pttl(raw))
        if code == 2:
            stored = parse_generation(raw)
            if stored is None:
                return Answer("corrupt", reason=f"the generation key holds {raw!r}, which is "
                                                f"no generation")
            return Answer("stale", stored=stored)
        return _unknown(script, reply)
    if script in ("renew", "release"):
        n = _int(reply)
        if n in (0, 1):
            return Answer({("renew", 1): "renewed", ("renew", 0): "lost",
                           ("release", 1): "released", ("release", 0): "not_held"}[script, n])
        return _unknown(script, reply)
    if script == "check":
        n = _int(reply)
        if n is not None and n >= -1:
            return Answer("held", pttl_ms=n if n >= 0 else None)
        if n in (-2, -3):
            return Answer("not_held")
        return _unknown(script, reply)
    if script == "claim":
        code, raw = _pair(reply)
        if code in (0, 1, 2):
            return Answer({2: "claimed", 1: "ours", 0: "others"}[code], value=_text(raw))
        return _unknown(script, reply)
    # takeover
    if reply is None:
        return Answer("taken_over")
    text = _text(reply)
    return Answer("taken_over", value=text) if text is not None else _unknown(script, reply)


def decode_error(text: str) -> Answer:
    """An error reply by its code, the first word, matched exactly."""
    code = text.split(" ", 1)[0]
    if code == "NOSCRIPT":
        return Answer("noscript", reason=f"Redis answered: {text}")
    if code in UNAVAILABLE_CODES:
        return Answer("unavailable", reason=f"Redis answered: {text}")
    if code == "LFOVERSIZED":
        # a script refused to return a stored value longer than lease_fence
        # ever writes: nothing was written, a person must look at the key
        return Answer("corrupt", reason=f"Redis answered: {text}")
    return Answer("unknown", reason=f"Redis answered: {text}")


def _parser_table() -> Dict[str, Any]:
    """redis-py's own table of the error codes it turns into exception
    classes (stripping the code from the message)."""
    # (by name: redis-py 5 and later, typed, have no BaseParser in
    # redis.connection; redis-py 4 has no redis._parsers)
    import importlib
    try:
        module = importlib.import_module("redis._parsers.base")    # redis-py 5
    except ImportError:
        module = importlib.import_module("redis.connection")       # redis-py 4
    table: Dict[str, Any] = module.BaseParser.EXCEPTION_CLASSES
    return table


def error_text(exc: BaseException) -> Optional[str]:
    """The text of the error reply redis-py made ``exc`` of ("CODE message"),
    or None when ``exc`` is no error reply (a timeout, a connection lost)."""
    from redis.exceptions import ResponseError
    message = str(exc.args[0]) if exc.args else ""
    table = _parser_table()
    errs = table.get("ERR")
    if isinstance(errs, dict) and errs.get(message) is type(exc):
        return f"ERR {message}"                  # one of the ERR texts it classes
    for code, cls in table.items():
        if cls is type(exc):
            return f"{code} {message}"           # the code it stripped, given back
    if isinstance(exc, ResponseError):
        return message                           # not classed: the whole text
    return None


def transport(request: str, why: str) -> Answer:
    """A request without a reply: ``not_sent`` (nothing left: unavailable),
    ``no_reply`` or ``interrupted`` (maybe ran: unknown)."""
    outcome = {"not_sent": "unavailable", "no_reply": "unknown",
               "interrupted": "unknown"}.get(request)
    if outcome is None:
        raise ValueError(f"no such request state: {request!r}")
    return Answer(outcome, reason=why)

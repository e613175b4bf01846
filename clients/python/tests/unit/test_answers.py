"""The answer table, row by row, without a server: scripts/answers.json.

Every ``replies`` and ``errors`` row is written as RESP bytes, read by
redis-py's own RESP2 parser (the objects redis-py really hands over: int,
bytes, None, list, or the error it makes of an error reply) and decoded by
``lease_fence._protocol.decode``, the client-side mode's one decoder; the
outcome and the fields the row names must match. ``transport`` rows: what a
request without a reply decodes as, and what the script runner does with
them. ``statuses`` rows: what acquire / try_acquire / renew / release do
with a row of that status (the SQL functions' rows, sync and aio, and a
client-side lease): return, None, or which exception.

The table is read at test time: LF_ANSWERS (a path), else $LF_SRC/scripts/,
else the repository this file sits in.
"""

from __future__ import annotations

import json
import os
import socket
import types
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest
import redis.exceptions

import lease_fence
from lease_fence import _errors, _protocol


def _answers_path() -> Path:
    if os.environ.get("LF_ANSWERS"):
        return Path(os.environ["LF_ANSWERS"])
    if os.environ.get("LF_SRC"):
        return Path(os.environ["LF_SRC"]) / "scripts" / "answers.json"
    return Path(__file__).resolve().parents[4] / "scripts" / "answers.json"


TABLE: Dict[str, Any] = json.loads(_answers_path().read_text(encoding="utf-8"))


def _row_id(row: Dict[str, Any]) -> str:
    return f"{row.get('script', row.get('operation', row.get('request', '')))}:" \
           f"{json.dumps(row.get('reply', row.get('status')), separators=(',', ':'))}"


# --------------------------------------------------------------------------
# RESP bytes, and redis-py's parser reading them
# --------------------------------------------------------------------------

def resp(reply: Dict[str, Any]) -> bytes:
    """The RESP2 bytes of a reply written as the table writes it."""
    (kind, value), = reply.items()
    if kind == "integer":
        return b":%d\r\n" % value
    if kind == "bulk":
        data = value.encode("utf-8")
        return b"$%d\r\n%s\r\n" % (len(data), data)
    if kind == "nil":
        return b"$-1\r\n"
    if kind == "status":
        return b"+%s\r\n" % value.encode("utf-8")
    if kind == "error":
        return b"-%s\r\n" % value.encode("utf-8")
    if kind == "array":
        return b"*%d\r\n" % len(value) + b"".join(resp(v) for v in value)
    raise ValueError(f"no such RESP type in the table: {kind}")


def _parser_class() -> Any:
    try:
        from redis._parsers.resp2 import _RESP2Parser     # redis-py 5
        return _RESP2Parser
    except ImportError:
        from redis.connection import PythonParser          # redis-py 4
        return PythonParser


def parsed(data: bytes) -> Any:
    """What redis-py hands over for these bytes: the object its RESP2 parser
    returns, or the exception for an error reply (returned or raised, as
    Connection.read_response raises it)."""
    a, b = socket.socketpair()
    try:
        a.sendall(data)
        a.shutdown(socket.SHUT_WR)
        conn = types.SimpleNamespace(_sock=b, socket_timeout=5.0, socket_connect_timeout=5.0,
                                     encoder=redis.connection.Encoder("utf-8", "strict", False))
        parser = _parser_class()(socket_read_size=65536)
        parser.on_connect(conn)
        try:
            reply = parser.read_response()
        except redis.exceptions.RedisError as e:          # raised error replies (LOADING, NOAUTH)
            return e
        finally:
            parser.on_disconnect()
        return reply
    finally:
        a.close()
        b.close()


def _expected_fields(row: Dict[str, Any]) -> Dict[str, Any]:
    out = {}
    for name in ("generation", "stored"):
        if name in row:
            out[name] = None if row[name] is None else int(row[name])
    for name in ("pttl_ms", "value"):
        if name in row:
            out[name] = row[name]
    return out


# --------------------------------------------------------------------------
# replies, errors
# --------------------------------------------------------------------------

@pytest.mark.parametrize("row", TABLE["replies"], ids=_row_id)
def test_reply(row: Dict[str, Any]) -> None:
    answer = _protocol.decode(row["script"], parsed(resp(row["reply"])))
    assert answer.outcome == row["outcome"], (row, answer)
    for name, want in _expected_fields(row).items():
        assert getattr(answer, name) == want, (name, row, answer)
    if answer.outcome not in ("acquired",):
        assert answer.generation is None, answer
    if answer.outcome != "stale":
        assert answer.stored is None, answer


@pytest.mark.parametrize("script", ["acquire", "renew", "release", "check"])
@pytest.mark.parametrize("row", TABLE["errors"], ids=_row_id)
def test_error(row: Dict[str, Any], script: str) -> None:
    reply = parsed(resp(row["reply"]))
    assert isinstance(reply, redis.exceptions.RedisError), reply
    answer = _protocol.decode(script, reply)
    assert answer.outcome == row["outcome"], (row, answer)
    assert _protocol.decode_error(row["reply"]["error"]).outcome == row["outcome"]


def test_every_outcome_decoded_is_in_the_table() -> None:
    names = set(TABLE["outcomes"])
    seen = {r["outcome"] for r in TABLE["replies"] + TABLE["errors"] + TABLE["transport"]}
    assert seen <= names, seen - names


# --------------------------------------------------------------------------
# transport, and the script runner: NOSCRIPT -> EVAL; EVAL answering NOSCRIPT
# --------------------------------------------------------------------------

@pytest.mark.parametrize("row", TABLE["transport"], ids=lambda r: r["request"])
def test_transport(row: Dict[str, Any]) -> None:
    assert _protocol.transport(row["request"], "why").outcome == row["outcome"]


class _Conn:
    """A redis-py connection's surface (connect, send_command,
    read_response, disconnect) whose replies are RESP bytes read by
    redis-py's parser; ``fail`` makes a step raise."""

    def __init__(self, replies: List[Dict[str, Any]],
                 fail: Optional[Dict[str, BaseException]] = None) -> None:
        self.replies = list(replies)
        self.fail = fail or {}
        self.sent: List[bytes] = []
        self.disconnected = False

    def connect(self) -> None:
        if "connect" in self.fail:
            raise self.fail["connect"]

    def check_health(self) -> None:
        pass

    def send_command(self, *args: Any, check_health: bool = True) -> None:
        self.sent.append(args[0])

    def read_response(self) -> Any:
        if "read" in self.fail:
            raise self.fail["read"]
        reply = parsed(resp(self.replies.pop(0)))
        if isinstance(reply, BaseException):
            raise reply
        return reply

    def disconnect(self) -> None:
        self.disconnected = True


def _client_side() -> Any:
    return pytest.importorskip("lease_fence.client_side",
                               reason="the package was built without its scripts")


def _reply_of(outcome: str, script: str = "release") -> Dict[str, Any]:
    return next(r["reply"] for r in TABLE["replies"]
                if r["script"] == script and r["outcome"] == outcome)


def _error_of(outcome: str) -> Dict[str, Any]:
    return next(r["reply"] for r in TABLE["errors"] if r["outcome"] == outcome)


def test_noscript_sends_eval() -> None:
    cs = _client_side()
    conn = _Conn([_error_of("noscript"), _reply_of("released")])
    out = cs._run_on(conn, cs.SCRIPTS["release"], [b"k"], [b"id", b"PUBLISH"])
    assert (out.outcome, conn.sent) == ("released", [b"EVALSHA", b"EVAL"])


def test_eval_answering_noscript_is_unavailable() -> None:
    cs = _client_side()
    conn = _Conn([_error_of("noscript"), _error_of("noscript")])
    out = cs._run_on(conn, cs.SCRIPTS["release"], [b"k"], [b"id", b"PUBLISH"])
    assert out.outcome == "unavailable", out        # EVAL carries the text: refused unrun
    assert conn.sent == [b"EVALSHA", b"EVAL"]


@pytest.mark.parametrize("row", TABLE["transport"], ids=lambda r: r["request"])
def test_runner_without_a_reply(row: Dict[str, Any]) -> None:
    """not_sent: connecting failed; no_reply: the read timed out; interrupted:
    the wait ended by KeyboardInterrupt (raised on, the connection closed)."""
    cs = _client_side()
    fail: Dict[str, BaseException] = {
        "not_sent": {"connect": redis.exceptions.ConnectionError("refused")},
        "no_reply": {"read": redis.exceptions.TimeoutError("Timeout reading from socket")},
        "interrupted": {"read": KeyboardInterrupt()},
    }[row["request"]]
    conn = _Conn([], fail)
    if row["request"] == "interrupted":
        with pytest.raises(KeyboardInterrupt):
            cs._run_on(conn, cs.SCRIPTS["renew"], [b"k"], [b"id", b"1000"])
        assert conn.disconnected        # never read again: a late reply is nobody's
        out = _protocol.transport("interrupted", "KeyboardInterrupt")
    else:
        out = cs._run_on(conn, cs.SCRIPTS["renew"], [b"k"], [b"id", b"1000"])
        assert conn.disconnected
    assert out.outcome == row["outcome"], out


# --------------------------------------------------------------------------
# the client-side acquire plan, fed decoded answers
# --------------------------------------------------------------------------

def _run_plan(answers: List[Dict[str, Any]]) -> Any:
    """Drive the acquire plan (no I/O): draws answer 42 (and above+1 to heal),
    acquire requests get the next reply decoded, cleanups 'confirmed'."""
    cs = _client_side()
    plan = cs._acquire_plan("r", 10000, 0, 0, 0, 0)
    answer: Any = None
    replies = list(answers)
    try:
        while True:
            req = plan.send(answer)
            if req[0] == "draw":
                answer = 42 if req[1] is None else req[1] + 1
            elif req[0] == "acquire":
                answer = _protocol.decode("acquire", parsed(resp(replies.pop(0))))
            elif req[0] == "cleanup":
                answer = "confirmed"
            else:
                answer = None
    except StopIteration as done:
        return done.value


@pytest.mark.parametrize("row", [r for r in TABLE["replies"] if r["script"] == "acquire"],
                         ids=_row_id)
def test_client_side_acquire_plan(row: Dict[str, Any]) -> None:
    """Each acquire reply, as the first answer to a plan that sent generation
    42: the lease's status (acquired only when the echo is 42; corrupt
    raises DataCorrupted, a RuntimeError)."""
    expected = {"acquired": "acquired", "busy": "busy", "stale": "stale",
                "unknown": "unknown", "corrupt": None}[row["outcome"]]
    if row["outcome"] == "acquired" and row["generation"] != "42":
        expected = "unknown"            # an echo of another generation: another request's
    if expected is None:
        with pytest.raises(lease_fence.DataCorrupted) as e:
            _run_plan([row["reply"]])
        assert isinstance(e.value, RuntimeError) and e.value.sqlstate == "XX001"
        assert "does not hold a generation" in str(e.value)
        return
    lease = _run_plan([row["reply"]])
    assert lease.status == expected, lease
    assert lease.acquired is {"acquired": True, "unknown": None}.get(expected, False)
    if expected == "unknown":
        assert lease.cleanup == "confirmed" and lease.identity is not None


@pytest.mark.parametrize("script", ["renew", "release"])
def test_client_side_renew_and_release_results(script: str) -> None:
    """renew / release: every reply of the table, through the result the
    client-side method returns or raises."""
    cs = _client_side()
    lease = lease_fence.Lease(True, "acquired", "r", "0" * 32, 42, 1000)
    for row in [r for r in TABLE["replies"] if r["script"] == script] + \
            [dict(r, script=script) for r in TABLE["errors"] if r["outcome"] != "noscript"]:
        answer = _protocol.decode(script, parsed(resp(row["reply"])))
        status = answer.outcome if answer.outcome in (
            "renewed", "lost", "released", "not_held", "unavailable") else "unknown"
        if script == "release":
            assert cs._release_result(answer) == status, row
            continue
        expect = next(r["renew"] for r in TABLE["statuses"]
                      if r["operation"] == "renew" and r["status"] == status)
        _check(expect, lambda: cs._renew_result(answer, lease, "r", 0, 900))


# --------------------------------------------------------------------------
# statuses: the row -> result translation, without a server
# --------------------------------------------------------------------------

def _acquire_row(row: Dict[str, Any]) -> Dict[str, Any]:
    got = row["acquired"]
    return {"acquired": got, "status": row["status"], "resource": "r",
            "identity": "0" * 32 if got is not False else None,
            "generation": 42 if got is not False else None,
            "validity_ms": 900 if got else None, "reason": None}


def _check(expect: str, call: Any) -> None:
    if expect == "return":
        assert call() is not None
    elif expect == "none":
        assert call() is None
    else:
        with pytest.raises(lease_fence.LeaseError) as e:
            call()
        assert type(e.value).__name__ == expect, (expect, e.value)


def _client_side_lease(row: Dict[str, Any]) -> Any:
    cs = _client_side()
    return cs.ClientSideLease(**_acquire_row(row))


@pytest.mark.parametrize("row", [r for r in TABLE["statuses"] if r["operation"] == "acquire"],
                         ids=_row_id)
@pytest.mark.parametrize("edition", ["sql", "client_side"])
def test_status_acquire(row: Dict[str, Any], edition: str) -> None:
    """acquire and try_acquire (lease_fence and lease_fence.aio share the
    translation, _errors._acquired / _try_acquired, as the client-side
    classes do)."""
    def lease() -> Any:
        return _errors._lease_from_row(_acquire_row(row)) if edition == "sql" \
            else _client_side_lease(row)
    _check(row["acquire"], lambda: _errors._acquired(lease()))
    _check(row["try_acquire"], lambda: _errors._try_acquired(lease()))


@pytest.mark.parametrize("row", [r for r in TABLE["statuses"] if r["operation"] == "renew"],
                         ids=_row_id)
def test_status_renew(row: Dict[str, Any]) -> None:
    lease = lease_fence.Lease(True, "acquired", "r", "0" * 32, 42, 1000)
    _check(row["renew"], lambda: _errors._renewed(
        row["status"], lease, 900 if row["renewed"] else None, None, row["renewed"]))


@pytest.mark.parametrize("row", [r for r in TABLE["statuses"] if r["operation"] == "release"],
                         ids=_row_id)
def test_status_release(row: Dict[str, Any]) -> None:
    assert row["release"] == "return"
    got = _errors._released(row["status"], None)
    assert got == row["status"] and isinstance(got, lease_fence.ReleaseStatus)


def test_the_verb_table_in_both_modules() -> None:
    """The verb table's names, in lease_fence and lease_fence.aio, and the
    one translation the tests above assert is the one both modules and the
    client-side classes use."""
    from lease_fence import _sync, aio
    for mod in (lease_fence, aio):
        for name in ("acquire", "try_acquire", "job", "transaction_lease", "kept_alive_lease",
                     "fenced", "renew", "release"):
            assert callable(getattr(mod, name)), (mod.__name__, name)
    for name in ("_acquired", "_try_acquired", "_renewed", "_released"):
        shared = getattr(_errors, name)
        assert getattr(_sync, name) is shared and getattr(aio, name) is shared, name
        client_side = _client_side()
        assert getattr(client_side, name) is shared, name

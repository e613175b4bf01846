"""One argument order per verb: every optional argument after ``ttl_ms`` is
keyword-only, in every flavour of the verbs (sync, aio, Django, client-side
sync and async). Positional use raises TypeError. No server needed."""

from __future__ import annotations

import inspect
from typing import Any, Callable, List, Tuple

import pytest

import lease_fence
from lease_fence import aio, client_side, django

VERBS = ("acquire", "try_acquire", "transaction_lease", "job", "kept_alive_lease", "renew")


def _verbs() -> List[Tuple[str, Callable[..., Any]]]:
    out = []
    for where, obj in (("lease_fence", lease_fence), ("lease_fence.aio", aio),
                       ("lease_fence.django", django),
                       ("ClientSideLeases", client_side.ClientSideLeases),
                       ("AsyncClientSideLeases", client_side.AsyncClientSideLeases)):
        for name in VERBS:
            if hasattr(obj, name):
                out.append((f"{where}.{name}", getattr(obj, name)))
    return out


@pytest.mark.parametrize("name,verb", _verbs(), ids=[n for n, _ in _verbs()])
def test_optional_arguments_after_ttl_ms_are_keyword_only(name: str,
                                                          verb: Callable[..., Any]) -> None:
    params = list(inspect.signature(verb).parameters.values())
    names = [p.name for p in params]
    assert "ttl_ms" in names, name
    after = params[names.index("ttl_ms") + 1:]
    assert after, f"{name}: no optional argument after ttl_ms"
    for p in after:
        assert p.kind is inspect.Parameter.KEYWORD_ONLY, f"{name}: {p.name} is {p.kind}"
        assert p.default is not inspect.Parameter.empty, f"{name}: {p.name} has no default"


@pytest.mark.parametrize("name,verb", _verbs(), ids=[n for n, _ in _verbs()])
def test_positional_min_validity_ms_is_a_type_error(name: str, verb: Callable[..., Any]) -> None:
    sig = inspect.signature(verb)
    required = [p for p in sig.parameters.values()
                if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    args: List[Any] = [object()] * len(required) + [0]     # one more: min_validity_ms
    with pytest.raises(TypeError):
        sig.bind(*args)
    sig.bind(*args[:-1], min_validity_ms=0)                 # by keyword: fine


def test_every_verb_is_checked() -> None:
    found = {n for n, _ in _verbs()}
    assert len(found) == 6 + 6 + 5 + 3 + 3, sorted(found)


@pytest.mark.parametrize("where,name", [(w, n) for w in ("lease_fence", "lease_fence.aio")
                                        for n in ("leadership", "take_over")])
def test_election_verbs_keyword_only_after_ttl_ms(where: str, name: str) -> None:
    """leadership / take_over: (conn, name, ttl_ms, *, ...), in sync and aio."""
    verb = getattr(aio if where.endswith("aio") else lease_fence, name)
    params = list(inspect.signature(verb).parameters.values())
    assert [p.name for p in params[:3]] == ["conn", "election" if name == "leadership"
                                            else "resource", "ttl_ms"]
    assert params[3:], name
    for p in params[3:]:
        assert p.kind is inspect.Parameter.KEYWORD_ONLY, f"{where}.{name}: {p.name}"
        assert p.default is not inspect.Parameter.empty


FAIR_VERBS = ("acquire", "try_acquire", "transaction_lease", "job", "kept_alive_lease",
              "leadership")


def _fair_verbs() -> List[Tuple[str, Callable[..., Any]]]:
    out = []
    for where, obj in (("lease_fence", lease_fence), ("lease_fence.aio", aio),
                       ("lease_fence.django", django),
                       ("ClientSideLeases", client_side.ClientSideLeases),
                       ("AsyncClientSideLeases", client_side.AsyncClientSideLeases)):
        for name in FAIR_VERBS:
            if hasattr(obj, name):
                out.append((f"{where}.{name}", getattr(obj, name)))
    return out


@pytest.mark.parametrize("name,verb", _fair_verbs(), ids=[n for n, _ in _fair_verbs()])
def test_fair_is_a_keyword_that_defaults_to_false(name: str, verb: Callable[..., Any]) -> None:
    """Every verb that acquires or campaigns takes fair=False (issue 53); the
    client-side ones too (they refuse True)."""
    p = inspect.signature(verb).parameters.get("fair")
    assert p is not None, name
    assert p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is False, name


def test_every_fair_verb_is_checked() -> None:
    assert len(_fair_verbs()) == 6 + 6 + 4 + 2 + 2, sorted(n for n, _ in _fair_verbs())

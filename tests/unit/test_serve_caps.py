"""The caps of ``spool serve`` in-process (the real-HTTP tests are tests/api/test_serve_bounds.py):
long-lived request slots per holder and in all; dashboard sessions per token and in all."""

from __future__ import annotations

import pytest

from spool.runner.api.dashboard import sessions as dashboard_sessions
from spool.runner.api.context import ApiError, Slots
from spool.runner.api.dashboard.auth import Sessions, SessionsFull
from spool.tokens import TokenInfo


def test_slots_refuse_past_a_holders_share_and_past_the_total_and_come_back() -> None:
    slots = Slots("streams open", per_holder=2, total=3, retry_after_seconds=5)
    slots.take("a", "token 'a'")
    slots.take("a", "token 'a'")
    with pytest.raises(ApiError) as refused:
        slots.take("a", "token 'a'")
    assert refused.value.status == 429 and refused.value.headers == {"Retry-After": "5"}
    assert "token 'a' already has 2 streams open" in refused.value.message
    slots.take("b", "token 'b'")
    with pytest.raises(ApiError, match="already has 3 streams open, its most at once"):
        slots.take("c", "token 'c'")
    slots.give("a")
    with slots.held("c", "token 'c'"):
        assert slots.in_use == 3
    assert slots.in_use == 2


class Tokens:
    def __init__(self, *names: str) -> None:
        self.infos = {name: TokenInfo(name, "submit", 1.0, None) for name in names}

    def verify(self, token: str) -> TokenInfo | None:
        return self.infos.get(token)

    def list(self) -> list[TokenInfo]:
        return list(self.infos.values())


def test_a_tokens_logins_end_only_its_own_oldest_and_a_full_table_refuses_without_ending_any(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(dashboard_sessions, "MAX_SESSIONS", 8)
    sessions = Sessions(Tokens("a", "b", "c"))  # type: ignore[arg-type]
    first_b = sessions.login("b")
    assert first_b is not None
    made_a = [sessions.login("a") for _ in range(12)]
    assert [sessions.lookup(m[0]) is not None for m in made_a if m] == [False] * 7 + [True] * 5
    assert sessions.lookup(first_b[0]) is not None
    sessions.login("b")
    sessions.login("b")  # 5 of a's and 3 of b's: the table is full
    with pytest.raises(SessionsFull):
        sessions.login("c")
    assert sessions.lookup(first_b[0]) is not None and sessions.lookup(made_a[-5][0]) is not None  # type: ignore[index]
    assert sessions.login("a") is not None  # a token at its share still logs in: it ends its own oldest
    assert sessions.lookup(made_a[-5][0]) is None  # type: ignore[index]

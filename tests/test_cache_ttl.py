"""Cache expiry: a message said longer than the policy's `cache_ttl` after the one before it clears what is pending.

The property tests (test_incremental, test_budget and the rest, through
`helpers.POLICIES` and timed sessions) check the store against `prune`
under a `cache_ttl`; these check the rule itself by hand, the times the
store keeps, and the edges: a time refused, a retry, a policy changed.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from click.testing import CliRunner

from prunestore import (
    InvalidArgumentError,
    InvalidMessageError,
    InvalidPolicyError,
    Message,
    Policy,
    Prices,
    PruneStore,
    prune,
)
from prunestore.cli import main
from prunestore.errors import DuplicateMessageError
from prunestore.jsonl import parse_line, to_json
from prunestore.prices import PRICES, prompt_costs

BOTH_APIS = True

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)
POLICY = Policy(clear_at_least=100, cache_ttl=300)


def _chat(*gaps: float | None) -> list[Message]:
    """Tool results of one tool, each superseding the one before (so the older ones wait, pending),
    said `gaps` seconds apart (None: a message without a time)."""
    out, at = [], T0
    for i, gap in enumerate((0, *gaps)):
        at = at + timedelta(seconds=gap or 0)
        out.append(
            Message(
                id=f"m{i}",
                role="tool_output",
                content=f"result {i}",
                turn=i,
                tool_key="t",
                at=None if gap is None else at,
            )
        )
    return out


def test_an_idle_gap_longer_than_the_ttl_holds_an_event_for_what_is_pending():
    verdicts = prune(_chat(10, 20), policy=POLICY).verdicts
    assert verdicts == {"m0": "pending", "m1": "pending", "m2": "kept"}  # 4 pending tokens: far below 100

    result = prune(_chat(10, 301), policy=POLICY)
    assert result.verdicts == {"m0": "superseded", "m1": "superseded", "m2": "kept"}
    assert result.events == 1 and result.pending_tokens == 0

    assert prune(_chat(10, 300), policy=POLICY).events == 0  # longer than the TTL, not as long
    assert prune(_chat(10, None), policy=POLICY).events == 0  # no time: no gap to measure
    assert prune(_chat(10, 301), policy=Policy(clear_at_least=100)).events == 0  # no TTL: times are not read


def test_an_idle_gap_with_nothing_pending_is_no_event():
    ms = [Message(id=f"u{i}", role="user", content="hello", turn=i, at=T0 + timedelta(hours=i)) for i in range(3)]
    assert prune(ms, policy=POLICY).events == 0


def test_the_store_follows_the_rule_across_appends_and_keeps_the_times(open_store):
    store = open_store(POLICY)
    for message in _chat(10, 20, 301, 5):
        store.append("s", message)
        stored = store.messages("s")
        assert {m.id: m.verdict for m in stored} == prune([m.to_message() for m in stored], policy=POLICY).verdicts
    assert store.stats("s").events == 1
    assert [m.to_message() for m in store.messages("s")] == _chat(10, 20, 301, 5)
    assert store.verify().ok


def test_under_a_ttl_a_message_without_a_time_is_stored_with_the_appends(open_store):
    store = open_store(POLICY)
    before = datetime.now(timezone.utc)
    store.append("s", Message(id="a", role="user", content="hi", turn=0))
    (stored,) = store.messages("s")
    assert stored.at is not None and before <= stored.at <= datetime.now(timezone.utc)
    store.append("s", Message(id="a", role="user", content="hi", turn=0))  # a retry without a time: the same message
    store.append("s", stored.to_message())  # and with the time it was given
    assert len(store.messages("s")) == 1
    with pytest.raises(DuplicateMessageError, match="with different at"):
        store.append("s", Message(id="a", role="user", content="hi", turn=0, at=T0))
    assert store.messages("s") == [stored]


def test_without_a_ttl_a_message_keeps_the_time_it_was_given_or_none(open_store):
    store = open_store()
    store.append("s", [Message(id="a", role="user", content="hi", turn=0), *_chat(5)])
    assert [m.at for m in store.messages("s")] == [None, T0, T0 + timedelta(seconds=5)]


def test_a_ttl_set_later_replays_the_stored_times(open_store):
    store = open_store(Policy(clear_at_least=100))
    ms = _chat(10, 400, 10)
    store.append("s", ms)
    assert store.stats("s").events == 0
    store.rebuild(policy=POLICY)
    assert {m.id: m.verdict for m in store.messages("s")} == prune(ms, policy=POLICY).verdicts
    assert store.stats("s").events == 1
    assert store.verify().ok
    store.pop("s")
    store.append("s", ms[-1])  # the gap is read back from the stored message before it
    assert {m.id: m.verdict for m in store.messages("s")} == prune(ms, policy=POLICY).verdicts
    assert store.verify().ok


def test_bad_times_and_ttls_are_refused_by_name():
    with pytest.raises(InvalidMessageError, match="at=.*timezone-aware"):
        Message(id="a", role="user", content="x", turn=0, at=datetime(2026, 1, 1))  # noqa: DTZ001 (the point)
    with pytest.raises(InvalidMessageError, match="at="):
        Message(id="a", role="user", content="x", turn=0, at=1767225600)
    with pytest.raises(InvalidPolicyError, match="cache_ttl=0"):
        Policy(clear_at_least=10, cache_ttl=0)
    with pytest.raises(InvalidPolicyError, match="cache_ttl=300: needs clear_at_least"):
        Policy(budget=1000, cache_ttl=300)


def test_the_policy_and_jsonl_carry_the_ttl_and_times():
    assert "cache_ttl" not in Policy(clear_at_least=5).to_json()  # policies stored before it read the same
    assert Policy.from_json(POLICY.to_json()) == POLICY
    message = Message(
        id="a", role="user", content="x", turn=0, at=datetime(2026, 1, 1, 12, tzinfo=timezone(timedelta(hours=2)))
    )
    line = to_json(message)
    assert line["at"] == "2026-01-01T12:00:00+02:00"
    assert parse_line(__import__("json").dumps(line), 1, session_field=False) == (None, message)
    with pytest.raises(InvalidMessageError, match="line 1: at='yesterday'"):
        parse_line('{"id": "a", "role": "user", "content": "x", "turn": 0, "at": "yesterday"}', 1, session_field=False)


def test_the_policy_command_sets_and_shows_the_ttl(store_url):
    runner = CliRunner()

    def cli(*args: str, code: int = 0) -> str:
        result = runner.invoke(main, ["--db", store_url, *args])
        assert result.exit_code == code, result.output
        return result.output

    PruneStore(store_url).close()
    assert "cache_ttl: none" in cli("policy")
    assert "--cache-ttl" in cli("policy", "--cache-ttl", "0", code=2)
    assert "cache_ttl=300: needs clear_at_least" in cli("policy", "--cache-ttl", "300", "--yes", code=2)
    shown = cli("policy", "--cache-ttl", "300", "--clear-at-least", "50", "--yes")
    assert "cache_ttl: 300" in shown and "clear_at_least: 50" in shown
    assert "cache_ttl: none" in cli("policy", "--cache-ttl", "none", "--yes")


def test_a_prompt_sent_after_the_cache_expired_is_written_whole():
    prompts = [[("a", 100)], [("a", 100), ("b", 10)], [("a", 100), ("b", 10), ("c", 5)]]
    times = [T0, T0 + timedelta(seconds=60), T0 + timedelta(minutes=10)]
    warm = prompt_costs(prompts, Prices(ttl=None), times)
    cold = prompt_costs(prompts, Prices(), times)  # 5 minutes: the third prompt finds nothing cached
    assert (warm.expired, cold.expired) == (0, 1)
    assert warm.cost == pytest.approx(1.25 * 100 + (0.1 * 100 + 1.25 * 10) + (0.1 * 110 + 1.25 * 5))
    assert cold.cost == pytest.approx(1.25 * 100 + (0.1 * 100 + 1.25 * 10) + 1.25 * 115)
    assert prompt_costs(prompts, Prices()).expired == 0  # no times: the cache never expires
    assert prompt_costs(prompts, PRICES["anthropic-1h"], times).expired == 0
    with pytest.raises(InvalidArgumentError, match="ttl=0"):
        Prices(ttl=0)


def test_after_an_idle_gap_the_budget_trims_to_its_target_for_free():
    policy = Policy(budget=100, clear_at_least=40, cache_ttl=300)
    said = [T0 + timedelta(seconds=30 * i) for i in range(7)] + [T0 + timedelta(minutes=20)]
    ms = [Message(f"u{i}", "user", f"note {i}", turn=i, tokens=10, at=at) for i, at in enumerate(said)]
    result = prune(ms, policy=policy)  # 80 tokens: under the budget, above its target of 60
    assert result.events == 1 and [m.id for m in result.live] == [f"u{i}" for i in range(2, 8)]
    assert {i for i, v in result.verdicts.items() if v == "evicted"} == {"u0", "u1"}
    warm = [Message(m.id, m.role, m.content, m.turn, tokens=10, at=T0 + timedelta(seconds=30 * m.turn)) for m in ms]
    assert prune(warm, policy=policy).events == 0  # the same messages without the pause: no event

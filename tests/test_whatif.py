"""`what_if` and `prunestore cost`: a stored session replayed under a policy, priced turn by turn.

The expectation is computed independently: for each turn, `prune` over the
messages so far gives the prompt the policy would send, and
`prices.prompt_costs` prices the prompts one after another.
"""

from __future__ import annotations

import itertools
import json
from itertools import groupby

import pytest
from helpers import sessions
from hypothesis import given, settings
from hypothesis import strategies as st

from prunestore import InvalidArgumentError, InvalidPolicyError, Message, Policy, Prices, prune
from prunestore.errors import SessionNotFoundError
from prunestore.prices import PRICES, prompt_costs

BOTH_APIS = True

_names = itertools.count()

CANDIDATES = [
    Policy(),
    Policy(restore="direct"),
    Policy(budget=11, clear_at_least=3),
    Policy(budget=11, clear_at_least=3, evict="definers_last"),
    Policy(budget=9, restore="direct", evict="definers_last"),
    Policy(clear_at_least=5),
    Policy(budget=13, clear_at_least=6, cache_ttl=60),
]


def expected(messages: list[Message], policy: Policy, prices: Prices, tokens: dict[str, int]):
    """(cost, cost of sending everything, breaks, peak, prune's result over all) by `prune` per turn."""
    prompts, everything, so_far, times = [], [], list[Message](), []
    for _, turn in groupby(messages, key=lambda m: m.turn):
        so_far.extend(turn)
        live = prune(so_far, policy=policy).live
        prompts.append([(m.id, tokens[m.id]) for m in live])
        everything.append([(m.id, tokens[m.id]) for m in so_far])
        times.append(so_far[-1].at)  # a turn is sent at its last message's time
    ours, theirs = prompt_costs(prompts, prices, times), prompt_costs(everything, prices, times)
    return ours, theirs, prune(messages, policy=policy)


def _pieces(messages: list[Message], cuts: list[int]) -> list[list[Message]]:
    bounds = [0, *cuts, len(messages)]
    return [messages[a:b] for a, b in itertools.pairwise(bounds) if a < b]


def _check_ledger(store, session: str, messages: list[Message], policy: Policy) -> None:
    """The stored ledger equals `prune` per turn priced by `prompt_costs`, for the messages stored so far."""
    assert policy.prices is not None
    stored = store.messages(session)
    tokens = {m.id: m.tokens for m in stored}
    ours, theirs, _ = expected(messages, policy, policy.prices, tokens)
    got = store.stats(session)
    assert got.ledger is not None and got.cost is not None and got.cost_everything is not None
    assert (got.ledger.turns, got.ledger.breaks, got.ledger.expired) == (ours.turns, ours.breaks, ours.expired)
    assert got.cost == pytest.approx(ours.cost) and got.cost_everything == pytest.approx(theirs.cost)
    assert got.ledger.read + got.ledger.written == round(ours.mean * ours.turns)
    assert store.summary(session).ledger in (got.ledger, None)  # None only after a cut, until the next write
    last = store.history(session)[-1]
    if last.seq == stored[-1].seq:  # the history's point of the last append (a cut inside one leaves none)
        assert (last.cost, last.cost_everything) == (pytest.approx(got.cost), pytest.approx(got.cost_everything))


PRICED = [
    Policy(prices=PRICES["anthropic-5m"]),
    Policy(budget=11, clear_at_least=3, prices=PRICES["openai"]),
    Policy(budget=11, clear_at_least=3, evict="definers_last", prices=Prices(ttl=45)),
    Policy(budget=9, restore="direct", evict="definers_last", prices=Prices(read=0.5, write=1.0, ttl=None)),
    Policy(budget=13, clear_at_least=6, cache_ttl=60, prices=PRICES["anthropic-1h"]),
]


@pytest.mark.parametrize("policy", PRICED, ids=["passes", "budget", "definers-last", "direct", "cache-ttl"])
@settings(max_examples=15)
@given(data=st.data())
def test_the_ledger_after_every_append_prices_the_turns_prune_gives(open_store, policy, data):
    """Appends of any size (a turn over several, several turns in one), then a cut and more appends."""
    store = open_store(policy)
    ms = data.draw(sessions(min_size=1, max_size=16))
    cuts = sorted(data.draw(st.sets(st.integers(1, max(len(ms) - 1, 1)), max_size=6))) if len(ms) > 1 else []
    session = f"l{next(_names)}"
    done: list[Message] = []
    for piece in _pieces(ms, cuts):
        store.append(session, piece)
        done.extend(piece)
        _check_ledger(store, session, done, policy)
    keep = data.draw(st.integers(1, len(done)))
    store.truncate(session, done[keep - 1].id)
    del done[keep:]
    _check_ledger(store, session, done, policy)
    more = [Message(f"{m.id}-again", m.role, m.content, done[-1].turn + m.turn, at=m.at) for m in ms[:3]]
    store.append(session, more)
    _check_ledger(store, session, done + more, policy)
    assert store.verify(session).ok


def test_verify_finds_a_ledger_that_is_not_the_replay_of_the_messages(open_store):
    store = open_store(Policy(budget=11, clear_at_least=3, prices="openai"))
    store.append("s", [Message(f"m{t}", "user", f"fact {t} DEFINE:k{t}", t) for t in range(1, 9)])
    store.append("s", Message("r", "user", "REF:k1", 9))
    assert store.verify("s").ok
    wrong = store.stats("s").ledger
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE prunestore_sessions SET ledger = replace(ledger, '[[', '[[1') ")
    (found,) = store.verify("s").mismatches
    assert (found.what, found.subject, found.expected) == ("session", "ledger", wrong)
    store.rebuild("s")
    assert store.verify("s").ok and store.stats("s").ledger == wrong


@pytest.mark.parametrize("stored_under", [Policy(), Policy(budget=11, clear_at_least=3)], ids=["plain", "budget"])
@settings(max_examples=25)
@given(data=st.data())
def test_what_if_prices_the_prompts_prune_gives_turn_by_turn(open_store, stored_under, data):
    store = open_store(stored_under)
    ms = data.draw(sessions(min_size=1, max_size=20))
    policy = data.draw(st.sampled_from(CANDIDATES))
    prices = data.draw(
        st.sampled_from([Prices(), *PRICES.values(), Prices(read=0.5, write=1.0, fresh=2.0, ttl=None), Prices(ttl=45)])
    )
    session = f"w{next(_names)}"
    for _, turn in groupby(ms, key=lambda m: m.turn):
        store.append(session, list(turn))
    stored = {m.id: m for m in store.messages(session)}
    tokens = {i: m.tokens for i, m in stored.items()}

    replay = store.what_if(session, policy, prices)
    ours, theirs, result = expected(ms, policy, prices, tokens)
    assert replay.turns == ours.turns and replay.messages == len(ms)
    assert replay.cost == pytest.approx(ours.cost) and replay.cost_everything == pytest.approx(theirs.cost)
    assert (replay.breaks, replay.peak, replay.expired) == (ours.breaks, ours.peak, ours.expired)
    assert replay.mean == pytest.approx(ours.mean)
    assert (replay.events, replay.comebacks, replay.late_joins) == (result.events, result.comebacks, result.late_joins)
    changed = [i for i, m in stored.items() if m.verdict != result.verdicts[i]]
    assert replay.changed == len(changed) and list(replay.changed_ids) == changed[:10]
    # Under the store's own policy nothing would change, and the counts are the store's.
    same = store.what_if(session)
    stats = store.stats(session)
    assert same.changed == 0 and same.policy == stored_under
    assert (same.events, same.comebacks, same.late_joins) == (stats.events, stats.comebacks, stats.late_joins)


def test_what_if_writes_nothing_and_refuses_bad_arguments(open_store):
    store = open_store(Policy(budget=30, clear_at_least=10))
    for t in range(1, 12):
        store.append(
            "s", [Message(f"f{t}", "user", f"fact {t} DEFINE:k{t}", t), Message(f"c{t}", "assistant", "x " * 9, t)]
        )
    before = [(m.id, m.verdict) for m in store.messages("s")]
    replay = store.what_if("s", Policy(), prices="anthropic-1h")
    assert replay.changed > 0 and replay.prices == PRICES["anthropic-1h"]
    assert [(m.id, m.verdict) for m in store.messages("s")] == before and store.verify().ok
    with pytest.raises(InvalidArgumentError, match="prices='cheap'"):
        store.what_if("s", prices="cheap")
    with pytest.raises(InvalidPolicyError, match="policy='none'"):
        store.what_if("s", "none")
    with pytest.raises(SessionNotFoundError, match="session='nope'"):
        store.what_if("nope")
    with pytest.raises(InvalidArgumentError, match="read=-1"):
        Prices(read=-1)


def command_line(store_url):
    """The ``prunestore`` command on the store: its output, the exit code checked."""
    from click.testing import CliRunner

    from prunestore.cli import main

    def cli(*args, code=0):
        result = CliRunner().invoke(main, ["--db", store_url, *args])
        assert result.exit_code == code, (result.output, result.exception)
        return result.output

    return cli


def test_cost_command_prints_both_policies_and_equals_what_if(store_url):
    from prunestore import PruneStore

    cli = command_line(store_url)
    with PruneStore(store_url, policy=Policy(budget=60, clear_at_least=20)) as store:
        for t in range(1, 30):
            batch = [Message(f"f{t}", "user", f"fact {t} DEFINE:k{t}", t), Message(f"c{t}", "assistant", "x " * 9, t)]
            if t > 6 and t % 3 == 0:
                batch.append(Message(f"r{t}", "user", f"as said REF:k{t - 6}", t))
            store.append("s", batch)
        other = Policy(budget=60, clear_at_least=20, evict="definers_last")
        mine, theirs = store.what_if("s"), store.what_if("s", other, Prices(read=0.1, write=2.0))
    shown = json.loads(cli("cost", "s", "--evict", "definers_last", "--prices", "0.1,2", "--json"))
    assert [row["policy"]["evict"] for row in shown] == ["oldest", "definers_last"]
    assert shown[1]["cost"] == pytest.approx(theirs.cost) and shown[1]["comebacks"] == theirs.comebacks
    assert shown[1]["changed"] == theirs.changed and shown[0]["changed"] == 0
    assert json.loads(cli("cost", "--json"))[0]["cost"] == pytest.approx(mine.cost)  # every session by default
    text = cli("cost", "s", "--budget", "none")
    assert "the store's policy" in text and "the other policy" in text and "turns priced" in text
    assert "anthropic-5m" in cli("cost", "--prices", "free", code=2)


def test_policy_prices_from_the_command_line_keep_the_ledger_and_price_the_replays(store_url):
    from prunestore import PruneStore

    cli = command_line(store_url)
    with PruneStore(store_url, policy=Policy(budget=60, clear_at_least=20)) as store:
        for t in range(1, 30):
            store.append(
                "s", [Message(f"f{t}", "user", f"fact {t} DEFINE:k{t}", t), Message(f"c{t}", "assistant", "x " * 9, t)]
            )
        assert store.stats("s").cost is None
    assert "cost so far" not in cli("stats")
    assert "prices: none" in cli("policy")
    assert "prices: anthropic-1h" in cli("policy", "--prices", "anthropic-1h", "--yes")
    hour = PRICES["anthropic-1h"]
    with PruneStore(store_url) as store:
        assert store.policy.prices == hour
        stats, replay = store.stats("s"), store.what_if("s")
        assert replay.prices == hour  # the policy's prices are the replay's default
        assert stats.cost == pytest.approx(replay.cost) and stats.cost_everything == pytest.approx(
            replay.cost_everything
        )
        assert store.what_if("s", prices="anthropic-5m").cost < replay.cost  # writes cost 1.25 there, not 2
        assert store.verify().ok
    assert f"cost so far, in fresh input tokens under the policy's prices: {stats.cost:,.0f}" in cli("stats", "s")
    assert json.loads(cli("cost", "--json"))[0]["cost"] == pytest.approx(replay.cost)
    numbers = json.loads(cli("policy", "--prices", "0.25,1", "--yes", "--json"))["prices"]
    assert numbers == {"read": 0.25, "write": 1.0, "fresh": 1.0, "ttl": 300}
    assert "prices: 0.25,1,1" in cli("policy")
    assert "each at least 0" in cli("policy", "--prices", "-1,1", "--yes", code=2)
    assert json.loads(cli("policy", "--json"))["prices"] == numbers  # a refused value changes nothing
    assert json.loads(cli("policy", "--prices", "none", "--yes", "--json"))["prices"] is None
    with PruneStore(store_url) as store:
        assert store.stats("s").cost is None and store.summary("s").ledger is None

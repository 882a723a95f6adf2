"""Generators of sessions that reach every interaction of the passes.

Small pools make keys, tool keys and passages collide. Each session draws a
profile (how often messages carry tool keys, TTLs, definitions and
references, and how many keys there are), so that hypothesis explores both
sessions that keep almost everything and sessions that drop almost
everything, where restoration chains, cycles, late references and
hand-overs between copies are common.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import strategies as st

from prunestore import Message, Policy

KEYS = ["k1", "k2", "k3", "k4", "k5", "k6"]
TOOL_KEYS = ["search", "sql", "fs"]
TEXTS = ["alpha passage", "Alpha   PASSAGE", "beta passage", "gamma"]
ROLES = ["system", "user", "assistant", "tool_output", "retrieved_doc", "retrieved_doc"]


def _chance(draw, odds: int) -> bool:
    """True with probability 1/odds."""
    return draw(st.integers(1, odds)) == 1


profiles = st.fixed_dictionaries(
    {
        "tool_odds": st.sampled_from([1, 2, 4]),
        "ttl_odds": st.sampled_from([1, 2, 8]),
        "keys": st.sampled_from([3, 6]),
        "define_odds": st.sampled_from([0, 1, 3]),
        "ref_odds": st.sampled_from([0, 1, 3]),
        # Every message defines one key and refers to another: long restoration chains and cycles.
        "linked": st.booleans(),
        # A conversation of facts and chatter (one session in three): a fact defines one key, a later
        # message sometimes refers to it; whether the budget evicts facts or chatter first shows here.
        "facts": st.integers(1, 3).map(lambda n: n == 1),
    }
)


@st.composite
def fact_specs(draw):
    """One message's fields in a conversation of facts and chatter."""
    role = draw(st.sampled_from(["user", "assistant", "tool_output", "retrieved_doc"]))
    words = [draw(st.sampled_from(["alpha", "beta gamma", "delta epsilon zeta"]))]
    if _chance(draw, 3):
        words.append("DEFINE:" + draw(st.sampled_from(KEYS)))
    if _chance(draw, 5):
        words.append("REF:" + draw(st.sampled_from(KEYS)))
    tool_key = draw(st.sampled_from([None, None, "search"])) if role == "tool_output" else None
    return {"role": role, "content": " ".join(words), "tool_key": tool_key, "ttl": None, "defines": (), "refs": ()}


@st.composite
def message_specs(draw, profile: dict, tool_roles_can_dedupe: bool = True):
    """One message's fields except id and turn."""
    role = draw(st.sampled_from(ROLES))
    keys = st.sampled_from(KEYS[: profile["keys"]])
    # Passages come from a smaller pool so that copies (and copies of dropped copies) are common.
    words = [draw(st.sampled_from(TEXTS[:2] if role == "retrieved_doc" else TEXTS))]
    tool_key = draw(st.sampled_from(TOOL_KEYS)) if _chance(draw, profile["tool_odds"]) else None
    expiring = _chance(draw, profile["ttl_odds"])
    defines, refs = [], []
    if profile["linked"] and (tool_key is not None or expiring):
        # Messages that will be dropped define and refer: restoration chains, cycles, late references.
        defines.append(draw(keys))
        refs.append(draw(keys))
    elif not profile["linked"] or _chance(draw, 4):
        for odds, field in ((profile["define_odds"], defines), (profile["ref_odds"], refs)):
            while _chance(draw, odds + 1) and len(field) < 3:
                field.append(draw(keys))
    for field, marker in ((defines, "DEFINE:"), (refs, "REF:")):
        # Half of the keys go into the content as markers; passages stay plain so that copies collide.
        for key in list(field):
            if role != "retrieved_doc" and draw(st.booleans()):
                field.remove(key)
                words.append(marker + key)
    if tool_key is not None and not tool_roles_can_dedupe and role == "retrieved_doc":
        tool_key = None
    return {
        "role": role,
        "content": " ".join(words),
        "tool_key": tool_key,
        "ttl": draw(st.integers(0, 3)) if expiring else None,
        "defines": tuple(defines),
        "refs": tuple(refs),
    }


@st.composite
def sessions(draw, min_size: int = 0, max_size: int = 30, tool_roles_can_dedupe: bool = True):
    """A list of messages in append order, with non-decreasing turns and times.

    Every message has a time (`Message.at`), seconds or minutes after the one before, so a `cache_ttl`
    of a minute finds idle gaps; they lie in the future, so a message a test appends without a time
    (which a store under a `cache_ttl` stamps with the present) never comes long after one of these.
    """
    profile = draw(profiles)
    # Draw the length first: st.lists favours short lists, and the interactions need long ones.
    size = draw(st.integers(min_size, max_size))
    turn, out = 0, []
    at = SESSIONS_START
    for i in range(size):
        spec = draw(fact_specs() if profile["facts"] else message_specs(profile, tool_roles_can_dedupe))
        turn += draw(st.sampled_from([0, 1, 1, 1] if profile["facts"] else [0, 0, 1, 1, 2]))
        ttl = spec.pop("ttl")
        expires = None if ttl is None else turn + ttl
        metadata = draw(st.sampled_from([None, None, {"n": i}]))  # stores keep a metadata dict apart per read
        given = [None, None, None, None, 0, 2] if profile["facts"] else [None, None, None, None, 0, 9, 40]
        tokens = draw(st.sampled_from(given))  # a count given with the message
        at += timedelta(seconds=draw(st.sampled_from([0, 1, 30, 61, 400])))
        out.append(
            Message(id=f"m{i}", turn=turn, expires_after_turn=expires, metadata=metadata, tokens=tokens, at=at, **spec)
        )
    return out


SESSIONS_START = datetime(2100, 1, 1, tzinfo=timezone.utc)


@st.composite
def summarized(draw, tokens: list[int | None] | None = None, quiet: bool = False):
    """A session with summaries added at random places, each covering some earlier messages (summaries too).

    `tokens`: the token counts a summary may be given (None: counted from its text). `quiet`: each summary
    is said in the turn of the message before it, so its own step moves no turn (the next message's may).
    """
    out: list[Message] = []
    for m in draw(sessions(min_size=4, max_size=24)):
        earlier = [e.id for e in out if e.role != "erased"]
        if earlier and draw(st.integers(1, 3)) == 1:
            covered = draw(st.lists(st.sampled_from(earlier), min_size=1, max_size=6, unique=True))
            summary = Message(
                id=f"s{len(out)}",
                role=draw(st.sampled_from(["user", "assistant", "system"])),
                content=draw(st.sampled_from(["summary", "a longer summary of what was said REF:k1"])),
                turn=out[-1].turn if quiet else m.turn,
                tokens=draw(st.sampled_from(tokens or [None, 0, 1, 3])),
                at=out[-1].at,  # said with the message before it: no idle gap of its own
                summarizes=tuple(covered),
            )
            out.append(summary)
        out.append(m)
    return out


def weather_chat(n: int) -> list[Message]:
    """A system message and `n` turns of a question and an answer, each long enough to weigh under a budget."""
    ms = [Message("sys", "system", "You are terse.", turn=0)]
    for t in range(1, n + 1):
        ms.append(Message(f"u{t}", "user", f"question {t} about the city weather far away", turn=t))
        ms.append(Message(f"a{t}", "assistant", f"answer {t} that is long enough to weigh", turn=t))
    return ms


@st.composite
def batches(draw, messages: list[Message]):
    """The messages cut into consecutive batches of random sizes."""
    out, i = [], 0
    while i < len(messages):
        size = draw(st.integers(1, 4))
        out.append(messages[i : i + size])
        i += size
    return out


# The restore modes and dedupe settings every property test runs under.
POLICIES = [
    pytest.param(Policy(), id="transitive"),
    pytest.param(Policy(restore="direct"), id="direct"),
    pytest.param(Policy(dedupe_roles={"retrieved_doc", "tool_output"}), id="dedupe-tools"),
    *(
        pytest.param(policy, id=name)
        for name, policy in [
            ("budget", Policy(budget=12, clear_at_least=4, pinned_roles={"system", "user"})),
            ("budget-direct", Policy(restore="direct", budget=9)),
            ("definers-last", Policy(budget=11, clear_at_least=3, evict="definers_last")),
            ("cache-ttl", Policy(budget=16, clear_at_least=8, cache_ttl=60)),
        ]
    ),
]


def cached_prompt_equals_cold(store_url: str, make, add, read, script) -> None:
    """Apply `script` ((writer, batch) pairs) through history objects and compare the cached prompt with a cold one.

    Writers 0 and 1 share a store (and its cache); writer 2 is another store,
    as another process would be. A batch may also be ``"pop"`` (the writer's
    store pops the last message) or ``("truncate", n)`` (it cuts after the
    n-th message, counted from the end). After every step, a reader on the
    shared store must see what a reader on a store without a cache sees.
    """
    from prunestore import PruneStore

    with (
        PruneStore(store_url) as shared,
        PruneStore(store_url) as other,
        PruneStore(store_url, live_cache_bytes=0) as cold,
    ):
        for name in shared.sessions():  # an empty start for every example
            shared.delete_session(name)
        writers = [make("s", shared), make("s", shared), make("s", other)]
        reader, oracle = make("s", shared), make("s", cold)
        stores = [shared, shared, other]
        for writer, batch in script:
            if batch == "pop":
                stores[writer].pop("s")
            elif isinstance(batch, tuple):
                stored = stores[writer].messages("s") if "s" in stores[writer].sessions() else []
                if len(stored) > batch[1]:
                    stores[writer].truncate("s", stored[-1 - batch[1]].id)
            else:
                add(writers[writer], batch)
            assert read(reader) == read(oracle)
        assert shared.verify().ok


def char_tokens(text: str) -> int:
    """A tokenizer other than the default, importable by path (``helpers:char_tokens``): one token a character."""
    return len(text)


@st.composite
def tool_loop_turns(draw) -> list[list[list[tuple[str, str]]]]:
    """Turns of an agent's tool loop, for the framework tests to script their models with: each turn a list
    of model steps, each step the (call id, folder) of one to three parallel `ls` calls over a few folders
    (so later calls supersede earlier results); each turn then ends with an answer."""
    turns = []
    for t in range(draw(st.integers(1, 4))):
        steps = draw(st.lists(st.lists(st.sampled_from(["/a", "/b", "/c"]), min_size=1, max_size=3), max_size=4))
        turns.append([[(f"c{t}-{s}-{n}", path) for n, path in enumerate(step)] for s, step in enumerate(steps)])
    return turns

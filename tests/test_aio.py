"""AsyncPruneStore inside one event loop: many sessions at once, the loop kept free while the database works.

The behaviour and property tests run against AsyncPruneStore too (modules
with BOTH_APIS, through tests/blocking.py); this module drives it the way an
async web service does.
"""

from __future__ import annotations

import asyncio

from helpers import sessions
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prunestore import AsyncPruneStore, Message, prune

SESSIONS = 40


async def _chat(store: AsyncPruneStore, session: str, messages: list[Message]) -> None:
    for message in messages:  # one append per message, as a chatbot does every turn
        await store.append(session, message)


@settings(max_examples=3, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(sessions(min_size=1, max_size=12), min_size=SESSIONS, max_size=SESSIONS))
def test_many_sessions_concurrently_in_one_event_loop(store_url, generated):
    async def main() -> None:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0)
                ticks += 1

        async with AsyncPruneStore(store_url) as store:
            clock = asyncio.create_task(ticker())
            names = [f"s{i}-{id(generated)}" for i in range(SESSIONS)]
            await asyncio.gather(*(_chat(store, n, ms) for n, ms in zip(names, generated, strict=True)))
            clock.cancel()
            # The loop ran other tasks while appends waited on the database: a store that blocked the loop
            # would run every append before the ticker's first step (how many steps it gets depends on load).
            assert ticks > 0
            for name, ms in zip(names, generated, strict=True):
                stored = await store.messages(name)
                assert {m.id: m.verdict for m in stored} == prune(ms, policy=store.policy).verdicts
            assert (await store.verify()).ok

    asyncio.run(main())


def test_concurrent_tasks_on_one_session_serialize(store_url):
    async def main() -> None:
        async with AsyncPruneStore(store_url) as store:
            batches = [
                [Message(f"w{w}-{i}", "tool_output", f"r {i % 3} REF:k", 0, tool_key=f"t{i % 2}") for i in range(5)]
                for w in range(8)
            ]
            await asyncio.gather(*(store.append("shared", b) for b in batches))
            stored = await store.messages("shared")
            assert [m.seq for m in stored] == list(range(1, 41))
            assert (await store.verify("shared")).ok

    asyncio.run(main())


def test_the_async_store_has_every_call_of_the_store_with_the_same_signature():
    import inspect

    from prunestore import PruneStore

    calls = [name for name, _ in inspect.getmembers(PruneStore, inspect.isfunction) if not name.startswith("_")]
    assert {"append", "live", "view", "pop", "append_with", "truncate"} <= set(calls)
    for name in calls:
        ours = getattr(AsyncPruneStore, name, None)
        assert ours is not None, f"AsyncPruneStore has no {name}"
        if name != "close":
            assert inspect.iscoroutinefunction(ours), name
        assert inspect.signature(ours) == inspect.signature(getattr(PruneStore, name)), name


def test_event_loops_in_several_threads_open_one_store_at_once(store_url):
    """The first calls from several loops race to open the store: each must wait for the one opening, not fail."""
    import threading

    store = AsyncPruneStore(store_url)
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def use(n: int) -> None:
        async def main() -> None:
            await store.append(f"s{n}", Message("m", "user", f"hi {n}", 0))

        start.wait()
        try:
            asyncio.run(main())
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=use, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    async def names() -> list[str]:
        try:
            return await store.sessions()
        finally:
            await store.close()

    assert not errors, errors
    assert asyncio.run(names()) == ["s0", "s1", "s2", "s3"]

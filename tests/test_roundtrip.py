"""Content and metadata come back exactly as given, on both backends."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from prunestore import Message

BOTH_APIS = True  # these tests run on PruneStore and on AsyncPruneStore (see conftest)

TEXTS = {
    "nul": "before\x00after\x00",
    "backslashes near nul": "\\0 \\\x00 \\\\0\x00\\",
    "emoji": "🦜🔥 families: 👨‍👩‍👧‍👦",
    "combining marks": "e\u0301 vs \u00e9, Zalgo: Z\u0351\u0308\u0334",
    "right to left": "שלום عليكم",
    "control characters": "\t\r\n\x01\x7f\u2028",
    "one MiB": "x" * (1 << 20),
    "empty": "",
}


def test_contents_round_trip_exactly(store):
    messages = [Message(f"m{i}", "user", text, 0) for i, text in enumerate(TEXTS.values())]
    store.append("s", messages)
    stored = store.messages("s")
    assert [m.content for m in stored] == list(TEXTS.values())
    assert [m.content for m in store.live("s")] == list(TEXTS.values())
    assert all(m.to_message() == original for m, original in zip(stored, messages, strict=True))
    assert store.verify().ok


def test_metadata_round_trips(store):
    metadata = {"role": "tool", "tool_call_id": "call_1", "nested": {"a": [1, 2.5, None, True, "\x00"]}, "é": "ü"}
    store.append("s", Message("a", "tool_output", "x", 0, metadata=metadata))
    assert store.messages("s")[0].metadata == metadata


@settings(max_examples=40)
@given(
    st.text(st.characters(blacklist_categories=["Cs"])), st.text(st.characters(blacklist_categories=["Cs"]), min_size=1)
)
def test_any_text_round_trips(store, content, session):
    session = session.replace("\x00", "")[:100] or "s"
    message = Message("m", "retrieved_doc", content, 0)
    store.delete_session(session) if session in store.sessions() else None
    store.append(session, message)
    assert store.messages(session)[0].content == content

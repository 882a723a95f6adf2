"""Exact token counts: the built-in OpenAI encodings against tiktoken, OpenAI's own implementation, on
messages as the provider is sent them; a store records its counter by name, refuses another, and
recounts on a change (from Python or the command line); under a budget the fold is the batch's."""

from __future__ import annotations

import gzip
import hashlib
import importlib.resources
import itertools
import json
import sys

import pytest
from click.testing import CliRunner
from helpers import sessions
from hypothesis import given, settings
from hypothesis import strategies as st

from prunestore import (
    DuplicateMessageError,
    InvalidMessageError,
    Message,
    Policy,
    TokenizerMismatchError,
    count_tokens,
    from_anthropic,
    from_openai,
    prune,
)
from prunestore.cli import main
from prunestore.tokens import PER_MESSAGE, OpenAIEncoding, cl100k_base, message_tokens, o200k_base

BOTH_APIS = True
ENCODINGS = {"o200k_base": o200k_base, "cl100k_base": cl100k_base}
_names = itertools.count()
_URL = "https://openaipublic.blob.core.windows.net/encodings/{}.tiktoken"


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """tiktoken's encodings, read offline from the files bpe-openai ships: tiktoken checks each file's
    SHA-256 against the one OpenAI publishes before it uses it, so both count by the same, official data."""
    cache = tmp_path_factory.mktemp("tiktoken")
    data = importlib.resources.files("bpe_openai.data")
    for name in ENCODINGS:
        url = _URL.format(name)
        raw = gzip.decompress(data.joinpath(f"{name}.tiktoken.gz").read_bytes())
        (cache / hashlib.sha1(url.encode()).hexdigest()).write_bytes(raw)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TIKTOKEN_CACHE_DIR", str(cache))
        import tiktoken

        yield {name: tiktoken.get_encoding(name) for name in ENCODINGS}


def _sent_tokens(encoding, role: str, content: str, calls: list[tuple[str, str]]) -> int:
    """The documented count of a message, by the reference encoding."""
    count = lambda text: len(encoding.encode_ordinary(text))  # noqa: E731
    return PER_MESSAGE + count(role) + count(content) + sum(count(name) + count(args) for name, args in calls)


TEXTS = st.text(st.characters(codec="utf-8"), max_size=300) | st.sampled_from(
    ["<|endoftext|> is text here", "  indented\n\tcode()  ", "日本語のテキスト", "a" * 3000, "QUJD" * 1000]
)


@pytest.mark.sqlite
@pytest.mark.parametrize("name", ENCODINGS)
@settings(max_examples=150)
@given(text=TEXTS)
def test_an_encoding_counts_text_as_tiktoken_does(reference, name, text):
    assert ENCODINGS[name](text) == len(reference[name].encode_ordinary(text))


@pytest.mark.sqlite
@pytest.mark.parametrize("name", ENCODINGS)
@settings(max_examples=60)
@given(text=TEXTS, call_name=st.sampled_from(["search", "get_weather", "sql"]), arguments=TEXTS)
def test_a_rendered_message_counts_its_role_content_and_calls(reference, name, text, call_name, arguments):
    encoding, ref = ENCODINGS[name], reference[name]
    args = json.dumps({"q": arguments})
    transcript = [
        {"role": "user", "content": text},
        {"role": "assistant", "content": None, "tool_calls": [_call("c1", call_name, args)]},
        {"role": "tool", "tool_call_id": "c1", "content": text},
    ]
    user, assistant, tool = from_openai(transcript)
    assert encoding.count_message(user) == _sent_tokens(ref, "user", text, [])
    assert encoding.count_message(assistant) == _sent_tokens(ref, "assistant", assistant.content, [(call_name, args)])
    assert encoding.count_message(tool) == _sent_tokens(ref, "tool", text, [])
    blocks = [{"type": "text", "text": text}, {"type": "tool_use", "id": "t1", "name": call_name, "input": {"q": 1}}]
    system, anthropic_call = from_anthropic([{"role": "assistant", "content": blocks}], system="Be brief.")
    assert encoding.count_message(system) == _sent_tokens(ref, "system", "Be brief.", [])
    want = _sent_tokens(ref, "assistant", anthropic_call.content, [(call_name, '{"q":1}')])
    assert encoding.count_message(anthropic_call) == want


def _call(call_id: str, name: str, arguments: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_a_plain_message_counts_as_its_role_sends_it(reference):
    ref = reference["o200k_base"]
    for role, sent in (("tool_output", "tool"), ("retrieved_doc", "user"), ("system", "system")):
        message = Message("m", role, "some content", 1)
        assert o200k_base.count_message(message) == _sent_tokens(ref, sent, "some content", [])
    assert message_tokens(count_tokens, message) == count_tokens("some content")  # the default: content only


def test_a_store_records_its_encoding_by_name_and_refuses_another(open_store):
    store = open_store(tokenizer="o200k_base")
    assert store.tokenizer_name == "prunestore.tokens:o200k_base"
    message = Message("a", "user", "Hello there, how are you today?", 1)
    store.append("s", [message])
    assert store.messages("s")[0].tokens == o200k_base.count_message(message) == PER_MESSAGE + 1 + 8
    assert open_store().tokenizer is o200k_base  # opened without one: the recorded one, by name
    with pytest.raises(TokenizerMismatchError, match=r"'prunestore.text:count_tokens'.*'prunestore.tokens:o200k_base'"):
        open_store(tokenizer=count_tokens)
    with pytest.raises(TokenizerMismatchError, match="cl100k_base"):
        open_store(tokenizer=cl100k_base)


def test_a_change_of_encoding_recounts_every_message_and_verifies(open_store):
    store = open_store(Policy(budget=60, clear_at_least=20))
    messages = [Message(f"m{i}", "tool_output", f"result {i}: " + "ok " * (i % 7), i) for i in range(1, 30)]
    store.append("s", messages)
    before = [m.tokens for m in store.messages("s")]
    store.rebuild(tokenizer="cl100k_base")
    stored = store.messages("s")
    assert [m.tokens for m in stored] == [cl100k_base.count_message(m) for m in messages] != before
    assert store.verify().ok
    batch = prune(messages, policy=store.policy, tokenizer=cl100k_base)
    assert {m.id: m.verdict for m in stored} == batch.verdicts
    assert sum(m.tokens for m in stored) == batch.tokens_before
    assert open_store().tokenizer_name == "prunestore.tokens:cl100k_base"


def test_the_command_line_changes_the_encoding(store_url, open_store):
    store = open_store()
    store.append("s", [Message("a", "user", "Hello there", 1), Message("b", "assistant", "Hi!", 1)])
    runner = CliRunner()
    shown = runner.invoke(main, ["--db", store_url, "policy", "--tokenizer", "o200k_base", "--yes"])
    assert shown.exit_code == 0, shown.output
    assert "tokenizer: prunestore.tokens:o200k_base" in shown.output
    reopened = open_store()
    assert [m.tokens for m in reopened.messages("s")] == [o200k_base.count_message(m) for m in reopened.messages("s")]
    assert runner.invoke(main, ["--db", store_url, "verify"]).exit_code == 0
    unknown = runner.invoke(main, ["--db", store_url, "policy", "--tokenizer", "p50k_unknown", "--yes"])
    assert unknown.exit_code == 2 and "p50k_unknown" in unknown.output


def test_a_missing_package_is_refused_when_the_store_opens(open_store, monkeypatch):
    monkeypatch.setitem(sys.modules, "bpe_openai", None)  # as if the extra were not installed
    with pytest.raises(TokenizerMismatchError, match=r"prunestore\[openai-tokens\]"):
        open_store(tokenizer=OpenAIEncoding("o200k_base"))


@pytest.mark.parametrize("restore", ["transitive", "direct"])
@settings(max_examples=15)
@given(data=st.data())
def test_under_a_budget_exact_counts_fold_as_the_batch_does(open_store, restore, data):
    policy = Policy(budget=40, clear_at_least=10, restore=restore)
    store = open_store(policy, tokenizer=o200k_base)
    messages = data.draw(sessions(min_size=1, max_size=20))
    session = f"s{next(_names)}"
    for i, message in enumerate(messages):
        store.append(session, message)
        batch = prune(messages[: i + 1], policy=policy, tokenizer=o200k_base)
        assert {m.id: m.verdict for m in store.messages(session)} == batch.verdicts
    assert store.stats(session).tokens == batch.tokens_before
    assert store.verify(session).ok


def test_a_given_count_is_kept_through_a_change_of_counter(open_store, store_url):
    store = open_store(Policy(budget=100, clear_at_least=10))
    given = Message("big", "tool_output", "a short text the provider counted as many tokens", 1, tokens=90)
    store.append("s", [given, Message("u", "user", "hello", 2)])
    stored = store.messages("s", ids=["big"])[0]
    assert (stored.tokens, stored.tokens_given, stored.to_message()) == (90, True, given)
    assert store.append("s", given).appended == 0  # the same message again: a retry, nothing written
    with pytest.raises(DuplicateMessageError, match="tokens"):
        store.append("s", Message("big", "tool_output", given.content, 1, tokens=91))
    store.rebuild(tokenizer="o200k_base")
    counted = store.messages("s", ids=["u"])[0]
    assert store.messages("s", ids=["big"])[0].tokens == 90 and counted.tokens == o200k_base.count_message(counted)
    assert store.verify().ok
    batch = prune([m.to_message() for m in store.messages("s")], policy=store.policy, tokenizer=o200k_base)
    assert {m.id: m.verdict for m in store.messages("s")} == batch.verdicts
    assert batch.tokens_before == store.stats("s").tokens
    exported = CliRunner().invoke(main, ["--db", store_url, "messages", "s", "--jsonl"])
    assert exported.exit_code == 0 and '"tokens": 90' in exported.output and exported.output.count('"tokens"') == 1


@pytest.mark.sqlite
@pytest.mark.parametrize("bad", [-1, 2**31, True, "9", 1.5])
def test_a_given_count_must_be_a_whole_number_a_column_holds(bad):
    with pytest.raises(InvalidMessageError, match=r"tokens="):
        Message("m", "user", "text", 1, tokens=bad)

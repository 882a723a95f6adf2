"""``tokens_from_usage=True``: an adapter stores a response with the output tokens its framework reported.

Through each framework's own objects: a LangChain ``AIMessage`` with its
``usage_metadata``, a Pydantic AI ``ModelResponse`` with its ``usage`` (as a
``FunctionModel`` run returns it), and the Anthropic SDK's ``Message`` from
``messages.create`` over a scripted HTTP answer. Without the option, every
message is counted by the store's counter, as before.
"""

from __future__ import annotations

import asyncio

import pytest
from providers import ScriptedAPI

from prunestore import Policy
from prunestore.tokens import message_tokens


def counted(store, message) -> int:
    """What the store's counter gives the stored message."""
    return message_tokens(store.tokenizer, message.to_message())


def assert_tokens(store, session: str, reported: dict[str, int]) -> None:
    """The messages named in `reported` hold those counts, given; every other one its counter's count."""
    stored = store.messages(session)
    assert {m.id for m in stored} >= set(reported)
    for m in stored:
        if m.id in reported:
            assert (m.tokens, m.tokens_given) == (reported[m.id], True), m.id
        else:
            assert (m.tokens, m.tokens_given) == (counted(store, m), False), m.id
    assert store.stats(session).tokens == sum(m.tokens for m in stored)
    assert store.verify(session).ok


@pytest.mark.parametrize("option", [True, False])
def test_langchain_ai_messages_keep_their_output_tokens(open_store, option):
    from langchain_core.messages import AIMessage, HumanMessage

    from prunestore.integrations.langchain import PrunedChatMessageHistory

    store = open_store()
    history = PrunedChatMessageHistory("s", store, tokens_from_usage=option)
    usage = {"input_tokens": 12, "output_tokens": 57, "total_tokens": 69}
    history.add_messages([HumanMessage("Hi."), AIMessage("Hello there, how can I help?", usage_metadata=usage)])
    history.add_messages([HumanMessage("Nothing."), AIMessage("Fine.")])  # no usage: counted
    assert_tokens(store, "s", {"lc-2": 57} if option else {})


@pytest.mark.parametrize("option", [True, False])
def test_pydantic_ai_responses_keep_their_output_tokens(open_store, option):
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.usage import RequestUsage

    from prunestore.integrations.pydantic_ai import PruneStoreHistory

    store = open_store()

    def model(messages, info):
        return ModelResponse(parts=[TextPart("Hello there.")], usage=RequestUsage(input_tokens=9, output_tokens=41))

    agent = Agent(FunctionModel(model), capabilities=[PruneStoreHistory(store, session="s", tokens_from_usage=option)])
    asyncio.run(agent.run("Hi."))
    (response,) = [m.id for m in store.messages("s") if m.role == "assistant"]
    assert_tokens(store, "s", {response: 41} if option else {})


@pytest.mark.parametrize("option", [True, False])
def test_anthropic_sdk_messages_keep_their_output_tokens(open_store, option):
    anthropic = pytest.importorskip("anthropic")
    httpx = pytest.importorskip("httpx2")

    from prunestore.integrations.anthropic_messages import AnthropicHistory

    store = open_store(Policy(budget=10_000))
    answer = {"id": "msg_x", "type": "message", "role": "assistant", "model": "claude-test",
              "content": [{"type": "text", "text": "Hello there."}], "stop_reason": "end_turn",
              "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 33}}  # fmt: skip
    sdk = anthropic.Anthropic(
        api_key="test", http_client=httpx.Client(transport=httpx.MockTransport(ScriptedAPI([answer], httpx.Response)))
    )
    history = AnthropicHistory("s", store, tokens_from_usage=option)
    history.add([{"role": "user", "content": "Hi."}])
    history.add([sdk.messages.create(model="claude-test", max_tokens=100, **history.request())])
    history.add([{"role": "assistant", "content": "And a message of the caller's own."}])  # a dict: no usage
    assert_tokens(store, "s", {"ant-2": 33} if option else {})
    assert store.stats("s").live_tokens == sum(m.tokens for m in store.live("s"))  # the budget counts them so


def test_a_usage_of_zero_or_none_is_not_a_count():
    from prunestore.integrations._shared import reported_tokens

    on = {"tokens_from_usage": True}
    assert [reported_tokens(on, n) for n in (0, None, True, "5", 5)] == [None, None, None, None, 5]
    assert reported_tokens({}, 5) is None


def test_an_option_an_adapter_does_not_know_is_refused_by_name(store):
    from prunestore import InvalidArgumentError
    from prunestore.integrations.anthropic_messages import AnthropicHistory
    from prunestore.integrations.langchain import PrunedChatMessageHistory, PruneStoreMiddleware
    from prunestore.integrations.openai_chat import OpenAIChatHistory
    from prunestore.integrations.openai_responses import OpenAIResponsesHistory
    from prunestore.integrations.pydantic_ai import PruneStoreHistory

    makers = [
        lambda **o: AnthropicHistory("s", store, **o),
        lambda **o: PrunedChatMessageHistory("s", store, **o),
        lambda **o: PruneStoreMiddleware(store, **o),
        lambda **o: PruneStoreHistory(store, **o),
        lambda **o: OpenAIChatHistory("s", store, **o),
        lambda **o: OpenAIResponsesHistory("s", store, **o),
    ]
    for make in makers:
        make(keep_tools=["send_mail"], ttl={"ls": 2})  # known ones are taken
        with pytest.raises(InvalidArgumentError, match="keep_tool=\\['send_mail'\\]: not an option"):
            make(keep_tool=["send_mail"])  # a typo is not ignored
    for make in makers[4:]:  # plain messages and items carry no usage
        with pytest.raises(InvalidArgumentError, match="tokens_from_usage=True"):
            make(tokens_from_usage=True)
    assert store.sessions() == []  # nothing written

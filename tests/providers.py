"""What the providers accept, written down as validators, and generated agent transcripts to feed them.

The validators check what the APIs reject with a 400: a tool result that
does not follow the assistant message with its call, a call without its
result, an empty assistant message, and for Anthropic two messages of the
same role in a row or text before the tool results of a user message.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st


def validate_openai(messages: list[dict], *, waiting_at_end: bool = False) -> None:
    """With `waiting_at_end`, the last assistant message's calls may still wait for their results."""
    pending: set[str] | None = None
    for n, m in enumerate(messages):
        role = m.get("role")
        assert role in ("system", "developer", "user", "assistant", "tool"), (n, role)
        if role == "tool":
            assert pending is not None and m.get("tool_call_id") in pending, f"{n}: tool result without its call"
            pending.discard(m["tool_call_id"])
            continue
        assert not pending, f"{n}: calls {pending} have no result"
        pending = None
        if role == "assistant":
            calls = m.get("tool_calls") or []
            assert calls or m.get("content") not in (None, "", []), f"{n}: empty assistant message"
            ids = [c["id"] for c in calls]
            assert len(set(ids)) == len(ids), f"{n}: a call id twice"
            pending = set(ids)
    assert waiting_at_end or not pending, f"calls {pending} at the end have no result"


def validate_anthropic(system: object, messages: list[dict], *, waiting_at_end: bool = False) -> None:
    """With `waiting_at_end`, the last assistant message's calls may still wait for their results."""
    assert system is None or isinstance(system, (str, list)), system
    previous = None
    pending: set[str] = set()
    for n, m in enumerate(messages):
        role, content = m.get("role"), m.get("content")
        assert role in ("user", "assistant"), (n, role)
        assert role != previous, f"{n}: two {role} messages in a row"
        assert content not in ("", [], None), f"{n}: empty message"
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if role == "user":
            results = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
            waiting = waiting_at_end and n == len(messages) - 1  # the caller adds the missing results
            assert len(set(results)) == len(results), f"{n}: a result twice"
            assert set(results) <= pending if waiting else set(results) == pending, f"{n}: {results} != {pending}"
            firsts = [b["type"] == "tool_result" for b in blocks]
            assert firsts == sorted(firsts, reverse=True), f"{n}: text before a tool result"
            pending = set()
        else:
            assert not any(b["type"] == "tool_result" for b in blocks), f"{n}: a tool result from the assistant"
            # Extended thinking: an assistant turn with reasoning starts with it (the API refuses a final one
            # that does not), and reasoning is never sent alone.
            reasoning = [b["type"] in ("thinking", "redacted_thinking") for b in blocks]
            assert not any(reasoning) or reasoning[0], f"{n}: reasoning that does not lead its turn"
            assert not all(reasoning), f"{n}: reasoning alone"
            pending = {b["id"] for b in blocks if b["type"] == "tool_use"}
        previous = role
    assert waiting_at_end or not pending, f"calls {pending} at the end have no result"


TOOLS: dict[str, list[str | None]] = {
    "search": ["prunestore", "sqlite wal", "alembic"],
    "run_sql": ["SELECT 1", "SELECT count(*) FROM t"],
    "get_user_settings": [None],
    "fetch_doc": ["guide", "faq", "changelog"],  # a document tool: its results are passages
}
PASSAGES = ["Passage about setup.", "Passage about pruning.", "passage about  SETUP."]


@st.composite
def openai_transcripts(draw, unique: bool = False, max_turns: int = 5, reused_ids: bool = False) -> list[dict]:
    """A Chat Completions agent transcript: parallel calls, repeated calls, duplicate passages, a call still
    waiting for its result at the end, and abandoned calls (no result ever came, the conversation went on).

    With `unique`, every call and result differs, so nothing is pruned. With `reused_ids`, each message
    numbers its calls from ``call_0``, as some providers do.
    """
    messages: list[dict] = [{"role": "system", "content": "You are a careful agent."}]
    calls_made = 0
    turns = draw(st.integers(1, max_turns))
    for turn in range(turns):
        text = draw(st.sampled_from(["Find it.", "My preferred format is CSV.", "Again, please."]))
        messages.append({"role": "user", "content": f"{text} ({turn})" if unique else text})
        steps = draw(st.integers(0, 3))
        for step in range(steps):
            calls: list[dict[str, Any]] = []
            for number in range(draw(st.integers(0, 3))):
                calls_made += 1
                name = draw(st.sampled_from(sorted(TOOLS)))
                argument = draw(st.sampled_from(TOOLS[name]))
                arguments = {} if argument is None else {"q": argument}
                if unique:
                    arguments["n"] = calls_made
                spacing = draw(st.sampled_from([(",", ":"), (", ", ": ")]))  # equal calls, different whitespace
                calls.append(
                    {
                        "id": f"call_{number}" if reused_ids else f"call_{calls_made}",
                        "type": "function",
                        "function": {"name": name, "arguments": json.dumps(arguments, separators=spacing)},
                    }
                )
            if calls:
                message = {
                    "role": "assistant",
                    "content": draw(st.sampled_from([None, "Let me check."])),
                    "tool_calls": calls,
                }
            else:
                message = {"role": "assistant", "content": f"Here is the answer {calls_made}."}
            messages.append(message)
            last = turn == turns - 1 and step == steps - 1
            for call in calls:
                if last and draw(st.booleans()):
                    continue  # no result yet: the call is still running
                if not unique and draw(st.integers(0, 9)) == 0:
                    continue  # abandoned: the tool never answered
                name = call["function"]["name"]
                if name == "fetch_doc":
                    content = f"{draw(st.sampled_from(PASSAGES))} {arguments_of(call) if unique else ''}".strip()
                else:
                    content = f"{name} says {draw(st.integers(0, 2)) if not unique else arguments_of(call)}"
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
    return messages


def arguments_of(call: dict) -> str:
    """A call's arguments: with `unique`, they tell every call apart (its id may not)."""
    return call["function"]["arguments"]


def anthropic_from_openai(messages: list[dict]) -> tuple[str | None, list[dict]]:
    """The same conversation as the Messages API records it: results as blocks of one user message."""
    system = None
    out: list[dict] = []
    for m in messages:
        if m["role"] == "system":
            system = m["content"]
        elif m["role"] == "assistant":
            blocks = [{"type": "text", "text": m["content"]}] if m.get("content") else []
            blocks += [
                {
                    "type": "tool_use",
                    "id": c["id"],
                    "name": c["function"]["name"],
                    "input": json.loads(c["function"]["arguments"]),
                }
                for c in m.get("tool_calls") or []
            ]
            if out and out[-1]["role"] == "assistant":  # the API wants one message per side in a row
                out[-1]["content"].extend(blocks)
            else:
                out.append({"role": "assistant", "content": blocks})
        elif m["role"] == "tool":
            block = {"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": m["content"]}
            if out and out[-1]["role"] == "user":
                out[-1]["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
        elif out and out[-1]["role"] == "user":
            if isinstance(out[-1]["content"], str):
                out[-1]["content"] = [{"type": "text", "text": out[-1]["content"]}]
            out[-1]["content"].append({"type": "text", "text": m["content"]})  # text after the results
        else:
            out.append({"role": "user", "content": m["content"]})
    return system, out


class ScriptedAPI:
    """The HTTP side of a provider's API for an SDK's ``MockTransport``: records each request's JSON body
    and answers with the next body of the script, as a `response` (the SDK's HTTP library's class)."""

    def __init__(self, script: list[dict], response: Any) -> None:
        self.answers = iter(script)
        self.bodies: list[dict] = []
        self.response = response

    def __call__(self, request: Any) -> Any:
        self.bodies.append(json.loads(request.content))
        return self.response(200, json=next(self.answers))

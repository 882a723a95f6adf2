"""A tool loop on the Anthropic SDK whose history lives in prunestore (no network: the model is scripted).

Each turn the user asks for the weather; the model calls the weather tool,
then answers. When a city comes up again, the new result supersedes the
old one, and the old call goes with it (with the model's reasoning about
it). Run it twice: the session is on disk and goes on.

    pip install '.[anthropic]'
    python examples/anthropic_messages.py   # PRUNESTORE_URL, else sqlite:///prunestore.db
"""

from __future__ import annotations

import json
import os
import uuid

import anthropic
import httpx2

from prunestore import PruneStore
from prunestore.integrations.anthropic_messages import AnthropicHistory

TOOLS = [{"name": "weather", "description": "Today's weather in a city.", "input_schema": {"type": "object"}}]


def scripted_model(request: httpx2.Request) -> httpx2.Response:
    """A stand-in for the Messages API: asks for the weather of the city in the last question, then answers."""
    messages = json.loads(request.content)["messages"]
    last = messages[-1]["content"]
    if isinstance(last, list) and last[0]["type"] == "tool_result":
        content = [{"type": "text", "text": f"It is {last[0]['content']}."}]
    else:
        city = (last if isinstance(last, str) else last[-1]["text"]).split()[-1].rstrip("?")
        content = [
            {"type": "thinking", "thinking": f"The user asks about {city}.", "signature": "c2lnbmF0dXJl"},
            {"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:12]}", "name": "weather", "input": {"city": city}},
        ]
    stop = "tool_use" if content[-1]["type"] == "tool_use" else "end_turn"
    usage = {"input_tokens": len(request.content) // 4, "output_tokens": 20}
    body = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": content}
    return httpx2.Response(200, json={**body, "stop_reason": stop, "stop_sequence": None, "usage": usage})


def weather(city: str) -> str:
    return {"Paris": "sunny", "Oslo": "snowing"}.get(city, "raining")


def main() -> None:
    client = anthropic.Anthropic(
        api_key="offline", http_client=httpx2.Client(transport=httpx2.MockTransport(scripted_model))
    )
    with PruneStore(os.environ.get("PRUNESTORE_URL", "sqlite:///prunestore.db")) as store:
        history = AnthropicHistory("weather-chat", store, system="Be brief.")
        for question in ["What is the weather in Paris?", "And in Oslo?", "Once more for Paris?"]:
            history.add([{"role": "user", "content": question}])
            while True:
                request = history.request()  # system and messages, each with a cache breakpoint
                sent = request["messages"]
                response = client.messages.create(model="claude-sonnet-4-5", max_tokens=512, tools=TOOLS, **request)
                history.add([response])
                calls = [b for b in response.content if b.type == "tool_use"]
                if not calls:
                    break
                results = [
                    {"type": "tool_result", "tool_use_id": c.id, "content": weather(c.input["city"])} for c in calls
                ]
                history.add([{"role": "user", "content": results}])
            print(f"{question:32} -> {response.content[0].text:18} prompt: {len(sent)} messages")
        calls = [
            b["input"]["city"]
            for m in history.messages()
            if isinstance(m["content"], list)
            for b in m["content"]
            if b["type"] == "tool_use"
        ]
        print(f"calls in the prompt: {', '.join(calls)}; stored: {len(store.messages('weather-chat'))} messages")
        print("verify:", "ok" if store.verify().ok else "MISMATCH")


if __name__ == "__main__":
    main()

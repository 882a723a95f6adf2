"""A tool loop on the OpenAI Responses API whose input lives in prunestore (no network: the model is scripted).

The code keeps the conversation itself (``store=False``) and sends the
model's reasoning back with ``include=["reasoning.encrypted_content"]``.
When a folder is listed again, the new output supersedes the old one, and
the old call goes with it, with the reasoning item that preceded it. Run it
twice: the session is on disk and goes on.

    pip install '.[openai]'
    python examples/openai_responses.py   # PRUNESTORE_URL, else sqlite:///prunestore.db
"""

from __future__ import annotations

import json
import os
import uuid

import httpx
import openai

from prunestore import PruneStore
from prunestore.integrations.openai_responses import OpenAIResponsesHistory

TOOLS = [{"type": "function", "name": "ls", "description": "List a folder.", "parameters": {"type": "object"}}]


def scripted_model(request: httpx.Request) -> httpx.Response:
    """A stand-in for the Responses API: lists the folder in the last question, then answers."""
    last = json.loads(request.content)["input"][-1]
    item_id = uuid.uuid4().hex[:8]
    if last.get("type") == "function_call_output":
        text = {"type": "output_text", "text": f"It holds {last['output']}.", "annotations": []}
        output = [{"type": "message", "id": f"msg_{item_id}", "role": "assistant", "content": [text]}]
    else:
        folder = last["content"].split()[-1].rstrip("?")
        arguments = json.dumps({"path": folder})
        output = [
            {"type": "reasoning", "id": f"rs_{item_id}", "summary": [], "encrypted_content": "ZW5jcnlwdGVk"},
            {
                "type": "function_call",
                "id": f"fc_{item_id}",
                "call_id": f"call_{item_id}",
                "name": "ls",
                "arguments": arguments,
            },
        ]
    body = {"id": "resp_1", "object": "response", "created_at": 0, "model": "gpt-5", "status": "completed"}
    return httpx.Response(200, json={**body, "output": output, "tools": TOOLS, "parallel_tool_calls": True})


def ls(path: str) -> str:
    return {"/data": "a.csv and b.csv", "/logs": "app.log"}.get(path, "nothing")


def main() -> None:
    client = openai.OpenAI(api_key="offline", http_client=httpx.Client(transport=httpx.MockTransport(scripted_model)))
    with PruneStore(os.environ.get("PRUNESTORE_URL", "sqlite:///prunestore.db")) as store:
        history = OpenAIResponsesHistory("files-chat", store)
        for question in ["What is in /data?", "And in /logs?", "Once more, what is in /data?"]:
            history.add([{"role": "user", "content": question}])
            while True:
                sent = history.items()
                response = client.responses.create(
                    model="gpt-5", input=sent, tools=TOOLS, store=False, include=["reasoning.encrypted_content"]
                )
                history.add(response.output)
                calls = [item for item in response.output if item.type == "function_call"]
                if not calls:
                    break
                history.add(
                    [
                        {
                            "type": "function_call_output",
                            "call_id": c.call_id,
                            "output": ls(json.loads(c.arguments)["path"]),
                        }
                        for c in calls
                    ]
                )
            print(f"{question:30} -> {response.output_text:26} input: {len(sent)} items")
        calls = [json.loads(i["arguments"])["path"] for i in history.items() if i.get("type") == "function_call"]
        print(f"calls in the input: {', '.join(calls)}; stored: {len(store.messages('files-chat'))} items")
        print("verify:", "ok" if store.verify().ok else "MISMATCH")


if __name__ == "__main__":
    main()

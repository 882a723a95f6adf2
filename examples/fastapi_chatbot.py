"""A multi-session chat endpoint on FastAPI whose every prompt is built from the live history.

POST /sessions/{session}/messages {"content": "..."} stores the user's
message, builds the prompt from what is live (`AsyncPruneStore.render`),
asks the model (a stub here: it lists files when asked about files, which
makes the older listings stale), stores what it said, and returns the reply
with the sizes of the prompt and of the stored history.

    pip install 'prunestore[asyncio]' fastapi uvicorn
    python examples/fastapi_chatbot.py         # PRUNESTORE_URL, else sqlite:///prunestore.db
"""

from __future__ import annotations

import json
import uuid
from contextlib import asynccontextmanager
from dataclasses import replace

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from prunestore import AsyncPruneStore, SessionNotFoundError
from prunestore.formats import Continuation, from_openai

FILES = ["orders.csv", "refunds.csv"]


class UserMessage(BaseModel):
    content: str


class Reply(BaseModel):
    reply: str
    prompt_messages: int
    prompt_tokens: int
    stored_messages: int


def stub_model(prompt: list[dict]) -> dict:
    """A stand-in for an LLM: calls list_files when the question is about files, then answers."""
    last = prompt[-1]
    if last["role"] == "user" and "file" in last["content"].lower():
        call = {
            "id": f"call-{uuid.uuid4().hex[:8]}",
            "type": "function",
            "function": {"name": "list_files", "arguments": "{}"},
        }
        return {"role": "assistant", "content": None, "tool_calls": [call]}
    if last["role"] == "tool":
        return {"role": "assistant", "content": f"There are {len(json.loads(last['content']))} files."}
    return {"role": "assistant", "content": f"You said: {last['content']}"}


@asynccontextmanager
async def lifespan(app: FastAPI):
    async with AsyncPruneStore() as store:
        app.state.store = store
        yield


app = FastAPI(lifespan=lifespan)


@app.exception_handler(SessionNotFoundError)
async def no_such_session(request: Request, exc: SessionNotFoundError) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=404)


@app.post("/sessions/{session}/messages")
async def chat(session: str, message: UserMessage) -> Reply:
    store: AsyncPruneStore = app.state.store
    try:
        continuation = Continuation.after(await store.messages(session))
    except SessionNotFoundError:
        continuation = Continuation()

    async def store_openai(*items: dict) -> None:
        # Random ids (a tool result keeps its call id), so concurrent requests never collide.
        messages = from_openai(list(items), continuation=continuation)
        await store.append(
            session, [m if m.role == "tool_output" else replace(m, id=uuid.uuid4().hex) for m in messages]
        )

    await store_openai({"role": "user", "content": message.content})
    while True:
        prompt = await store.render(session, "openai")
        answer = stub_model(prompt.messages)
        await store_openai(answer)
        if not answer.get("tool_calls"):
            break
        for call in answer["tool_calls"]:  # run the tools, store their results
            await store_openai({"role": "tool", "tool_call_id": call["id"], "content": json.dumps(FILES)})
    stats = await store.stats(session)
    return Reply(
        reply=answer["content"],
        prompt_messages=prompt.report.messages_out,
        prompt_tokens=prompt.report.tokens_out,
        stored_messages=stats.messages,
    )


@app.get("/sessions/{session}/prompt")
async def prompt(session: str) -> list[dict]:
    """The prompt the next turn would send (404 for a session the store does not hold)."""
    return (await app.state.store.render(session, "openai")).messages


if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app)

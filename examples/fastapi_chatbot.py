"""A multi-session chat endpoint on FastAPI whose every prompt is built from the live history.

POST /sessions/{session}/messages {"content": "..."} stores the user's
message, builds the prompt from what is live (`OpenAIChatHistory`: the pruned
Chat Completions messages, kept in the store's cache and patched from each
append, so a turn costs the same at any length), asks the model (a stub
here: it lists files when asked about files, which makes the older listings
stale), stores what it said, and returns the reply with the sizes of the
prompt and of the stored history. Concurrent requests on one session are
safe: turns and tool keys are read from the store as each message is stored.

    pip install fastapi uvicorn
    python examples/fastapi_chatbot.py         # PRUNESTORE_URL, else sqlite:///prunestore.db
"""

from __future__ import annotations

import json
import uuid
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from prunestore import AsyncPruneStore, SessionNotFoundError, count_tokens
from prunestore.integrations.openai_chat import OpenAIChatHistory

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
    history = OpenAIChatHistory(session, store)
    await history.aadd([{"role": "user", "content": message.content}])
    while True:
        prompt = await history.amessages()
        answer = stub_model(prompt)
        await history.aadd([answer])
        if not answer.get("tool_calls"):
            break
        for call in answer["tool_calls"]:  # run the tools, store their results
            await history.aadd([{"role": "tool", "tool_call_id": call["id"], "content": json.dumps(FILES)}])
    stats = await store.stats(session)
    return Reply(
        reply=answer["content"],
        prompt_messages=len(prompt),
        prompt_tokens=sum(count_tokens(m.get("content") or "") for m in prompt),
        stored_messages=stats.messages,
    )


@app.get("/sessions/{session}/prompt")
async def prompt(session: str) -> list[dict]:
    """The prompt the next turn would send (404 for a session the store does not hold)."""
    await app.state.store.stats(session)  # raises SessionNotFoundError for an unknown session
    return await OpenAIChatHistory(session, app.state.store).amessages()


if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app)

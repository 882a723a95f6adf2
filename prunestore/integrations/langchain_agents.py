"""A middleware for LangChain v1 agents: the model sees the thread's pruned history, the checkpointer keeps it whole.

Needs ``langchain`` 1.x (``pip install '.[langchain]'``). Give it to
``create_agent(..., middleware=[PruneStoreMiddleware(store)])``: before
each model call it appends the agent state's new messages to the store
session of the LangGraph thread, then calls the model with the store's
prompt in place of the state's messages. The state, and so the
checkpointer, is never edited. A run's last answer is stored at the
thread's next model call: a hook after the run would cost every run one
more checkpoint of the whole state.

Appends are idempotent by message id (LangGraph gives every message in the
state one): a node that runs again (a retry, a resume after an interrupt,
another process on the same thread) appends nothing twice. Messages are
stored and pruned as `PrunedChatMessageHistory` stores them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

try:
    from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
    from langchain.tools import ToolRuntime
    from langchain_core.messages import BaseMessage
    from langchain_core.tools import BaseTool, StructuredTool
except ModuleNotFoundError as exc:
    raise ModuleNotFoundError(
        f"PruneStoreMiddleware needs langchain 1.x ({exc.name} is missing): install the langchain extra "
        "(python -m pip install '.[langchain]' in prunestore's folder)",
        name=exc.name,
    ) from exc

from ..aio import AsyncPruneStore
from ..errors import InvalidArgumentError
from ..model import Message
from ..sql.sessions import SessionState
from ..store import PruneStore
from ._langchain_messages import LANGCHAIN, builder
from ._shared import (
    RECALL_DESCRIPTION,
    blocking,
    checked_options,
    on_store,
    recall_answer,
    recall_answer_blocking,
    unstored,
)

__all__ = ["PruneStoreMiddleware"]

SessionName = str | Callable[[Any], str] | None


class PruneStoreMiddleware(AgentMiddleware):
    """Prune what a ``create_agent`` agent's model sees, keeping the thread's full state in its checkpointer.

    `store` is a `PruneStore` (for ``invoke``/``stream``; ``ainvoke`` runs it
    in a worker thread) or an `AsyncPruneStore` (``ainvoke``/``astream``
    only). `session` names the store session: by default the thread's
    ``thread_id``, so the agent needs a checkpointer and a thread; an agent
    running inside another graph's node (a subagent called from a tool) gets
    a session of its own per call, named after the thread and the node. A
    string fixes the name; a function of the LangGraph ``Runtime`` computes
    it. Keyword options (``document_tools``, ``keep_tools``, ``ttl``,
    ``keys_of``) say how tool results are pruned, as for `from_openai`.
    With ``tokens_from_usage=True`` a model's response is stored with the output
    tokens its framework reported (docs/integrations.md).

    With ``recall=True`` the agent gets a tool, ``recall(words)``, that looks
    up the thread's messages no longer in the prompt (`PruneStore.recall`):
    what the model asks back comes as that tool's result.

    The messages handed to the model are shared with the store's cache: a
    middleware placed after this one must copy a message before changing it.
    """

    def __init__(
        self, store: PruneStore | AsyncPruneStore, *, session: SessionName = None, recall: bool = False, **options: Any
    ) -> None:
        super().__init__()
        self.store = store
        self.session = session
        self.options = checked_options(options)
        self.tools: list[BaseTool] = [self._recall_tool()] if recall else []

    def session_of(self, runtime: Any) -> str:
        """The store session of the thread `runtime` runs in."""
        if isinstance(self.session, str):
            return self.session
        if self.session is not None:
            return self.session(runtime)
        info = getattr(runtime, "execution_info", None)
        thread = getattr(info, "thread_id", None)
        if thread is None or thread == "":
            raise InvalidArgumentError(
                "thread_id=None: PruneStoreMiddleware keys the store by the LangGraph thread; give the agent a "
                "checkpointer and invoke it with config={'configurable': {'thread_id': ...}}, or name the "
                "session with PruneStoreMiddleware(store, session=...)"
            )
        caller = str(getattr(info, "checkpoint_ns", "") or "").rpartition("|")[0]
        return f"{thread}|{caller}" if caller else str(thread)

    # -- the model call ---------------------------------------------------------

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse | Any:
        store = self._blocking()
        name = self.session_of(request.runtime)
        store.append_with(name, _new_messages(request.state["messages"], self.options))
        return handler(request.override(messages=list(store.view(name, LANGCHAIN))))

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ModelResponse | Any:
        name = self.session_of(request.runtime)
        await on_store(self.store, "append_with", name, _new_messages(request.state["messages"], self.options))
        prompt = await on_store(self.store, "view", name, LANGCHAIN)
        return await handler(request.override(messages=list(prompt)))

    def _recall_tool(self) -> BaseTool:
        """The agent's look-up of its thread's pruned messages (the thread's session, as the model call's)."""

        def recall(words: str, runtime: ToolRuntime) -> str:
            return recall_answer_blocking(self._blocking(), self.session_of(runtime), words)

        async def arecall(words: str, runtime: ToolRuntime) -> str:
            return await recall_answer(self.store, self.session_of(runtime), words)

        return StructuredTool.from_function(recall, coroutine=arecall, name="recall", description=RECALL_DESCRIPTION)

    def _blocking(self) -> PruneStore:
        return blocking(self.store, "the agent's async methods (ainvoke, astream)")


def _new_messages(messages: Sequence[BaseMessage], options: dict[str, Any]) -> Callable[[SessionState], list[Message]]:
    """The builder that appends, under the session's lock, the messages of `messages` the session lacks."""

    def id_at(place: int) -> str:
        return messages[place].id or f"lc-at-{place}"

    def build(state: SessionState) -> list[Message]:
        new = unstored(state, len(messages), id_at, state.last_id())
        return builder([messages[i] for i in new], options, list(map(id_at, new)))(state) if new else []

    return build

"""A Pydantic AI capability: each model request of an agent is sent the conversation's pruned history.

Needs ``pydantic-ai`` (or ``pydantic-ai-slim``) 2.x (``pip install
'.[pydantic-ai]'``). Give it to the agent,
``Agent(model, capabilities=[PruneStoreHistory(store)])``, and run with a
conversation id (``agent.run(prompt, conversation_id="user-42")``), or with
``message_history=`` as usual: before each model request it appends the
run's messages that the store session does not hold yet, and sends the
model the session's prompt in place of the run's messages; after the run it
stores the run's last answer. The run's own messages (``result.all_messages()``)
are left as Pydantic AI made them.

Each message is stored as ``ModelMessagesTypeAdapter`` dumps it, so what the
model is sent is what Pydantic AI would send wherever nothing was pruned. A
request is stored in pieces: each tool return part on its own, keyed by its
call's tool name and canonical arguments (a later identical call supersedes
it), the other parts together; the pieces of a request that are in the
prompt are sent as one request again. A tool call part goes when its return
is pruned, and a response left with nothing to send goes.

A message's store id is derived from its run (``run_id`` and its place among
that run's messages), so a request step that runs again, a run resumed with
``message_history=result.all_messages()`` and another process on the same
conversation append nothing twice. Messages handed to the model carry their
store id in ``metadata["prunestore_id"]`` (metadata is never sent to a
model), so a history passed back from them is recognised too.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

try:
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.messages import (
        ModelMessage,
        ModelMessagesTypeAdapter,
        ModelRequest,
        ModelResponse,
        SystemPromptPart,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )
    from pydantic_ai.tools import RunContext
    from pydantic_ai.toolsets import FunctionToolset
except ModuleNotFoundError as exc:
    raise ModuleNotFoundError(
        f"prunestore.integrations.pydantic_ai needs pydantic-ai 2.x ({exc.name} is missing): install the "
        "pydantic-ai extra (python -m pip install '.[pydantic-ai]' in prunestore's folder)",
        name=exc.name,
    ) from exc

from ..aio import AsyncPruneStore
from ..errors import InvalidArgumentError, SessionNotFoundError
from ..model import Message, Role, StoredMessage
from ..prices import common_prefix
from ..sql.sessions import SessionState
from ..store import PruneStore
from ..views import Unit
from ._shared import (
    RECALL_DESCRIPTION,
    checked_options,
    importer_after,
    on_store,
    recall_answer,
    reported_tokens,
    unstored,
    with_call_keys,
)

__all__ = ["PruneStoreHistory", "PYDANTIC_AI"]

_ID = "prunestore_id"  # the metadata entry that names a message handed out by the store
_PIECE = "/"  # a request's pieces after the first are stored as <id>/<n>


class PruneStoreHistory(AbstractCapability[Any]):
    """A conversation's messages in a prunestore session, and its pruned prompt for each model request.

    `store` is a `PruneStore` (its calls run in a worker thread) or an
    `AsyncPruneStore`. `session` names the store session: by default the
    run's ``conversation_id``; a string fixes it, a function of the
    ``RunContext`` computes it. Keyword options (``document_tools``,
    ``keep_tools``, ``ttl``, ``keys_of``) say how tool returns are pruned, as
    for `from_openai`.
    With ``tokens_from_usage=True`` a model's response is stored with the output
    tokens its framework reported (docs/integrations.md).

    With ``recall=True`` the agent gets a tool, ``recall(words)``, that looks
    up the conversation's messages no longer in the prompt (`PruneStore.recall`):
    what the model asks back comes as that tool's return.
    """

    def __init__(
        self,
        store: PruneStore | AsyncPruneStore,
        *,
        session: str | Callable[[Any], str] | None = None,
        recall: bool = False,
        **options: Any,
    ) -> None:
        self.store = store
        self.session = session
        self.options = checked_options(options)
        self.recall = recall
        self._joined: OrderedDict[str, _Joined] = OrderedDict()  # per session, the last prompt joined
        self._lock = threading.Lock()

    def session_of(self, ctx: Any) -> str:
        """The store session of the conversation `ctx` (a ``RunContext``) belongs to."""
        if isinstance(self.session, str):
            return self.session
        if self.session is not None:
            return self.session(ctx)
        if not ctx.conversation_id:
            raise InvalidArgumentError("conversation_id=None: name the session with PruneStoreHistory(session=...)")
        return str(ctx.conversation_id)

    def get_toolset(self) -> FunctionToolset[Any] | None:
        if not self.recall:
            return None

        async def recall(ctx: RunContext[Any], words: str) -> str:
            return await recall_answer(self.store, self.session_of(ctx), words)

        toolset: FunctionToolset[Any] = FunctionToolset()
        toolset.add_function(recall, takes_ctx=True, name="recall", description=RECALL_DESCRIPTION)
        return toolset

    async def messages(self, session: str) -> list[ModelMessage]:
        """The session's pruned history, as ``message_history=`` takes it; a new list, messages read-only."""
        try:
            return self._prompt(session, await on_store(self.store, "view", session, PYDANTIC_AI))
        except SessionNotFoundError:
            return []

    async def before_model_request(self, ctx: Any, request_context: Any) -> Any:
        name = self.session_of(ctx)
        await on_store(self.store, "append_with", name, _new_messages(ctx.messages, self.options))
        prompt = await on_store(self.store, "view", name, PYDANTIC_AI)
        return dataclasses.replace(request_context, messages=self._prompt(name, prompt))

    async def after_run(self, ctx: Any, *, result: Any) -> Any:
        """Store the run's last answer now, not at the conversation's next model request."""
        build = _new_messages(result.all_messages(), self.options)
        await on_store(self.store, "append_with", self.session_of(ctx), build)
        return result

    def _prompt(self, session: str, items: list[ModelMessage]) -> list[ModelMessage]:
        """`_requests_joined(items)`, joining only from where the items differ from the session's last ones
        (the view's items are shared until their row changes)."""
        with self._lock:
            last = self._joined.pop(session, None)
        out: list[ModelMessage] = []
        ends: list[int] = []  # the place in `items` of each message's last piece
        if last is not None:
            keep = bisect_right(last.ends, common_prefix(last.items, items) - 1)
            out, ends = last.messages[:keep], last.ends[:keep]
        for place in range(ends[-1] + 1 if ends else 0, len(items)):
            item = items[place]
            before = out[-1] if out else None
            if isinstance(item, ModelRequest) and isinstance(before, ModelRequest) and _same_request(before, item):
                out[-1], ends[-1] = dataclasses.replace(before, parts=[*before.parts, *item.parts]), place
            else:
                out.append(item)
                ends.append(place)
        with self._lock:
            self._joined[session] = _Joined(items, out, ends)
            while len(self._joined) > _JOINED_SESSIONS:
                self._joined.popitem(last=False)
        return out[:]


# -- messages in ----------------------------------------------------------------------------


def _new_messages(messages: Sequence[ModelMessage], options: dict[str, Any]) -> Callable[[SessionState], list[Message]]:
    """The builder that appends, under the session's lock, the messages the session lacks (ids worked
    out from the end, only back to the session's last message)."""
    ids = _Ids(messages)

    def build(state: SessionState) -> list[Message]:
        last = (state.last_id() or "").split(_PIECE)[0]
        new = [i for i in unstored(state, len(messages), ids.__getitem__, last) if not _handed_out(messages[i])]
        return _stored_form([messages[i] for i in new], [ids[i] for i in new], options)(state) if new else []

    return build


class _Ids:
    """Each message's store id: the one it was handed out with, else ``pa-<run id>-<place>``, its place
    among the messages of its run not handed out (``pa-at-<place in the list>`` without a run id).

    Worked out as asked, a run at a time: Pydantic AI puts a run's messages after the history it was
    given, so a run's messages sit together, and an id needs only those of its run before it.
    """

    def __init__(self, messages: Sequence[ModelMessage]) -> None:
        self.messages = messages
        self.known: dict[int, str] = {}

    def __getitem__(self, place: int) -> str:
        if place not in self.known:
            self._work_out(place)
        return self.known[place]

    def _work_out(self, place: int) -> None:
        messages, run = self.messages, self.messages[place].run_id
        first = place
        while run is not None and first > 0 and messages[first - 1].run_id == run:
            first -= 1
        count = 0
        for at in range(first, place + 1):
            handed = _handed_out(messages[at])
            if handed is not None:
                self.known[at] = handed
            elif run is None:
                self.known[at] = f"pa-at-{at}"
            else:
                self.known[at] = f"pa-{run}-{count}"
                count += 1


def _handed_out(message: ModelMessage) -> str | None:
    metadata = message.metadata
    return metadata.get(_ID) if isinstance(metadata, dict) else None


def _stored_form(
    messages: list[ModelMessage], ids: list[str], options: dict[str, Any]
) -> Callable[[SessionState], list[Message]]:
    made = {
        p.tool_call_id for m in messages if isinstance(m, ModelResponse) for p in m.parts if isinstance(p, ToolCallPart)
    }
    answered = [p.tool_call_id for m in messages if isinstance(m, ModelRequest) for p in _returns(m.parts)]
    earlier = [call_id for call_id in answered if call_id not in made]

    def build(state: SessionState) -> list[Message]:
        # Pydantic AI merges consecutive requests of two runs into one without a run id, whose id is new: its
        # returns the session holds already are not stored again.
        done = state.answered(earlier)
        importer = importer_after(state, [c for c in answered if c not in done], _calls, options)
        out: list[Message] = []
        for message, message_id in zip(messages, ids, strict=True):
            if isinstance(message, ModelResponse):
                calls = [p for p in message.parts if isinstance(p, ToolCallPart)]
                for call in calls:
                    importer.calls[call.tool_call_id] = (call.tool_name, call.args_as_dict())
                text = "\n".join(
                    [p.content for p in message.parts if isinstance(p, TextPart)]
                    + [f"{c.tool_name}({_json(c.args_as_dict())})" for c in calls]
                )
                tokens = reported_tokens(options, message.usage.output_tokens)
                metadata = _dumped(message, message_id)
                stored = Message(message_id, "assistant", text, importer.turn, metadata=metadata, tokens=tokens)
                out.append(with_call_keys(stored, makes=[c.tool_call_id for c in calls]))
                continue
            for n, parts in enumerate(_pieces(message)):
                if isinstance(parts[0], ToolReturnPart) and parts[0].tool_call_id in done:
                    continue
                piece_id = message_id if n == 0 else f"{message_id}{_PIECE}{n}"
                metadata = _dumped(dataclasses.replace(message, parts=parts), message_id)
                if isinstance(parts[0], ToolReturnPart):
                    result = parts[0]
                    stored = importer.result(piece_id, result.tool_call_id, result.model_response_str(), metadata)
                    out.append(with_call_keys(stored, answers=result.tool_call_id))
                    continue
                text = "\n".join(_part_text(p) for p in parts if isinstance(p, (UserPromptPart, SystemPromptPart)))
                asks = any(isinstance(p, UserPromptPart) for p in parts)
                role: Role = "system" if all(isinstance(p, SystemPromptPart) for p in parts) else "user"
                turn = importer.advance(0, asks and bool(text.strip()))
                out.append(Message(piece_id, role, text, turn, metadata=metadata))
        return out

    return build


def _returns(parts: Sequence[Any]) -> list[ToolReturnPart]:
    return [p for p in parts if isinstance(p, ToolReturnPart) and p.tool_call_id]


def _pieces(request: ModelRequest) -> list[list[Any]]:
    """A request's parts in order: each tool return alone, the parts between them together."""
    pieces: list[list[Any]] = []
    for part in request.parts:
        if isinstance(part, ToolReturnPart) and part.tool_call_id:
            pieces.append([part])
        elif pieces and not isinstance(pieces[-1][0], ToolReturnPart):
            pieces[-1].append(part)
        else:
            pieces.append([part])
    return pieces or [[]]


def _part_text(part: UserPromptPart | SystemPromptPart) -> str:
    content = part.content
    if isinstance(content, str):
        return content
    return "\n".join(item for item in content if isinstance(item, str))


def _dumped(message: ModelMessage, message_id: str) -> dict[str, Any]:
    return {"pydantic_ai": ModelMessagesTypeAdapter.dump_python([message], mode="json")[0], "message": message_id}


def _calls(stored: StoredMessage) -> list[tuple[str, Any, Any]]:
    data = (stored.metadata or {}).get("pydantic_ai") or {}
    return [
        (p.get("tool_call_id"), p.get("tool_name"), _arguments(p.get("args")))
        for p in data.get("parts", [])
        if p.get("part_kind") == "tool-call"
    ]


def _arguments(args: Any) -> Any:
    if isinstance(args, str):
        try:
            return json.loads(args)
        except ValueError:
            return args
    return args


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


# -- messages out ---------------------------------------------------------------------------


class _PydanticAIForm:
    """Pydantic AI messages as a `views.View` sends them: a response, or one piece of a request."""

    name = "pydantic-ai"
    indexed = True  # its call ids are among those `prunestore.sql.calls.call_ids` finds in the metadata

    def unit(self, stored: StoredMessage) -> Unit:
        metadata = stored.metadata or {}
        (message,) = ModelMessagesTypeAdapter.validate_python([metadata["pydantic_ai"]])
        message.metadata = {**(message.metadata or {}), _ID: metadata.get("message", stored.id)}
        if isinstance(message, ModelResponse):
            calls = tuple(p.tool_call_id for p in message.parts if isinstance(p, ToolCallPart))
            return Unit(message, calls=calls)
        returns = _returns(message.parts)
        return Unit(message, answers=returns[0].tool_call_id if returns else None)

    def without_calls(self, item: ModelResponse, dropped: frozenset[str]) -> ModelResponse | None:
        parts = [p for p in item.parts if not (isinstance(p, ToolCallPart) and p.tool_call_id in dropped)]
        if not any(isinstance(p, ToolCallPart) or (isinstance(p, TextPart) and p.content.strip()) for p in parts):
            return None
        return dataclasses.replace(item, parts=parts)


def _same_request(before: ModelRequest, piece: ModelRequest) -> bool:
    return _handed_out(before) == _handed_out(piece)


_JOINED_SESSIONS = 256  # sessions whose last joined prompt a capability keeps


@dataclasses.dataclass
class _Joined:
    items: list[ModelMessage]
    messages: list[ModelMessage]
    ends: list[int]


PYDANTIC_AI = _PydanticAIForm()

"""Provider transcripts in, provider-valid prompts out.

A provider-neutral plan (`plan`, and `transcripts` for imports), then one
module per provider (`openai`, `anthropic`).

`from_openai` and `from_anthropic` turn a Chat Completions or Messages
transcript into `Message`s: each tool result its own message, keyed by its
call (tool name plus canonical arguments) so a later identical call
supersedes it. The provider's original message, or the part of it a message
holds, goes into ``metadata`` under ``"openai"`` or ``"anthropic"``, so
nothing is lost and rendering can give it back exactly.

`render` turns stored messages back into a prompt a provider accepts: every
kept call has its result right after it, a call whose result is gone is
removed (or, with ``dropped="placeholder"``, its result says why it is
gone), an assistant message left empty is dropped, and Anthropic's
user/assistant alternation holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, get_args

from ..errors import InvalidMessageError, shorten
from ..model import StoredMessage
from ..text import count_tokens
from .anthropic import from_anthropic, to_anthropic
from .openai import from_openai, to_openai
from .plan import DROPPED_MODES, Item, Planned, Rendered, RenderReport, item_of, plan_prompt, to_text
from .transcripts import Continuation, ToolResult, openai_calls, tool_key

__all__ = [
    "ToolResult",
    "Continuation",
    "from_openai",
    "from_anthropic",
    "openai_calls",
    "tool_key",
    "render",
    "Rendered",
    "RenderReport",
    "FORMATS",
    "Format",
    "Dropped",
]

Format = Literal["openai", "anthropic", "text"]
Dropped = Literal["omit", "placeholder"]  # what becomes of a pruned tool result whose call is sent
FORMATS: tuple[str, ...] = get_args(Format)


def render(stored: Sequence[StoredMessage], format: Format = "openai", dropped: Dropped = "omit") -> Rendered:
    """The live messages of a session as a prompt `format` accepts (see the module docstring)."""
    return render_prompt(stored, format, dropped, (len(stored), sum(m.tokens for m in stored)))


class RenderLinks:
    """The call ids a message makes or answers as rendering reads them, and whether it only answers one
    (see `prunestore.sql.calls`); it keeps each message's item for the render that follows."""

    def __init__(self) -> None:
        self.items: dict[int, Item] = {}

    def __call__(self, message: StoredMessage) -> tuple[list[str | None], bool]:
        item = self.items[message.seq] = item_of(message)
        answers = item.role == "tool" and item.call_id is not None
        return [call.id for call in item.calls] + ([item.call_id] if answers else []), answers


def render_prompt(
    stored: Sequence[StoredMessage],
    format: Format,
    dropped: Dropped,
    session: tuple[int, int],
    items: Mapping[int, Item] | None = None,
) -> Rendered:
    """`render`, of the messages that decide the prompt of a session of `session` (messages, tokens);
    `items` holds those of them already read (`RenderLinks`), by seq."""
    if format not in FORMATS:
        raise InvalidMessageError(f"format={shorten(format)}: must be one of {', '.join(FORMATS)}")
    if dropped not in DROPPED_MODES:
        raise InvalidMessageError(f"dropped={shorten(dropped)}: must be 'omit' or 'placeholder'")
    return render_plan(plan_prompt(stored, dropped, items), format, session)


def render_plan(planned: Planned, format: Format, session: tuple[int, int]) -> Rendered:
    """`render_prompt`'s prompt from the plan it makes: for a caller that needs the plan too."""
    plan, removed, placeholders = planned
    sent = [item for item, answered in plan for item in [item, *answered]]
    tokens_out = sum(count_tokens(item.content) if item.content is not None else item.message.tokens for item in sent)
    system: str | list | None = None
    text = ""
    if format == "openai":
        messages = to_openai(plan)
    elif format == "anthropic":
        system, messages = to_anthropic(plan)
    else:
        messages, text = [], to_text(plan)
    report = RenderReport(
        messages_in=session[0],
        messages_out=len(messages) if format != "text" else len(sent),
        tokens_in=session[1],
        tokens_out=tokens_out,
        calls_removed=removed,
        placeholders=placeholders,
    )
    return Rendered(format, messages, system, text, report)

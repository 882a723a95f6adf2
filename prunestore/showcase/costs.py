"""The price model of the showcase's figures: Anthropic's 5-minute prompt cache (`prunestore.prices`).

Per input token: read from the cache 0.1, written to it 1.25, fresh (no
cache) 1.0. A turn's cached part is the longest common prefix of its prompt
with the previous turn's prompt; the rest is written to the cache. A prompt
is a list of (key, tokens) per message, so a key must change when a
message's content does (a cleared tool result, say).
"""

from __future__ import annotations

from ..prices import Prices, PromptCosts, prompt_costs

__all__ = ["READ", "WRITE", "FRESH", "PromptCosts", "prompt_costs"]

READ, WRITE, FRESH = Prices().read, Prices().write, Prices().fresh

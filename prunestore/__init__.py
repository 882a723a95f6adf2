"""prunestore: a persistent, incremental prompt-pruning store for LLM chat sessions.

Messages go in with `PruneStore.append`; `PruneStore.live` says what goes into
the next prompt. `prune` is the same decision as a pure function over a list
of messages, and the oracle the store is checked against.
"""

from .aio import AsyncPruneStore
from .errors import (
    DatabaseError,
    DuplicateMessageError,
    InvalidArgumentError,
    InvalidMessageError,
    InvalidPolicyError,
    InvalidRevisionError,
    MessageNotFoundError,
    PolicyMismatchError,
    PruneStoreError,
    SessionExistsError,
    SessionIdCollisionError,
    SessionNotFoundError,
    StoreNotFoundError,
    TokenizerMismatchError,
    TurnOrderError,
)
from .formats import Rendered, RenderReport, from_anthropic, from_openai
from .model import ROLES, VERDICTS, Message, StoredMessage
from .policy import Policy
from .prices import LedgerTotals, Prices
from .prune import PruneResult, prune
from .results import (
    Cause,
    Delta,
    Entry,
    Erasure,
    Explanation,
    GcReport,
    HistoryPoint,
    Mismatch,
    PromptSource,
    SessionSummary,
    Stats,
    Summarized,
    VerdictStats,
    VerifyReport,
    Window,
)
from .store import PruneStore
from .text import count_tokens, normalize
from .whatif import WhatIf

__version__ = "0.1.0"

__all__ = [
    "Message",
    "StoredMessage",
    "Policy",
    "ROLES",
    "VERDICTS",
    "prune",
    "PruneResult",
    "count_tokens",
    "normalize",
    "PruneStore",
    "AsyncPruneStore",
    "from_openai",
    "from_anthropic",
    "Rendered",
    "RenderReport",
    "Delta",
    "Erasure",
    "Summarized",
    "Explanation",
    "Cause",
    "Mismatch",
    "Stats",
    "VerdictStats",
    "GcReport",
    "SessionSummary",
    "Window",
    "PromptSource",
    "Entry",
    "HistoryPoint",
    "VerifyReport",
    "Prices",
    "LedgerTotals",
    "WhatIf",
    "PruneStoreError",
    "InvalidMessageError",
    "InvalidPolicyError",
    "InvalidArgumentError",
    "DuplicateMessageError",
    "TurnOrderError",
    "SessionNotFoundError",
    "StoreNotFoundError",
    "MessageNotFoundError",
    "SessionExistsError",
    "SessionIdCollisionError",
    "PolicyMismatchError",
    "TokenizerMismatchError",
    "InvalidRevisionError",
    "DatabaseError",
]

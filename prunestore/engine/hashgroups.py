"""Pass 2's index kept by the maintainer: the surviving holders of each content hash, in order."""

from __future__ import annotations

from dataclasses import dataclass, field

from .state import MsgState, Rows


@dataclass(eq=False)
class _HashGroup:
    """Surviving holders of one content hash: stored ones minus removals plus additions."""

    content_hash: bytes
    removed: set[int] = field(default_factory=set)
    added: dict[int, None] = field(default_factory=dict)  # new holders, in order (an ordered set)
    cursor: int | None = None  # smallest stored holder not removed, once looked up
    looked_up: bool = False
    lost_first: bool = False


class HashGroups:
    """Pass 2's index: per content hash, the surviving holders in order; the first is kept, the rest duplicates.

    Holders are the stored ones (read from `Rows` a page at a time) minus the
    ones this transaction removed, plus the ones it added. A group whose first
    holder left is remembered, so the next copy can take over (`lost_first`).
    """

    def __init__(self, rows: Rows) -> None:
        self.rows = rows
        self.groups: dict[bytes, _HashGroup] = {}
        self.lost_first: list[_HashGroup] = []

    def group(self, content_hash: bytes) -> _HashGroup:
        group = self.groups.get(content_hash)
        if group is None:
            group = self.groups[content_hash] = _HashGroup(content_hash)
        return group

    def first_holder(self, group: _HashGroup) -> int | None:
        if not group.looked_up:
            group.cursor = self.rows.first_holder_after(group.content_hash, 0)
            group.looked_up = True
        while group.cursor is not None and group.cursor in group.removed:
            group.cursor = self.rows.first_holder_after(group.content_hash, group.cursor)
        if group.cursor is not None:
            return group.cursor
        return next(iter(group.added), None)

    def join(self, state: MsgState) -> bool:
        """A new holder joins its group; whether an earlier one survives (then it is a duplicate)."""
        group = self.group(state.content_hash)
        duplicate = self.first_holder(group) is not None
        group.added[state.seq] = None
        return duplicate

    def leave(self, state: MsgState) -> None:
        """A holder stops surviving (superseded or expired); the next copy may take over."""
        group = self.group(state.content_hash)
        was_first = self.first_holder(group) == state.seq
        if state.seq in group.added:
            del group.added[state.seq]
        else:
            group.removed.add(state.seq)
        if was_first and not group.lost_first:
            group.lost_first = True
            self.lost_first.append(group)

    def new_firsts(self) -> list[int]:
        """The first holders of the groups that lost theirs since the last call."""
        groups, self.lost_first = self.lost_first, []
        firsts = []
        for group in groups:
            group.lost_first = False
            first = self.first_holder(group)
            if first is not None:
                firsts.append(first)
        return firsts

    def changes(self) -> tuple[list[tuple[bytes, int]], list[tuple[bytes, int]]]:
        """(added, removed) rows of the surviving-holders index."""
        added = [(g.content_hash, seq) for g in self.groups.values() for seq in g.added]
        removed = [(g.content_hash, seq) for g in self.groups.values() for seq in g.removed]
        return added, removed

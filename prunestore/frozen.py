"""Read-only JSON values, so that stored metadata can be shared between calls instead of rebuilt.

`live()` keeps each session's messages in memory and hands the same message
objects to every caller. A message is immutable, but a metadata dict is not:
built afresh for every call it made a read of 7,500 messages with metadata
30 to 70 times slower than one without. Metadata read from the store is
therefore a `FrozenDict` (and its lists `FrozenList`s): a dict and a list in
every way a reader uses them (``isinstance``, ``==``, ``json.dumps``,
iteration), but a change raises `TypeError`. ``dict(m.metadata)``,
``copy.copy`` and ``copy.deepcopy`` give ordinary, changeable copies, and a
pickled one arrives as a plain dict.
"""

from __future__ import annotations

import copy
from typing import Any, NoReturn

__all__ = ["FrozenDict", "FrozenList", "freeze"]

_HINT = "stored metadata is read-only (shared between calls): change a copy, dict(metadata) or copy.deepcopy(metadata)"


def _refuse(self: object, *args: Any, **kwargs: Any) -> NoReturn:
    raise TypeError(_HINT)


class FrozenDict(dict):
    """A dict that refuses changes."""

    __slots__ = ()
    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __copy__(self) -> dict:
        return dict(self)

    def __deepcopy__(self, memo: dict) -> dict:
        return {key: copy.deepcopy(value, memo) for key, value in self.items()}

    def __reduce__(self) -> tuple:
        return (dict, (dict(self),))


class FrozenList(list):
    """A list that refuses changes."""

    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = remove = pop = clear = sort = reverse = _refuse

    def __copy__(self) -> list:
        return list(self)

    def __deepcopy__(self, memo: dict) -> list:
        return [copy.deepcopy(value, memo) for value in self]

    def __reduce__(self) -> tuple:
        return (list, (list(self),))


_CONTAINERS = (dict, list)


def freeze(value: Any) -> Any:
    """`value` (decoded JSON) with every dict and list in it read-only; frozen parts are kept as they are."""
    kind = type(value)
    if kind is dict:
        return FrozenDict({k: freeze(v) if type(v) in _CONTAINERS else v for k, v in value.items()})
    if kind is list:
        return FrozenList([freeze(v) if type(v) in _CONTAINERS else v for v in value])
    return value

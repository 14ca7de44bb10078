"""What a saved checkpoint holds of each channel: the channels that changed, each as its new value
whole, or as the items appended to its previous version when it is a list that only grew (as
``add_messages`` grows ``messages``); a channel that did not change is not saved again.

A checkpoint saved so builds on the ones before it, back to the newest one saved whole (every
channel's value): a `Chain`. A thread's next submission reads that chain (the ledger returns it:
`AttemptContext.checkpoints`) and rebuilds the values from it. A turn writes what it changed,
whatever the thread's length; a chain that holds more bytes of superseded values (replaced,
removed, trimmed) than of live ones is cut by saving the next checkpoint whole, so reading it
costs at most twice the state it rebuilds (plus each checkpoint's own small description). A
graph whose state only grows (messages never removed) reads the whole state, as it must, in as
many pieces as it took turns since its chain began.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol

Version = str | int | float
Blob = tuple[str, bytes]
"""A value as the serializer typed it (`SerializerProtocol.dumps_typed`)."""


@dataclass(frozen=True)
class Whole:
    """The channel's value, whole."""

    blob: Blob


@dataclass(frozen=True)
class Appended:
    """The items appended to the channel's version ``base``."""

    base: Version
    blob: Blob


@dataclass(frozen=True)
class Empty:
    """The channel holds no value (an ephemeral channel consumed, a value never written)."""


Piece = Whole | Appended | Empty


class _Absent:
    """The value of a channel that holds none (None is a value a channel may hold)."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT = _Absent()


def appended(old: Any, new: Any) -> list[Any] | None:
    """The items ``new`` adds to ``old`` when ``new`` is the list ``old`` followed by them (None
    otherwise: it is not a list, or an item was removed, replaced or reordered)."""
    if not isinstance(old, list) or not isinstance(new, list) or len(new) < len(old):
        return None
    try:
        if all(a is b or bool(a == b) for a, b in zip(old, new, strict=False)):
            return new[len(old) :]
    except (TypeError, ValueError):  # items with no truth in their equality (arrays)
        return None
    return None


def encode(piece: Piece) -> list[Any]:
    """``piece`` as it is saved in a checkpoint's payload."""
    if isinstance(piece, Whole):
        return ["whole", *piece.blob]
    if isinstance(piece, Appended):
        return ["appended", piece.base, *piece.blob]
    return ["empty"]


def decode(saved: list[Any]) -> Piece:
    """The piece `encode` saved."""
    if saved[0] == "whole":
        return Whole((saved[1], saved[2]))
    if saved[0] == "appended":
        return Appended(saved[1], (saved[2], saved[3]))
    return Empty()


def _stored(piece: Piece) -> int:
    return 0 if isinstance(piece, Empty) else len(piece.blob[1])


class Chain:
    """One LangGraph thread and namespace's channel versions since its newest whole checkpoint:
    the piece each was saved as, the bytes its value is made of, and (once asked) the value."""

    def __init__(self, serde: SerializerProtocol) -> None:
        self._serde = serde
        self._pieces: dict[tuple[str, Version], Piece] = {}
        self._sizes: dict[tuple[str, Version], int] = {}
        self._values: dict[tuple[str, Version], Any] = {}
        self.stored = 0
        """The bytes of every piece saved in the chain (superseded ones included)."""

    def knows(self, channel: str, version: Version) -> bool:
        return (channel, version) in self._pieces

    def live(self, versions: dict[str, Version]) -> int:
        """The bytes the values at ``versions`` are made of (each channel must be known)."""
        return sum(self._sizes[(channel, v)] for channel, v in versions.items())

    def piece(self, channel: str, value: Any, base: Version | None) -> Piece:
        """How to save ``value`` as the channel's next version after ``base`` (its version in
        the parent checkpoint): the items it appends to it, or the value whole (`ABSENT`: the
        channel holds none)."""
        if value is ABSENT:
            return Empty()
        if base is not None and self.knows(channel, base):
            items = appended(self.value(channel, base), value)
            if items is not None:
                return Appended(base, self._serde.dumps_typed(items))
        return Whole(self._serde.dumps_typed(value))

    def add(self, channel: str, version: Version, piece: Piece, value: Any = ABSENT) -> None:
        """Count ``piece`` in as the channel's ``version`` (``value``: its value, when the saver
        has it at hand; else it is rebuilt when asked)."""
        size = _stored(piece)
        if isinstance(piece, Appended):
            size += self._sizes[(channel, piece.base)]
        key = (channel, version)
        self._pieces[key] = piece
        self._sizes[key] = size
        self.stored += _stored(piece)
        if value is not ABSENT:  # a copy of a list: a graph may extend it in place later
            self._values[key] = list(value) if isinstance(value, list) else value
        else:
            self._values.pop(key, None)

    def value(self, channel: str, version: Version) -> Any:
        """The channel's value at ``version`` (`ABSENT` when it holds none): the newest value at
        hand or saved whole before it, with the items appended since (walked without
        recursion: a chain may be thousands of versions long)."""
        key: tuple[str, Version] = (channel, version)
        tail: list[Blob] = []
        while key not in self._values:
            piece = self._pieces[key]
            if isinstance(piece, Empty):
                return ABSENT
            if isinstance(piece, Whole):
                self._values[key] = self._serde.loads_typed(piece.blob)
                break
            tail.append(piece.blob)
            key = (channel, piece.base)
        value = self._values[key]
        if not tail:
            return value
        value = list(value)
        for blob in reversed(tail):
            value.extend(self._serde.loads_typed(blob))
        self._values[(channel, version)] = value
        return value

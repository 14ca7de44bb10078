"""What a saved checkpoint holds of each channel: the channels that changed, each as its new value
whole, or as the items appended to its previous version when it is a list that only grew (as
``add_messages`` grows ``messages``); a channel that did not change is not saved again.

A checkpoint saved so builds on the ones before it, back to the newest one saved whole (every
channel's value): a `Chain`. A thread's next submission reads that chain (the ledger returns it:
`AttemptContext.checkpoints`) and rebuilds the values from it. A turn writes what it changed,
whatever the thread's length; a chain that holds more bytes of superseded values (replaced,
removed, trimmed) than of live ones is cut by saving the next checkpoint whole, so reading it
costs at most twice the state it rebuilds (plus each checkpoint's own small description). A
graph whose state only grows (messages never removed) is never cut, as saving it whole again
would make a turn's writes grow with the thread: it reads its whole state, which LangGraph holds
whole anyway, in as many pieces as it took supersteps since the thread began.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.base import ChannelVersions, Checkpoint
from langgraph.checkpoint.serde.base import SerializerProtocol

from threadwarden.errors import InvalidInput

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


class Chains:
    """The chains of every LangGraph thread and namespace a saver holds, and each checkpoint's
    channel versions (a checkpoint's pieces are what changed since its parent's)."""

    def __init__(self, serde: SerializerProtocol) -> None:
        self._serde = serde
        self._chains: dict[tuple[str, str], Chain] = {}
        self._versions: dict[tuple[str, str, str], ChannelVersions] = {}

    def pieces(
        self,
        thread_id: str,
        ns: str,
        parent: str | None,
        checkpoint: Checkpoint,
        new_versions: ChannelVersions,
    ) -> tuple[dict[str, Piece], bool]:
        """What to save of ``checkpoint`` (counted in): the changed channels' pieces on the
        chain of its ``parent``, or (no chain to build on, or one that would hold more
        superseded bytes than live ones) every channel whole; and whether it is whole."""
        values = checkpoint["channel_values"]
        versions = {**checkpoint["channel_versions"], **new_versions}
        key = (thread_id, ns)
        self._versions[(*key, checkpoint["id"])] = versions
        chain = self._chains.get(key)
        before = self._versions.get((*key, parent)) if parent is not None else None
        if (
            chain is not None
            and before is not None
            and all(chain.knows(k, v) for k, v in versions.items() if k not in new_versions)
        ):
            pieces = {k: chain.piece(k, values.get(k, ABSENT), before.get(k)) for k in new_versions}
            for k, piece in pieces.items():
                chain.add(k, new_versions[k], piece, values.get(k, ABSENT))
            if chain.stored <= 2 * chain.live(versions):
                return pieces, False
        chain = self._chains[key] = Chain(self._serde)
        pieces = {k: chain.piece(k, values.get(k, ABSENT), None) for k in versions}
        for k, piece in pieces.items():
            chain.add(k, versions[k], piece, values.get(k, ABSENT))
        return pieces, True

    def saved(self, meta: dict[str, Any], value: dict[str, Any]) -> dict[str, Piece]:
        """Count a saved checkpoint (its ``meta`` and payload) in; its pieces."""
        checkpoint = value["checkpoint"]
        versions = checkpoint["channel_versions"]
        if "values" in value:
            pieces = {k: decode(p) for k, p in value["values"].items()}
            whole = not meta.get("delta", False)
        else:  # saved whole, before checkpoints held what changed (issue 37)
            values = checkpoint.pop("channel_values")
            pieces = {
                k: Whole(self._serde.dumps_typed(values[k])) if k in values else Empty()
                for k in versions
            }
            whole = True
        key = (meta["thread_id"], meta["ns"])
        if whole:
            self._chains[key] = Chain(self._serde)
        elif key not in self._chains:
            raise InvalidInput("checkpoints", f"a chain that begins with a whole checkpoint {key}")
        for k, piece in pieces.items():
            self._chains[key].add(k, versions[k], piece)
        self._versions[(*key, checkpoint["id"])] = versions
        return pieces

    def values(self, thread_id: str, ns: str, versions: ChannelVersions) -> dict[str, Any]:
        """The values at ``versions`` (of channels that hold one)."""
        chain = self._chains[(thread_id, ns)]
        values = {k: chain.value(k, v) for k, v in versions.items()}
        return {k: v for k, v in values.items() if v is not ABSENT}

    def forget(self, thread_id: str) -> None:
        """Drop the thread's chains (it was deleted)."""
        for key in [k for k in self._chains if k[0] == thread_id]:
            del self._chains[key]

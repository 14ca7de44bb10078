"""A graph's memory: its checkpoints, in `LedgerSaver`, a LangGraph checkpointer on the
threadwarden ledger fenced by the attempt. The graph's state carries across the thread's
submissions, so the binding reads no history records (`MEMORY_KINDS` is empty) and there is no
compaction here: a graph keeps its state small itself (it summarizes with a journaled model and
removes messages: docs/agents.md, "Long threads: summarize with `journaled(model)`").

The saver keeps LangGraph's own in-memory saver as its index and writes every change through
`AttemptContext.save_checkpoint`: the ledger holds the saver's log (each checkpoint, each
task's pending writes, each deleted thread), checked against the attempt's ownership, so a
stale attempt cannot write. `load` replays that log into a fresh index: the thread's carried
checkpoint (its newest completed submission's last state) and everything this submission saved.

A checkpoint holds what changed since its parent (`_chain`: a list that only grew saves the
items it appended), so a turn writes what it changed, not the whole state again; the carried
checkpoint is rebuilt from the chain the ledger returns (the newest checkpoint saved whole and
the carried ones after it).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.base import SerializerProtocol
from pydantic_core import to_jsonable_python

from threadwarden.agents.langgraph._chain import Chains, encode
from threadwarden.bindings import AttemptContext, SavedCheckpoint

MEMORY_KINDS: frozenset[str] = frozenset()
"""The record kinds the binding reads from the thread's history: none (its memory is its
checkpoints: the claim loads no history)."""

UPDATE = "graph-update"
"""The record kind of one node's update (its writes to the graph's state), appended with the
task's saved writes: ``{"node": name, "update": {...}}``."""


_PULL = "~__pregel_pull, "
"""How a task path of a node the graph's edges triggered begins (the node's name follows)."""


def _jsonable(value: Any) -> Any:
    return to_jsonable_python(value, fallback=repr)


def _node_update(task_path: str, writes: Sequence[tuple[str, Any]]) -> dict[str, Any] | None:
    """The record of a node's writes to state channels (routing and special writes left out)."""
    update = {c: _jsonable(v) for c, v in writes if not c.startswith(("__", "branch:"))}
    pulled = task_path.startswith(_PULL) and "," not in task_path[len(_PULL) :]
    node = task_path[len(_PULL) :] if pulled else None
    if not update or node == "__start__":  # the input: the submission holds it already
        return None
    return {"node": node, "task": task_path, "update": update}


class LedgerSaver(BaseCheckpointSaver[str]):
    """LangGraph's `BaseCheckpointSaver` on the ledger, for one attempt.

    Reads come from memory (what `load` replayed and this attempt wrote); every write is a
    fenced `save_checkpoint` carrying the attempt's journal position. Checkpoints of the
    thread's root graph (``thread_id`` the threadwarden thread, namespace ``""``) carry to the
    thread's next submission.
    """

    def __init__(self, ctx: AttemptContext, *, serde: SerializerProtocol | None = None) -> None:
        super().__init__(serde=serde)
        self._ctx = ctx
        self._memory = InMemorySaver(serde=self.serde)
        self._lock = asyncio.Lock()
        self._chains = Chains(self.serde)
        self._own = 0  # how many changes this submission saved (loaded or written)
        self.position = 0
        """The furthest journal position of this submission's saved checkpoints and writes."""
        self.carried: dict[str, Any] = {}
        """The channel values of the checkpoint the thread carried to this submission."""

    @classmethod
    async def load(
        cls, ctx: AttemptContext, *, serde: SerializerProtocol | None = None
    ) -> LedgerSaver:
        """A saver holding the thread's carried checkpoint and this submission's log."""
        saver = cls(ctx, serde=serde)
        saved = await ctx.checkpoints()
        saver._carry([s for s in saved if s.submission_id != ctx.submission_id])
        for own in saved:
            if own.submission_id == ctx.submission_id:
                saver._replay(own)
                saver._own += 1
                saver.position = max(saver.position, own.step)
        return saver

    @property
    def resuming(self) -> bool:
        """Whether this submission saved anything already (a re-run resumes from it)."""
        return self._own > 0

    def _carry(self, chain: list[SavedCheckpoint]) -> None:
        """Rebuild the carried checkpoint from its chain; only that one goes into the index."""
        last: tuple[dict[str, Any], dict[str, Any]] | None = None
        for saved in chain:
            if saved.meta["op"] == "put":
                value = self._loads(saved)
                self._chains.saved(saved.meta, value)
                last = saved.meta, value
            else:
                self._chains.forget(saved.meta["thread_id"])
                last = None
        if last is None:
            return
        meta, value = last
        versions = value["checkpoint"]["channel_versions"]
        self.carried = self._chains.values(meta["thread_id"], meta["ns"], versions)
        self._memory.put(
            _config(meta["thread_id"], meta["ns"], value["parent"]),
            _with_values(value["checkpoint"], self.carried),
            value["metadata"],
            versions,
        )

    def _replay(self, saved: SavedCheckpoint) -> None:
        meta = saved.meta
        value = self._loads(saved)
        if meta["op"] == "put":
            versions = value["checkpoint"]["channel_versions"]
            changed = {k: versions[k] for k in self._chains.saved(meta, value)}
            values = self._chains.values(meta["thread_id"], meta["ns"], changed)
            self._memory.put(
                _config(meta["thread_id"], meta["ns"], value["parent"]),
                _with_values(value["checkpoint"], values),
                value["metadata"],
                changed,
            )
        elif meta["op"] == "writes":
            config = _config(meta["thread_id"], meta["ns"], meta["checkpoint_id"])
            self._memory.put_writes(
                config, [(c, v) for c, v in value], meta["task_id"], meta["task_path"]
            )
        else:
            self._memory.delete_thread(meta["thread_id"])
            self._chains.forget(meta["thread_id"])

    def _loads(self, saved: SavedCheckpoint) -> Any:
        return self.serde.loads_typed((saved.meta["type"], saved.data))

    async def _save(
        self,
        meta: dict[str, Any],
        value: Any,
        *,
        carry: bool,
        records: Sequence[tuple[str, Any]] = (),
    ) -> None:
        # The position now, when LangGraph hands the change over: its saves run in the
        # background, and the next superstep's steps may be taken before one's turn comes.
        step = self._ctx.steps_taken
        kind, data = self.serde.dumps_typed(value)
        async with self._lock:  # saved (and their records appended) in the order handed over
            await self._ctx.save_checkpoint(
                {**meta, "type": kind}, data, carry=carry, records=records, step=step
            )
        self._own += 1

    def _root(self, thread_id: str, ns: str) -> bool:
        return thread_id == self._ctx.thread_id and not ns

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        saved = self._memory.put(config, checkpoint, metadata, new_versions)
        conf = saved["configurable"]
        thread_id, ns = conf["thread_id"], conf["checkpoint_ns"]
        parent = config["configurable"].get("checkpoint_id")
        pieces, whole = self._chains.pieces(thread_id, ns, parent, checkpoint, new_versions)
        description = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        await self._save(
            {
                "op": "put",
                "thread_id": thread_id,
                "ns": ns,
                "checkpoint_id": conf["checkpoint_id"],
                "parent": parent,
                "delta": not whole,
            },
            {
                "checkpoint": description,
                "metadata": get_checkpoint_metadata(config, metadata),
                "parent": parent,
                "values": {k: encode(piece) for k, piece in pieces.items()},
            },
            carry=self._root(thread_id, ns),
        )
        return saved

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._memory.put_writes(config, writes, task_id, task_path)
        conf = config["configurable"]
        ns = conf.get("checkpoint_ns", "")
        update = _node_update(task_path, writes)
        await self._save(
            {
                "op": "writes",
                "thread_id": conf["thread_id"],
                "ns": ns,
                "checkpoint_id": conf["checkpoint_id"],
                "task_id": task_id,
                "task_path": task_path,
            },
            list(writes),
            carry=False,
            records=[(UPDATE, update)] if update is not None and not ns else (),
        )

    async def adelete_thread(self, thread_id: str) -> None:
        self._memory.delete_thread(thread_id)
        self._chains.forget(thread_id)
        await self._save(
            {"op": "delete", "thread_id": thread_id}, None, carry=self._root(thread_id, "")
        )

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._memory.get_tuple(config)

    async def alist(
        self, config: RunnableConfig | None, **options: Any
    ) -> AsyncIterator[CheckpointTuple]:
        """`list`'s checkpoints (``options``: its ``filter``, ``before`` and ``limit``)."""
        for item in self.list(config, **options):
            yield item

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._memory.get_tuple(config)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        return self._memory.list(config, filter=filter, before=before, limit=limit)

    def get_next_version(self, current: str | None, channel: None) -> str:
        return self._memory.get_next_version(current, channel)


def _with_values(saved: dict[str, Any], values: dict[str, Any]) -> Checkpoint:
    """A saved checkpoint's description (all but its values) with ``values``."""
    return cast(Checkpoint, {**saved, "channel_values": values})


def _config(thread_id: str, ns: str, checkpoint_id: str | None) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
    }

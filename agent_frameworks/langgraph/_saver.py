"""`LedgerSaver`: a LangGraph checkpointer on the threadwarden ledger, fenced by the attempt.

The saver keeps LangGraph's own in-memory saver as its index and writes every change through
`AttemptContext.save_checkpoint`: the ledger holds the saver's log (each checkpoint, each
task's pending writes, each deleted thread), checked against the attempt's ownership, so a
stale attempt cannot write. `load` replays that log into a fresh index: the thread's carried
checkpoint (its newest completed submission's last state) and everything this submission saved.

A checkpoint is stored whole (every channel's value, not only the changed ones), so the
carried one alone is enough to continue the thread from.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.base import SerializerProtocol
from pydantic_core import to_jsonable_python

from threadwarden.bindings import AttemptContext, SavedCheckpoint

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
        self._own = 0  # how many changes this submission saved (loaded or written)
        self.position = 0
        """The furthest journal position of this submission's saved checkpoints and writes."""

    @classmethod
    async def load(
        cls, ctx: AttemptContext, *, serde: SerializerProtocol | None = None
    ) -> LedgerSaver:
        """A saver holding the thread's carried checkpoint and this submission's log."""
        saver = cls(ctx, serde=serde)
        for saved in await ctx.checkpoints():
            saver._replay(saved)
        return saver

    @property
    def resuming(self) -> bool:
        """Whether this submission saved anything already (a re-run resumes from it)."""
        return self._own > 0

    def _replay(self, saved: SavedCheckpoint) -> None:
        meta = saved.meta
        value = self.serde.loads_typed((meta["type"], saved.data))
        if meta["op"] == "put":
            self._memory.put(
                _config(meta["thread_id"], meta["ns"], value["parent"]),
                value["checkpoint"],
                value["metadata"],
                value["checkpoint"]["channel_versions"],
            )
        elif meta["op"] == "writes":
            config = _config(meta["thread_id"], meta["ns"], meta["checkpoint_id"])
            self._memory.put_writes(
                config, [(c, v) for c, v in value], meta["task_id"], meta["task_path"]
            )
        else:
            self._memory.delete_thread(meta["thread_id"])
        if saved.submission_id == self._ctx.submission_id:
            self._own += 1
            self.position = max(self.position, saved.step)

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
        whole = self._memory.get_tuple(saved)
        assert whole is not None
        conf = saved["configurable"]
        parent = config["configurable"].get("checkpoint_id")
        await self._save(
            {
                "op": "put",
                "thread_id": conf["thread_id"],
                "ns": conf["checkpoint_ns"],
                "checkpoint_id": conf["checkpoint_id"],
                "parent": parent,
            },
            {"checkpoint": whole.checkpoint, "metadata": whole.metadata, "parent": parent},
            carry=self._root(conf["thread_id"], conf["checkpoint_ns"]),
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


def _config(thread_id: str, ns: str, checkpoint_id: str | None) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
    }

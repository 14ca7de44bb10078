"""CPU time of the processes a side runs on, read from ``/proc`` (Linux).

A process tree's time is what its live processes used (``utime + stime``) plus what their
reaped children used (``cutime + cstime``): a PostgreSQL backend that exited counts in the
postmaster's, a worker's helper in the worker's. Clock ticks are converted with
``SC_CLK_TCK``. The bench's own process counts by itself (its children are the workers and the
servers, measured apart).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

_TICK_S = 1 / os.sysconf("SC_CLK_TCK")
_PROC = Path("/proc")


@dataclass(frozen=True)
class _Stat:
    ppid: int
    own_s: float
    children_s: float


def _stat(pid: int) -> _Stat | None:
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:  # gone since it was listed
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) "; comm may hold spaces
    # Fields 4, 14-17 of proc(5): ppid, utime, stime, cutime, cstime (here from field 3 on).
    ppid, utime, stime, cutime, cstime = (int(fields[i]) for i in (1, 11, 12, 13, 14))
    return _Stat(ppid, (utime + stime) * _TICK_S, (cutime + cstime) * _TICK_S)


def _all() -> dict[int, _Stat]:
    stats: dict[int, _Stat] = {}
    for entry in _PROC.iterdir():
        if entry.name.isdigit() and (found := _stat(int(entry.name))) is not None:
            stats[int(entry.name)] = found
    return stats


def _tree(root: int, stats: Mapping[int, _Stat]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, stat in stats.items():
        children.setdefault(stat.ppid, []).append(pid)
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in stats and pid not in tree:
            tree.add(pid)
            todo.extend(children.get(pid, []))
    return tree


def snapshot(groups: Mapping[str, Iterable[int]], *, alone: Iterable[int] = ()) -> dict[str, float]:
    """CPU seconds used so far by each group of process trees (``groups``: name → root pids);
    ``alone`` roots count without their children (under the name ``bench``)."""
    stats = _all()
    seconds: dict[str, float] = {}
    for name, roots in groups.items():
        pids: set[int] = set().union(*(_tree(root, stats) for root in roots))
        seconds[name] = sum(stats[p].own_s + stats[p].children_s for p in pids)
    solo = [stats[p].own_s for p in alone if p in stats]
    if solo:
        seconds["bench"] = sum(solo)
    return seconds


def used(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """CPU seconds per group between two snapshots."""
    return {name: max(after[name] - before.get(name, 0.0), 0.0) for name in after}


def trees(roots: Iterable[int]) -> set[int]:
    """The live processes of the trees under ``roots`` (the roots included)."""
    stats = _all()
    return set().union(*(_tree(root, stats) for root in roots))

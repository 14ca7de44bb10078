"""The room-to-room import graph of the installed package, and its cycles.

A room is a top-level folder (`threadwarden.ledger` is `ledger/`); the public API's modules
(`threadwarden`, `threadwarden.bindings`, …: the folder `api/`) are the room `api`. Imports under
`if TYPE_CHECKING:` are left out: they never run. `python -m tests.helpers.rooms` prints the
graph (what each room imports, with how many import lines) and any cycle; `tests/test_rooms.py`
keeps it acyclic. Built with grimp, the graph library import-linter checks the contracts with.
"""

import sys
from collections import Counter

import grimp

ROOT = "threadwarden"
FOLDERS = {"agents": "agent_frameworks"}
"""Rooms whose folder is not named as their subpackage (pyproject.toml's package-dir)."""


def room_of(module: str) -> str:
    """The folder a module of the package lives in."""
    parts = module.split(".")
    if len(parts) == 1:
        return "api"
    graph_subpackages = _subpackages()
    if parts[1] in graph_subpackages:
        return FOLDERS.get(parts[1], parts[1])
    return "api"


def _subpackages() -> set[str]:
    return {
        name.split(".")[1]
        for name in _graph().find_children(ROOT)
        if _graph().find_children(name) or name.split(".")[1] in FOLDERS
    }


_GRAPH: grimp.ImportGraph | None = None


def _graph() -> grimp.ImportGraph:
    global _GRAPH
    if _GRAPH is None:
        _GRAPH = grimp.build_graph(ROOT, exclude_type_checking_imports=True, cache_dir=None)
    return _GRAPH


def room_imports() -> Counter[tuple[str, str]]:
    """(importing room, imported room) → how many import lines run between them."""
    graph = _graph()
    edges: Counter[tuple[str, str]] = Counter()
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            source, target = room_of(module), room_of(imported)
            if source != target:
                lines = graph.get_import_details(importer=module, imported=imported)
                edges[(source, target)] += max(1, len(lines))
    return edges


def cycles(edges: Counter[tuple[str, str]]) -> list[list[str]]:
    """Every cycle between rooms, each as the rooms it passes through (empty: none)."""
    successors: dict[str, set[str]] = {}
    for source, target in edges:
        successors.setdefault(source, set()).add(target)
    found: list[list[str]] = []

    def walk(path: list[str]) -> None:
        for nxt in sorted(successors.get(path[-1], ())):
            if nxt == path[0]:
                found.append([*path, nxt])
            elif nxt not in path and nxt > path[0]:
                walk([*path, nxt])

    for start in sorted(successors):
        walk([start])
    return found


def main() -> int:
    edges = room_imports()
    rooms = sorted({room for edge in edges for room in edge})
    print("| room | imports (import lines) |")
    print("|---|---|")
    for room in rooms:
        targets = sorted((t, n) for (s, t), n in edges.items() if s == room)
        print(f"| `{room}` | " + ", ".join(f"`{t}` ({n})" for t, n in targets) + " |")
    found = cycles(edges)
    print("cycles: " + ("; ".join(" → ".join(c) for c in found) if found else "none"))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

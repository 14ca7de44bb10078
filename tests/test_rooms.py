"""The rooms import one another one way: the room-to-room graph has no cycle (issue 32)."""

from collections import Counter

from tests.helpers.rooms import cycles, room_imports


def test_rooms_import_one_another_without_a_cycle() -> None:
    edges = room_imports()
    assert ("ledger", "api") in edges  # the graph is read (an empty one has no cycle either)
    assert cycles(edges) == []


def test_rooms_cycles_finds_a_cycle_between_rooms() -> None:
    """The check itself: a two-room and a three-room loop are each found once."""
    edges = Counter({("a", "b"): 1, ("b", "a"): 1, ("b", "c"): 1, ("c", "d"): 1, ("d", "b"): 1})
    assert cycles(edges) == [["a", "b", "a"], ["b", "c", "d", "b"]]

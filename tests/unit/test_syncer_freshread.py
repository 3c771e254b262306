"""The Syncer's fresh read before a write: which read (``read_kind``), and ``FreshNodes`` carrying it out."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from sunk.model.slurm import Node
from sunk.slurm.client import Snapshot
from sunk.slurm.errors import NotFound, SlurmUnavailable
from sunk.syncer.freshread import LIST, NODE, FreshNodes, read_kind

# ---- read_kind: pure -----------------------------------------------------------------------------------------

SIZES = (0, 1, 2, 5, 50, 100, 200, 1000, 1005, 5000, 5005, 10_000, 100_000)


@pytest.mark.parametrize("node_count", SIZES)
@pytest.mark.parametrize("waiting", [-1, 0, 1])
def test_a_lone_caller_reads_its_node_alone_at_any_size(waiting: int, node_count: int):
    assert read_kind(waiting, node_count) == NODE


@pytest.mark.parametrize(("node_count", "first_list"), [(0, 2), (1, 2), (5, 2), (100, 4), (200, 6), (1000, 23),
                                                         (5000, 108), (10_000, 214)])
def test_a_burst_shares_a_list_once_that_costs_less_than_a_read_each(node_count: int, first_list: int):
    """The break-even the docstring names: below it every caller reads its node alone."""
    assert read_kind(first_list - 1, node_count) == NODE
    assert read_kind(first_list, node_count) == LIST


@pytest.mark.parametrize("node_count", SIZES)
def test_more_callers_never_turn_a_list_back_into_reads(node_count: int):
    kinds = [read_kind(w, node_count) for w in range(1, 400)]
    assert kinds == sorted(kinds, key=lambda k: k == LIST)  # NODE ... NODE LIST ... LIST


@pytest.mark.parametrize("waiting", [2, 4, 8, 64, 256])
def test_more_nodes_never_turn_reads_into_a_list(waiting: int):
    kinds = [read_kind(waiting, m) for m in range(0, 20_000, 7)]
    assert kinds == sorted(kinds, key=lambda k: k == NODE)  # LIST ... LIST NODE ... NODE


def test_the_syncers_four_workers_read_nodes_alone_from_200_nodes_on():
    assert all(read_kind(w, m) == NODE for w in range(1, 5) for m in (200, 1000, 5000))
    assert read_kind(4, 5) == LIST  # the dev cluster's 5 nodes: a burst of 4 shares one list


# ---- FreshNodes --------------------------------------------------------------------------------------------------


class Slurm:
    """Slurm's truth; ``hold`` makes single-node reads wait (``reading`` says one is under way)."""

    def __init__(self, *nodes: Node) -> None:
        self.nodes = {n.name: n for n in nodes}
        self.calls: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.hold = threading.Event()
        self.hold.set()
        self.reading = threading.Event()
        self.error: Exception | None = None

    def list_nodes(self, *, updated_since: int | None = None) -> Snapshot:
        with self.lock:
            self.calls.append(("list", ""))
        if self.error is not None:
            raise self.error
        return Snapshot(items=tuple(self.nodes.values()), last_update=1)

    def read_node(self, name: str) -> Node:
        with self.lock:
            self.calls.append(("read", name))
        self.reading.set()
        assert self.hold.wait(5)
        if self.error is not None:
            raise self.error
        if name not in self.nodes:
            raise NotFound(f"no Slurm node {name!r}")
        return self.nodes[name]


def test_a_lone_write_reads_its_node_alone_and_sees_a_drain_of_a_moment_ago():
    slurm = Slurm(Node("node1", state="IDLE"), Node("node2"))
    fresh = FreshNodes(slurm, lambda: 5000)  # type: ignore[arg-type]
    slurm.nodes["node1"] = Node("node1", state="IDLE+DRAIN", reason="bad DIMM")  # a person, just before
    current = fresh.node("node1")
    assert current is not None and current.reason == "bad DIMM"
    assert slurm.calls == [("read", "node1")] and (fresh.single_reads, fresh.lists) == (1, 0)


@pytest.mark.parametrize("node_count", [5, 5000])
def test_a_node_slurm_does_not_know_is_none_either_way(node_count: int):
    slurm = Slurm(Node("node2"))
    fresh = FreshNodes(slurm, lambda: node_count)  # type: ignore[arg-type]
    assert fresh.node("node1") is None
    assert fresh.nodes().get("node1") is None


def test_an_outage_is_raised_and_the_caller_no_longer_counts_as_waiting():
    slurm = Slurm(Node("node1"))
    slurm.error = SlurmUnavailable("slurmrestd: connection refused")
    fresh = FreshNodes(slurm, lambda: 5)  # type: ignore[arg-type]
    for _ in range(3):
        with pytest.raises(SlurmUnavailable):
            fresh.node("node1")
    assert [kind for kind, _ in slurm.calls] == ["read"] * 3  # each alone: none of them is still waiting


def _burst(slurm: Slurm, fresh: FreshNodes, names: list[str], *, lists: bool) -> dict[str, Node | None]:
    """The first caller's single read is held until every other caller has asked; then all go on.
    ``lists``: the others take a list (not held: each is joined before the next asks)."""
    slurm.hold.clear()
    found: dict[str, Node | None] = {}
    first = threading.Thread(target=lambda: found.__setitem__(names[0], fresh.node(names[0])))
    first.start()
    assert slurm.reading.wait(5)
    others = [threading.Thread(target=lambda n=n: found.__setitem__(n, fresh.node(n))) for n in names[1:]]
    for t in others:
        t.start()
        if lists:
            t.join(5)
    slurm.hold.set()
    for t in [first, *others]:
        t.join(5)
    return found


def test_a_burst_on_a_small_cluster_shares_lists():
    nodes = [Node(f"node{i}", state="IDLE") for i in range(1, 6)]
    slurm = Slurm(*nodes)
    fresh = FreshNodes(slurm, lambda: len(nodes))  # type: ignore[arg-type]
    found = _burst(slurm, fresh, ["node1", "node2", "node3", "node4"], lists=True)
    assert {name: n.name if n else None for name, n in found.items()} == {f"node{i}": f"node{i}" for i in range(1, 5)}
    # the first read its node alone (it was alone); each later one found another waiting: a list
    assert slurm.calls[0] == ("read", "node1") and [k for k, _ in slurm.calls[1:]] == ["list"] * 3
    assert (fresh.single_reads, fresh.lists) == (1, 3)


def test_a_burst_on_a_large_cluster_reads_each_node_alone():
    nodes = [Node(f"node{i}", state="IDLE") for i in range(1, 6)]
    slurm = Slurm(*nodes)
    fresh = FreshNodes(slurm, lambda: 5000)  # type: ignore[arg-type]
    found = _burst(slurm, fresh, ["node1", "node2", "node3", "node4"], lists=False)
    assert all(found[name] is not None for name in found) and len(found) == 4
    assert sorted(slurm.calls) == [("read", f"node{i}") for i in range(1, 5)] and fresh.lists == 0


class SlowList:
    """A list that waits for ``release``; each list says which it was (``reason``)."""

    def __init__(self) -> None:
        self.calls = 0
        self.release = threading.Event()
        self.started = threading.Event()

    def list_nodes(self, *, updated_since: int | None = None) -> Snapshot:
        self.calls += 1
        version = self.calls
        self.started.set()
        assert self.release.wait(5)
        return Snapshot(items=(Node("node1", reason=f"v{version}"),), last_update=version)


def test_the_shared_list_is_one_that_began_after_the_caller_asked_and_is_shared():
    """FreshRead's guarantee on the list path: callers that came while a list ran take the next one, together."""
    slurm = SlowList()
    fresh = FreshNodes(slurm, lambda: 1)  # type: ignore[arg-type]
    results: list[str] = []
    lock = threading.Lock()

    def read() -> None:
        reason = fresh.nodes()["node1"].reason
        with lock:
            results.append(reason)

    first = threading.Thread(target=read)
    first.start()
    assert slurm.started.wait(5)  # list v1 is running
    late = [threading.Thread(target=read) for _ in range(5)]
    for t in late:
        t.start()
    # every late caller waits on v1 (to begin the next list); none has returned
    _until(lambda: fresh.waiting_for_list == 5 or not all(t.is_alive() for t in late))
    assert fresh.waiting_for_list == 5
    slurm.release.set()
    for t in [first, *late]:
        t.join(5)
    assert results[0] == "v1"
    assert sorted(results[1:]) == ["v2"] * 5  # the late ones did not take v1, which began before them
    assert slurm.calls == 2 and fresh.lists == 2 and fresh.waiting_for_list == 0


def _until(predicate: Callable[[], bool]) -> None:
    """Wait (at most 5 s) for another thread to get where ``predicate`` says."""
    done = threading.Event()
    for _ in range(5000):
        if predicate():
            return
        done.wait(0.001)
    raise AssertionError("another thread never got there")


def test_the_list_hands_its_error_to_its_waiters():
    class Broken:
        def list_nodes(self, **_: object) -> Snapshot:
            raise RuntimeError("slurmctld down")

    with pytest.raises(RuntimeError, match="slurmctld down"):
        FreshNodes(Broken(), lambda: 1).nodes()  # type: ignore[arg-type]

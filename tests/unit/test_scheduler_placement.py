"""NodePlacement: exclusions kept per set of selectors until a Node or a slurmd Pod changes; waiting units woken
only by a Node that admits them (scheduler/placement.py)."""

from __future__ import annotations

from typing import Any

from scheduler.placement import NodePlacement, PartitionNodes
from sunk.model.slurm import Partition
from sunk.slurm.errors import SlurmUnavailable
from sunk.translate.placement import Exclusion

NODES = {"w1": {"metadata": {"name": "w1", "labels": {"pool": "a"}}},
         "w2": {"metadata": {"name": "w2", "labels": {"pool": "b"}}}}


def pod(selector: Any = None) -> dict[str, Any]:
    return {"metadata": {"uid": "u"}, "spec": {"nodeSelector": selector} if selector else {}}


class Mapping:
    def __init__(self) -> None:
        self.walks = 0
        self.nodes = {"n1": "w1", "n2": "w2"}

    def __call__(self) -> dict[str, str]:
        self.walks += 1
        return dict(self.nodes)


def test_pods_that_ask_alike_share_one_walk_until_something_changes() -> None:
    mapping = Mapping()
    placement = NodePlacement(mapping, NODES.get)
    assert placement.exclusion([pod({"pool": "a"})])[0].excluded == ("n2",)
    assert placement.exclusion([pod({"pool": "a"})])[0].excluded == ("n2",)
    assert placement.exclusion([pod()])[0].excluded == () and mapping.walks == 1  # (asking nothing: no walk)
    mapping.nodes["n3"] = "w9"
    assert placement.exclusion([pod({"pool": "a"})])[0].excluded == ("n2",)  # (kept: nothing said it changed)
    placement.changed()
    assert placement.exclusion([pod({"pool": "a"})])[0].excluded == ("n2", "n3") and mapping.walks == 2


def test_the_kept_exclusions_are_bounded() -> None:
    mapping = Mapping()
    placement = NodePlacement(mapping, NODES.get, cache_size=2)
    for value in ("a", "b", "c", "a"):
        placement.exclusion([pod({"pool": value})])
    assert mapping.walks == 4  # ("a" was dropped for "c")
    placement.exclusion([pod({"pool": "a"})])
    assert mapping.walks == 4


def test_a_change_wakes_only_the_waiting_units_that_node_admits_for_every_member() -> None:
    placement = NodePlacement(Mapping(), NODES.get)
    generation = placement.exclusion([pod({"pool": "b"})])[1]
    assert placement.wait("lone", [pod({"pool": "b"})], generation)
    assert placement.wait("gang", [pod({"pool": "b"}), pod({"pool": "a"})], generation)
    assert placement.wait("gang2", [pod({"pool": "b"}), pod()], generation)
    assert placement.changed(NODES["w2"]) == ["lone", "gang2"]
    assert placement.changed(NODES["w1"]) == [] and placement.changed(None) == []
    placement.settle("lone")
    assert placement.changed(NODES["w2"]) == ["gang2"] and placement.waiting() == 2


def test_a_change_while_the_exclusion_was_computed_is_not_lost() -> None:
    """The Node's wake came before the unit waited: ``wait`` says so, and the caller looks again at once."""
    placement = NodePlacement(Mapping(), NODES.get)
    found, generation = placement.exclusion([pod({"pool": "z"})])
    assert found.problem
    placement.changed(NODES["w2"])  # (nobody waits yet: nobody woken)
    assert placement.wait("lone", [pod({"pool": "z"})], generation) is False


def test_a_gang_counts_its_members_against_the_nodes_left() -> None:
    placement = NodePlacement(Mapping(), NODES.get)
    alone, _ = placement.exclusion([pod({"pool": "a"})])
    pair, _ = placement.exclusion([pod({"pool": "a"}), pod({"pool": "a"})])
    assert not alone.problem and pair.problem.startswith("1/2 Slurm nodes are available")
    assert "the gang needs 2" in pair.problem


def test_only_blocking_taints_are_kept_and_sunks_lock_changes_nothing() -> None:
    placement = NodePlacement(Mapping(), NODES.get, slurm_node_on={"w1": "n1", "w2": "n2"}.get)
    plain = {"metadata": {"uid": "u"}, "spec": {}}
    assert placement.exclusion([plain])[0].excluded == ()  # (no tainted Node: no key, no walk)
    lock = {"key": "sunk.coreweave.com/lock", "value": "true", "effect": "NoExecute"}
    w1 = {"metadata": {"name": "w1"}, "spec": {"taints": []}}
    w1_locked = {"metadata": {"name": "w1"}, "spec": {"taints": [lock]}}
    assert placement.node_changed(None, w1) is False and placement.node_changed(w1, w1_locked) is False
    w1_prefer = {"metadata": {"name": "w1"}, "spec": {"taints": [lock, {"key": "p", "effect": "PreferNoSchedule"}]}}
    assert placement.node_changed(w1_locked, w1_prefer) is False
    assert placement.exclusion([plain])[0].excluded == ()
    w2 = {"metadata": {"name": "w2"}, "spec": {"taints": [{"key": "m", "effect": "NoExecute"}]}}
    assert placement.node_changed(None, w2) is True
    placement.changed(w2)
    assert placement.exclusion([plain])[0].excluded == ("n2",)
    assert placement.node_changed(w2, None) is True
    placement.changed()
    assert placement.exclusion([plain])[0].excluded == ()


class Partitions:
    def __init__(self) -> None:
        self.lists = 0  # lists asked for, answered or not
        self.nodes = {"batch": ("n2",), "other": ("n1",)}
        self.fail: Exception | None = None

    def __call__(self) -> tuple[Partition, ...]:
        self.lists += 1
        if self.fail is not None:
            raise self.fail
        return tuple(Partition(name, nodes) for name, nodes in self.nodes.items())


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def partitioned() -> tuple[NodePlacement, Partitions, Clock]:
    partitions, clock = Partitions(), Clock()
    return NodePlacement(Mapping(), NODES.get, partitions=PartitionNodes(partitions, clock=clock)), partitions, clock


def problem(placement: NodePlacement, selector: Any, *partitions: str) -> str:
    return placement.exclusion([pod(selector)], partitions)[0].problem


def test_nodes_left_are_counted_in_the_jobs_partition_listed_once_per_change() -> None:
    """Pool a is left on n1 only, which is not batch's: a job in batch would fail in Slurm for good."""
    placement, partitions, clock = partitioned()
    found, _ = placement.exclusion([pod({"pool": "a"})], ("batch",))
    assert found.problem.startswith("0/1 Slurm nodes of partition batch are available")
    assert found.partitions == ("batch",)
    assert problem(placement, {"pool": "a"}, "other") == ""
    assert problem(placement, {"pool": "a"}) == ""  # (no partition named: judged among all)
    assert problem(placement, {"pool": "a"}, "batch") and partitions.lists == 1
    assert placement.exclusion([pod()], ("batch",))[0] == Exclusion() and partitions.lists == 1  # (nothing excluded)

    partitions.nodes["batch"] = ("n1", "n2")  # (Slurm's change, no Kubernetes event: seen once the list is old)
    clock.now += 29
    assert problem(placement, {"pool": "a"}, "batch") and partitions.lists == 1
    clock.now += 2
    assert problem(placement, {"pool": "a"}, "batch") == "" and partitions.lists == 2
    partitions.nodes["batch"] = ("n2",)
    placement.changed()  # (a Node or slurmd Pod changed: listed again, at most once a second)
    assert problem(placement, {"pool": "a"}, "batch") == "" and partitions.lists == 2
    clock.now += 1
    assert problem(placement, {"pool": "a"}, "batch") and partitions.lists == 3


def test_every_kept_verdict_is_judged_again_against_a_newer_list() -> None:
    """Whoever's ask reads the list again, every set of demands is judged against it, waiting or not."""
    placement, partitions, clock = partitioned()
    placement._node = {**NODES, "w3": {"metadata": {"name": "w3", "labels": {"pool": "c"}}}}.get
    assert problem(placement, {"pool": "a"}, "batch") and problem(placement, {"pool": "b"}, "other")
    assert problem(placement, {"pool": "b"}, "batch") == ""  # (fine, and kept so)
    partitions.nodes = {"batch": ("n1",), "other": ("n2",)}
    clock.now += 31
    assert problem(placement, {"pool": "b"}, "other") == "" and partitions.lists == 2
    assert problem(placement, {"pool": "a"}, "batch") == ""  # (the other set of demands, the newer list)
    assert problem(placement, {"pool": "b"}, "batch").startswith("0/1 Slurm nodes of partition batch")


def test_a_failed_list_is_not_asked_again_for_a_while_and_slurm_judges_meanwhile() -> None:
    placement, partitions, clock = partitioned()
    partitions.fail = SlurmUnavailable("list partitions: connection refused")
    assert placement.exclusion([pod({"pool": "a"})], ("batch",))[0] == Exclusion(("n2",))
    assert problem(placement, {"pool": "z"}, "batch").startswith("0/2 Slurm nodes are available")  # (as before)
    assert problem(placement, {"pool": "a"}, "batch") == "" and partitions.lists == 1
    clock.now += 5
    partitions.fail = ValueError("hostlist: unbalanced brackets")  # (an answer its parser refused: the same)
    assert problem(placement, {"pool": "a"}, "batch") == "" and partitions.lists == 2
    partitions.fail = None
    clock.now += 5
    assert problem(placement, {"pool": "a"}, "batch") and partitions.lists == 3
    partitions.fail = SlurmUnavailable("list partitions: connection refused")
    clock.now += 31
    assert problem(placement, {"pool": "a"}, "batch") and partitions.lists == 4  # (the last list kept)
    clock.now += 30
    assert problem(placement, {"pool": "a"}, "batch") == "" and partitions.lists == 5  # (too old: Slurm judges)


def test_a_list_that_hangs_then_fails_is_not_asked_again_by_the_next_asker() -> None:
    """Its time is when it ended: askers queued behind a timeout take its failure, not a timeout each."""
    partitions, clock = Partitions(), Clock()

    def hanging() -> tuple[Partition, ...]:
        clock.now += 30  # (slurmrestd's read timeout)
        return partitions()

    listed = PartitionNodes(hanging, clock=clock)
    partitions.fail = SlurmUnavailable("list partitions: read timed out")
    assert listed.current(0) is None and listed.current(0) is None and partitions.lists == 1


def test_a_unit_judged_on_a_list_older_than_a_change_looks_again_when_the_next_list_is_due() -> None:
    placement, partitions, clock = partitioned()
    _found, generation = placement.exclusion([pod({"pool": "a"})], ("batch",))
    assert placement.recheck_in(generation) == 30.0  # (the list shows this generation: the next in 30 s)
    clock.now += 0.25
    placement.changed()
    found, generation = placement.exclusion([pod({"pool": "a"})], ("batch",))
    assert found.problem and partitions.lists == 1  # (judged on the list a quarter second old)
    assert placement.recheck_in(generation) == 0.75  # (a list that shows the change may be read then)


def test_what_a_tenant_names_is_left_to_slurm_unless_slurm_listed_it() -> None:
    placement, partitions, clock = partitioned()
    assert problem(placement, {"pool": "a"}, "nosuch") == ""
    assert problem(placement, {"pool": "a"}, "batch", "nosuch") == ""
    assert problem(placement, {"pool": "a"}, *(["batch"] * 40_000)).startswith(
        "0/1 Slurm nodes of partition batch are available")  # (named once, however often written)
    many = [f"p{i}" for i in range(20)]
    partitions.nodes.update({name: ("n2",) for name in many})
    placement.changed()
    clock.now += 1
    assert problem(placement, {"pool": "a"}, *many) == ""  # (more than 16: Slurm judges)
    assert problem(placement, {"pool": "a"}, *many[:16]).startswith("0/1 Slurm nodes of partition p0, 0/1 of")

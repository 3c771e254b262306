"""benchmarks/placement.py: its worlds exclude what they say, so the figures time the work they name."""

from __future__ import annotations

from benchmarks import placement


def test_the_selecting_pod_is_kept_off_the_nodes_it_does_not_select_and_the_plain_one_off_the_tainted() -> None:
    world = placement.world(12, tainted=4)
    found, _ = placement.fresh(world)()
    # (selected: pool inference, odd i; GPU class H100 or H200, i not a multiple of 3; zone not z9: all)
    admitted = {f"n{i}" for i in range(12) if i % 2 and i % 3 and i >= 4}
    assert set(found.excluded) == {f"n{i}" for i in range(12)} - admitted and not found.problem
    plain, _ = world.exclusion([placement.PLAIN])
    assert plain.excluded == ("n0", "n1", "n2", "n3")
    assert placement.world(12).exclusion([placement.PLAIN])[0].excluded == ()


def test_a_node_event_wakes_the_waiting_units_it_admits() -> None:
    world = placement.world(4)
    for unit in range(3):
        world.wait(f"unit-{unit}", [placement.SELECTING], 0)
    assert world.changed(placement.node(1)) == ["unit-0", "unit-1", "unit-2"]
    assert world.changed(placement.node(2)) == []


def test_a_partition_judgement_counts_the_nodes_left_in_the_named_partition() -> None:
    """The selecting Pod is admitted on odd nodes only (inference's): judged in train, none is left."""
    for lists, versions in (("kept", 1), ("new", 4)):
        world = placement.world(12, partitions=lists)
        assert world.exclusion([placement.SELECTING], ("inference",))[0].problem == ""
        assert world.exclusion([placement.SELECTING], ("train",))[0].problem.startswith(
            "0/6 Slurm nodes of partition train are available")
        for _ in range(2):
            world.exclusion([placement.SELECTING], ("inference",))
        listed = world._partitions.current(0) if world._partitions is not None else None
        assert listed is not None and listed.version == versions + (lists == "new")  # ("new": a list each ask)

"""The Slurm nodes a Pod must not get, for its nodeSelector and required node affinity (translate/placement.py)."""

from __future__ import annotations

from typing import Any

import pytest

from sunk.translate.placement import (
    Demand,
    Exclusion,
    admits,
    demand_of,
    in_partitions,
    key_of,
    node_exclusion,
    selector_problems,
    taint_exclusion,
    tolerates,
)

NODES = {
    "worker-1": {"metadata": {"name": "worker-1", "labels": {"pool": "a", "gpu.nvidia.com/class": "H100"}}},
    "worker-2": {"metadata": {"name": "worker-2", "labels": {"pool": "b", "gpu.nvidia.com/class": "H100"}}},
    "worker-3": {"metadata": {"name": "worker-3", "labels": {"pool": "b", "rank": "7"}}},
}
SLURM = {"node1": "worker-1", "node2": "worker-2", "node3": "worker-3", "node4": "gone-node"}


def pod(node_selector: Any = None, affinity: Any = None) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if node_selector is not None:
        spec["nodeSelector"] = node_selector
    if affinity is not None:
        spec["affinity"] = affinity
    return {"spec": spec}


def required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": op, **({"values": list(values)} if values else {})}]}


def exclusion(*pods: Any) -> Exclusion:
    return node_exclusion([d for p in pods if (d := demand_of(p)).selects], SLURM, NODES.get)


@pytest.mark.parametrize(("the_pod", "expected"), [
    (pod(), Exclusion()),
    (pod(affinity={"podAntiAffinity": {}}), Exclusion()),
    (pod({}, {"nodeAffinity": {}}), Exclusion()),
    (pod({"pool": "b"}), Exclusion(("node1", "node4"))),
    (pod(affinity=required(expr("pool", "NotIn", "b"))), Exclusion(("node2", "node3", "node4"))),
    (pod(affinity=required(expr("rank", "Gt", "5"), expr("pool", "In", "a"))), Exclusion(("node2", "node4"))),
    (pod({"pool": "b"}, required(expr("gpu.nvidia.com/class", "Exists"))), Exclusion(("node1", "node3", "node4"))),
    (pod(affinity=required({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["worker-3"]}]})),
     Exclusion(("node1", "node2", "node4"))),
], ids=["nothing asked", "no node affinity", "empty selector and affinity", "nodeSelector", "NotIn", "ORed terms",
        "selector and affinity", "matchFields"])
def test_the_slurm_nodes_whose_node_the_pod_rules_out_are_excluded(the_pod: Any, expected: Exclusion) -> None:
    assert exclusion(the_pod) == expected


def test_a_gang_excludes_what_any_member_rules_out() -> None:
    assert exclusion(pod({"pool": "b"}), pod(), pod(affinity=required(expr("rank", "Exists")))) == Exclusion(
        ("node1", "node2", "node4"))
    assert exclusion(pod({"pool": "b"}), pod({"pool": "b"})) == exclusion(pod({"pool": "b"}))


def test_none_matching_is_a_problem_with_every_node_excluded() -> None:
    found = exclusion(pod({"pool": "nowhere"}))
    assert found.excluded == ("node1", "node2", "node3", "node4") and found.problem.startswith("0/4 Slurm nodes")
    assert "taints it does not tolerate" in found.problem
    assert exclusion(pod({"pool": "a"}), pod({"pool": "b"})).problem  # (members that agree on no node)
    assert node_exclusion([demand_of(pod({"pool": "a"}))], {}, NODES.get).problem.startswith("0/0")


@pytest.mark.parametrize("the_pod", [
    pod({"pool": 7}), pod(affinity={"nodeAffinity": "junk"}), pod(affinity=required(expr("pool", "Sideways", "a"))),
    pod(affinity=required()),
])
def test_a_selector_that_is_not_valid_is_a_problem_and_admits_nowhere(the_pod: Any) -> None:
    assert selector_problems(the_pod)
    assert demand_of(the_pod).selects and not any(admits(demand_of(the_pod), n) for n in NODES.values())
    assert exclusion(the_pod).problem


def test_admits_reads_one_pods_selector_against_one_node() -> None:
    assert [name for name, n in NODES.items() if admits(demand_of(pod({"pool": "b"})), n)] == ["worker-2", "worker-3"]


def test_the_cache_key_is_the_set_of_selectors() -> None:
    a, b = demand_of(pod({"pool": "a"})), demand_of(pod({"pool": "b", "rank": "7"}))
    b_reordered = demand_of(pod({"rank": "7", "pool": "b"}))
    assert key_of([a, b]) == key_of([b_reordered, a, a])
    assert key_of([a]) != key_of([b])
    assert key_of([a]) != key_of([Demand(a.selector, a.affinity, ({"operator": "Exists"},))])


def test_a_selector_larger_than_sunk_reads_is_refused_not_matched_node_by_node() -> None:
    big = required(*({"matchExpressions": [{"key": f"k{i}-{j}", "operator": "NotIn", "values": ["v"] * 5}
                                           for j in range(10)]} for i in range(7)))
    assert selector_problems(pod(affinity=big))[0].startswith("spec.nodeSelector and ")
    many_values = required(expr("pool", "In", *(f"v{i}" for i in range(257))))
    assert "257" in selector_problems(pod(affinity=many_values))[0]
    assert selector_problems(pod({f"k{i}": "v" for i in range(30)}, required(expr("pool", "In", "a")))) == []


@pytest.mark.parametrize(("bound", "label", "admitted"), [
    ("5", "7", True), ("5", "+7", True), ("5", "5_0", False), ("5", " 7", False),
    ("5", "1" + "0" * 19, False), ("-9223372036854775808", "0", True),
], ids=["plain", "signed", "underscore", "space", "beyond int64", "int64 min"])
def test_gt_reads_numbers_as_kubernetes_does(bound: str, label: str, admitted: bool) -> None:
    """strconv.ParseInt(v, 10, 64): what the kubelet's admission reads; a label it cannot read matches nothing."""
    demand = demand_of(pod(affinity=required(expr("rank", "Gt", bound))))
    assert admits(demand, {"metadata": {"name": "w", "labels": {"rank": label}}}) is admitted
    assert selector_problems(pod(affinity=required(expr("rank", "Gt", "5_0"))))


def tainted(name: str, *taints: dict[str, str], labels: Any = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": {"taints": list(taints)}}


@pytest.mark.parametrize(("toleration", "taint", "expected"), [
    ({"key": "k", "operator": "Equal", "value": "v"}, {"key": "k", "value": "v", "effect": "NoSchedule"}, True),
    ({"key": "k", "value": "v"}, {"key": "k", "value": "w", "effect": "NoSchedule"}, False),
    ({"key": "k", "operator": "Exists"}, {"key": "k", "value": "w", "effect": "NoExecute"}, True),
    ({"key": "k", "operator": "Exists", "effect": "NoSchedule"}, {"key": "k", "effect": "NoExecute"}, False),
    ({"operator": "Exists"}, {"key": "anything", "effect": "NoExecute"}, True),
    ({"operator": "Exists", "effect": "NoExecute"}, {"key": "anything", "effect": "NoExecute"}, True),
    ({"key": "k", "operator": "Sideways"}, {"key": "k", "effect": "NoExecute"}, False),
    ({"key": "k"}, {"key": "k", "effect": "NoSchedule"}, True),  # (Equal, both values empty)
    ("junk", {"key": "k", "effect": "NoSchedule"}, False),
], ids=["equal", "other value", "exists", "other effect", "every key", "every key of an effect", "bad operator",
        "empty values", "not an object"])
def test_tolerations_match_as_kubernetes_matches_them(toleration: Any, taint: Any, expected: bool) -> None:
    assert tolerates(toleration, taint) is expected


def test_a_taint_the_pod_does_not_tolerate_rules_its_node_out_but_not_sunks_lock_nor_prefer() -> None:
    nodes = {"w1": tainted("w1", {"key": "maint", "effect": "NoExecute"}),
             "w2": tainted("w2", {"key": "sunk.coreweave.com/lock", "value": "true", "effect": "NoExecute"},
                           {"key": "soft", "effect": "PreferNoSchedule"}),
             "w3": tainted("w3", {"key": "gpu", "value": "true", "effect": "NoSchedule"})}
    on = {"w1": "n1", "w2": "n2", "w3": "n3"}.get

    def exclusion(*demands: Demand, total: int = 4) -> Exclusion:
        return taint_exclusion(demands, nodes.items(), on, lambda: total, members=len(demands))

    plain = demand_of({"spec": {}})
    assert exclusion(plain) == Exclusion(("n1", "n3"))
    gpu = demand_of({"spec": {"tolerations": [{"key": "gpu", "operator": "Exists"}]}})
    assert exclusion(gpu) == Exclusion(("n1",))
    assert exclusion(gpu, plain) == Exclusion(("n1", "n3"))  # (a gang: any member; 2 left for its 2)
    everything = demand_of({"spec": {"tolerations": [{"operator": "Exists"}]}})
    assert exclusion(everything) == Exclusion()
    assert taint_exclusion([plain], nodes.items(), lambda _n: None, lambda: 4) == Exclusion()  # (no Slurm node)
    assert exclusion(plain, total=2).problem.startswith("0/2 Slurm nodes are available")
    assert "the gang needs 3" in exclusion(gpu, plain, plain, total=4).problem  # (1 left for 3)
    selecting = demand_of(pod({"pool": "b"}))
    assert node_exclusion([selecting], {"n1": "w1", "n3": "w3"}, {
        "w1": tainted("w1", labels={"pool": "b"}),
        "w3": tainted("w3", {"key": "gpu", "effect": "NoSchedule"}, labels={"pool": "b"})}.get) == Exclusion(("n3",))


def test_nodes_that_carry_the_same_taints_are_read_once() -> None:
    reads = []

    class Counting(dict):  # type: ignore[type-arg]
        def get(self, key: object, default: object = None) -> object:
            reads.append(key)
            return super().get(key, default)

    toleration = Counting(key="gpu", operator="Exists")
    demand = Demand(tolerations=(toleration,))
    nodes = [(f"w{i}", tainted(f"w{i}", {"key": "gpu", "effect": "NoSchedule"})) for i in range(50)]
    assert taint_exclusion([demand], nodes, lambda name: "n" + name[1:], lambda: 50) == Exclusion()
    assert 0 < len(reads) <= 4  # (one read of the toleration for the one set of taints, not 50)


def test_the_taints_kubernetes_writes_for_a_nodes_conditions_are_left_to_slurm() -> None:
    """Not-ready, unreachable, pressure, cordoned: the Syncer's drains and slurmd's own health say them to Slurm;
    read here, a Node's missed heartbeats kept every Pod off it and failed placeholders for good."""
    nodes = {"w1": tainted("w1", {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
                           {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"},
                           {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}),
             "w2": tainted("w2", {"key": "example.com/node.kubernetes.io", "effect": "NoSchedule"})}
    found = taint_exclusion([demand_of({"spec": {}})], nodes.items(), {"w1": "n1", "w2": "n2"}.get, lambda: 2)
    assert found == Exclusion(("n2",))


# -- judged in the job's partitions: Slurm fails a job whose partition has no node left (BadConstraints) ------------
PARTITIONS = {"batch": frozenset({"node1", "node2"}), "real": frozenset({"node3"}), "cold": frozenset({"node9"})}
HOSTED = {"node1": "worker-1", "node2": "worker-2", "node3": "worker-3"}


def test_a_partition_with_no_node_left_is_a_problem_though_another_partition_has_some() -> None:
    found = in_partitions(Exclusion(("node1", "node2")), ("batch",), PARTITIONS, HOSTED)
    assert found == Exclusion(("node1", "node2"), "0/2 Slurm nodes of partition batch are available: the Nodes their "
                              "slurmd Pods run on do not match the Pod's nodeSelector and required node affinity, "
                              "or have taints it does not tolerate", ("batch",))


@pytest.mark.parametrize(("excluded", "partitions", "members", "problem"), [
    (("node1",), ("batch",), 1, ""),  # (node2 left)
    (("node1",), ("batch",), 2, "1/2 Slurm nodes of partition batch are available"),
    (("node1", "node2"), ("batch", "real"), 1, ""),  # (a job runs in any one of its partitions)
    (("node1", "node3"), ("batch", "real"), 2, "1/2 Slurm nodes of partition batch, 0/1 of partition real are"),
    (("node1", "node2"), ("nosuch",), 1, ""),  # (a partition Slurm did not list: Slurm answers)
    (("node1", "node2"), ("batch", "nosuch"), 1, ""),
    (("node1", "node2"), (), 1, ""),  # (no partition named: Slurm's default, which sunk does not know)
    (("node1", "node2"), ("cold",), 1, ""),  # (no node of it has a Ready slurmd Pod: Slurm answers)
    (("node1", "node2"), ("batch", "batch"), 1, "0/2 Slurm nodes of partition batch are available"),
])
def test_enough_nodes_left_is_judged_in_any_of_the_jobs_partitions(excluded: Any, partitions: Any, members: int,
                                                                    problem: str) -> None:
    found = in_partitions(Exclusion(excluded), partitions, PARTITIONS, HOSTED, members=members)
    assert found.excluded == excluded and found.problem.startswith(problem) and bool(found.problem) == bool(problem)
    assert found.partitions == (tuple(dict.fromkeys(partitions)) if problem else ())


def test_nothing_excluded_or_a_problem_already_found_is_left_as_it_is() -> None:
    assert in_partitions(Exclusion(), ("cold",), PARTITIONS, HOSTED) == Exclusion()
    judged = Exclusion(("node1", "node2", "node3"), "0/3 Slurm nodes are available: ...")
    assert in_partitions(judged, ("batch",), PARTITIONS, HOSTED) is judged

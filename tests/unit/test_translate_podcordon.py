"""The Pod cordon marker: what the Pod controller writes for a Node, and how the Slurm side reads it back."""

from __future__ import annotations

from syncer_fakes import k8s_node, pod

from sunk.translate.podcordon import COND_POD_CORDONED, Cordon, desired_condition, pod_cordon


def _with(cond: dict[str, str] | None) -> dict:
    return pod("node1", node="worker-1", conditions=[cond] if cond else [])


def test_cordoned_node_marks_the_pod_with_the_reason_verbatim():
    want = desired_condition(_with(None), k8s_node("worker-1", cordoned=True, reason="PSU swap: ticket 7"))
    assert want == {"type": COND_POD_CORDONED, "status": "True", "reason": "NodeCordoned",
                    "message": "PSU swap: ticket 7"}
    assert pod_cordon(_with(want)) == Cordon(True, "PSU swap: ticket 7", "worker-1")


def test_cordon_without_a_reason_reads_back_without_one():
    want = desired_condition(_with(None), k8s_node("worker-1", cordoned=True))
    assert want is not None and want["message"] == ""
    stored = {k: v for k, v in want.items() if v}  # the apiserver drops empty strings
    assert pod_cordon(_with(stored)) == Cordon(True, None, "worker-1")


def test_never_cordoned_pods_get_no_condition_and_uncordoned_ones_get_false():
    assert desired_condition(_with(None), k8s_node("worker-1")) is None
    marked = {"type": COND_POD_CORDONED, "status": "True", "reason": "NodeCordoned", "message": "x"}
    want = desired_condition(_with(marked), k8s_node("worker-1"))
    assert want is not None and want["status"] == "False" and want["reason"] == "NodeUncordoned"
    assert pod_cordon(_with(want)) == Cordon(False)


def test_unknown_node_keeps_the_last_marker():
    marked = {"type": COND_POD_CORDONED, "status": "True", "reason": "NodeCordoned", "message": "x"}
    assert desired_condition(_with(marked), None) is None  # None: write nothing, keep what is there
    assert pod_cordon(_with(marked)).cordoned
    assert pod_cordon(None) == Cordon(False)

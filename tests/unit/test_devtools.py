"""Pure parts of sunk-dev: config rendering and PID-file discipline."""

from __future__ import annotations

import subprocess
import sys

from sunk_dev import slurmconf
from sunk_dev.procs import Daemon


def _settings(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith(("NodeName",
                                                                                                      "PartitionName")))


def test_slurm_conf_carries_the_settings_the_product_relies_on():
    conf = _settings(slurmconf.slurm_conf(slurmconf.SlurmLayout(nodes=3)))
    assert conf["PreemptType"] == "preempt/qos"
    assert conf["KillWait"] == "30"
    assert conf["ReturnToService"] == "2"
    assert conf["AuthAltTypes"] == "auth/jwt"
    assert conf["SelectTypeParameters"] == "CR_Core_Memory"
    assert conf["Prolog"] == "/etc/slurm/prolog.sh" and conf["Epilog"] == "/etc/slurm/epilog.sh"
    assert conf["PrologFlags"] == "Alloc"


def test_the_stand_in_nodes_are_dynamic_and_join_batch_by_their_feature():
    """node1..N register from their NodeSets' Pods (no NodeName line); the batch partition takes them through a
    NodeSet on their feature; one static node, never started and in no partition, stays for the contract test."""
    text = slurmconf.slurm_conf(slurmconf.SlurmLayout(nodes=3, phantom_nodes=5))
    assert "NodeName=node" not in text
    assert f"NodeSet=stand_in Feature={slurmconf.NODE_FEATURES}\n" in text
    assert "PartitionName=batch Nodes=stand_in Default=YES" in text
    static = next(line for line in text.splitlines() if line.startswith(f"NodeName={slurmconf.STATIC_NODE} "))
    assert "State=DOWN" in static and slurmconf.STATIC_NODE not in text.replace(static, "")
    assert "NodeName=phantom[1-5]" in text
    assert "PartitionName=phantom Nodes=phantom[1-5] Default=NO" in text
    assert f"MaxNodeCount={3 + 5 + 1 + slurmconf.DYNAMIC_NODES}" in text
    assert slurmconf.SlurmLayout(nodes=2).node_names == ("node1", "node2")


def test_no_phantom_partition_by_default():
    assert "phantom" not in slurmconf.slurm_conf(slurmconf.SlurmLayout(nodes=4))


def test_the_shared_gres_conf_names_no_node():
    """Each node's gres.conf lines are its Pod's (SUNK_GRES_CONF): a line here would give a node its GPUs twice."""
    assert slurmconf.GRES_CONF == "AutoDetect=off\n"


def test_the_dev_nodes_have_two_gpu_types_in_turn_one_nodeset_each():
    """So a Pod can ask for a type (--gpu-types) and land only on its nodes: each NodeSet takes the Nodes of its
    type by name, and registers their GPUs of that type, the feature of the batch partition, and NodeName names."""
    from sunk_dev.cluster import stand_in_nodesets

    layout = slurmconf.SlurmLayout(nodes=4)
    for node, gpu in (("node1", "h100"), ("node2", "a100"), ("node3", "h100"), ("node4", "a100")):
        assert slurmconf.gres(node) == f"gpu:{gpu}:2"
    nodesets = {n["metadata"]["name"]: n["spec"] for n in stand_in_nodesets(layout)}
    assert set(nodesets) == {"h100", "a100"}
    for gpu, nodes in (("h100", ["node1", "node3"]), ("a100", ["node2", "node4"])):
        spec = nodesets[gpu]
        (term,) = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"]
        assert term == {"matchFields": [{"key": "metadata.name", "operator": "In", "values": nodes}]}
        assert spec["naming"] == {"scheme": "NodeName"}
        assert spec["slurm"] == {"features": [slurmconf.NODE_FEATURES], "gres": f"gpu:{gpu}:2",
                                 "partitions": [slurmconf.PARTITION]}
        assert spec["template"]["metadata"]["labels"]["app.kubernetes.io/name"] == "slurmd"
    assert [n["metadata"]["name"] for n in stand_in_nodesets(slurmconf.SlurmLayout(nodes=1))] == ["h100"]


def _hook(path, body: str) -> None:
    path.write_text("#!/bin/bash\n" + body + "\n")
    path.chmod(0o755)


def test_hook_runner_runs_every_hook_in_order_and_fails_when_one_fails(tmp_path):
    runner = tmp_path / "prolog.sh"
    _hook(runner, slurmconf.hook_runner("prolog", base=str(tmp_path)))
    (tmp_path / "prolog.d").mkdir()
    trace = tmp_path / "trace"
    _hook(tmp_path / "prolog.d/10-first", f"echo first >> {trace}")
    _hook(tmp_path / "prolog.d/20-second", f"echo second >> {trace}")
    assert subprocess.run([str(runner)]).returncode == 0
    assert trace.read_text().split() == ["first", "second"]
    _hook(tmp_path / "prolog.d/15-broken", "exit 3")
    failed = subprocess.run([str(runner)], capture_output=True, text=True)
    assert failed.returncode == 1
    assert "15-broken failed with 3" in failed.stderr


def test_daemon_is_stopped_by_pid_and_forgets_it(tmp_path):
    daemon = Daemon("sleeper", (sys.executable, "-c", "import time; time.sleep(60)"), tmp_path)
    assert daemon.pid() is None
    pid = daemon.start()
    assert daemon.pid() == pid
    assert daemon.stop(timeout=5) is True
    assert daemon.pid() is None
    assert daemon.stop() is False


def test_a_reused_pid_is_not_ours(tmp_path):
    daemon = Daemon("other", ("true",), tmp_path)
    daemon.pid_file.parent.mkdir(parents=True)
    # PID 1 exists, but with another start time than the one recorded.
    daemon.pid_file.write_text("1 999999999\n")
    assert daemon.pid() is None
    assert daemon.stop() is False


def test_a_stand_in_nodes_gpus_follow_its_annotation_and_nothing_else():
    from sunk_dev import kubelet

    def annotated(value: object) -> dict:
        return {"metadata": {"annotations": {kubelet.GPUS_ANNOTATION: value}}}

    assert kubelet.capacity_of(annotated("4"))["nvidia.com/gpu"] == "4"
    assert kubelet.capacity_of(annotated("4"))["cpu"] == kubelet.CAPACITY["cpu"]
    for bad in ("-1", "4.5", "65", 4, "lots"):
        assert kubelet.capacity_of(annotated(bad)) == kubelet.CAPACITY
    assert kubelet.capacity_of(None) == kubelet.CAPACITY
    status = kubelet.ready_status("n", kubelet.capacity_of(annotated("4")))["status"]
    assert status["allocatable"]["nvidia.com/gpu"] == status["capacity"]["nvidia.com/gpu"] == "4"

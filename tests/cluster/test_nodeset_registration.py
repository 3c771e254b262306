"""What a NodeSet's Slurm nodes register with, and Slurm's topology, from the Nodes: on the real parts.

sunk-operator runs as in test_nodeset.py (the chart's flags, ServiceAccount and RBAC), here with
``scheduler.gpuTypes`` (so ``--gpu-types``) and ``operator.topology`` (block, into the ConfigMap the
chart names) set, plus ``--topology-file`` at the dev cluster's ``etc/slurm`` in the chroot: there
slurmctld reads its files, standing in for the ConfigMap a real slurmctld mounts. Its Nodes are
stand-in Nodes whose slurmd Pods run real ``slurmd -Z`` processes (``sunk_dev.standin_slurmd``).

- a NodeSet with ``memSpecLimit``: ``scontrol show node`` shows it;
- GRES from the Node (``operator.gresFromNode``, on for the whole module, so every NodeSet here registers
  its Node's GPUs, the stand-in's 2 unless its ``sunk.dev/gpus`` says otherwise): a Node advertising 4 GPUs
  of class A100_NVLINK_80GB registers ``Gres=gpu:a100:4``, IDLE, not INVAL (slurmd drops a GPU without
  ``File=``; the operator's gres.conf lines name ``/dev/nvidia[0-3]``, which the stand-in slurmd reads from a
  configuration directory of its own, the device files aliases of /dev/null), and a job asking
  ``--gres=gpu:a100:1`` runs on it and sees one GPU;
- Nodes labelled with two NVLink domains: ``scontrol show topology`` shows both blocks within 10 s of
  their registration; a gang of 2 Pods (a batch/v1 Job placed by sunk-scheduler as deployed, one Slurm
  job) lands inside one block; a relabelled Node moves block within 10 s while a job runs on it, and the
  job is not killed. Slurm's view needs the block plugin: Slurm
  25.05+ (the topology.yaml written selects it) or ``TopologyPlugin=topology/block`` in slurm.conf,
  which the dev cluster's 24.11 has not: there the test checks the topology.conf written (both
  blocks, within 10 s) and no more. In every leg of `make test`: on 25.11 and 26.05 Slurm's own view
  (topology.yaml, block sizes written out, so a block naming a node since deleted is only a warning).
  While it runs, the dev cluster's own nodes are in no block; the file is removed and slurmctld
  reconfigured at the end.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from kube_testns import create_namespace, delete_jobs, purge_namespace, wait_default_service_account
from rbac_harness import as_service_account, assert_never_forbidden, operator_as_deployed
from syncer_harness import free_port, wait_for
from test_gangs import all_bound, create_batch_job
from test_nodeset import Pool, _delete_quietly, _wait_registered_idle
from test_scheduler import scheduler_process, serving

from sunk.kube import client as kc
from sunk.kube.resources import CONFIGMAPS, LEASES, NAMESPACES, NODES, NODESLICES
from sunk.model import names
from sunk.model.hostlist import expand
from sunk.translate.nodeset.topology import CONF, DEFAULT_BLOCK_LABEL, YAML
from sunk_dev import kubelet, slurmconf
from sunk_dev.pool import StandInPool, apply_crds

NODES_IN_POOL = 4
GPU_CLASS = "A100_NVLINK_80GB"
TOPOLOGY_CONFIGMAP = "sunk-topology"

pytestmark = pytest.mark.every_release


def slurm_release(dev_cluster) -> tuple[int, int]:
    out = dev_cluster.slurm("scontrol", "--version").stdout  # "slurm 24.11.5"
    major, minor = re.search(r"(\d+)\.(\d+)", out).groups()  # type: ignore[union-attr]
    return int(major), int(minor)


@pytest.fixture(scope="module")
def gpool(kube_api, dev_cluster, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nodeset-registration")
    apply_crds(kube_api)
    run_id = uuid.uuid4().hex[:6]
    namespace = f"nodereg-{run_id}"
    kc.create(kube_api, NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    wait_default_service_account(kube_api, namespace)
    nodes = [f"nr{run_id}-{i}" for i in range(1, NODES_IN_POOL + 1)]
    stand_ins = StandInPool(dev_cluster, kube_api, nodes, tmp)
    file_format = YAML if slurm_release(dev_cluster) >= (25, 5) else CONF
    topology_file = Path(dev_cluster.root) / "etc/slurm" / file_format
    assert not topology_file.exists(), f"{topology_file} exists already: whose is it?"
    values = {"operator": {"enabled": True, "topology": {"type": "block", "format": file_format,
                                                         "configMap": TOPOLOGY_CONFIGMAP}},
              "scheduler": {"gpuTypes": {GPU_CLASS: "a100"}}, "slurmd": {"namespace": namespace}}
    values["operator"]["gresFromNode"] = True
    deployed = operator_as_deployed(kube_api, dev_cluster, tmp, namespace, values,
                                    extra=[f"--topology-file={topology_file}"])
    args = deployed.args
    assert f"--gpu-types={GPU_CLASS}=a100" in args and "--topology=block" in args and "--gres-from-node" in args
    account, operator = deployed.account, deployed.process
    p = Pool(kube_api, dev_cluster, namespace, run_id, nodes)
    p.operator = operator
    p.topology_file = topology_file  # type: ignore[attr-defined]
    p.file_format = file_format  # type: ignore[attr-defined]
    try:
        stand_ins.start()
        operator.start()
        yield p
    finally:
        try:
            p.reset()
            operator.stop()
        finally:
            topology_file.unlink(missing_ok=True)
            dev_cluster.slurm("scontrol", "reconfigure", check=False)
            stand_ins.stop()
            for obj in kc.list_objects(kube_api, NODESLICES, namespace):
                _delete_quietly(kube_api, NODESLICES, obj["metadata"]["name"], namespace)
            purge_namespace(kube_api, namespace)
            _delete_quietly(kube_api, LEASES, account["name"], account["namespace"])
        assert_never_forbidden(operator.log)


@pytest.fixture(autouse=True)
def fresh(gpool):
    yield
    for node in gpool.nodes:  # the Nodes as the stand-in kubelet made them
        kc.patch(gpool.api, NODES, node, {"metadata": {
            "annotations": {kubelet.GPUS_ANNOTATION: None},
            "labels": {DEFAULT_BLOCK_LABEL: None, "gpu.nvidia.com/class": "FAKE_GPU"}}})
        capacity = kubelet.capacity_of(None)  # now, not at the stand-in's next status write
        kc.patch(gpool.api, NODES, node, {"status": {"capacity": capacity, "allocatable": capacity}},
                 subresource="status")
    gpool.reset()


def show_node(pool: Pool, node: str) -> str:
    return pool.dev.slurm("scontrol", "show", "node", node, check=False).stdout


def test_a_nodeset_with_memspeclimit_shows_it_in_scontrol_show_node(gpool):
    a = gpool.nodes[0]
    gpool.label(a, True)
    spec_slurm = {"features": [slurmconf.DYNAMIC_FEATURE], "partitions": [slurmconf.DYNAMIC_PARTITION],
                  "memSpecLimit": 2048}
    gpool.nodeset("memspec", slurm=spec_slurm)
    _wait_registered_idle(gpool, [a])
    assert "MemSpecLimit=2048" in show_node(gpool, a)


def test_a_node_with_4_a100_gpus_registers_gpu_a100_4_idle_and_a_gpu_job_runs_there(gpool):
    """Issue 35 item 2: nobody writes a GRES line, the Node's allocatable nvidia.com/gpu (4, as the stand-in
    kubelet's ``sunk.dev/gpus`` makes it advertise) and its class label (mapped by gpuTypes) make
    ``Gres=gpu:a100:4``; the node is IDLE, not INVAL."""
    a = gpool.nodes[0]
    capacity = kubelet.capacity_of({"metadata": {"annotations": {kubelet.GPUS_ANNOTATION: "4"}}})
    kc.patch(gpool.api, NODES, a, {"metadata": {"labels": {"gpu.nvidia.com/class": GPU_CLASS},
                                                "annotations": {kubelet.GPUS_ANNOTATION: "4"}}})
    kc.patch(gpool.api, NODES, a, {"status": {"capacity": capacity, "allocatable": capacity}}, subresource="status")
    gpool.label(a, True)
    gpool.nodeset("gres")  # features and partitions only: no slurm.gres
    wait_for(lambda: len(gpool.pods("gres")) == 1, 30, "the slurmd Pod on the labelled Node")
    (pod,) = gpool.pods("gres").values()
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["SUNK_GRES_CONF"] == f"NodeName={a} Name=gpu Type=a100 File=/dev/nvidia[0-3]\n", env
    _wait_registered_idle(gpool, [a])
    shown = show_node(gpool, a)
    assert re.search(r"\bGres=gpu:a100:4\b", shown) and "INVAL" not in shown, shown
    out = gpool.dev.slurm("sbatch", "--parsable", "--chdir=/tmp", "-o", f"/tmp/gres-{gpool.run_id}.out", "-p",
                          slurmconf.DYNAMIC_PARTITION, "-w", a, "-n1", "--mem=100M", "--gres=gpu:a100:1",
                          f"--comment=nodeset-test-{gpool.run_id}", "--wrap",
                          "echo gpus=$CUDA_VISIBLE_DEVICES; sleep 600").stdout
    job = int(out.strip().split(";")[0])
    wait_for(lambda: gpool.job_state(job) == "RUNNING", 30, "the job asking gpu:a100:1 running on the node")
    detail = gpool.dev.slurm("scontrol", "show", "job", "-d", str(job)).stdout
    assert re.search(r"GRES=gpu:a100:1\(IDX:[0-3]\)", detail), detail
    gpool.cancel(job)


def blocks(pool: Pool) -> dict[str, set[str]]:
    """``scontrol show topology``'s blocks: name -> Slurm nodes."""
    out = pool.dev.slurm("scontrol", "show", "topology", check=False).stdout
    found: dict[str, set[str]] = {}
    for m in re.finditer(r"BlockName=(\S+).*?\bNodes=(\S+)", out):
        found[m.group(1)] = set(expand(m.group(2)))
    return found


def block_plugin_usable(pool: Pool) -> bool:
    if pool.file_format == YAML:  # type: ignore[attr-defined]
        return True  # topology.yaml names its plugin
    config = pool.dev.slurm("scontrol", "show", "config", check=False).stdout
    return bool(re.search(r"TopologyPlugin\s*=\s*topology/block", config))


@contextmanager
def gang_scheduler(pool: Pool, tmp: Path) -> Iterator[str]:
    """sunk-scheduler as deployed (the chart's ServiceAccount and RBAC, with ``slurmd.namespace`` the pool's, so
    it reads the NodeSet's slurmd Pods there), for a namespace of its own, whose name it yields; at the end that
    namespace's Pods go and their jobs end (``serving``), then the scheduler stops."""
    lease = f"sunk-scheduler-topology-{pool.run_id}"
    account, kubeconfig = as_service_account(pool.api, pool.dev, "scheduler-rbac.yaml", tmp, leases=[lease],
                                             values={"slurmd": {"namespace": pool.namespace}})
    pods_namespace = create_namespace(pool.api)
    ports = {"hooks": free_port(), "metrics": free_port(), "probes": free_port()}
    proc = scheduler_process(pool.dev, pods_namespace, tmp, name="sunk-scheduler-topology", ports=ports,
                             extra_args=(f"--kubeconfig={kubeconfig}", f"--slurmd-namespace={pool.namespace}",
                                         f"--leader-election-namespace={account['namespace']}",
                                         f"--leader-election-id={lease}"))
    with serving(pool.api, pool.dev, proc, pods_namespace):
        yield pods_namespace
    _delete_quietly(pool.api, LEASES, lease, account["namespace"])
    assert_never_forbidden(proc.log)


def test_topology_blocks_follow_the_node_labels_within_10s_and_a_relabel_kills_no_job(gpool, tmp_path):
    a, b, c, d = gpool.nodes
    blk_a, blk_b = f"blk-a-{gpool.run_id}", f"blk-b-{gpool.run_id}"
    for node, block in ((a, blk_a), (b, blk_a), (c, blk_b), (d, blk_b)):
        kc.patch(gpool.api, NODES, node, {"metadata": {"labels": {DEFAULT_BLOCK_LABEL: block}}})
        gpool.label(node, True)
    gpool.nodeset("topo")
    _wait_registered_idle(gpool, [a, b, c, d])
    registered = time.monotonic()
    if not block_plugin_usable(gpool):  # (24.11 here: the file is what sunk makes; Slurm shows no blocks)
        written = gpool.dev.root / "etc/slurm" / gpool.file_format  # type: ignore[attr-defined]
        wait_for(lambda: written.exists() and f"BlockName={blk_a} Nodes=" in written.read_text()
                 and f"BlockName={blk_b} Nodes=" in written.read_text(), 10, "topology.conf with both blocks",
                 interval=0.5)
        text = written.read_text()
        for block, members in ((blk_a, {a, b}), (blk_b, {c, d})):
            line = next(line for line in text.splitlines() if line.startswith(f"BlockName={block} "))
            assert set(expand(line.split("Nodes=", 1)[1].split()[0])) == members
        return
    wait_for(lambda: (got := blocks(gpool)).get(blk_a) == {a, b} and got.get(blk_b) == {c, d}, 10,
             "scontrol show topology: both blocks", interval=0.5)
    print(f"both blocks shown {time.monotonic() - registered:.1f} s after the nodes registered")
    cm = kc.get(gpool.api, CONFIGMAPS, TOPOLOGY_CONFIGMAP, gpool.namespace)
    assert blk_a in cm["data"][gpool.file_format]  # type: ignore[attr-defined]

    # A gang of two Pods (a batch/v1 Job, one Slurm job of 2 nodes) lands inside one block.
    with gang_scheduler(gpool, tmp_path) as pods_namespace:
        create_batch_job(gpool.api, pods_namespace, "pair", parallelism=2,
                         annotations={names.ANN_PARTITION: slurmconf.DYNAMIC_PARTITION})
        bound = wait_for(lambda: all_bound(gpool.api, pods_namespace, "job-name=pair", 2), 60,
                         "the gang's two Pods bound")
        placed = {pod["spec"]["nodeName"] for pod in bound}
        assert placed in ({a, b}, {c, d}), placed
        (gang,) = {int(pod["metadata"]["annotations"][names.ANN_JOB_ID]) for pod in bound}
        slurm_nodes = set(expand(gpool.dev.slurm("squeue", "-h", "-j", str(gang), "-o", "%N").stdout.strip()))
        assert slurm_nodes == placed, (slurm_nodes, placed)  # (NodeName scheme: the Slurm node is the Node)
        delete_jobs(gpool.api, pods_namespace)
    wait_for(lambda: gpool.job_state(gang) == "GONE", 60, "the gang's Slurm job gone")

    # Relabel a busy Node: the topology follows, the job runs on.
    job = gpool.submit(a)
    wait_for(lambda: gpool.job_state(job) == "RUNNING", 30, "a job on the Node to relabel")
    kc.patch(gpool.api, NODES, a, {"metadata": {"labels": {DEFAULT_BLOCK_LABEL: blk_b}}})
    wait_for(lambda: (got := blocks(gpool)).get(blk_a) == {b} and got.get(blk_b) == {a, c, d}, 10,
             "scontrol show topology: the relabelled node in its new block", interval=0.5)
    assert gpool.job_state(job) == "RUNNING"
    assert gpool.pods("topo")[a]["metadata"]["annotations"].get("sunk.coreweave.com/pending-deletion") is None
    gpool.cancel(job)


"""NodeSet at scale: 200 Nodes labelled at once until every Slurm node is IDLE, then a rolling update of
200 with 50 busy (issue 19).

    python -m benchmarks.nodeset --nodes 200 --busy 50

Raw path: ``--nodes`` ``slurmd -Z`` processes started straight on this machine (what the stand-in
kubelet would run, the same argv), timed from the first start to every Slurm node IDLE: what Slurm
alone takes to register that many dynamic nodes here.
NodeSet path: ``--nodes`` stand-in Nodes (a kubelet of the benchmark's own, ``sunk_dev.pool``),
a NodeSet selecting a label, and sunk-operator; timed from just before the first label patch to
every Slurm node IDLE. Its ratio to the raw path is the operator's and Kubernetes' cost.
Rolling update: ``--busy`` nodes get a job, then the template changes (maxUnavailable
``--max-unavailable``); timed until every idle node's Pod is replaced and its Slurm node IDLE
again, then, once the jobs are cancelled, until every Pod is replaced. Jobs killed by the
update (not RUNNING before their cancel) must be 0.

``--gres-from-node``: the operator registers each node's GPUs from its Node (the stand-in Nodes advertise
``nvidia.com/gpu`` and class FAKE_GPU, mapped to type ``fake``; gres.conf lines with device files), and
every node must register ``gpu:fake:N``, not only be IDLE. ``--topology block``: the Nodes are labelled
into NVLink domains of ``--block-size`` before the NodeSet selects them, and the operator writes Slurm's
block topology (topology.yaml on 25.05+, topology.conf before, in the dev chroot's etc/slurm, then
``scontrol reconfigure``); the file must name every domain at the end. Both on is issue 35's run.

Waiting is by ``sinfo`` every 0.2 s (one call for every node), the harness's own reading: the
operator reacts to events, not to this poll.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sunk.kube import client as kc
from sunk.kube.resources import NAMESPACES, NODES, NODESETS, PODS
from sunk.model import names
from sunk.translate.nodeset.topology import CONF, DEFAULT_BLOCK_LABEL, YAML
from sunk_dev import slurmconf
from sunk_dev.cluster import DevCluster
from sunk_dev.pool import StandInPool, apply_crds, wait_default_service_account
from sunk_dev.procs import free_port
from sunk_dev.standin_slurmd import SlurmdLaunch

LABEL = "sunk.dev/nodeset-bench"
GPU_TYPE = "fake"  # what the stand-in Nodes' class (FAKE_GPU) maps to with --gres-from-node
GOAL_READY_SECONDS = 60.0  # issue 19: 200 nodes ready within 60 s of the label


def wait(predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.2) -> float:
    """Seconds until ``predicate`` holds (raises after ``timeout``)."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        time.sleep(interval)
    return time.monotonic() - start


def slurm_states(cluster: DevCluster, nodes: list[str]) -> dict[str, str]:
    out = cluster.slurm("sinfo", "-h", "-N", "-p", slurmconf.DYNAMIC_PARTITION, "-o", "%N %T", check=False).stdout
    wanted = set(nodes)
    return {n: s for n, s in (line.split() for line in out.splitlines() if line.strip()) if n in wanted}


def all_idle(cluster: DevCluster, nodes: list[str], gres: str = "") -> bool:
    """Every node IDLE in sinfo (and registered with ``gres``, when given)."""
    states = slurm_states(cluster, nodes)
    if not (len(states) == len(nodes) and all(s == "idle" for s in states.values())):
        return False
    if not gres:
        return True
    out = cluster.slurm("sinfo", "-h", "-N", "-p", slurmconf.DYNAMIC_PARTITION, "-o", "%N %G", check=False).stdout
    got = {n: g for n, g in (line.split(None, 1) for line in out.splitlines() if line.strip()) if n in set(nodes)}
    return all(got.get(n, "").split("(")[0] == gres for n in nodes)


def slurm_release(cluster: DevCluster) -> tuple[int, int]:
    major, minor = cluster.slurm("scontrol", "--version").stdout.split()[1].split(".")[:2]
    return int(major), int(minor)


def raw_path(cluster: DevCluster, nodes: list[str], log_dir: Path) -> float:
    """Seconds for ``nodes`` slurmd -Z started at once to be IDLE; they are stopped and deleted after."""
    procs: list[subprocess.Popen[bytes]] = []
    start = time.monotonic()
    try:
        ports = [free_port() for _ in nodes]
        with (log_dir / "raw-slurmd.log").open("ab") as out:
            for node, port in zip(nodes, ports, strict=True):
                argv = SlurmdLaunch(node, f"Feature={slurmconf.DYNAMIC_FEATURE}").argv(
                    cluster.root, port, slurmconf.NODE_CPUS, slurmconf.NODE_MEMORY_MB)
                procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT))

        def idle_or_raise() -> bool:
            if exited := [(nodes[i], p.returncode) for i, p in enumerate(procs) if p.poll() is not None]:
                raise RuntimeError(f"raw slurmds exited (node, status): {exited[:5]}; "
                                   f"{(log_dir / 'raw-slurmd.log').read_text()[-2000:]}")
            return all_idle(cluster, nodes)

        wait(idle_or_raise, 300, "raw slurmds IDLE")
        return time.monotonic() - start
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for i in range(0, len(nodes), 50):
            cluster.slurm("scontrol", "delete", "nodename=" + ",".join(nodes[i:i + 50]), check=False)


def nodeset_body(namespace: str, run_id: str, max_unavailable: int, image: str) -> dict[str, Any]:
    return {
        "apiVersion": names.NODESET_API_VERSION, "kind": "NodeSet",
        "metadata": {"name": "bench", "namespace": namespace},
        "spec": {
            "nodeSelector": {LABEL: run_id}, "naming": {"scheme": "NodeName"},
            "slurm": {"features": [slurmconf.DYNAMIC_FEATURE], "partitions": [slurmconf.DYNAMIC_PARTITION]},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": max_unavailable}},
            "template": {"metadata": {"labels": {"app.kubernetes.io/name": "slurmd"}},
                         "spec": {"terminationGracePeriodSeconds": 5,
                                  "containers": [{"name": "slurmd", "image": image}]}},
        },
    }


def pod_uids(api: Any, namespace: str) -> dict[str, str]:
    """Live (not terminating) slurmd Pods of the NodeSet: name -> uid."""
    return {p["metadata"]["name"]: p["metadata"]["uid"]
            for p in kc.list_objects(api, PODS, namespace, label_selector=f"{names.LABEL_NODESET}=bench")
            if not p["metadata"].get("deletionTimestamp")}


def run(cluster: DevCluster, api: Any, count: int, busy: int, max_unavailable: int, log_dir: Path, *,
        gres_from_node: bool = False, topology: str = "", block_size: int = 18) -> dict[str, Any]:
    run_id = uuid.uuid4().hex[:6]
    nodes = [f"nb{run_id}-{i}" for i in range(1, count + 1)]
    result: dict[str, Any] = {"nodes": count, "busy": busy, "max_unavailable": max_unavailable,
                              "gres_from_node": gres_from_node, "topology": topology}
    gres = f"gpu:{GPU_TYPE}:{slurmconf.NODE_GPUS}" if gres_from_node else ""
    topology_file = cluster.root / "etc/slurm" / (YAML if slurm_release(cluster) >= (25, 5) else CONF)
    blocks = {node: f"nvl-{run_id}-{i // block_size}" for i, node in enumerate(nodes)}
    extra_args = []
    if gres_from_node:
        extra_args += ["--gres-from-node", f"--gpu-types=FAKE_GPU={GPU_TYPE}"]
    if topology:
        if topology_file.exists():
            raise RuntimeError(f"{topology_file} exists already: whose is it?")
        extra_args += [f"--topology={topology}", f"--topology-format={topology_file.name}",
                       f"--topology-file={topology_file}"]
    result["raw_ready_s"] = raw_path(cluster, [f"nr{run_id}-{i}" for i in range(1, count + 1)], log_dir)
    print(f"raw: {count} slurmd -Z IDLE in {result['raw_ready_s']:.1f} s", flush=True)

    apply_crds(api)
    namespace = f"nodeset-bench-{run_id}"
    kc.create(api, NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    wait_default_service_account(api, namespace)  # (or the operator's first Pods are refused, and retried)
    pool = StandInPool(cluster, api, nodes, log_dir)
    env = cluster.env()
    probes = free_port()
    operator_log = (log_dir / "sunk-operator.log").open("ab")
    operator = subprocess.Popen(
        [sys.executable, "-m", "sunk.commands.operator", f"--kubeconfig={cluster.kubeconfig}",
         f"--slurm-api-base={env['SLURM_REST_URL']}", f"--slurm-auth-token-file={env['SLURM_JWT_FILE']}",
         f"--watch-namespace={namespace}", "--metrics-bind-address=", f"--health-probe-bind-address=127.0.0.1:{probes}",
         "--leader-elect=false", *extra_args],
        stdout=operator_log, stderr=subprocess.STDOUT, env={**env, "SLURM_JWT": ""})
    jobs: list[int] = []
    try:
        pool.start(timeout=300)
        if topology:  # (the domains are the Nodes' before the NodeSet selects them, as on a real cluster)
            for node in nodes:
                kc.patch(api, NODES, node, {"metadata": {"labels": {DEFAULT_BLOCK_LABEL: blocks[node]}}})
        kc.create(api, NODESETS, nodeset_body(namespace, run_id, max_unavailable, "sunk-dev/slurmd:v1"), namespace)
        start = time.monotonic()
        for node in nodes:
            kc.patch(api, NODES, node, {"metadata": {"labels": {LABEL: run_id}}})
        result["label_s"] = time.monotonic() - start
        wait(lambda: all_idle(cluster, nodes, gres), 600, f"every NodeSet Slurm node IDLE {gres}".strip())
        result["nodeset_ready_s"] = time.monotonic() - start
        result["ratio"] = result["nodeset_ready_s"] / result["raw_ready_s"]
        print(f"nodeset: {count} Nodes labelled ({result['label_s']:.1f} s of patches) to every Slurm node IDLE in "
              f"{result['nodeset_ready_s']:.1f} s (ratio {result['ratio']:.2f} to raw)", flush=True)
        if topology:
            def every_domain_written() -> bool:
                text = topology_file.read_text() if topology_file.exists() else ""
                return all(block in text for block in set(blocks.values()))

            result["topology_s"] = wait(every_domain_written, 60, "the topology naming every domain") + \
                result["nodeset_ready_s"]
            print(f"topology: {len(set(blocks.values()))} domains in {topology_file.name} "
                  f"{result['topology_s']:.1f} s after the labels", flush=True)

        busy_nodes, idle_nodes = nodes[:busy], nodes[busy:]
        for node in busy_nodes:
            out = cluster.slurm("sbatch", "--parsable", "--chdir=/tmp", "-o", "/dev/null", "-p",
                                slurmconf.DYNAMIC_PARTITION, "-w", node, "-n1", "--mem=100M", "--wrap", "sleep 3600")
            jobs.append(int(out.stdout.strip().split(";")[0]))

        def running() -> int:
            out = cluster.slurm("squeue", "-h", "-t", "RUNNING", "-o", "%i", check=False).stdout.split()
            return len({int(j) for j in out} & set(jobs))

        wait(lambda: running() == len(jobs), 120, "the busy nodes' jobs running")
        wait(lambda: (kc.get(api, NODESETS, "bench", namespace).get("status") or {}).get("slurmAllocated") == busy,
             60, "the operator seeing the jobs")
        old = pod_uids(api, namespace)
        start = time.monotonic()
        kc.patch(api, NODESETS, "bench", {"spec": {"template": {"spec": {"containers": [
            {"name": "slurmd", "image": "sunk-dev/slurmd:v2"}]}}}}, namespace)

        def replaced(subset: list[str]) -> bool:
            now = pod_uids(api, namespace)
            return all(now.get(n) not in (None, old.get(n)) for n in subset)

        wait(lambda: replaced(idle_nodes) and all_idle(cluster, idle_nodes, gres), 900, "the idle nodes replaced")
        result["update_idle_s"] = time.monotonic() - start
        result["jobs_killed"] = len(jobs) - running()
        result["busy_replaced_early"] = sum(pod_uids(api, namespace).get(n) != old.get(n) for n in busy_nodes)
        print(f"rolling update: {len(idle_nodes)} idle nodes replaced and IDLE in {result['update_idle_s']:.1f} s; "
              f"jobs killed {result['jobs_killed']}, busy Pods replaced early {result['busy_replaced_early']}",
              flush=True)
        for job in jobs:
            cluster.slurm("scancel", str(job), check=False)
        wait(lambda: replaced(nodes) and all_idle(cluster, nodes, gres), 900, "every node replaced")
        result["update_all_s"] = time.monotonic() - start
        print(f"rolling update: all {count} replaced and IDLE {result['update_all_s']:.1f} s after the change",
              flush=True)
        return result
    finally:
        for job in jobs:
            cluster.slurm("scancel", str(job), check=False)
        try:
            kc.delete(api, NODESETS, "bench", namespace)
            wait(lambda: not kc.list_objects(api, NODESETS, namespace), 300, "the NodeSet deleted", interval=1)
        except (kc.ApiError, TimeoutError) as exc:
            print(f"clean-up: {exc}", file=sys.stderr)
        operator.terminate()
        try:
            operator.wait(30)
        except subprocess.TimeoutExpired:  # (the clean-up below must run: the pool, its Nodes, the file)
            print("clean-up: sunk-operator did not stop within 30 s of SIGTERM: killed", file=sys.stderr)
            operator.kill()
            operator.wait()
        operator_log.close()
        if topology:
            topology_file.unlink(missing_ok=True)
            cluster.slurm("scontrol", "reconfigure", check=False)
        pool.stop()
        try:
            kc.delete(api, NAMESPACES, namespace)
        except kc.ApiError:
            pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--busy", type=int, default=50)
    parser.add_argument("--max-unavailable", type=int, default=20)
    parser.add_argument("--gres-from-node", action="store_true", help="GRES from the Nodes' GPUs (issue 35)")
    parser.add_argument("--topology", choices=("", "block"), default="", help="Slurm's topology from Node labels")
    parser.add_argument("--block-size", type=int, default=18, help="Nodes per NVLink domain with --topology block")
    args = parser.parse_args(argv)
    cluster = DevCluster.for_tests()
    with cluster.claimed("benchmarks.nodeset"):
        cluster.up()
        api = kc.load_api_client(str(cluster.kubeconfig))
        with tempfile.TemporaryDirectory(prefix="sunk-nodeset-bench-") as tmp:
            result = run(cluster, api, args.nodes, args.busy, args.max_unavailable, Path(tmp),
                         gres_from_node=args.gres_from_node, topology=args.topology, block_size=args.block_size)
    result["goal_ready_s"] = GOAL_READY_SECONDS
    print(json.dumps(result, sort_keys=True))
    ok = (result["jobs_killed"] == 0 and result["busy_replaced_early"] == 0
          and result["nodeset_ready_s"] <= GOAL_READY_SECONDS)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""Running the real ``sunk-syncer`` against the dev cluster, on slurmd Pods of its own.

Isolation: the syncer under test watches a throwaway namespace holding stand-in slurmd
Pods for ``NODES`` only (named and hostnamed like the real ones, bound to the same
Nodes; the fake kubelet makes them Running/Ready). It never sees the real slurm/nodeN
Pods, so it never manages Slurm nodes that other tests use. It runs without plugins
(no node locking): these tests are about state sync.

Every helper that changes Slurm or a Node has an undo that the tests call in finally.

The node-locking suite runs a state-syncing syncer on node3/node4 too; two syncers on
the same Slurm nodes fight (each writes its own Pod into Extra), so no two sessions may
run at once: the ``dev_cluster`` fixture claims the cluster (``sunk_dev.claim``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import requests

try:
    from procs import Process, free_port  # under pytest (rootdir-relative imports)
except ImportError:  # from benchmarks/
    from tests.cluster.procs import Process, free_port

from sunk.kube import client as kc
from sunk.kube import patch as kp
from sunk.kube.resources import NODES, PODS
from sunk.model import names
from sunk.model.slurm import Node
from sunk.slurm import NodeUpdate, connect
from sunk.translate import objects

NODES_UNDER_TEST = ("node3", "node4")
TEST_LABEL = "sunk.dev/syncer-test"
T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.05) -> T:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def never(predicate: Callable[[], Any], duration: float, what: str, interval: float = 0.05) -> None:
    deadline = time.monotonic() + duration
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            raise AssertionError(f"{what}: {found!r}")
        time.sleep(interval)


def stand_in_pod(slurm_node: str, namespace: str, k8s_node: str, run_id: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": slurm_node,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "slurmd", TEST_LABEL: run_id},
        },
        "spec": {
            "nodeName": k8s_node,
            "hostname": slurm_node,
            "terminationGracePeriodSeconds": 3,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "slurmd", "image": "sunk-dev/slurmd:24.11"}],
        },
    }


class SyncerUnderTest:
    """One ``python -m sunk.commands.syncer`` subprocess; kill() is a crash, stop() a clean exit."""

    def __init__(self, dev_cluster: Any, namespace: str, run_id: str, log_dir: Path, *, name: str = "syncer",
                 extra_flags: list[str] | None = None):
        env = dev_cluster.env()
        self.health_port, self.metrics_port, self.hooks_port = free_port(), free_port(), free_port()
        self.process = Process(
            name,
            "sunk.commands.syncer",
            [
                f"--kubeconfig={env['KUBECONFIG']}",
                *dev_cluster.slurm_flags(),
                f"--watch-namespace={namespace}",
                f"--slurmd-selector=app.kubernetes.io/name=slurmd,{TEST_LABEL}={run_id}",
                f"--leader-election-namespace={namespace}",
                f"--health-probe-bind-address=127.0.0.1:{self.health_port}",
                f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
                f"--hooks-api-bind-address=127.0.0.1:{self.hooks_port}",
                "--plugins=",
                "--slurm-poll-interval=500ms",
                "--zap-log-level=debug",
                *(extra_flags or []),
            ],
            f"http://127.0.0.1:{self.health_port}/readyz",
            log_dir,
            env={"SLURM_JWT": ""},
        )

    def start(self) -> SyncerUnderTest:
        """Start, unless already running (so a finally that restarts it never leaks a second process)."""
        if self.alive:
            return self
        try:
            self.process.start()
        except BaseException:
            self.process.stop()
            raise
        return self

    def stop(self) -> None:
        self.process.stop()

    def kill(self) -> None:
        self.process.kill()

    @property
    def alive(self) -> bool:
        return self.process.proc is not None and self.process.proc.poll() is None

    def healthz(self) -> int:
        return requests.get(f"http://127.0.0.1:{self.health_port}/healthz", timeout=2).status_code

    def metric(self, name: str, **labels: str) -> float:
        text = requests.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=2).text
        want = ",".join(f'{k}="{v}"' for k, v in labels.items())
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name + ("{" + want if want else "")) or (not want and line.startswith(name + " ")):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def log_lines(self) -> list[dict[str, Any]]:
        out = []
        for line in self.process.log.read_text(errors="replace").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out


class Cluster:
    """Reads and writes on both sides, for assertions and for undo."""

    def __init__(self, dev_cluster: Any, kube_api: Any, namespace: str):
        env = dev_cluster.env()
        self.dev = dev_cluster
        self.api = kube_api
        self.namespace = namespace
        self.slurm = connect("rest", url=env["SLURM_REST_URL"], token_file=env["SLURM_JWT_FILE"])

    # Slurm
    def node(self, name: str) -> Node:
        return self.slurm.get_node(name)

    def scontrol(self, *argv: str) -> None:
        self.dev.slurm("scontrol", "update", *argv)

    def drain(self, name: str, reason: str) -> None:
        self.slurm.update_node(name, NodeUpdate(state="DRAIN", reason=reason))

    def undrain(self, name: str) -> None:
        self.slurm.update_node(name, NodeUpdate(state="UNDRAIN"))

    def set_extra(self, name: str, text: str) -> None:
        self.slurm.update_node(name, NodeUpdate(extra=text))

    # Kubernetes
    def pod(self, name: str) -> dict[str, Any] | None:
        try:
            return kc.get(self.api, PODS, name, self.namespace)
        except kc.ApiError as exc:
            if exc.not_found:
                return None
            raise

    def pod_condition(self, name: str, ctype: str) -> dict[str, Any] | None:
        pod = self.pod(name)
        return objects.get_condition(pod, ctype) if pod else None

    def k8s_node(self, name: str) -> dict[str, Any]:
        return kc.get(self.api, NODES, name)

    def set_pod_ready(self, name: str, ready: bool) -> None:
        pod = self.pod(name)
        assert pod is not None
        status = "True" if ready else "False"
        # A reason on "not Ready" tells the stand-in kubelet a test set it (it restores only the
        # reasonless one kube-controller-manager writes for a NotReady Node). None on Ready, as a
        # kubelet writes it: that controller copies the condition when it flips it to False, and a
        # reason left here made the stand-in leave that flip alone (a Syncer test drained a node
        # for 50 s after the apiserver-restart test).
        ready_condition = {"type": "Ready", "status": status, **({} if ready else {"reason": "SyncerTest"})}
        kp.set_pod_conditions(self.api, pod, [ready_condition, {"type": "ContainersReady", "status": status}])

    def cordon(self, k8s_node: str, reason: str | None) -> None:
        node = self.k8s_node(k8s_node)
        kp.set_annotations(self.api, node, {names.ANN_CORDON_REASON: reason})
        kp.set_unschedulable(self.api, self.k8s_node(k8s_node), True)

    def uncordon(self, k8s_node: str) -> None:
        node = self.k8s_node(k8s_node)
        kp.set_unschedulable(self.api, node, False)
        kp.set_annotations(self.api, self.k8s_node(k8s_node), {names.ANN_CORDON_REASON: None})

    def create_pod(self, slurm_node: str, run_id: str) -> dict[str, Any]:
        pod = stand_in_pod(slurm_node, self.namespace, self.dev.k8s_node_for(slurm_node), run_id)
        return kc.create(self.api, PODS, pod, self.namespace)

    def wait_pod_ready(self, name: str, timeout: float = 30) -> None:
        def ready() -> bool:
            cond = self.pod_condition(name, "Ready")
            return bool(cond and cond.get("status") == "True")

        wait_for(ready, timeout, f"pod {self.namespace}/{name} Ready")


def restore_slurm_node(cluster: Cluster, name: str, own_reasons: tuple[str, ...] = ("k8s:", "syncer-test")) -> None:
    """Undo what these tests (or the syncer under test) did to a Slurm node: drains, the DOWN of a deleted
    slurmd Pod (``k8s: slurmd pod NS/NAME deleted``, if ReturnToService has not lifted it yet) and Extra."""
    node = cluster.node(name)
    if node.down and node.reason.startswith(own_reasons):
        cluster.scontrol(f"nodename={name}", "state=resume")
        node = cluster.node(name)
    if node.drained and not node.down and node.reason.startswith(own_reasons):
        cluster.undrain(name)
    if node.extra:
        cluster.set_extra(name, "")



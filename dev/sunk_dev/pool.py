"""Extra stand-in Nodes for NodeSet tests and benchmarks: a stand-in kubelet of their own.

The dev cluster's Nodes (node1..nodeN) are its own NodeSets'; a NodeSet test needs Nodes of its own to
label, whose slurmd Pods its NodeSet makes. ``StandInPool``
starts one more ``sunk_dev.kubelet`` for such Nodes, with ``--chroot``, so each NodeSet slurmd
Pod bound there runs a real ``slurmd -Z`` (``sunk_dev.standin_slurmd``). ``stop`` stops that
kubelet (and so every slurmd it started), deletes its Nodes, and deletes their Slurm nodes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from sunk.kube import client as kc
from sunk.kube.resources import NODES, Resource

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "manifests" / "chart" / "sunk" / "crds"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def create_or_replace(api: Any, collection: str, doc: dict[str, Any]) -> None:
    """``doc`` created in ``collection`` (an API path), or put over the object of its name (a test's
    own fixtures, where the last writer is meant to win)."""
    try:
        kc.request(api, "POST", collection, body=doc)
    except kc.ApiError as exc:
        if exc.status != 409:
            raise
        path = f"{collection}/{doc['metadata']['name']}"
        version = kc.request(api, "GET", path)["metadata"]["resourceVersion"]
        kc.request(api, "PUT", path, body={**doc, "metadata": {**doc["metadata"], "resourceVersion": version}})


def apply_crds(api: Any, timeout: float = 30) -> None:
    """The chart's CRDs (NodeSet, NodeSlice), created or replaced, and waited for until Established."""
    crds = [yaml.safe_load(path.read_text()) for path in sorted(CRDS.glob("*.yaml"))]
    for crd in crds:
        create_or_replace(api, CRD_PATH, crd)
    deadline = time.monotonic() + timeout
    while not all(crd_established(api, crd["metadata"]["name"]) for crd in crds):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the CRDs in {CRDS} not Established after {timeout:.0f} s")
        time.sleep(0.2)


def crd_established(api: Any, name: str) -> bool:
    conditions = kc.request(api, "GET", f"{CRD_PATH}/{name}").get("status", {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")


def wait_default_service_account(api: Any, namespace: str, timeout: float = 30) -> None:
    """Until kube-controller-manager has made the namespace's ``default`` ServiceAccount: the apiserver's
    ServiceAccount admission refuses a Pod without one (a new namespace's first Pod would race it)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            kc.get(api, SERVICE_ACCOUNTS, "default", namespace)
            return
        except kc.ApiError as exc:
            if not exc.not_found or time.monotonic() > deadline:
                raise
        time.sleep(0.05)


class StandInPool:
    """``nodes`` stand-in Nodes served by a kubelet process of their own."""

    def __init__(self, dev_cluster: Any, api: Any, nodes: list[str], log_dir: Path):
        self.dev, self.api, self.nodes, self.log_dir = dev_cluster, api, nodes, log_dir
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 120) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        with (self.log_dir / "kubelet.log").open("ab") as out:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "sunk_dev.kubelet", "--kubeconfig", str(self.dev.kubeconfig),
                 "--nodes", ",".join(self.nodes), "--chroot", str(self.dev.root), "--log-dir", str(self.log_dir)],
                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + timeout
        while not self.ready():
            if self._proc.poll() is not None:
                raise RuntimeError(f"the pool's kubelet exited with {self._proc.returncode}: see {self.log_dir}")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"the pool's {len(self.nodes)} Nodes not Ready after {timeout:.0f} s")
            time.sleep(0.5)

    def ready(self) -> bool:
        wanted = set(self.nodes)
        ready = {n["metadata"]["name"] for n in kc.list_objects(self.api, NODES)
                 if n["metadata"]["name"] in wanted
                 and any(c["type"] == "Ready" and c["status"] == "True"
                         for c in (n.get("status") or {}).get("conditions") or [])}
        return ready == wanted

    def stop(self) -> None:
        """Stop the kubelet (it stops its slurmds), delete the Nodes and their Slurm nodes."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(60)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        for node in self.nodes:
            try:
                kc.delete(self.api, NODES, node)
            except kc.ApiError as exc:
                if not exc.not_found:
                    raise
        for start in range(0, len(self.nodes), 50):
            names = ",".join(self.nodes[start:start + 50])
            self.dev.slurm("scontrol", "delete", f"nodename={names}", check=False)

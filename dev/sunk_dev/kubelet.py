"""A stand-in kubelet for the dev cluster: Nodes Ready, bound Pods Running, deletions finished.

It does what scheduling tests need from a kubelet and nothing else:
- registers its Nodes with capacity that matches the Slurm nodes (CPUs, memory, GPUs of slurmconf),
  and lifts the not-ready taint the apiserver puts on new Nodes (kube-controller-manager's
  node-lifecycle controller would too, once it sees them Ready);
- heartbeats as a kubelet does: renews each Node's Lease in ``kube-node-lease`` every
  ``LEASE_RENEW`` seconds and its Ready condition every ``STATUS_EVERY``; a stopped stand-in
  kubelet therefore makes its Nodes NotReady (and tainted unreachable) for real;
- a Pod bound to one of its Nodes becomes Running and Ready once (it never fights a
  test that later sets the Pod not Ready: tests give a reason). When the Node was NotReady,
  kube-controller-manager marked its Pods Ready=False, with no reason; a real kubelet's
  status manager puts its own view back, and so does this one, at once;
- a Pod being deleted goes away after the container "exits": immediately, or after the
  Pod's ``sunk.dev/termination-delay-seconds`` annotation, but never later than its
  grace period, which is what a real kubelet's SIGTERM-then-SIGKILL amounts to;
- given ``--chroot``, a NodeSet's slurmd Pod gets a real ``slurmd -Z`` process
  (``sunk_dev.standin_slurmd``), stopped when the Pod is deleted or this kubelet stops; with
  ``--state-dir`` and ``--keep-slurmds``, as a real kubelet's containers, they outlive this kubelet,
  which takes them over when it starts again (and stops those whose Pod went meanwhile), and each
  Slurm node keeps its port across restarts.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Optional

from kubernetes import client, config

from sunk_dev import slurmconf
from sunk_dev.procs import free_port
from sunk_dev.standin_slurmd import KubeletState, SlurmdRecord, StandInSlurmd, end_process, launch_of

log = logging.getLogger("sunk_dev.kubelet")

TERMINATION_DELAY = "sunk.dev/termination-delay-seconds"
# On a stand-in Node: the GPUs its "device plugin" advertises instead of slurmconf.NODE_GPUS (a NodeSet
# test gives one Node 4 GPUs of a class; the heartbeat's status write would otherwise set them back).
GPUS_ANNOTATION = "sunk.dev/gpus"
NODE_LABEL = "sunk.dev/fake-kubelet"
LEASE_DURATION = 40  # seconds, a kubelet's default
LEASE_RENEW = 10.0  # as a kubelet: a quarter of the duration, four renewals per 40 s of grace
STATUS_EVERY = 60.0  # and reports status at least this often (its nodeStatusReportFrequency is 5 min)


def micro_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# The Slurm node each Node hosts: kube-scheduler (extender mode) must see the same room Slurm does.
CAPACITY = {"cpu": str(slurmconf.NODE_CPUS), "memory": f"{slurmconf.NODE_MEMORY_MB}Mi", "pods": "300",
            "nvidia.com/gpu": str(slurmconf.NODE_GPUS)}


def node_object(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {NODE_LABEL: "true", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                       "gpu.nvidia.com/class": "FAKE_GPU", "gpu.nvidia.com/model": "FAKE_GPU"},
        },
        "status": {"capacity": CAPACITY, "allocatable": CAPACITY},
    }


def capacity_of(node: dict[str, Any] | None) -> dict[str, str]:
    """CAPACITY, with the GPUs the Node's ``sunk.dev/gpus`` annotation asks for (a whole number up to 64)."""
    asked = (((node or {}).get("metadata") or {}).get("annotations") or {}).get(GPUS_ANNOTATION)
    if isinstance(asked, str) and asked.isdigit() and int(asked) <= 64:
        return {**CAPACITY, "nvidia.com/gpu": str(int(asked))}
    return dict(CAPACITY)


def ready_status(node_name: str, capacity: dict[str, str] | None = None) -> dict[str, Any]:
    stamp = now()
    capacity = dict(CAPACITY) if capacity is None else capacity
    return {"status": {"capacity": capacity, "allocatable": capacity, "conditions": [
        {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "sunk-dev fake kubelet",
         "lastHeartbeatTime": stamp, "lastTransitionTime": stamp},
    ], "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": node_name}],
        "nodeInfo": {"kubeletVersion": "sunk-dev", "architecture": "amd64", "operatingSystem": "linux",
                     "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "", "osImage": "",
                     "containerRuntimeVersion": "", "kubeProxyVersion": ""}}}


def running_status(pod: dict[str, Any]) -> dict[str, Any]:
    stamp = now()
    conditions = [{"type": t, "status": "True", "lastTransitionTime": stamp}
                  for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")]
    return {"status": {
        "phase": "Running", "conditions": conditions, "hostIP": "127.0.0.1", "podIP": "127.0.0.1",
        "startTime": stamp,
        "containerStatuses": [
            {"name": c["name"], "image": c.get("image", ""), "imageID": "", "ready": True, "restartCount": 0,
             "started": True, "state": {"running": {"startedAt": stamp}}}
            for c in pod["spec"].get("containers", [])
        ],
    }}


class FakeKubelet:
    def __init__(self, api: client.ApiClient, nodes: list[str], chroot: Path | None = None,
                 log_dir: Path | None = None, state: KubeletState | None = None, keep_slurmds: bool = False):
        self.core = client.CoreV1Api(api)
        self.coordination = client.CoordinationV1Api(api)
        self.nodes = set(nodes)
        self.stopping = threading.Event()
        self._deleting: set[str] = set()
        self._lock = threading.Lock()
        self._chroot = chroot
        self._log_dir = log_dir or Path(".")
        self._slurmds: dict[str, StandInSlurmd] = {}  # by Pod UID
        self._state, self._keep_slurmds = state, keep_slurmds
        self._ports: dict[str, int] = state.ports() if state else {}  # by Slurm node

    def register(self) -> None:
        for name in sorted(self.nodes):
            try:
                self.core.create_node(node_object(name))  # type: ignore[arg-type]  # wire dicts are accepted
            except client.ApiException as exc:
                if exc.status != 409:
                    raise
                # (a Node an older sunk-dev made: its labels as this one makes them, the others kept)
                self.core.patch_node(name, {"metadata": {"labels": node_object(name)["metadata"]["labels"]}})
            self.core.patch_node_status(name, ready_status(name))
            self._renew_lease(name)
            self._clear_not_ready_taint(name)

    def _clear_not_ready_taint(self, name: str) -> None:
        """The apiserver taints new Nodes not-ready; the node-lifecycle controller (not run here) lifts it."""
        node: Any = self.core.read_node(name, _preload_content=False)
        taints = json.loads(node.data)["spec"].get("taints") or []
        kept = [t for t in taints if t["key"] != "node.kubernetes.io/not-ready"]
        if kept != taints:
            self.core.patch_node(name, {"spec": {"taints": kept}})

    def heartbeat(self) -> None:
        """Leases every LEASE_RENEW seconds, the Ready condition every STATUS_EVERY, for every Node."""
        last_status = time.monotonic()
        while not self.stopping.wait(LEASE_RENEW):
            status_due = time.monotonic() - last_status >= STATUS_EVERY
            for name in sorted(self.nodes):
                try:
                    self._renew_lease(name)
                    if status_due:
                        raw: Any = self.core.read_node(name, _preload_content=False)
                        capacity = capacity_of(json.loads(raw.data))
                        _discard(self.core.patch_node_status(name, ready_status(name, capacity),
                                                             _preload_content=False))
                except Exception as exc:  # the apiserver restarting: the next beat tries again
                    log.warning("heartbeat of %s failed: %s", name, exc)
            if status_due:
                last_status = time.monotonic()

    def _renew_lease(self, name: str) -> None:
        body = {"spec": {"holderIdentity": name, "leaseDurationSeconds": LEASE_DURATION, "renewTime": micro_now()}}
        try:
            _discard(self.coordination.patch_namespaced_lease(name, "kube-node-lease", body, _preload_content=False))
        except client.ApiException as exc:
            if exc.status != 404:
                raise
            node: Any = self.core.read_node(name, _preload_content=False)
            uid = json.loads(node.data)["metadata"]["uid"]
            lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                     "metadata": {"name": name, "namespace": "kube-node-lease", "ownerReferences": [
                         {"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid}]}, **body}
            _discard(self.coordination.create_namespaced_lease(
                "kube-node-lease", lease, _preload_content=False))  # type: ignore[arg-type]  # wire dicts are accepted

    def run(self) -> None:
        self.register()
        threading.Thread(target=self.heartbeat, name="heartbeat", daemon=True).start()
        while not self.stopping.is_set():
            try:
                version = self._sync_all()
                self._watch(version)
            except Exception as exc:
                log.warning("watch failed, relisting: %s", exc)
                self.stopping.wait(1.0)

    def _sync_all(self) -> str:
        resp: Any = self.core.list_pod_for_all_namespaces(_preload_content=False)
        data = json.loads(resp.data)
        present = {pod["metadata"]["uid"] for pod in data["items"]}
        with self._lock:
            gone = [uid for uid in self._slurmds if uid not in present]
        for uid in gone:  # deleted while the watch was down: stopped before a successor of the same name starts
            self._stop_slurmd(uid, grace=0)
        for record in self._state.records() if self._state else ():
            if record.uid not in present:  # (deleted while no kubelet ran: an earlier kubelet's slurmd)
                self._stop_slurmd(record.uid, grace=0)
        for pod in data["items"]:
            self._handle(pod)
        return data["metadata"]["resourceVersion"]

    def _watch(self, version: str) -> None:
        resp: Any = self.core.list_pod_for_all_namespaces(
            watch=True, resource_version=version, allow_watch_bookmarks=True, timeout_seconds=300,
            _preload_content=False, _request_timeout=(5, 330),
        )
        try:
            for line in _lines(resp):
                if self.stopping.is_set():
                    return
                event = json.loads(line)
                if event["type"] == "ERROR":
                    raise RuntimeError(event["object"].get("message"))
                if event["type"] in ("ADDED", "MODIFIED"):
                    self._handle(event["object"])
                elif event["type"] == "DELETED":  # (a forced deletion skips the graceful path)
                    self._stop_slurmd(event["object"]["metadata"]["uid"], grace=0)
        finally:
            resp.release_conn()

    def _handle(self, pod: dict[str, Any]) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        if spec.get("nodeName") not in self.nodes:
            return
        if meta.get("deletionTimestamp"):
            self._finish_deletion(pod)
            return
        self._ensure_slurmd(pod)
        conditions = pod.get("status", {}).get("conditions", [])
        ready = next((c for c in conditions if c["type"] == "Ready"), None)
        if ready is None or (ready.get("status") == "False" and not ready.get("reason")):
            try:
                _discard(self.core.patch_namespaced_pod_status(meta["name"], meta["namespace"], running_status(pod),
                                                               _preload_content=False))
            except client.ApiException as exc:
                if exc.status != 404:
                    log.warning("could not mark %s/%s running: %s", meta["namespace"], meta["name"], exc.reason)

    def _ensure_slurmd(self, pod: dict[str, Any]) -> None:
        if self._chroot is None:
            return
        launch = launch_of(pod)
        if launch is None:
            return
        uid = pod["metadata"]["uid"]
        with self._lock:
            if uid in self._slurmds or self.stopping.is_set():
                return
            port = self._ports.get(launch.node)
            if port is None:
                port = self._ports[launch.node] = free_port()
                if self._state is not None:
                    self._state.save_ports(self._ports)
            left = self._left_running(uid)
            slurmd = StandInSlurmd(launch, self._chroot, port, slurmconf.NODE_CPUS, slurmconf.NODE_MEMORY_MB,
                                   self._log_dir, uid=uid, state=self._state, adopt=left)
            self._slurmds[uid] = slurmd
        log.info("%s slurmd of Slurm node %s for Pod %s/%s", "taking over" if left else "starting", launch.node,
                 pod["metadata"]["namespace"], pod["metadata"]["name"])
        slurmd.start()

    def _left_running(self, uid: str) -> SlurmdRecord | None:
        """The live slurmd an earlier kubelet started for Pod ``uid``, if any."""
        if self._state is None:
            return None
        record = next((r for r in self._state.records() if r.uid == uid), None)
        if record is not None and not record.alive():
            self._state.forget(uid)
            return None
        return record

    def _stop_slurmd(self, uid: str, grace: float) -> None:
        with self._lock:
            slurmd = self._slurmds.pop(uid, None)
        if slurmd is not None:
            log.info("stopping slurmd of Slurm node %s", slurmd.launch.node)
            slurmd.stop(grace)
        elif self._state is not None and (left := self._left_running(uid)) is not None:
            log.info("stopping slurmd of Slurm node %s (pid %d), left by an earlier kubelet", left.node, left.pid)
            end_process(left, grace)
            self._state.forget(uid)

    def shutdown(self) -> None:
        """Stop every slurmd this kubelet started (a dev tool's clean exit: no orphan slurmd), or with
        ``keep_slurmds`` leave them running for the next kubelet to take over."""
        self.stopping.set()
        with self._lock:
            slurmds = dict(self._slurmds)
        for uid, slurmd in slurmds.items():
            if self._keep_slurmds:
                slurmd.release()
            else:
                self._stop_slurmd(uid, grace=2.0)

    def _finish_deletion(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        with self._lock:
            if uid in self._deleting:
                return
            self._deleting.add(uid)
        grace = meta.get("deletionGracePeriodSeconds") or 0
        try:
            delay = float((meta.get("annotations") or {}).get(TERMINATION_DELAY, "0"))
        except ValueError:
            delay = 0.0
        delay = max(0.0, min(delay, float(grace)))
        timer = threading.Timer(delay, self._delete, args=(meta["namespace"], meta["name"], uid, float(grace) - delay))
        timer.daemon = True
        timer.start()

    def _delete(self, namespace: str, name: str, uid: str, grace: float = 0.0) -> None:
        self._stop_slurmd(uid, grace)
        try:
            _discard(self.core.delete_namespaced_pod(name, namespace, body=client.V1DeleteOptions(
                grace_period_seconds=0, preconditions=client.V1Preconditions(uid=uid)), _preload_content=False))
        except client.ApiException as exc:
            if exc.status not in (404, 409):
                log.warning("could not finish deleting %s/%s: %s", namespace, name, exc.reason)
        finally:
            with self._lock:
                self._deleting.discard(uid)


def _discard(resp: Any) -> None:
    """Return the connection of an unread reply to the pool.

    Replies are left unread where nothing uses them: the client's decoding into V1Pod
    objects cost more CPU than the call, on the machine the benchmarks share.
    """
    resp.drain_conn()
    resp.release_conn()


def _lines(resp: Any):
    buffer = b""
    for chunk in resp.stream(amt=65536, decode_content=True):
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line.strip():
                yield line


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--nodes", required=True, help="comma-separated Node names")
    parser.add_argument("--chroot", type=Path, default=None,
                        help="the dev cluster's Slurm root: run a real slurmd for each NodeSet slurmd Pod")
    parser.add_argument("--log-dir", type=Path, default=None, help="where the slurmds' output goes")
    parser.add_argument("--state-dir", type=Path, default=None,
                        help="ports and running slurmds, kept across restarts (sunk_dev.standin_slurmd.KubeletState)")
    parser.add_argument("--keep-slurmds", action="store_true",
                        help="leave the slurmds running at exit, for the next kubelet (needs --state-dir)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    cfg = client.Configuration()
    config.load_kube_config(config_file=args.kubeconfig, client_configuration=cfg)
    # Deletions finish on timer threads, hundreds at once when a benchmark ends: past the
    # default pool of cpu*5 each would open (and TLS-handshake) a connection of its own.
    cfg.connection_pool_maxsize = 64
    if args.keep_slurmds and args.state_dir is None:
        parser.error("--keep-slurmds needs --state-dir")
    kubelet = FakeKubelet(client.ApiClient(cfg), [n for n in args.nodes.split(",") if n], chroot=args.chroot,
                          log_dir=args.log_dir, state=KubeletState(args.state_dir) if args.state_dir else None,
                          keep_slurmds=args.keep_slurmds)
    signal.signal(signal.SIGTERM, lambda *_: kubelet.stopping.set())
    threading.Thread(target=kubelet.run, daemon=True).start()
    while not kubelet.stopping.wait(3600):
        pass
    kubelet.shutdown()
    time.sleep(0.1)


if __name__ == "__main__":
    main()

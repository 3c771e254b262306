"""NodeSet on the real parts: sunk-operator as the chart deploys it, its slurmd Pods real slurmds.

The operator runs with the chart's rendered flags, as the chart's ServiceAccount with its
rendered RBAC (``operator.enabled``), against the real apiserver with the chart's CRDs. Its
Nodes are stand-in Nodes of a kubelet of this module's own (``sunk_dev.kubelet --chroot``), on
which every NodeSet slurmd Pod runs a real ``slurmd -Z``: the Slurm node registers when the Pod
starts and stops answering when it is deleted, as on a real Node. The Slurm nodes are dynamic,
with feature ``real`` (slurm.conf's ``NodeSet=dynamic``), so they join partition ``real`` and
no other test's job lands there.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from kube_testns import purge_namespace, wait_default_service_account
from procs import Process
from rbac_harness import as_service_account, assert_never_forbidden, deployment_args, operator_as_deployed, rendered
from syncer_harness import free_port, never, wait_for

from sunk.kube import client as kc
from sunk.kube.resources import EVENTS, LEASES, NAMESPACES, NODES, NODESETS, NODESLICES, PODS
from sunk.model import names
from sunk.slurm import connect
from sunk_dev import slurmconf
from sunk_dev.pool import StandInPool, apply_crds

POOL_LABEL = "sunk.dev/nodeset-test"
NODES_IN_POOL = 4


class Pool:
    """This module's stand-in Nodes, its operator, and reads of both sides."""

    def __init__(self, api, dev_cluster, namespace: str, run_id: str, nodes: list[str]):
        self.api, self.dev, self.namespace, self.run_id, self.nodes = api, dev_cluster, namespace, run_id, nodes
        env = dev_cluster.env()
        self.slurm = connect("rest", url=env["SLURM_REST_URL"], token_file=env["SLURM_JWT_FILE"])
        self.operator: Process | None = None

    # Kubernetes
    def label(self, node: str, on: bool) -> None:
        kc.patch(self.api, NODES, node, {"metadata": {"labels": {POOL_LABEL: self.run_id if on else None}}})

    def nodeset(self, name: str, **spec: Any) -> dict[str, Any]:
        body = {
            "apiVersion": names.NODESET_API_VERSION, "kind": "NodeSet",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {
                "nodeSelector": {POOL_LABEL: self.run_id},
                "naming": {"scheme": "NodeName"},
                "slurm": {"features": [slurmconf.DYNAMIC_FEATURE], "partitions": [slurmconf.DYNAMIC_PARTITION]},
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
                "template": {
                    "metadata": {"labels": {"app.kubernetes.io/name": "slurmd"}},
                    "spec": {"terminationGracePeriodSeconds": 5,
                             "containers": [{"name": "slurmd", "image": "sunk-dev/slurmd:v1",
                                             "command": ["slurmd", "-D", "-Z"]}]},
                },
                **spec,
            },
        }
        return kc.create(self.api, NODESETS, body, self.namespace)

    def get_nodeset(self, name: str) -> dict[str, Any] | None:
        try:
            return kc.get(self.api, NODESETS, name, self.namespace)
        except kc.ApiError as exc:
            if exc.not_found:
                return None
            raise

    def status(self, name: str) -> dict[str, Any]:
        return (self.get_nodeset(name) or {}).get("status") or {}

    def condition(self, name: str, ctype: str) -> dict[str, Any]:
        return next((c for c in self.status(name).get("conditions") or [] if c.get("type") == ctype), {})

    def pods(self, nodeset: str) -> dict[str, dict[str, Any]]:
        """The NodeSet's slurmd Pods by name (terminating ones too)."""
        items = kc.list_objects(self.api, PODS, self.namespace, label_selector=f"{names.LABEL_NODESET}={nodeset}")
        return {p["metadata"]["name"]: p for p in items}

    def events(self, name: str) -> set[str]:
        return {e["reason"] for e in kc.list_objects(self.api, EVENTS, self.namespace)
                if e["involvedObject"]["name"] == name}

    def slices(self, nodeset: str) -> list[str]:
        """The Slurm node names every NodeSlice of the NodeSet lists."""
        found: list[str] = []
        for obj in kc.list_objects(self.api, NODESLICES, self.namespace,
                                   label_selector=f"{names.LABEL_NODESET}={nodeset}"):
            found += [e.get("slurmNode") for e in (obj.get("spec") or {}).get("entries") or []]
        return sorted(found)

    # Slurm
    def state(self, node: str) -> str:
        """sinfo's state of a Slurm node ("idle", "drained", "alloc", "down*", ...); "" when Slurm has none."""
        out = self.dev.slurm("sinfo", "-h", "-N", "-n", node, "-o", "%T", check=False).stdout.split()
        return out[0] if out else ""

    def reason(self, node: str) -> str:
        return self.dev.slurm("sinfo", "-h", "-N", "-n", node, "-o", "%E", check=False).stdout.strip()

    def submit(self, node: str, seconds: int = 600) -> int:
        out = self.dev.slurm("sbatch", "--parsable", "--chdir=/tmp", "-o", "/dev/null", "-p",
                             slurmconf.DYNAMIC_PARTITION, "-w", node, "-n1", "--mem=100M",
                             f"--comment=nodeset-test-{self.run_id}", "--wrap", f"sleep {seconds}").stdout
        return int(out.strip().split(";")[0])

    def job_state(self, job: int) -> str:
        out = self.dev.slurm("squeue", "-h", "-j", str(job), "-o", "%T", check=False).stdout.strip()
        return out or "GONE"

    def cancel(self, job: int) -> None:
        self.dev.slurm("scancel", str(job), check=False)

    def reset(self) -> None:
        """No NodeSet (its Pods drained and deleted by the operator, or its finalizer dropped after 60 s),
        no job of this module, no label, no Slurm node of the pool."""
        for job in self.dev.slurm("squeue", "-h", "-o", "%i %k", check=False).stdout.splitlines():
            if f"nodeset-test-{self.run_id}" in job:
                self.cancel(int(job.split()[0]))
        for ns in kc.list_objects(self.api, NODESETS, self.namespace):
            _delete_quietly(self.api, NODESETS, ns["metadata"]["name"], self.namespace)
        deadline = time.monotonic() + 60
        while (left := kc.list_objects(self.api, NODESETS, self.namespace)) and time.monotonic() < deadline:
            time.sleep(0.5)
        for ns in left:  # what the operator did not finish
            try:
                kc.patch(self.api, NODESETS, ns["metadata"]["name"], {"metadata": {"finalizers": None}},
                         self.namespace)
            except kc.ApiError as exc:
                if not exc.not_found:
                    raise
        for pod in kc.list_objects(self.api, PODS, self.namespace):
            _delete_quietly(self.api, PODS, pod["metadata"]["name"], self.namespace)
        for node in self.nodes:
            self.label(node, False)
        wait_for(lambda: not kc.list_objects(self.api, PODS, self.namespace), 60, "the pool's Pods gone",
                 interval=0.5)
        self.dev.slurm("scontrol", "delete", "nodename=" + ",".join(self.nodes), check=False)


@pytest.fixture(scope="module")
def pool(kube_api, dev_cluster, tmp_path_factory):
    """NODES_IN_POOL stand-in Nodes (none labelled yet), and sunk-operator watching a namespace of its own."""
    tmp = tmp_path_factory.mktemp("nodeset")
    apply_crds(kube_api)
    run_id = uuid.uuid4().hex[:6]
    namespace = f"nodeset-{run_id}"
    kc.create(kube_api, NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    wait_default_service_account(kube_api, namespace)  # (the operator's first Pods would be refused)
    nodes = [f"ns{run_id}-{i}" for i in range(1, NODES_IN_POOL + 1)]
    stand_ins = StandInPool(dev_cluster, kube_api, nodes, tmp)
    values = {"operator": {"enabled": True}, "slurmd": {"namespace": namespace}}
    deployed = operator_as_deployed(kube_api, dev_cluster, tmp, namespace, values)
    account, operator = deployed.account, deployed.process
    p = Pool(kube_api, dev_cluster, namespace, run_id, nodes)
    p.operator = operator
    try:
        stand_ins.start()
        operator.start()
        yield p
    finally:
        try:
            p.reset()
            operator.stop()
        finally:
            stand_ins.stop()  # (its kubelet stops every slurmd it started; Nodes and Slurm nodes deleted)
            for obj in kc.list_objects(kube_api, NODESLICES, namespace):
                _delete_quietly(kube_api, NODESLICES, obj["metadata"]["name"], namespace)
            purge_namespace(kube_api, namespace)
            _delete_quietly(kube_api, LEASES, account["name"], account["namespace"])
        assert_never_forbidden(operator.log)


@pytest.fixture(autouse=True)
def fresh_pool(pool):
    """Each test starts from the pool as the fixture made it, whatever the previous one left when it failed."""
    yield
    pool.reset()


def _delete_quietly(api, resource, name: str, namespace: str | None = None) -> None:
    try:
        kc.delete(api, resource, name, namespace)
    except kc.ApiError as exc:
        if not exc.not_found:
            raise


def _wait_registered_idle(pool: Pool, nodes: list[str], timeout: float = 60) -> None:
    wait_for(lambda: all(pool.state(n) == "idle" for n in nodes), timeout,
             f"Slurm nodes {nodes} registered and IDLE", interval=0.5)


def test_labelled_nodes_get_slurmd_pods_whose_slurm_nodes_register(pool):
    """Label two Nodes: a slurmd Pod each, a real slurmd registers each as an IDLE Slurm node, the
    status counts them, the NodeSlices list them. Label a third: it joins the same way."""
    a, b, c = pool.nodes[:3]
    pool.label(a, True)
    pool.label(b, True)
    pool.nodeset("grow")
    started = time.monotonic()
    wait_for(lambda: set(pool.pods("grow")) == {a, b}, 30, "a slurmd Pod on each labelled Node")
    _wait_registered_idle(pool, [a, b])
    registered = time.monotonic() - started
    wait_for(lambda: (s := pool.status("grow")).get("matching") == 2 and s.get("ready") == 2
             and s.get("slurmIdle") == 2, 30, "status: 2 matching, 2 ready, 2 idle in Slurm")
    assert pool.slices("grow") == sorted([a, b])
    pods = pool.pods("grow")
    assert pods[a]["spec"]["nodeName"] == a and pods[a]["spec"]["hostname"] == a
    pool.label(c, True)
    wait_for(lambda: c in pool.pods("grow"), 30, "a slurmd Pod on the newly labelled Node")
    _wait_registered_idle(pool, [c])
    wait_for(lambda: pool.status("grow").get("slurmIdle") == 3, 30, "status: 3 idle in Slurm")
    print(f"two Nodes labelled to both Slurm nodes IDLE: {registered:.1f} s")
    kc.delete(pool.api, NODESETS, "grow", pool.namespace)
    wait_for(lambda: pool.get_nodeset("grow") is None, 60, "the idle NodeSet deleted (drained, Pods removed)")
    assert pool.pods("grow") == {}
    for n in (a, b, c):
        pool.label(n, False)


def test_unlabelling_a_busy_node_drains_at_once_and_deletes_its_pod_only_after_the_job(pool):
    """A Node leaves the selector while a job runs on its Slurm node: drained at once with a k8s: reason,
    the job keeps running, the Pod stays until the job ends, then goes; its slurmd stops."""
    a, b = pool.nodes[:2]
    pool.label(a, True)
    pool.label(b, True)
    pool.nodeset("shrink")
    _wait_registered_idle(pool, [a, b])
    job = pool.submit(a)
    wait_for(lambda: pool.job_state(job) == "RUNNING", 30, f"job {job} running on {a}")
    pool.label(a, False)
    wait_for(lambda: "drain" in pool.state(a), 10, f"{a} draining (it left the NodeSet's selector)")
    assert pool.reason(a).startswith(names.K8S_DRAIN_PREFIX), pool.reason(a)
    never(lambda: a not in pool.pods("shrink") or pool.job_state(job) != "RUNNING", 5,
          "the Pod deleted, or the job stopped, while the job runs")
    assert pool.pods("shrink")[a]["metadata"]["annotations"].get(names.ANN_PENDING_DELETION)
    pool.cancel(job)
    wait_for(lambda: a not in pool.pods("shrink"), 60, f"{a}'s Pod deleted once its job ended")
    wait_for(lambda: pool.state(a) in ("", ) or "*" in pool.state(a) or "down" in pool.state(a), 60,
             f"{a}'s slurmd stopped (Slurm node gone, down or not responding)")
    assert pool.state(b) == "idle", "the other Node's Slurm node was touched"
    wait_for(lambda: pool.slices("shrink") == [b], 30, "the NodeSlice lists only the remaining node")
    kc.delete(pool.api, NODESETS, "shrink", pool.namespace)
    wait_for(lambda: pool.get_nodeset("shrink") is None, 60, "the NodeSet deleted")
    pool.label(b, False)
    pool.dev.slurm("scontrol", "delete", f"nodename={a},{b}", check=False)


def test_a_template_change_replaces_idle_nodes_first_and_kills_no_job(pool):
    """Two of four Slurm nodes busy when the template changes: the idle ones are replaced first, the busy
    ones drained and replaced only after their jobs end; no job is killed; a person's drain on an idle
    node is not lifted by the replacement."""
    nodes = pool.nodes
    for n in nodes:
        pool.label(n, True)
    pool.nodeset("roll", updateStrategy={"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 2}})
    _wait_registered_idle(pool, nodes)
    busy, idle = nodes[:2], nodes[2:]
    jobs = [pool.submit(n) for n in busy]
    wait_for(lambda: all(pool.job_state(j) == "RUNNING" for j in jobs), 30, "the jobs running")
    # "Idle first" is by the operator's view of Slurm (a list per second): let it see the jobs first.
    wait_for(lambda: pool.status("roll").get("slurmAllocated") == 2, 30, "status: 2 allocated in Slurm")
    manual = f"nodeset-test {pool.run_id}: a person's drain"
    pool.dev.slurm("scontrol", "update", f"nodename={idle[1]}", "state=drain", f"reason={manual}")
    old = {n: p["metadata"]["uid"] for n, p in pool.pods("roll").items()}
    kc.patch(pool.api, NODESETS, "roll", {"spec": {"template": {"spec": {"containers": [
        {"name": "slurmd", "image": "sunk-dev/slurmd:v2", "command": ["slurmd", "-D", "-Z"]}]}}}}, pool.namespace)

    def replaced(n: str) -> bool:
        pod = pool.pods("roll").get(n)
        return bool(pod) and pod["metadata"]["uid"] != old[n] and not pod["metadata"].get("deletionTimestamp")

    wait_for(lambda: all(replaced(n) for n in idle), 60, "the idle nodes' Pods replaced")
    assert not any(replaced(n) for n in busy), "a busy node's Pod was replaced while its job ran"
    assert all(pool.job_state(j) == "RUNNING" for j in jobs), "a job was stopped by the update"
    # The busy ones are marked (drained) once the replaced idle ones are Ready and the budget is free again.
    wait_for(lambda: all("drain" in pool.state(n) for n in busy), 30, "the busy nodes draining for the update")
    assert all(pool.job_state(j) == "RUNNING" for j in jobs), "a job was stopped by the update"
    wait_for(lambda: pool.state(idle[0]) == "idle", 60, f"{idle[0]} back and IDLE")
    assert pool.reason(idle[1]) == manual, "a person's drain was replaced"
    progressing = pool.condition("roll", "Progressing")
    assert progressing.get("status") == "True", progressing
    for j in jobs:
        pool.cancel(j)
    wait_for(lambda: all(replaced(n) for n in nodes), 90, "every Pod replaced once the jobs ended")
    wait_for(lambda: all(pool.state(n) == "idle" for n in (*busy, idle[0])), 60, "the replaced nodes IDLE")
    wait_for(lambda: pool.status("roll").get("updated") == 4, 30, "status: 4 updated")
    assert pool.reason(idle[1]) == manual, "a person's drain was lifted"
    pool.dev.slurm("scontrol", "update", f"nodename={idle[1]}", "state=resume")
    kc.delete(pool.api, NODESETS, "roll", pool.namespace)
    wait_for(lambda: pool.get_nodeset("roll") is None, 60, "the NodeSet deleted")
    for n in nodes:
        pool.label(n, False)
    pool.dev.slurm("scontrol", "delete", "nodename=" + ",".join(nodes), check=False)


def test_deleting_a_nodeset_with_jobs_running_lets_them_finish(pool):
    """The NodeSet deleted while a job runs: its node drained, the job runs on, the NodeSet goes only once
    the job ended, and slurmctld keeps running throughout."""
    a, b = pool.nodes[:2]
    pool.label(a, True)
    pool.label(b, True)
    pool.nodeset("gone")
    _wait_registered_idle(pool, [a, b])
    job = pool.submit(a, seconds=600)
    wait_for(lambda: pool.job_state(job) == "RUNNING", 30, f"job {job} running")
    kc.delete(pool.api, NODESETS, "gone", pool.namespace)
    wait_for(lambda: "drain" in pool.state(a) and "drain" in pool.state(b), 10, "both nodes draining")
    never(lambda: pool.get_nodeset("gone") is None or pool.job_state(job) != "RUNNING", 5,
          "the NodeSet gone, or the job stopped, while the job runs")
    pool.cancel(job)
    wait_for(lambda: pool.get_nodeset("gone") is None, 60, "the NodeSet deleted once its job ended")
    assert pool.pods("gone") == {}
    assert pool.dev.slurm("scontrol", "ping", check=False).returncode == 0, "slurmctld stopped answering"
    for n in (a, b):
        pool.label(n, False)
    pool.dev.slurm("scontrol", "delete", f"nodename={a},{b}", check=False)


def test_a_nodeset_matching_nothing_says_so_and_touches_nothing(pool):
    """Bad input: a selector no Node matches, and a template without a slurmd container: a False condition
    and an Event each, no Pod created, nothing drained."""
    kc.create(pool.api, NODESETS, {
        "apiVersion": names.NODESET_API_VERSION, "kind": "NodeSet",
        "metadata": {"name": "nomatch", "namespace": pool.namespace},
        "spec": {"nodeSelector": {POOL_LABEL: "no-such-pool"}, "naming": {"scheme": "NodeName"},
                 "template": {"spec": {"containers": [{"name": "slurmd", "image": "x"}]}}}}, pool.namespace)
    kc.create(pool.api, NODESETS, {
        "apiVersion": names.NODESET_API_VERSION, "kind": "NodeSet",
        "metadata": {"name": "noslurmd", "namespace": pool.namespace},
        "spec": {"nodeSelector": {POOL_LABEL: pool.run_id}, "naming": {"scheme": "NodeName"},
                 "template": {"spec": {"containers": [{"name": "web", "image": "x"}]}}}}, pool.namespace)
    wait_for(lambda: pool.condition("nomatch", "NodesMatched").get("status") == "False", 30,
             "NodesMatched=False on the NodeSet matching nothing")
    wait_for(lambda: pool.condition("noslurmd", "SpecValid").get("status") == "False", 30,
             "SpecValid=False on the NodeSet without a slurmd container")
    wait_for(lambda: pool.events("nomatch") and pool.events("noslurmd"), 30, "an Event on each")
    assert pool.pods("nomatch") == {} and pool.pods("noslurmd") == {}
    for name in ("nomatch", "noslurmd"):
        kc.delete(pool.api, NODESETS, name, pool.namespace)
        wait_for(lambda name=name: pool.get_nodeset(name) is None, 30, f"{name} deleted")


@pytest.fixture(params=[True, False], ids=["clean-up", "no-clean-up"])
def pool_syncer(request, pool, kube_api, dev_cluster, tmp_path):
    """sunk-syncer on the pool's namespace as the chart renders it with syncer.config.syncer.slurmNodeCleanUp
    on or off (node rights and locking off: state sync only), as its rendered ServiceAccount."""
    cleanup = request.param
    values = {"fullnameOverride": "sunk-pool", "slurmd": {"namespace": pool.namespace},
              "syncer": {"nodePermissions": {"enabled": False}, "nodeLocking": {"enabled": False},
                         "config": {"syncer": {"slurmNodeCleanUp": cleanup}}}}
    account, kubeconfig = as_service_account(kube_api, dev_cluster, "syncer-rbac.yaml", tmp_path, values=values)
    env = dev_cluster.env()
    hooks, metrics, probes = free_port(), free_port(), free_port()
    args = deployment_args("syncer.yaml", "sunk-pool-syncer", {
        "--slurm-api-base": env["SLURM_REST_URL"], "--slurm-auth-token-file": env["SLURM_JWT_FILE"],
        "--watch-namespace": pool.namespace, "--hooks-api-bind-address": f"127.0.0.1:{hooks}",
        "--metrics-bind-address": f"127.0.0.1:{metrics}", "--health-probe-bind-address": f"127.0.0.1:{probes}"},
        docs=rendered("syncer.yaml", values))
    assert f"--slurm-node-clean-up={str(cleanup).lower()}" in args, args
    proc = Process("sunk-syncer-pool", "sunk.commands.syncer", [*args, f"--kubeconfig={kubeconfig}"],
                   f"http://127.0.0.1:{probes}/readyz", tmp_path, env={"SLURM_JWT": ""})
    proc.start()
    try:
        yield cleanup, proc
    finally:
        proc.stop()
        _delete_quietly(kube_api, LEASES, "sunk-pool-syncer", account["namespace"])
        assert_never_forbidden(proc.log)


def test_a_node_leaving_the_nodeset_goes_down_and_is_deleted_from_slurm_only_with_clean_up(pool, pool_syncer):
    """Unlabel a Node while a job runs: drained, and once the job ends its Pod is deleted; the Syncer sets the
    Slurm node DOWN (the Pod's deletion) and, with clean-up on, deletes it from Slurm once its NodeSlice entry
    is gone; with clean-up off the node stays, DOWN. The other node of the set and the dev cluster's own nodes stay."""
    cleanup, syncer = pool_syncer
    a, b = pool.nodes[:2]
    pool.label(a, True)
    pool.label(b, True)
    pool.nodeset("leave")
    _wait_registered_idle(pool, [a, b])
    if cleanup:  # the Syncer marks the nodes a NodeSlice lists: the only ones it may ever delete
        wait_for(lambda: '"nodeset"' in pool.slurm.get_node(a).extra, 30, f"{a} marked as the NodeSet's in Extra")
    job = pool.submit(a)
    wait_for(lambda: pool.job_state(job) == "RUNNING", 30, f"job {job} running on {a}")
    pool.label(a, False)
    wait_for(lambda: "drain" in pool.state(a), 10, f"{a} draining")
    pool.cancel(job)
    wait_for(lambda: a not in pool.pods("leave"), 60, f"{a}'s Pod deleted once its job ended")
    wait_for(lambda: pool.slices("leave") == [b], 30, "the NodeSlice lists only the remaining node")
    if cleanup:
        # Not before slurmctld forgets the cancelled job (MinJobAge, then its purge, about once a minute):
        # a node a job record still names is never deleted.
        wait_for(lambda: pool.state(a) == "", slurmconf.MIN_JOB_AGE + 150, f"Slurm node {a} deleted by the clean-up")
    else:
        # (sinfo shows DOWN+DRAIN as "drained": Slurm's own flags tell)
        wait_for(lambda: pool.slurm.get_node(a).down, 30, f"Slurm node {a} DOWN (its Pod deleted)")
        never(lambda: pool.state(a) == "", 5, f"Slurm node {a} deleted with clean-up off")
    log = syncer.log.read_text(errors="replace")
    assert f"slurmd pod {pool.namespace}/{a} deleted" in log, log[-3000:]
    assert pool.state(b) == "idle", f"{b}, still in the NodeSet, was touched: {pool.state(b)}"
    static = pool.dev.slurm("sinfo", "-h", "-N", "-p", "batch", "-o", "%N", check=False).stdout.split()
    assert len(static) == len(pool.dev.layout.node_names), static
    kc.delete(pool.api, NODESETS, "leave", pool.namespace)
    wait_for(lambda: pool.get_nodeset("leave") is None, 60, "the NodeSet deleted")
    pool.label(b, False)
    pool.dev.slurm("scontrol", "delete", f"nodename={a},{b}", check=False)


def test_colliding_and_taken_names_say_so_and_delete_nothing(pool):
    """Bad input, names: the stand-in Nodes all have the InternalIP 127.0.0.1, so the IPv4Octets scheme maps two
    of them to one Slurm node name (NameCollision: neither gets it); a second NodeSet over a Node whose Slurm
    node name a first one's Pod holds (NameTaken). A False NamesValid and an Event each; the first NodeSet's Pod
    and Slurm node are untouched."""
    a, b = pool.nodes[:2]
    pool.label(a, True)
    pool.label(b, True)
    pool.nodeset("first")
    _wait_registered_idle(pool, [a, b])
    held = {n: p["metadata"]["uid"] for n, p in pool.pods("first").items()}
    pool.nodeset("octets", naming={"scheme": "IPv4Octets", "prefix": "oct"})
    wait_for(lambda: (c := pool.condition("octets", "NamesValid")).get("status") == "False"
             and c.get("reason") == "NameCollision", 30, "NamesValid=False (NameCollision) on the IPv4Octets NodeSet")
    pool.nodeset("second")
    wait_for(lambda: (c := pool.condition("second", "NamesValid")).get("status") == "False"
             and c.get("reason") == "NameTaken", 30, "NamesValid=False (NameTaken) on the second NodeSet")
    wait_for(lambda: {"NameCollision"} <= pool.events("octets") and {"NameTaken"} <= pool.events("second"), 30,
             "an Event on each")
    never(lambda: pool.pods("octets") or pool.pods("second"), 3, "a Pod made under a colliding or taken name")
    assert {n: p["metadata"]["uid"] for n, p in pool.pods("first").items()} == held, "the first NodeSet's Pods changed"
    assert all(pool.state(n) == "idle" for n in (a, b)), {n: pool.state(n) for n in (a, b)}

"""Node-locking test fixtures: a syncer serving the hook API, and the prolog/epilog wired into Slurm.

The syncer only sees the slurmd Pods labelled ``LABEL`` (node3 and node4 here), so it never
locks the Nodes other tests use. The prolog and epilog are installed into the dev cluster's
prolog.d/epilog.d behind a wrapper that only acts on jobs submitted by ``HookScripts.sbatch``
(their comment carries a marker), and removed afterwards: a leftover prolog that calls a
stopped syncer would fail every job on the cluster.
"""

from __future__ import annotations

import secrets
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import requests
from procs import Process, free_port
from slurmtools import wait_for

from sunk.kube import client as kc
from sunk.kube.patch import remove_taint, set_annotations, set_labels
from sunk.kube.resources import LEASES, NODES, PODS
from sunk.locking.requests import REQUEST_PREFIX
from sunk.model import names
from sunk.scripts import shipped_script
from sunk_dev.cluster import k8s_node_for, write_node_tokens

LABEL = "sunk.dev/locking-test"
NODES_UNDER_TEST = ("node3", "node4")
K8S_NODE3, K8S_NODE4 = (k8s_node_for(node) for node in NODES_UNDER_TEST)  # their Kubernetes Nodes
SLURMD_SELECTOR = f"app.kubernetes.io/name=slurmd,{LABEL}=true"
# Every spec.schedulerName the cluster tests' schedulers and extender serve: the Syncer takes a job-id
# annotation as sunk's word only on their Pods (--scheduler-names; the chart names its own).
# PLACED_BY: the schedulerName of the Pods the locking tests make as if sunk had placed them (spec.nodeName
# and a job-id annotation, no scheduler running under that name).
PLACED_BY = "sunk-locking-test"
TEST_SCHEDULERS = ("sunk-scheduler", "sunk-scheduler-test", "sunk-scheduler-scope-test", "sunk-extender-test",
                   "sunk-identity-test", "sunk-bench", "tenant-slurm-staging-slurm-scheduler", PLACED_BY)


def label_slurmd_pods(api, value: str | None) -> None:
    for node in NODES_UNDER_TEST:
        pod = kc.get(api, PODS, node, "slurm")
        set_labels(api, pod, {LABEL: value})


def clean_up(api, dev_cluster, lease: str) -> None:
    """What a stopped test syncer may leave: lock annotations and requests, lock taints, its Lease."""
    for node in NODES_UNDER_TEST:
        pod = kc.get(api, PODS, node, "slurm")
        stale = {k: None for k in (pod["metadata"].get("annotations") or {})
                 if k == names.LOCK_KEY or k.startswith(REQUEST_PREFIX)}
        set_annotations(api, pod, stale)
        remove_taint(api, kc.get(api, NODES, dev_cluster.k8s_node_for(node)), names.LOCK_KEY)
    try:
        kc.delete(api, LEASES, lease, "slurm")
    except kc.ApiError as exc:
        if not exc.not_found:
            raise


class SyncerProcess(Process):
    """The real ``sunk-syncer`` (gunicorn, leader election, state sync), limited to our slurmd Pods."""

    def __init__(self, dev_cluster, token_file: Path, log_dir: Path, flags: list[str] | None = None,
                 lease: str = "sunk-syncer-locktest"):
        env = dev_cluster.env()
        hooks, metrics, probes = free_port(), free_port(), free_port()
        self.url = f"http://127.0.0.1:{hooks}"
        self.ports = (hooks, metrics, probes)
        args = [
            f"--kubeconfig={env['KUBECONFIG']}", *dev_cluster.slurm_flags(), "--slurm-poll-interval=0.5s",
            "--watch-namespace=slurm", f"--slurmd-selector={SLURMD_SELECTOR}",
            f"--hooks-api-bind-address=127.0.0.1:{hooks}", f"--hooks-token-file={token_file}",
            f"--metrics-bind-address=127.0.0.1:{metrics}", f"--health-probe-bind-address=127.0.0.1:{probes}",
            f"--leader-election-id={lease}", "--zap-log-level=debug", f"--scheduler-names={','.join(TEST_SCHEDULERS)}",
            *(flags or []),
        ]
        super().__init__(f"sunk-syncer-{hooks}", "sunk.commands.syncer", args, f"http://127.0.0.1:{probes}/readyz",
                         log_dir)

    def start(self, timeout: float = 60) -> None:
        super().start(timeout)
        wait_for(lambda: requests.get(f"{self.url}/healthz", timeout=2).status_code == 200, 30, "hooks healthz")


@contextmanager
def running_syncer(api, dev_cluster, token_file: Path, log_dir: Path, flags: list[str],
                   lease: str) -> Iterator[SyncerProcess]:
    """A SyncerProcess on node3/node4 (their slurmd Pods labelled for it); undone afterwards."""
    label_slurmd_pods(api, "true")
    proc = SyncerProcess(dev_cluster, token_file, log_dir, flags, lease=lease)
    try:
        proc.start()
        yield proc
    finally:
        proc.stop()
        label_slurmd_pods(api, None)
        clean_up(api, dev_cluster, lease)


class HookScripts:
    """prolog.sh/epilog.sh with their hooks.env, installed in the dev cluster's chroot for our jobs only."""

    def __init__(self, dev_cluster, syncer_url: str, token: str):
        self.cluster = dev_cluster
        self.root = Path(dev_cluster.root)
        self.id = uuid.uuid4().hex[:8]
        self.inner = f"/etc/sunk-locktest-{self.id}"  # as seen inside the chroot
        self.dir = self.root / self.inner.lstrip("/")
        self.url, self.token = syncer_url, token
        self.marker = f"locktest-{self.id}"  # jobs carry it in their comment
        self.wrappers = [self.root / f"etc/slurm/{kind}.d/50-sunk-locktest-{self.id}" for kind in ("prolog", "epilog")]

    def install(self, lock_timeout: int = 30) -> None:
        self.dir.mkdir(mode=0o700)
        for script in ("prolog.sh", "epilog.sh"):
            (self.dir / script).write_text(shipped_script(script))  # (as the chart ships it: self-contained)
            (self.dir / script).chmod(0o755)
        write_node_tokens(self.dir / "tokens", self.token.encode(), self.cluster.slurm_nodes)
        self.set_timeout(lock_timeout)
        for wrapper, kind in zip(self.wrappers, ("prolog", "epilog"), strict=True):
            wrapper.write_text(  # only this module's jobs: others sharing the cluster never call our syncer
                "#!/bin/bash\n"
                f'[[ "${{SLURM_JOB_COMMENT:-}}" == *{self.marker}* ]] || exit 0\n'
                f"SUNK_HOOKS_ENV={self.inner}/hooks.env exec {self.inner}/{kind}.sh\n")
            wrapper.chmod(0o755)

    def set_timeout(self, seconds: int) -> None:
        (self.dir / "hooks.env").write_text(
            f"SUNK_SYNCER_URL={self.url}\nSUNK_HOOKS_TOKEN_FILE={self.inner}/tokens/%n\nSUNK_LOCK_TIMEOUT={seconds}\n")

    def sbatch(self, node: str, script: str, *flags: str, admin_comment: str | None = None) -> int:
        """Submit a batch job that runs our prolog and epilog, alone on ``node`` once other tests' jobs left it.

        Alone (exclusive, on an idle node) so that the lock's history is this job's only. ``admin_comment``
        (where a placeholder's identity lives; sbatch has no option for it): submitted held, given it as root,
        then released, so that it starts with it.
        """
        wait_for(lambda: self.cluster.slurm("sinfo", "-h", "-n", node, "-o", "%T").stdout.strip() == "idle", 120,
                 f"{node} to be idle", interval=1)
        held = ("--hold",) if admin_comment is not None else ()
        out = self.cluster.slurm("sbatch", "--parsable", "-w", node, "--exclusive", "-o", "/dev/null",
                                 f"--comment={self.marker}", *held, *flags, "--wrap", script)
        job = int(out.stdout.strip().split(";")[0])
        if admin_comment is not None:
            admin_hold(self.cluster, job, admin_comment)
        return job

    def remove(self) -> None:
        for wrapper in self.wrappers:  # first, so no job runs a half-removed script
            wrapper.unlink(missing_ok=True)
        shutil.rmtree(self.dir, ignore_errors=True)


def admin_hold(cluster: Any, job: int, admin_comment: str) -> None:
    """Give a held job its AdminComment (as root, a Slurm super user) and release it."""
    cluster.slurm("scontrol", "update", f"jobid={job}", f"AdminComment={admin_comment}")
    cluster.slurm("scontrol", "release", str(job))


def new_token() -> str:
    return secrets.token_hex(24)


def lock_value(pod: dict[str, Any] | None) -> str | None:
    return ((pod or {}).get("metadata", {}).get("annotations") or {}).get("sunk.coreweave.com/lock")

"""``DevCluster``: bring the whole local cluster up, idempotently, and describe it.

Mapping (also in docs/development.md): Slurm node ``nodeN`` runs in slurmd Pod
``slurm/nodeN``, which is bound to Kubernetes Node ``nodeN``. The Pod name is the
Slurm node name, as in SUNK, where the slurmd Pod's hostname is the Slurm node's name, and
the Slurm node takes its Node's name, as a NodeSet's ``NodeName`` scheme names it.

Slurm runs from the chroot of the release asked for (``sunk_dev.release``); ``up`` asking for
another release than the one running stops the Slurm side (and what runs Slurm's binaries or
talks to it: the stand-in kubelet, sunk's daemons, the real Node's slurmd Pod) and starts it
from the other chroot, whose state is its own. Kubernetes (etcd, the apiserver) stays up.
"""

from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import datetime
import functools
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Optional

import requests
from attrs import frozen

import sunk
from sunk.hooks.auth import node_token
from sunk.kube import client as kc
from sunk.model import names
from sunk.scripts import shipped_script
from sunk.translate import nodestate
from sunk.translate.nodeset import pod as nodeset_pod
from sunk.translate.nodeset.spec import read_spec

from . import (
    chroot,
    claim,
    dns,
    images,
    kubebuild,
    kubeconf,
    kubelet,
    phases,
    pool,
    realnode,
    release,
    slurmbuild,
    slurmconf,
    slurmimages,
    slurmonk8s,
    standin_slurmd,
    workloads,
)
from .procs import Daemon, run, wait_until

SLURM_NAMESPACE = "slurm"
SLURMD_SELECTOR = "app.kubernetes.io%2Fname%3Dslurmd"  # URL-encoded, as the list calls take it
FAKE_KUBELET_SELECTOR = f"{kubelet.NODE_LABEL}%3Dtrue"
DEMO_SCHEDULER = "sunk-scheduler"
DEMO_NAMESPACE = "demo"
PRODUCT_PORTS = {"syncer": 8000, "scheduler": 8100}
OPERATOR_LEASE = "sunk-dev-operator"
OPERATOR_PROBES = 8281  # the dev cluster's own sunk-operator: /readyz (and /metrics one port below)
POD_USER = "sunk-pods"  # uid 65534 by a name Slurm resolves to it ("nobody" it reads as 99)
# The checkout this file is in (dev/sunk_dev/cluster.py): the product's sources are at its root, the dev
# tools under dev/ (a distribution of their own, which the product's wheel and image leave out).
CHECKOUT = Path(__file__).resolve().parents[2]
SCRIPTS_DIR = CHECKOUT / "sunk" / "scripts"  # the product's Slurm scripts (its package data)
ETCD_REVISION_FLOOR = 20  # see DevCluster._age_etcd
# The dev cluster's Slurm identity policy (--identity-policy), as its operator chose it: every Pod author is
# trusted, any user (root included, and the default) and any priority, because the tests of everything else
# name the users and priorities they need. tests/cluster/test_identity_policy.py tests policies with teeth,
# and the chart's own default (a non-root identity).
DEV_IDENTITY_POLICY = {"default": {"identity": {"userId": 0, "groupId": 0}, "userIds": ["0-4294967293"],
                                   "priority": {"min": 0, "max": 4294967293}}}
@frozen
class SlurmRest:
    url: str
    token: str
    user: str = "root"


GO_LOG = "setup-go.log"  # the Go builds' output (run/logs), beside setup.log: they run at the same time
DAEMON_RESTARTS = 3  # a daemon that exits while `up` waits for it is started again this often


@frozen
class ComponentStatus:
    name: str
    pid: Optional[int]
    healthy: bool
    detail: str = ""


@frozen
class Component:
    daemon: Daemon
    healthy: Callable[[], bool]
    prepare: Optional[Callable[[], None]] = None
    after: Optional[Callable[[], None]] = None
    # ``after`` on every `up`, the daemon already running too: it brings objects to what this checkout says
    # (idempotent and cheap), so a change to them reaches a dev cluster left up.
    after_every_up: bool = False
    timeout: float = 60.0
    # Runs the release's Slurm binaries or holds its state and credentials (the stand-in kubelet runs
    # NodeSet Pods' slurmd from the chroot): what `up` stops when it switches Slurm releases.
    slurm_side: bool = False



def k8s_node_for(slurm_node: str) -> str:
    """The Kubernetes Node a Slurm node of the dev cluster's layout runs on (tests name Nodes through it): the
    one of the same name (a NodeSet's ``NodeName`` scheme)."""
    return slurm_node


def default_home() -> Path:
    return Path(os.environ.get("SUNK_DEV_HOME") or Path.home() / ".cache" / "sunk-dev")


def chroot_directories(slurmd_nodes: Iterable[str], mariadb_socket_dir: str = "run/mysqld") -> dict[str, str]:
    """The directories ``up`` makes in the chroot (relative path: owner), before any daemon starts
    (``mariadb_socket_dir``: where the chroot's MariaDB clients look for the server, by release).

    ``/etc/sunk`` is among them although only the Syncer's hooks fill it: the real Node's slurmd
    Pod mounts it as a hostPath ``Directory`` at once, and on a fresh machine it did not exist yet
    (the Pod never started: "hostPath type check failed").
    """
    dirs = {
        "var/spool/slurmctld": "slurm", "var/log/slurm": "slurm", "run/munge": "munge",
        mariadb_socket_dir: "mysql", "etc/slurm/prolog.d": "root", "etc/slurm/epilog.d": "root", "etc/sunk": "root",
    }
    for node in slurmd_nodes:
        dirs[f"var/spool/slurmd/{node}"] = "root"
    return dirs


class DevCluster:
    def __init__(self, home: Path, nodes: int = 4, phantom_nodes: int = 0, with_sunk: Optional[bool] = None,
                 log=sys.stderr, slurm: Optional[release.SlurmRelease] = None, slurm_on_kubernetes: bool = False):
        """``slurm``: the release ``up`` brings up (switching from another one running); None (status,
        env, down, ``sunk-dev slurm``) means the one recorded by the last ``up``. ``slurm_on_kubernetes``: ``up``
        also brings the chart's SlurmCluster up on two real Nodes (``sunk_dev.slurmonk8s``); without it, ``up``
        takes one a former ``up`` left down."""
        self.home = home
        self.slurm_on_kubernetes = slurm_on_kubernetes
        self.run_dir = home / "run"
        self.kube_dir = self.run_dir / "kube"
        self.log = log
        self._asked_layout = slurmconf.SlurmLayout(nodes=nodes, phantom_nodes=phantom_nodes)
        self.layout = self._asked_layout
        self._reconfigure = False  # set when `up` rewrote a slurm.conf that slurmctld already runs with
        self.with_sunk = self._saved_with_sunk() if with_sunk is None else with_sunk
        self._asked_release = slurm
        # The release whose daemons may still run: `up` stops them before starting this one's.
        self._running_release: Optional[release.SlurmRelease] = None
        recorded = self._observe()
        self.release = recorded if slurm is None else slurm
        self._built_images: list[images.Built] = []  # what `up` built for the real Node (sunk_dev.images)

    def _observe(self) -> release.SlurmRelease:
        """Read what runs now from run/ (its layout, its Slurm release) and return the recorded release.

        ``up`` reads it again once it holds the claim: another session may have switched releases or
        changed the layout between this object's making and then."""
        running = self._any_running()
        saved = self._saved_layout()
        # A running cluster keeps its shape; `down` first to change it.
        self.layout = saved if saved is not None and running else self._asked_layout
        recorded = self._recorded_release()
        self._running_release = recorded if running else None
        return recorded

    def _recorded_release(self) -> release.SlurmRelease:
        """The release the last ``up`` recorded; one this checkout does not know (a newer checkout's)
        is taken for the default with a warning, so that ``down`` and ``status`` still work."""
        data = self._saved_data()
        self._unknown_release: Optional[str] = None
        try:
            return release.saved(data)
        except ValueError:
            self._unknown_release = str(data.get("slurm"))
            self._say(f"sunk-dev: run/layout.json names Slurm release {data.get('slurm')!r}, which this checkout "
                      f"does not know: taken for {release.DEFAULT.name} (`down` stops its daemons by PID)")
            return release.DEFAULT

    @classmethod
    def for_tests(cls) -> DevCluster:
        """Tests run sunk's own processes themselves, so the cluster runs none of them; Slurm is the
        release ``SUNK_DEV_SLURM`` names (the default one without it), never "whatever runs"."""
        return cls(default_home(), nodes=int(os.environ.get("SUNK_DEV_NODES", "4")), with_sunk=False,
                   slurm=release.chosen())

    def claimed(self, who: str, timeout: float = 3600):
        """Use the cluster alone (see ``sunk_dev.claim``): tests and benchmarks hold this."""
        return claim.claimed(self.run_dir, who, timeout, log=self.log)

    # -- facts -------------------------------------------------------------------------
    @property
    def root(self) -> Path:
        """The Slurm release's chroot: Slurm's binaries, configuration and state."""
        return chroot.chroot_dir(self.home, self.release)

    @property
    def mariadb_socket(self) -> str:
        """Where this chroot's MariaDB clients (slurmdbd) look for the server (``chroot.mariadb_socket``)."""
        return chroot.chroot_mariadb_socket(self.root)

    @property
    def kube_root(self) -> Path:
        """etcd's chroot (and its data): the default release's, whichever Slurm runs."""
        return chroot.chroot_dir(self.home, release.DEFAULT)

    @property
    def slurmd_image(self) -> str:
        """The real Node's slurmd image: the shipped ``sunk-slurmd:<version>-slurm<release>``."""
        return slurmimages.slurmd_image_name(sunk.__version__, self.release.name)

    @property
    def kubeconfig(self) -> Path:
        return self.kube_dir / "admin.kubeconfig"

    @property
    def _applied_conf(self) -> Path:
        return self.run_dir / "slurm.conf.applied"

    @property
    def real_node(self) -> bool:
        """A real kubelet Node (containerd, runc) beside the stand-in ones: see ``sunk_dev.realnode``."""
        return realnode.enabled()

    @property
    def real_paths(self) -> realnode.Paths:
        return realnode.Paths(self.home)

    @property
    def slurmd_nodes(self) -> tuple[str, ...]:
        """Every Slurm node with a slurmd Pod (and sunk's prolog): the layout's and the real Node's."""
        return self.layout.node_names + ((realnode.SLURM_NODE,) if self.real_node else ())

    @property
    def slurm_nodes(self) -> tuple[str, ...]:
        return self.layout.node_names

    @property
    def built_images(self) -> dict[str, str]:
        """The images ``up`` built for the real Node and imported: name -> image ID."""
        return {built.name: built.image_id for built in self._built_images}

    @property
    def kube_scheduler_binary(self) -> Path:
        return kubebuild.kube_bin_dir(self.home) / "kube-scheduler"

    @property
    def client_conf(self) -> Path:
        """slurm.conf for a Slurm client on the host (pyslurm): ``slurmbuild.client_conf``."""
        return self.run_dir / "slurm-client.conf"

    @property
    def jwt_file(self) -> Path:
        return self.run_dir / "slurm.jwt"

    @property
    def slurm_rest(self) -> SlurmRest:
        return SlurmRest(url=f"http://127.0.0.1:{slurmconf.SLURMRESTD_PORT}", token=self.jwt_file.read_text().strip())

    @staticmethod
    def k8s_node_for(slurm_node: str) -> str:
        return k8s_node_for(slurm_node)

    def env(self) -> dict[str, str]:
        rest = self.slurm_rest
        return {
            "KUBECONFIG": str(self.kubeconfig),
            "SLURM_REST_URL": rest.url,
            "SLURM_JWT": rest.token,
            "SLURM_JWT_FILE": str(self.jwt_file),
            "SLURM_USER": rest.user,
            "SUNK_DEV_CHROOT": str(self.root),
            # (no SUNK_DEV_SLURM: exported, it would pin every later `make test` in that shell to
            # the release running now; `sunk-dev status` says which one that is)
            "SUNK_DEV_HOME": str(self.home),
            # A pyslurm client's (a release built with pyslurm only): its slurm.conf and libslurm.
            **(slurmbuild.client_env(self.root, self.client_conf) if self.release.pyslurm else {}),
            # kubectl and helm of the dev cluster's version first
            "PATH": os.pathsep.join([str(kubebuild.kube_bin_dir(self.home)), str(kubebuild.helm_bin_dir(self.home)),
                                     os.environ.get("PATH", "")]),
        }

    def slurm_flags(self) -> list[str]:
        """How a daemon a test starts reaches Slurm: slurmrestd with the JWT, or pyslurm (the backend
        ``SUNK_DEV_SLURM_BACKEND`` names: ``release.daemon_backend``; its slurm.conf and loader path
        come with ``env()``)."""
        if release.daemon_backend(self.release) == "pyslurm":
            return ["--slurm-backend=pyslurm"]
        return [f"--slurm-api-base={self.slurm_rest.url}", f"--slurm-auth-token-file={self.jwt_file}"]

    def identity_policy_file(self) -> Path:
        """DEV_IDENTITY_POLICY as the file the dev cluster's schedulers read."""
        path = self.run_dir / "identity-policy.json"
        text = json.dumps(DEV_IDENTITY_POLICY)
        if not path.exists() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        return path

    def slurm(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run a Slurm command (scontrol, sbatch, sacctmgr, ...) inside the chroot."""
        return run(["chroot", str(self.root), *args], check=check, timeout=timeout)

    # -- lifecycle -----------------------------------------------------------------------
    def up(self) -> None:
        started = time.monotonic()
        recorded = self._observe()
        if self._unknown_release is not None and self._running_release is not None:
            # Its daemons run from a chroot this checkout cannot name: a switch would stop the wrong
            # release's hooks and jobs, and no switch would keep the other Slurm under this one's name.
            raise RuntimeError(f"Slurm release {self._unknown_release!r} (recorded in run/layout.json by another "
                               "checkout) is running: `sunk-dev down` first")
        if self._asked_release is None:
            self.release = recorded
        self._say(f"sunk-dev: cache {self.home}")
        # The Go builds (Kubernetes, helm, CoreDNS: minutes of CPU on a fresh machine) run beside what waits on the
        # network and the disk (the chroot, apt, the images), and are waited for where the binaries are needed.
        builds = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="go-build")
        go_tools = builds.submit(self._build_go_tools)
        builds.shutdown(wait=False)  # (its thread ends with the builds; a failure is raised by result() below)
        for needed in dict.fromkeys((self.release, release.DEFAULT)):  # (etcd runs from the default's)
            with self._phase(f"chroot {needed.suite}") as log:
                chroot.ensure_chroot(self.home, needed, log=log, project=CHECKOUT)
        version = release.check_version(self.release, chroot.slurm_version(self.root))
        if self._running_release is not None and self._running_release != self.release:
            self._switch_slurm(self._running_release)
            self._save_layout()  # (interrupted from here on, the next `up` knows the old release is gone)
        for other in chroot.chroot_dirs(self.home):  # (what an interrupted switch or `down` left behind)
            if other != self.root:
                self._end_strays(other, other.name)
        self._say(f"  slurm release    {self.release.describe(version)}")
        self._reconfigure = False
        self._configure_chroot()
        wheel = None
        if self.release.pyslurm:
            with self._phase("pyslurm") as log:
                wheel = slurmbuild.ensure_pyslurm(self.root, self.release, self.home, log)
        if self.real_node:
            with self._phase("containerd") as log:
                realnode.ensure_packages(log=log)
            if realnode.write_config(self.real_paths, cluster_dns=realnode.node_ip(),
                                     client_ca=kubeconf.kubelet_client_ca(self.kube_dir)):
                self._component("kubelet-real").daemon.stop()  # (it reads its configuration when it starts)
            if self._write_corefile():
                self._component("coredns").daemon.stop()  # (likewise)
        if self.real_node and images.enabled():  # on unless SUNK_DEV_IMAGES=0 (sunk_dev.images)
            # (with pyslurm also sunk's pyslurm variant, sunk:<version>-slurm<release>: slurm.backend pyslurm)
            self._built_images = images.build_images(self.home, CHECKOUT, self.root,
                                                     sunk.__version__, self._phase, self.release.name,
                                                     pyslurm_wheel=wheel)
            # The real Node's slurmd runs the slurmd image `make images` ships (sunk_dev.slurmimages), not a
            # dev build: what the cluster tests run is what an operator pushes.
            with self._phase("slurm images"):
                self._built_images.append(slurmimages.build_slurmd_image(
                    self.home / "images", self.root, self.release, sunk.__version__))
        bin_dir = go_tools.result()
        # The apiserver reads its tokens at start only, and a running one would keep serving an older
        # certificate (one without the kubernetes Service's address, from a cache made before), or run without
        # the client certificate for the kubelets that a cache made before lacked (and so without its flags).
        read_at_start = [self.kube_dir / "tokens.csv", self.kube_dir / "apiserver.crt",
                         self.kube_dir / "kubelet-client.crt"]
        before = [path.read_bytes() if path.exists() else None for path in read_at_start]
        kubeconf.ensure_pki(self.kube_dir)
        if any(path.read_bytes() != old for path, old in zip(read_at_start, before, strict=True)):
            self._component("kube-apiserver").daemon.stop()
        self._write_jwt()
        self._save_layout()
        if not self.with_sunk:
            if any(c.daemon.pid() for c in self._sunk_components()):
                self.end_demo_workloads()
            for component in self._sunk_components():
                if component.daemon.stop():
                    self._say(f"  {component.daemon.name:<16} stopped (not asked for; `up --sunk` runs it)")
            self._remove_hooks()
        self._stop_static_slurmds()
        self.kubelet_state.unpause_all()  # (what a test that was killed left paused)
        for component in self._components(bin_dir):
            self._ensure(component)
        if self._built_images:  # (each `up`: containerd may have run already, with an older image)
            with self._phase("images import"):
                imported = images.import_missing(functools.partial(realnode.ctr, self.real_paths), self._built_images)
            if imported:
                self._say(f"  images           imported into containerd: {', '.join(imported)}")
        if self._reconfigure:
            self._say("  slurm.conf changed: scontrol reconfigure")
            self.slurm("scontrol", "reconfigure")
            wait_until(self._slurmctld_ok, 60, what="slurmctld after reconfigure")
        self._applied_conf.write_text((self.root / "etc/slurm/slurm.conf").read_text())
        self._seed_kubernetes()
        if not self.with_sunk:
            self._end_left_demo()
        if self.real_node and images.enabled():
            if self.slurm_on_kubernetes:
                slurmonk8s.bring_up(self, self._say)
            elif slurmonk8s.installed(self):
                slurmonk8s.take_down(self, self._say)
        self._say(f"sunk-dev: up in {time.monotonic() - started:.1f}s")

    def down(self) -> list[str]:
        stopped = []
        # The demo's workloads end first, while its scheduler still runs (end_demo_workloads says why). Left
        # behind, its Deployments outlived `down`: the next `up` without --sunk (make test) found their Pods
        # on the real Node, where the chart's own Pods then had no room.
        if any(c.daemon.pid() for c in self._sunk_components()):
            self.end_demo_workloads()
        # The workload controllers a killed gang test left running (their webhooks go with etcd's
        # data only if it is wiped; test_gangs removes them before it starts).
        for controller in workloads.CONTROLLERS:
            daemon = workloads.controller_daemon(controller, self.run_dir / "workloads")
            if daemon.stop():
                stopped.append(daemon.name)
        if self.real_node and any(d.pid() for d in self._second_node_daemons()[1:]):
            stopped += self.stop_second_real_node()  # (what a test could not stop, while the apiserver still runs)
        bin_dir = kubebuild.kube_bin_dir(self.home)
        everything = self._components(bin_dir) + ([] if self.with_sunk else self._sunk_components())
        for component in reversed(everything):
            if component.daemon.name == "containerd":
                realnode.clean_up_containers(self.real_paths)  # (the kubelet is stopped by now)
                realnode.remove_service_routes()
            if component.daemon.stop():
                stopped.append(component.daemon.name)
            if component.daemon.name == "kube-proxy" and (bin_dir / "kube-proxy").exists():
                run(realnode.kube_proxy_cleanup_argv(bin_dir / "kube-proxy"), check=False)
        realnode.unmount_kubelet_root(self.real_paths)
        # Every release's chroot, not only the recorded one: a switch interrupted half-way leaves the
        # other's /proc mounted (and its hooks, which would call a stopped Syncer).
        for root in chroot.chroot_dirs(self.home):
            self._remove_hooks(root)
            stopped.extend(f"{cmd.split(' ', 1)[0]} (pid {pid})" for pid, cmd in chroot.end_processes_in(root).items())
            chroot.unmount_all(root)
        return stopped

    def stray_processes(self) -> dict[int, str]:
        """What runs in a chroot that should run nothing: another release's (job steps, a daemon of
        an interrupted switch), the Kubernetes side's etcd aside. pid -> "root: command"."""
        found = {}
        for root in chroot.chroot_dirs(self.home):
            if root == self.root:
                continue
            keep = self._kube_side_pids() if root == self.kube_root else set()
            found.update({pid: f"{root.name}: {cmd}" for pid, cmd in chroot.processes_in(root).items()
                          if pid not in keep})
        return found

    def _kube_side_pids(self) -> set[int]:
        return {pid for c in self._components(kubebuild.kube_bin_dir(self.home))
                if not c.slurm_side and (pid := c.daemon.pid()) is not None}

    def _end_strays(self, root: Path, which: str) -> None:
        """End what ``root`` still runs once its Slurm daemons are stopped: slurmstepds and their job
        steps outlive slurmd and scancel when their node no longer answers (etcd stays)."""
        keep = self._kube_side_pids() if root == self.kube_root else set()
        for pid, cmd in chroot.end_processes_in(root, keep=keep).items():
            self._say(f"  {cmd.split(' ', 1)[0]:<16} pid {pid} of {which} ended")

    def _switch_slurm(self, running: release.SlurmRelease) -> None:
        """Stop the Slurm side of ``running`` so that ``up`` starts this release's: each release keeps its
        own state in its own chroot (a newer slurmdbd upgrades MariaDB's schema, a newer slurmctld its
        StateSaveLocation, and an older one refuses both), so nothing is carried over. Also stopped:
        whatever runs Slurm's binaries or talks to slurmctld (the stand-in kubelet's NodeSet slurmds,
        sunk's daemons, the real Node's slurmd Pod). etcd and the apiserver stay up."""
        self._say(f"  slurm release    {running.describe()} runs: stopping its Slurm side for "
                  f"{self.release.describe()}")
        old_root = chroot.chroot_dir(self.home, running)
        if any(c.daemon.pid() for c in self._sunk_components()):
            self.end_demo_workloads(old_root)  # (the running Slurm's clients: a newer one may not talk to it)
        for component in self._sunk_components():
            component.daemon.stop()
        if old_root.exists():
            # Before any job is killed: its epilog would call the Syncer just stopped, fail, and leave the
            # node drained in that release's state, found again on switching back.
            self._remove_hooks(old_root)
        if self.real_node:
            # realnode1's slurmd runs the running release's image: its NodeSet makes no Pod until `up` applies
            # it again with this release's (an operator started meanwhile would make one of the old image)
            self._component("sunk-operator").daemon.stop()
            with contextlib.suppress(requests.RequestException, RuntimeError, TimeoutError, OSError):
                self._scale_real_nodeset_to_none()
        if old_root.exists() and Daemon("slurmctld", (), self.run_dir).pid():
            self._end_jobs(old_root)
        for component in reversed(self.slurm_side()):
            if component.daemon.stop():
                self._say(f"  {component.daemon.name:<16} stopped ({running.describe()})")
        if old_root.exists():
            self._end_strays(old_root, running.describe())
        if old_root.exists() and old_root != self.kube_root:
            chroot.unmount_all(old_root)
        self._applied_conf.unlink(missing_ok=True)  # (no slurmctld has read this release's slurm.conf yet)
        self._running_release = None

    def status(self) -> list[ComponentStatus]:
        out = []
        for component in self._components(kubebuild.kube_bin_dir(self.home)):
            pid = component.daemon.pid()
            healthy = False
            detail = "not running"
            if pid is not None:
                try:
                    healthy = bool(component.healthy())
                    detail = "healthy" if healthy else "unhealthy"
                except Exception as exc:
                    detail = f"unhealthy: {exc}"
            out.append(ComponentStatus(component.daemon.name, pid, healthy, detail))
        strays = self.stray_processes()
        out.append(ComponentStatus("other releases", next(iter(strays), None), not strays,
                                   "; ".join(f"{pid} {what}"[:120] for pid, what in strays.items()) or
                                   "nothing runs in another release's chroot"))
        return out

    def stop_component(self, name: str) -> None:
        self._component(name).daemon.stop()

    def start_component(self, name: str) -> None:
        self._ensure(self._component(name))

    def stop_slurmd(self, slurm_node: str, timeout: float = 15) -> None:
        """Stop the slurmd of a stand-in Slurm node and keep it stopped (its Pod stays): what a test does to
        make slurmctld find the node silent. The slurmd is paused in the stand-in kubelet, which starts it again
        once ``start_slurmd`` lifts the pause."""
        state = self.kubelet_state
        state.pause(slurm_node)
        quiet_since: list[float] = []

        def stopped() -> bool:
            """None of the node's slurmds alive for longer than the kubelet takes to start one it had decided to
            start before it saw the pause (each is ended as it is found)."""
            live = [r for r in state.records() if r.node == slurm_node and r.alive()]
            for record in live:
                standin_slurmd.end_process(record, grace=5)
            if live:
                quiet_since.clear()
                return False
            quiet_since[:] = quiet_since or [time.monotonic()]
            return time.monotonic() - quiet_since[0] > standin_slurmd.RESTART_DELAY + 2 * standin_slurmd.POLL

        try:
            if not any(r.node == slurm_node and r.alive() for r in state.records()):
                raise RuntimeError(f"no slurmd of {slurm_node} runs on a stand-in Node")
            wait_until(stopped, timeout, interval=0.1, what=f"{slurm_node}'s slurmd to stop")
        except BaseException:
            state.unpause(slurm_node)  # (a pause left behind would keep the node down for every later test)
            raise

    def start_slurmd(self, slurm_node: str, timeout: float = 60) -> None:
        """Start a slurmd ``stop_slurmd`` stopped, and wait until slurmctld finds it answering."""
        state = self.kubelet_state
        state.unpause(slurm_node)
        wait_until(lambda: any(r.node == slurm_node and r.alive() for r in state.records())
                   and self._slurmd_ok(slurm_node), timeout, what=f"{slurm_node}'s slurmd started and answering")

    @property
    def kubelet_state(self) -> standin_slurmd.KubeletState:
        """The stand-in kubelet's state: its slurmds' ports and processes, the paused nodes."""
        return standin_slurmd.KubeletState(self.run_dir / "standin-kubelet")

    # -- internals ---------------------------------------------------------------------------
    def _component(self, name: str) -> Component:
        for component in self._components(kubebuild.kube_bin_dir(self.home)):
            if component.daemon.name == name:
                return component
        raise KeyError(f"no component {name!r}")

    def slurm_side(self) -> list[Component]:
        """The components of the Slurm release, in start order (``Component.slurm_side``)."""
        return [c for c in self._components(kubebuild.kube_bin_dir(self.home)) if c.slurm_side]

    def _components(self, bin_dir: Path) -> list[Component]:
        root = str(self.root)
        in_root = ("chroot", root)

        def daemon(name: str, *argv: str, env: Optional[dict[str, str]] = None) -> Daemon:
            return Daemon(name=name, argv=tuple(argv), run_dir=self.run_dir, env=env)

        comps = [
            Component(daemon("munged", "chroot", "--userspec=munge:munge", root, "munged", "--foreground", "--force"),
                      self._munge_ok, prepare=self._prepare_munge, slurm_side=True),
            Component(daemon("mariadb", *in_root, "mariadbd", "--user=mysql", "--skip-networking",
                             f"--socket={self.mariadb_socket}", "--innodb-flush-log-at-trx-commit=0"),
                      self._mariadb_ok, after=self._bootstrap_db, slurm_side=True),
            Component(daemon("slurmdbd", *in_root, "slurmdbd", "-D"), self._slurmdbd_ok,
                      after=self._bootstrap_accounting, slurm_side=True),
            Component(daemon("slurmctld", *in_root, "slurmctld", "-D", "-i"), self._slurmctld_ok,
                      slurm_side=True),
        ]
        comps += [
            Component(daemon("slurmrestd", "chroot", "--userspec=slurmrestd:slurmrestd", root,
                             "env", "SLURM_JWT=daemon", "slurmrestd", "-a", "rest_auth/jwt", "-s", "openapi/slurmctld",
                             f"127.0.0.1:{slurmconf.SLURMRESTD_PORT}"),
                      self._slurmrestd_ok, slurm_side=True),
        ]
        # An etcd that starts on a new store (the default release's chroot, whose packages changed, is new) while
        # the rest of Kubernetes runs: the apiserver's watch cache would wait forever for the old revisions ("Too
        # large resource version") and the kubelets would heartbeat Nodes that are gone, so everything after etcd
        # starts again after it, stopped last first. Not when etcd restarts on its own store (a fault, a crash):
        # the others reconnect (and a restart of everything would take the real Node's containers down for nothing).
        after_etcd: list[Daemon] = []
        etcd_store = self.kube_root / "var/lib/sunk-etcd/member"

        def stop_after_etcd() -> None:
            if not etcd_store.exists():
                for later in reversed(after_etcd):
                    later.stop()

        comps += [
            Component(daemon("etcd", "chroot", str(self.kube_root), "etcd", "--data-dir=/var/lib/sunk-etcd",
                             "--name=sunk-dev",
                             f"--listen-client-urls=http://127.0.0.1:{kubeconf.ETCD_PORT}",
                             f"--advertise-client-urls=http://127.0.0.1:{kubeconf.ETCD_PORT}",
                             "--listen-peer-urls=http://127.0.0.1:2380", "--unsafe-no-fsync",
                             "--quota-backend-bytes=4294967296", "--log-level=warn"),
                      self._etcd_ok, prepare=stop_after_etcd, after=self._age_etcd),
            Component(daemon("kube-apiserver", *kubeconf.apiserver_argv(bin_dir / "kube-apiserver", self.kube_dir)),
                      self._apiserver_ok, timeout=120),
            Component(daemon("kube-controller-manager",
                             *kubeconf.controller_manager_argv(bin_dir / "kube-controller-manager", self.kube_dir)),
                      self._controller_manager_ok, timeout=120),
            Component(daemon("kubelet", sys.executable, "-m", "sunk_dev.kubelet", "--kubeconfig", str(self.kubeconfig),
                             "--nodes", ",".join(self.k8s_node_for(n) for n in self.layout.node_names),
                             "--chroot", str(self.root), "--log-dir", str(self.run_dir / "logs"),
                             "--state-dir", str(self.run_dir / "standin-kubelet"), "--keep-slurmds",
                             env={**os.environ, "PYTHONPATH": os.pathsep.join((str(CHECKOUT), str(CHECKOUT / "dev")))}),
                      self._kubelet_ok, slurm_side=True),
        ]
        comps.append(self._operator_component())
        if self.real_node:
            paths = self.real_paths
            kubelet = daemon("kubelet-real", *realnode.kubelet_argv(bin_dir / "kubelet", paths, self.kubeconfig))
            comps += [
                Component(daemon("coredns", *dns.argv(dns.COREDNS.binary(self.home), self.run_dir / "Corefile")),
                          self._coredns_ok, prepare=self._prepare_coredns, after=self._publish_coredns),
                Component(daemon("kube-proxy", *realnode.kube_proxy_argv(bin_dir / "kube-proxy", self.kubeconfig)),
                          self._kube_proxy_ok),
                Component(daemon("containerd", *realnode.containerd_argv(paths)),
                          functools.partial(realnode.containerd_ok, paths),
                          after=functools.partial(self._import_images, paths)),
                Component(kubelet, functools.partial(self._real_kubelet_ok, paths, kubelet), timeout=120),
                Component(daemon("dra-driver", *realnode.dra_driver_argv(bin_dir / "dra-test-driver", paths,
                                                                          self.kubeconfig)),
                          self._dra_driver_ok, prepare=functools.partial(realnode.prepare_dra_driver, paths),
                          after=self._publish_device_class, after_every_up=True, timeout=60),
            ]
        out = comps + self._sunk_components() if self.with_sunk else comps
        after_etcd.extend(c.daemon for c in out[[c.daemon.name for c in out].index("etcd") + 1:])
        return out

    def _write_corefile(self) -> bool:
        """Write CoreDNS's configuration (answering the Pods of every real Node); whether it changed."""
        path, wanted = self.run_dir / "Corefile", dns.corefile(realnode.node_ip(), self.kubeconfig,
                                                               " ".join(realnode.POD_SUBNETS))
        if path.exists() and path.read_text() == wanted:
            return False
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(wanted)
        return True

    def _prepare_coredns(self) -> None:
        self._write_corefile()

    @staticmethod
    def _coredns_ok() -> bool:
        try:
            return requests.get(f"http://127.0.0.1:{dns.READY_PORT}/ready", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def _publish_coredns(self) -> None:
        """The ``kube-dns`` Service and its EndpointSlice (``dns.kube_dns_objects``), made again if the host's
        address changed."""
        for path, obj in dns.kube_dns_objects(realnode.node_ip()):
            named = f"{path}/{obj['metadata']['name']}"
            got = self.kube_request("GET", named)
            if got.status_code == 200 and obj.get("endpoints", got.json().get("endpoints")) == got.json().get(
                    "endpoints"):
                continue
            if got.status_code == 200:
                self._expect(self.kube_request("DELETE", named), 200, 404)
            self._expect(self.kube_request("POST", path, obj), 201, 409)

    def _import_images(self, paths: realnode.Paths) -> None:
        if imported := realnode.ensure_images(paths):
            self._say(f"  images           imported into containerd: {', '.join(imported)}")

    def _real_kubelet_ok(self, paths: realnode.Paths, daemon: Daemon) -> bool:
        """Serving, and its Node Ready by a status this very kubelet posted: after ``down`` the Node keeps the last
        one's Ready condition for the controller-manager's grace period, and a kubelet that then exits at once
        (containerd's CRI not initialized yet) would pass for started (seen once in CI)."""
        started = daemon.started_at()
        if started is None:
            return False
        try:
            healthz = requests.get(f"http://127.0.0.1:{paths.healthz_port}/healthz", timeout=2)
        except requests.RequestException:
            return False
        node = self.kube_request("GET", f"/api/v1/nodes/{paths.node_name}")
        if healthz.status_code != 200 or node.status_code != 200:
            return False
        return any(c["type"] == "Ready" and c["status"] == "True" and _posted_since(c.get("lastHeartbeatTime"), started)
                   for c in node.json().get("status", {}).get("conditions", []))

    @staticmethod
    def _kube_proxy_ok() -> bool:
        """Its rules are synced (``/livez``). Not ``/healthz``, which also wants the real Node's object: on a fresh
        machine that Node registers only once the real kubelet, started after kube-proxy, runs."""
        try:
            return requests.get(f"http://127.0.0.1:{realnode.KUBE_PROXY_HEALTHZ_PORT}/livez", timeout=2).ok
        except requests.RequestException:
            return False

    def _second_node_daemons(self) -> tuple[realnode.Paths, Daemon, Daemon]:
        paths = realnode.Paths(self.home, node=2)
        kubelet = kubebuild.kube_bin_dir(self.home) / "kubelet"
        return (paths, Daemon("containerd-2", tuple(realnode.containerd_argv(paths)), self.run_dir),
                Daemon("kubelet-real-2", tuple(realnode.kubelet_argv(kubelet, paths, self.kubeconfig)), self.run_dir))

    @contextlib.contextmanager
    def second_real_node(self, built: Iterable[images.Built] = ()) -> Iterator[realnode.Paths]:
        """A second real kubelet Node (``realnode2``: its own containerd, ports, bridge, Pod subnet, cgroup root and
        Pod logs) beside ``up``'s, for as long as the block runs, with ``built`` imported: for what needs Pods
        running on two Nodes (a Slurm job of two slurmd Pods). Not part of ``up``: every other test sees one
        real Node. On the way out its Pods and the Node object go; ``down`` stops it if a test could not."""
        try:
            yield self.start_second_real_node(built)
        finally:
            self.stop_second_real_node()

    def start_second_real_node(self, built: Iterable[images.Built] = ()) -> realnode.Paths:
        """``realnode2`` started (or found running) with ``built`` imported, until ``down`` or
        ``stop_second_real_node``."""
        if not self.real_node:
            raise RuntimeError("a second real Node needs the first (SUNK_DEV_REAL_NODE=0 is set)")
        paths, containerd, kubelet = self._second_node_daemons()
        realnode.ensure_cgroup_root(paths)
        realnode.write_config(paths, cluster_dns=realnode.node_ip(),
                              client_ca=kubeconf.kubelet_client_ca(self.kube_dir))
        if containerd.pid() is None:
            containerd.start()
        wait_until(functools.partial(realnode.containerd_ok, paths), 60, what="containerd-2 to be healthy")
        realnode.ensure_images(paths)
        images.import_missing(functools.partial(realnode.ctr, paths), built)
        if kubelet.pid() is None:
            kubelet.start()
        wait_until(functools.partial(self._real_kubelet_ok, paths, kubelet), 120, what=f"{paths.node_name} to be Ready")
        return paths

    def import_images(self, built: Iterable[images.Built]) -> list[str]:
        """Into the first real Node's containerd, those not there yet (or built anew since)."""
        return images.import_missing(functools.partial(realnode.ctr, self.real_paths), list(built))

    def stop_second_real_node(self) -> list[str]:
        """The second real Node stopped: its Pods and its Node object deleted first (force: no kubelet will
        confirm)."""
        paths, containerd, kubelet = self._second_node_daemons()
        with contextlib.suppress(requests.RequestException):  # (an apiserver already stopped: nothing to delete)
            self._delete_pods_on(paths.node_name)
        stopped = [daemon.name for daemon in (kubelet,) if daemon.stop()]
        realnode.clean_up_containers(paths)  # (the kubelet is stopped by now)
        stopped += [daemon.name for daemon in (containerd,) if daemon.stop()]
        realnode.unmount_kubelet_root(paths)
        with contextlib.suppress(requests.RequestException):
            self._expect(self.kube_request("DELETE", f"/api/v1/nodes/{paths.node_name}"), 200, 404)
        return stopped

    def _delete_pods_on(self, node: str) -> None:
        """Every Pod bound to Node ``node``, deleted at once (grace 0: no kubelet serves it to confirm)."""
        pods = self.kube_request("GET", f"/api/v1/pods?fieldSelector=spec.nodeName%3D{node}")
        for pod in (pods.json().get("items") or () if pods.status_code == 200 else ()):
            meta = pod["metadata"]
            self.kube_request("DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                              {"gracePeriodSeconds": 0})

    def _dra_driver_ok(self) -> bool:
        """The DRA test driver published the real Node's devices (a ResourceSlice of its pool)."""
        got = self.kube_request("GET", f"/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3D"
                                       f"{realnode.NODE_NAME}")
        published = {(s["spec"].get("driver"), len(s["spec"].get("devices") or ()))
                     for s in (got.json().get("items") or () if got.status_code == 200 else ())}
        return (realnode.DRA_DRIVER, realnode.DRA_DEVICES) in published

    def _publish_device_class(self) -> None:
        """The DeviceClasses, made or brought to what this checkout says (a class's config changes with it)."""
        for device_class in realnode.device_classes():
            path = "/apis/resource.k8s.io/v1/deviceclasses"
            made = self.kube_request("POST", path, device_class)
            self._expect(made, 201, 409)
            if made.status_code == 409:
                self._expect(self.kube_request("PATCH", f"{path}/{device_class['metadata']['name']}",
                                               {"spec": device_class["spec"]}, "application/merge-patch+json"), 200)

    def _operator_component(self) -> Component:
        """sunk-operator for the NodeSets of the ``slurm`` namespace, from this checkout, leader-elected: part of
        the dev cluster itself (not of ``--sunk``), since the dev cluster's slurmd Pods are a NodeSet's to make.
        Its CRDs are applied before it starts; it is started again whenever it exits (``sunk_dev.supervise``: it
        exits on losing its Lease, which a test stopping the apiserver makes it do). Slurm-side: it talks to
        slurmctld, so a release switch stops it."""
        env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(CHECKOUT), str(CHECKOUT / "dev")))}
        operator = Daemon("sunk-operator", (
            sys.executable, "-m", "sunk_dev.supervise", "--",
            sys.executable, "-m", "sunk.commands.operator", f"--kubeconfig={self.kubeconfig}",
            f"--slurm-api-base=http://127.0.0.1:{slurmconf.SLURMRESTD_PORT}",
            f"--slurm-auth-token-file={self.jwt_file}", f"--watch-namespace={SLURM_NAMESPACE}",
            # (a Lease of its own: the chart's operator, which the NodeSet tests run, takes `sunk-operator` in
            # namespace slurm, the chart's default, whatever namespace it watches)
            "--leader-elect", f"--leader-election-id={OPERATOR_LEASE}",
            f"--metrics-bind-address=127.0.0.1:{OPERATOR_PROBES - 1}",
            f"--health-probe-bind-address=127.0.0.1:{OPERATOR_PROBES}",
        ), self.run_dir, env)
        return Component(operator, functools.partial(_ready, OPERATOR_PROBES), prepare=self._apply_crds,
                         slurm_side=True)

    def _apply_crds(self) -> None:
        api = kc.load_api_client(str(self.kubeconfig))
        try:
            pool.apply_crds(api)
        finally:
            api.close()

    def _sunk_components(self) -> list[Component]:
        """sunk's own daemons, from this checkout: what production runs as Deployments."""
        env = {**os.environ, "PYTHONPATH": str(CHECKOUT)}  # this checkout's product code first
        secret = self.run_dir / "scheduler-hook.secret"
        common = [f"--kubeconfig={self.kubeconfig}", f"--slurm-api-base=http://127.0.0.1:{slurmconf.SLURMRESTD_PORT}",
                  f"--slurm-auth-token-file={self.jwt_file}", "--leader-election-namespace=" + SLURM_NAMESPACE]
        scheduler = Daemon("sunk-scheduler", (
            sys.executable, "-m", "sunk.commands.scheduler", f"--scheduler-name={DEMO_SCHEDULER}", "--scope=cluster",
            *common, f"--slurm-kill-wait={slurmconf.KILL_WAIT}s",
            f"--hooks-api-bind-address=127.0.0.1:{PRODUCT_PORTS['scheduler']}",
            f"--hooks-url=http://127.0.0.1:{PRODUCT_PORTS['scheduler']}", f"--hook-secret-file={secret}",
            f"--identity-policy={self.identity_policy_file()}",
            f"--metrics-bind-address=127.0.0.1:{PRODUCT_PORTS['scheduler'] + 80}",
            f"--health-probe-bind-address=127.0.0.1:{PRODUCT_PORTS['scheduler'] + 81}",
        ), self.run_dir, env)
        token = self.run_dir / "syncer-hooks.token"
        syncer = Daemon("sunk-syncer", (
            sys.executable, "-m", "sunk.commands.syncer", *common, f"--watch-namespace={SLURM_NAMESPACE}",
            f"--hooks-api-bind-address=127.0.0.1:{PRODUCT_PORTS['syncer']}", f"--hooks-token-file={token}",
            f"--metrics-bind-address=127.0.0.1:{PRODUCT_PORTS['syncer'] + 80}",
            f"--health-probe-bind-address=127.0.0.1:{PRODUCT_PORTS['syncer'] + 81}",
        ), self.run_dir, env)
        return [
            Component(syncer, functools.partial(_ready, PRODUCT_PORTS["syncer"] + 81),
                      prepare=functools.partial(self._install_hooks, token)),
            Component(scheduler, functools.partial(_ready, PRODUCT_PORTS["scheduler"] + 81),
                      prepare=functools.partial(_ensure_secret, secret)),
        ]

    def _install_hooks(self, token: Path) -> None:
        """The prolog/epilog that lock Nodes through the Syncer, as the slurmd Pods mount them:
        each Slurm node gets its own token (one file per node, since all share this chroot)."""
        _ensure_secret(token)
        sunk_etc = self.root / "etc/sunk"
        write_node_tokens(sunk_etc / "hooks-tokens", token.read_bytes().strip(), self.slurmd_nodes)
        (sunk_etc / "hooks.token").unlink(missing_ok=True)  # (the shared token of older versions)
        (sunk_etc / "hooks.env").write_text(
            f"SUNK_SYNCER_URL=http://127.0.0.1:{PRODUCT_PORTS['syncer']}\n"
            "SUNK_HOOKS_TOKEN_FILE=/etc/sunk/hooks-tokens/%n\nSUNK_LOCK_TIMEOUT=60\n")
        for kind in ("prolog", "epilog"):
            target = self.root / f"etc/slurm/{kind}.d/50-sunk-lock"
            target.write_text(shipped_script(f"{kind}.sh"))
            target.chmod(0o755)

    def _remove_hooks(self, root: Optional[Path] = None) -> None:
        """Without a Syncer the prolog must not call one: every job would fail and drain its node."""
        root = self.root if root is None else root
        (root / "etc/sunk/hooks.env").unlink(missing_ok=True)
        for kind in ("prolog", "epilog"):
            (root / f"etc/slurm/{kind}.d/50-sunk-lock").unlink(missing_ok=True)

    def _ensure(self, component: Component) -> None:
        name = component.daemon.name
        if component.daemon.pid() is not None and component.daemon.runs_other_argv():
            self._say(f"  {name:<16} runs with other arguments: started again")
            component.daemon.stop()
        if component.daemon.pid() is not None:
            try:
                wait_until(component.healthy, component.timeout, what=f"{name} to be healthy")
            except TimeoutError:
                raise RuntimeError(f"{name} is running but unhealthy; log tail:\n{component.daemon.tail()}") from None
            if component.after and component.after_every_up:
                component.after()
            return
        if component.prepare:
            component.prepare()
        began = time.monotonic()
        component.daemon.start()
        restarts = 0

        def started() -> bool:
            """Healthy; a daemon that exited meanwhile is started again (3 times at most), as a supervisor's
            Restart=on-failure would: the kubelet exits when containerd's CRI answers "server is not
            initialized yet", a moment after containerd's own API does (seen after `down`, then `up`)."""
            nonlocal restarts
            if component.daemon.pid() is None:
                if restarts >= DAEMON_RESTARTS:
                    raise RuntimeError(f"{name} exited {restarts + 1} times")
                restarts += 1
                time.sleep(1)
                component.daemon.start()
                return False
            return bool(component.healthy())

        try:
            wait_until(started, component.timeout, what=f"{name} to be healthy")
        except TimeoutError as exc:
            raise RuntimeError(f"{exc}; log tail of {component.daemon.log_file}:\n{component.daemon.tail()}") from None
        if component.after:
            component.after()
        again = f", restarted {restarts} times" if restarts else ""
        self._say(f"  {name:<16} started ({time.monotonic() - began:.1f}s{again})")

    def _say(self, line: str) -> None:
        print(line, file=self.log, flush=True)

    def _phase(self, name: str, log: str = "setup.log") -> contextlib.AbstractContextManager[IO[str]]:
        """A set-up step whose tools talk a lot: their output in run/logs/``log`` (``sunk_dev.phases``)."""
        return phases.log_phase(name, self.run_dir / "logs" / log, self.log)

    def _build_go_tools(self) -> Path:
        """Kubernetes' binaries (their directory returned), helm and, for the real Node, CoreDNS: built when missing,
        their output in run/logs/setup-go.log (they run beside the steps that write setup.log)."""
        with self._phase("kubernetes", GO_LOG) as log:
            bin_dir = kubebuild.build(self.home, log=log)
        with self._phase("helm", GO_LOG) as log:
            kubebuild.build_helm(self.home, log=log)
        if self.real_node:
            with self._phase("coredns", GO_LOG) as log:
                kubebuild.build_go_command(self.home, dns.COREDNS, log=log)
        return bin_dir

    def _saved_data(self) -> dict:
        """What the last ``up`` recorded in run/layout.json ({} before any)."""
        try:
            data = json.loads((self.run_dir / "layout.json").read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _saved_layout(self) -> Optional[slurmconf.SlurmLayout]:
        data = self._saved_data()
        if "nodes" not in data:
            return None
        return slurmconf.SlurmLayout(nodes=data["nodes"], phantom_nodes=data.get("phantom_nodes", 0))

    def _saved_with_sunk(self) -> bool:
        return bool(self._saved_data().get("with_sunk", False))

    def _save_layout(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "layout.json").write_text(json.dumps(
            {"nodes": self.layout.nodes, "phantom_nodes": self.layout.phantom_nodes, "with_sunk": self.with_sunk,
             "slurm": self.release.name}))

    def _any_running(self) -> bool:
        pids = self.run_dir / "pids"
        return any(Daemon(p.stem, (), self.run_dir).pid() for p in pids.glob("*.pid")) if pids.exists() else False

    # -- chroot configuration -------------------------------------------------------------------
    def _configure_chroot(self) -> None:
        root = self.root
        for each in {root, self.kube_root}:  # (etcd's, when Slurm runs from another release's)
            chroot.mount_proc(each)
            (each / "etc/hosts").write_text("127.0.0.1 localhost\n::1 localhost\n")
            (each / "tmp").chmod(0o1777)
        # (slurm: Debian's packages make it with this uid; a release built from source has none)
        for user, uid in (("slurm", 64030), ("slurmrestd", 1999), ("kube", 1001)):
            if run(["chroot", str(root), "id", user], check=False).returncode != 0:
                # The group first, with the uid's number: useradd --user-group takes the next free gid for a uid
                # above GID_MAX (slurm's group was 1000, a gid the SlurmCluster's login users may take).
                if run(["chroot", str(root), "getent", "group", user], check=False).returncode != 0:
                    run(["chroot", str(root), "groupadd", "--gid", str(uid), user])
                run(["chroot", str(root), "useradd", "--uid", str(uid), "--gid", user, "--no-create-home",
                     "--shell", "/usr/sbin/nologin", user])
        if run(["chroot", str(root), "id", "-g", "slurm"]).stdout.strip() != "64030":  # (a chroot made before: 1000)
            taken = run(["chroot", str(root), "getent", "group", "64030"], check=False).stdout.strip()
            if taken:
                raise RuntimeError(f"{root}: slurm's group is not 64030, and 64030 is {taken!r}'s: remove the "
                                   f"chroot to have it made again")
            run(["chroot", str(root), "groupmod", "--gid", "64030", "slurm"])
        # Slurm reads the name "nobody" as uid 99 (SLURM_AUTH_NOBODY), never as Debian's 65534: the chart's default
        # Pod identity, uid 65534, has an association only under a second name for that uid.
        if run(["chroot", str(root), "id", POD_USER], check=False).returncode != 0:
            run(["chroot", str(root), "useradd", "--uid", "65534", "--non-unique", "--gid", "65534", "--no-create-home",
                 "--shell", "/usr/sbin/nologin", POD_USER])
        for i in range(max(slurmconf.NODE_GPUS, realnode.DRA_DEVICES)):  # (realnode1's are mounted in its Pod)
            dev = root / realnode.GPU_FILE.format(index=i).lstrip("/")
            if not dev.exists():
                os.mknod(dev, 0o666 | 0o020000, os.makedev(1, 3))
        socket_dir = self.mariadb_socket.lstrip("/").rsplit("/", 1)[0]
        for rel, owner in chroot_directories(self.slurmd_nodes, socket_dir).items():
            (root / rel).mkdir(parents=True, exist_ok=True)
            shutil.chown(root / rel, *self._ids(owner))
        etc = root / "etc/slurm"
        conf = slurmconf.slurm_conf(self.layout)
        # What slurmctld last read (an `up` that failed after writing slurm.conf never told it).
        applied = self._applied_conf.read_text() if self._applied_conf.exists() else None
        if (etc / "slurm.conf").exists() and (applied or (etc / "slurm.conf").read_text()) != conf:
            self._reconfigure = True
        (etc / "slurm.conf").write_text(conf)
        if self.release.pyslurm:  # (a client on the host: slurmbuild.client_conf)
            self.run_dir.mkdir(parents=True, exist_ok=True)
            slurm_user = slurmbuild.host_slurm_user(self._ids("slurm")[0], sys.stderr)
            self.client_conf.write_text(slurmbuild.client_conf(conf, root, slurm_user))
        (etc / "gres.conf").write_text(slurmconf.GRES_CONF)
        (etc / "cgroup.conf").write_text(slurmconf.CGROUP_CONF)
        for kind in ("prolog", "epilog"):
            path = etc / f"{kind}.sh"
            path.write_text(slurmconf.hook_runner(kind))
            path.chmod(0o755)
        jwt_key = etc / "jwt.key"
        if not jwt_key.exists():
            jwt_key.write_bytes(secrets.token_bytes(32))
        jwt_key.chmod(0o600)
        shutil.chown(jwt_key, *self._ids("slurm"))
        db_pass_file = self.run_dir / "db.pass"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if not db_pass_file.exists():
            db_pass_file.write_text(secrets.token_hex(12))
        dbd = etc / "slurmdbd.conf"
        dbd.write_text(slurmconf.slurmdbd_conf(db_pass_file.read_text().strip()))
        dbd.chmod(0o600)
        shutil.chown(dbd, *self._ids("slurm"))

    def _ids(self, user: str) -> tuple[int, int]:
        for line in (self.root / "etc/passwd").read_text().splitlines():
            fields = line.split(":")
            if fields[0] == user:
                return int(fields[2]), int(fields[3])
        raise KeyError(f"no user {user} in the chroot")

    def _write_jwt(self) -> None:
        import jwt

        key = (self.root / "etc/slurm/jwt.key").read_bytes()
        now = int(time.time())
        if self.jwt_file.exists():
            try:
                claims = jwt.decode(self.jwt_file.read_text().strip(), key, algorithms=["HS256"])
                if claims.get("exp", 0) > now + 7 * 86400:
                    return
            except jwt.PyJWTError:
                pass
        token = jwt.encode({"sun": "root", "iat": now, "exp": now + 365 * 86400}, key, algorithm="HS256")
        self.jwt_file.write_text(token + "\n")
        self.jwt_file.chmod(0o600)

    # -- health checks and bootstrap ----------------------------------------------------------------
    def _prepare_munge(self) -> None:
        key = self.root / "etc/munge/munge.key"
        if not key.exists():
            run(["chroot", str(self.root), "mungekey", "--create"])
        shutil.chown(key, *self._ids("munge"))
        key.chmod(0o400)

    def _munge_ok(self) -> bool:
        cred = self.slurm("munge", "-n", check=False, timeout=10)
        return cred.returncode == 0 and run(["chroot", str(self.root), "unmunge"], input=cred.stdout,
                                            check=False, timeout=10).returncode == 0

    def _mariadb_ok(self) -> bool:
        return self.slurm("mariadb-admin", f"--socket={self.mariadb_socket}", "ping", check=False,
                          timeout=10).returncode == 0

    def _bootstrap_db(self) -> None:
        password = (self.run_dir / "db.pass").read_text().strip()
        sql = (
            f"CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '{password}';"
            f"ALTER USER 'slurm'@'localhost' IDENTIFIED BY '{password}';"
            "CREATE DATABASE IF NOT EXISTS slurm_acct_db;"
            "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"
        )
        self.slurm("mariadb", f"--socket={self.mariadb_socket}", "-e", sql)

    def _slurmdbd_ok(self) -> bool:
        return self.slurm("sacctmgr", "-n", "-P", "list", "cluster", check=False, timeout=15).returncode == 0

    def _bootstrap_accounting(self) -> None:
        """Cluster, QOS and users: ``high`` preempts ``normal``; root and kube may use both. uid 65534 is the chart's
        default Slurm identity for Pods (identityPolicy): its operator gives it an association, as nobody where
        Slurm resolves that name to 65534 (24.11) and as POD_USER where it reads nobody as uid 99 (25.11; 26.05 takes
        POD_USER too)."""
        sacctmgr = ("sacctmgr", "-i")
        clusters = self.slurm("sacctmgr", "-n", "-P", "list", "cluster", "format=cluster").stdout.split()
        if slurmconf.CLUSTER_NAME not in clusters:
            self.slurm(*sacctmgr, "add", "cluster", slurmconf.CLUSTER_NAME)
        qos = self.slurm("sacctmgr", "-n", "-P", "list", "qos", "format=name").stdout.split()
        if "high" not in qos:
            self.slurm(*sacctmgr, "add", "qos", "high", "Priority=1000", "Preempt=normal", "PreemptMode=requeue")
        self.slurm(*sacctmgr, "modify", "qos", "normal", "set", "Priority=10", check=False)
        users = self.slurm("sacctmgr", "-n", "-P", "list", "user", "format=user").stdout.split()
        for user in ("kube", "nobody"):
            if user not in users:
                self.slurm(*sacctmgr, "add", "user", user, "account=root")
        if POD_USER not in users:  # (24.11's sacctmgr takes the name for uid 65534's first, nobody: "Nothing added")
            self.slurm(*sacctmgr, "add", "user", POD_USER, "account=root", check=False)
        self.slurm(*sacctmgr, "modify", "user", "where", "name=root,kube", "set", "qos=normal,high",
                   "defaultqos=normal", check=False)

    def _slurmctld_ok(self) -> bool:
        out = self.slurm("scontrol", "ping", check=False, timeout=15).stdout
        return "is UP" in out

    def _node_states(self) -> dict[str, str]:
        out = self.slurm("sinfo", "-h", "-N", "-o", "%N %T", check=False, timeout=15).stdout
        return dict(line.split(None, 1) for line in out.splitlines() if " " in line)

    def _slurmd_ok(self, node: str) -> bool:
        state = self._node_states().get(node, "")
        return bool(state) and not state.endswith("*") and not state.startswith(("down", "unknown", "future"))

    def _slurmrestd_ok(self) -> bool:
        rest = self.slurm_rest
        resp = requests.get(f"{rest.url}/slurm/v0.0.42/ping", timeout=5,
                            headers={"X-SLURM-USER-NAME": rest.user, "X-SLURM-USER-TOKEN": rest.token})
        return resp.status_code == 200 and not resp.json().get("errors")

    def _etcd_ok(self) -> bool:
        return requests.get(f"http://127.0.0.1:{kubeconf.ETCD_PORT}/health", timeout=5).json().get("health") == "true"

    def _age_etcd(self) -> None:
        """Give a new etcd some history before kube-apiserver first lists from it.

        Why: the apiserver's watch cache serves every resourceVersion after the revision it
        first listed at. On an empty etcd that is revision 1, so a watch from resourceVersion
        "1" is replayed from history instead of answered 410 Gone, as it is on any cluster
        that has lived a while. The dev cluster should behave like the lived-in kind.
        """
        url = f"http://127.0.0.1:{kubeconf.ETCD_PORT}/v3/kv"
        key = base64.b64encode(b"/sunk-dev/revision-floor").decode()
        revision = int(requests.post(f"{url}/range", json={"key": key}, timeout=5).json()["header"]["revision"])
        for i in range(revision, ETCD_REVISION_FLOOR):
            value = base64.b64encode(str(i).encode()).decode()
            requests.post(f"{url}/put", json={"key": key, "value": value}, timeout=5).raise_for_status()

    def _controller_manager_ok(self) -> bool:
        resp = requests.get(f"https://127.0.0.1:{kubeconf.CONTROLLER_MANAGER_PORT}/healthz", timeout=5,
                            verify=str(self.kube_dir / "ca.crt"))
        return resp.status_code == 200

    def _apiserver_ok(self) -> bool:
        resp = requests.get(f"https://127.0.0.1:{kubeconf.APISERVER_PORT}/readyz", timeout=5,
                            verify=str(self.kube_dir / "ca.crt"))
        return resp.status_code == 200

    def end_demo_workloads(self, root: Optional[Path] = None) -> None:
        """Delete the demo's Deployments and Pods while its scheduler still runs, so their jobs end
        (``root``: the chroot whose Slurm runs, when it is not this release's).

        Stopped first, the scheduler would leave the jobs holding their CPUs and GPU for
        ever, and cancelling them then would make each wait for its Pod until KillWait and
        drain its node. The Deployments go first (their ReplicaSets would make new Pods).
        """
        base = f"/api/v1/namespaces/{DEMO_NAMESPACE}/pods"
        deployments = f"/apis/apps/v1/namespaces/{DEMO_NAMESPACE}/deployments"
        try:
            for deployment in self.kube_request("GET", deployments).json().get("items") or []:
                self.kube_request("DELETE", f"{deployments}/{deployment['metadata']['name']}",
                                  {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Foreground"})
            wait_until(lambda: not self.kube_request("GET", deployments).json().get("items"), 60, interval=0.5,
                       what="the demo's Deployments to go")
            pods = self.kube_request("GET", base).json().get("items") or []
            for pod in pods:
                self.kube_request("DELETE", f"{base}/{pod['metadata']['name']}")
            if pods or self._demo_jobs(root):
                self._say(f"  demo Pods        deleted ({len(pods)}); waiting for their Slurm jobs to end")
                wait_until(lambda: not self._demo_jobs(root), 60, interval=0.5, what="the demo's Slurm jobs to end")
            # ... and always for the demo's Syncer to unlock their nodes: the garbage collector may have
            # deleted every Pod and the scheduler cancelled every job already, while the lock taints stay
            # until the Syncer sees the jobs gone (stopped now, it would leave them for its next start).
            if self._locked_nodes():
                wait_until(lambda: not self._locked_nodes(), 30, interval=0.5, what="the demo's nodes to unlock")
        except (requests.RequestException, ValueError, TimeoutError) as exc:
            self._say(f"  demo Pods        not cleaned up: {exc}")

    def _demo_left(self) -> bool:
        """The demo's Deployments, Pods not being deleted, or placeholder jobs exist."""
        base = f"/api/v1/namespaces/{DEMO_NAMESPACE}/pods"
        pods = self.kube_request("GET", base).json().get("items") or []
        deployments = self.kube_request("GET", f"/apis/apps/v1/namespaces/{DEMO_NAMESPACE}/deployments").json()
        return (bool(deployments.get("items")) or any(not p["metadata"].get("deletionTimestamp") for p in pods)
                or bool(self._demo_jobs()))

    def _end_left_demo(self) -> None:
        """End a demo whose daemons died before its workloads (a reboot, or a supervisor that killed
        `make demo`'s processes): its scheduler and Syncer run again just long enough to end them as
        `down` does. Left, the demo's jobs held node1 and realnode1 and its Pods were evicted by the
        tests' Syncers for the whole session. A failure here is said, not raised: the cluster is up."""
        try:
            if not self._demo_left():
                return
            self._say("  demo workloads   outlived the demo's daemons: starting them to end the workloads")
            components = self._sunk_components()
            try:
                for component in components:
                    self._ensure(component)
                self.end_demo_workloads()
            finally:
                for component in reversed(components):
                    component.daemon.stop()
                self._remove_hooks()
            if self._demo_left():
                self._say("  demo workloads   NOT ended: `kubectl -n demo get pods`, `sunk-dev slurm squeue`")
        except (requests.RequestException, ValueError, RuntimeError, subprocess.SubprocessError) as exc:
            self._say(f"  demo workloads   not ended: {exc}")

    def _locked_nodes(self) -> list[str]:
        """Every Node of a slurmd Pod (what the demo's Syncer locks) with a lock taint: the stand-in
        kubelet's and the real Node (the demo's web Pod and its job may land on realnode1, and its
        lock would then keep every Pod off the real Node)."""
        pods = self.kube_request("GET", f"/api/v1/namespaces/{SLURM_NAMESPACE}/pods?labelSelector={SLURMD_SELECTOR}")
        hosts = {p["spec"].get("nodeName") for p in pods.json()["items"]}  # (only what the demo's Syncer locks)
        nodes = self.kube_request("GET", "/api/v1/nodes").json()["items"]
        return [n["metadata"]["name"] for n in nodes if n["metadata"]["name"] in hosts
                and any(t.get("key") == names.LOCK_KEY for t in n.get("spec", {}).get("taints") or [])]

    def _demo_jobs(self, root: Optional[Path] = None) -> list[str]:
        out = run(["chroot", str(root or self.root), "squeue", "-h", "-o", "%j"], check=False, timeout=120)
        names = out.stdout.split()
        return [name for name in names if name.startswith(f"k8s:{DEMO_NAMESPACE}/")]

    def kube_request(self, method: str, path: str, body: Optional[dict | list] = None,
                     content_type: str = "application/json") -> requests.Response:
        """One admin call to the apiserver: for bootstrapping and the demo, which need no client library."""
        return requests.request(
            method, f"https://127.0.0.1:{kubeconf.APISERVER_PORT}{path}", json=body, timeout=10,
            verify=str(self.kube_dir / "ca.crt"),
            headers={"Authorization": f"Bearer {kubeconf.admin_token(self.kube_dir)}", "Content-Type": content_type},
        )

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """The dev cluster's kubectl, as its admin."""
        kubectl = str(kubebuild.kube_bin_dir(self.home) / "kubectl")
        return run([kubectl, f"--kubeconfig={self.kubeconfig}", *args], check=check)

    def _kubelet_ok(self) -> bool:
        resp = self.kube_request("GET", f"/api/v1/nodes?labelSelector={FAKE_KUBELET_SELECTOR}")
        if resp.status_code != 200:
            return False
        ready = {
            node["metadata"]["name"]
            for node in resp.json()["items"]
            if any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions", []))
        }
        return all(self.k8s_node_for(n) in ready for n in self.layout.node_names)

    def _seed_kubernetes(self) -> None:
        """The slurmd Pods, one per Slurm node, bound straight to their Node (as a NodeSet would)."""
        ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SLURM_NAMESPACE}}
        self._expect(self.kube_request("POST", "/api/v1/namespaces", ns), 201, 409)
        # The apiserver's ServiceAccount admission refuses Pods until kube-controller-manager has made
        # the namespace's default ServiceAccount.
        wait_until(lambda: self.kube_request(
            "GET", f"/api/v1/namespaces/{SLURM_NAMESPACE}/serviceaccounts/default").status_code == 200, 60,
            what=f"the default ServiceAccount of namespace {SLURM_NAMESPACE}")
        pods = f"/api/v1/namespaces/{SLURM_NAMESPACE}/pods"
        self._forget_renamed_nodes()
        self._apply_stand_in_nodesets()
        if self.real_node:
            self._apply_real_nodeset(pods)
        else:  # (a dev cluster that ran with the real Node: its NodeSet would make a Pod no kubelet runs)
            self._expect(self.kube_request("DELETE", f"{NODESETS}/{realnode.REAL_NODESET}"), 200, 404)
        self._prune_kubernetes()
        wait_until(self._stand_in_nodes_ok, 90, interval=0.5,
                   what="the stand-in nodes' slurmd Pods Running and their slurmds registered")
        if self.real_node:
            try:
                wait_until(self._real_slurmd_ok, 90, interval=0.5,
                           what=f"slurmd in its container on {realnode.NODE_NAME} to register {realnode.SLURM_NODE}")
            except TimeoutError as exc:
                raise TimeoutError(f"{exc}; {self._real_slurmd_pod_says()}") from None
            # what kube-proxy would do for Pods of the real Node (the bridge made if no Pod made it yet)
            realnode.install_service_routes(realnode.service_routes(kubeconf.APISERVER_PORT,
                                                                    slurmconf.SLURMRESTD_PORT))

    def _end_jobs(self, root: Path, timeout: float = 20) -> None:
        """Kill every job of the Slurm about to stop (its slurmstepds and scripts would outlive their
        slurmd and slurmctld, in a chroot nothing runs any more), and wait a little for them to end."""
        def ids() -> list[str]:
            out = run(["chroot", str(root), "squeue", "-h", "-o", "%i"], check=False, timeout=15)
            return out.stdout.split() if out.returncode == 0 else []

        with contextlib.suppress(subprocess.SubprocessError, OSError):
            if not (jobs := ids()):
                return
            self._say(f"  slurm jobs       {len(jobs)} killed before the switch")
            run(["chroot", str(root), "scancel", "--full", "--signal=KILL", *jobs], check=False, timeout=30)
            run(["chroot", str(root), "scancel", *jobs], check=False, timeout=30)
            with contextlib.suppress(TimeoutError):
                wait_until(lambda: not ids(), timeout, interval=0.5, what="the jobs to end")

    def _real_node_registered_otherwise(self, gres: str) -> bool:
        """Whether slurmctld holds realnode1 with other GRES than ``gres`` (``(null)`` for none: a record of an
        older Pod, kept in that release's state)."""
        shown = self.slurm("scontrol", "--future", "show", "node", realnode.SLURM_NODE, check=False)
        if shown.returncode != 0 or "Gres=" not in shown.stdout:
            return False  # (not there: it registers anew)
        return f"Gres={gres} " not in shown.stdout.replace("\n", " ")

    def _delete_pod_and_wait(self, path: str) -> None:
        self._expect(self.kube_request("DELETE", path), 200, 404)
        wait_until(lambda: self.kube_request("GET", path).status_code == 404, 60, what=f"{path} deleted")

    def _prune_kubernetes(self) -> None:
        """The slurmd Pods and Nodes of a larger layout (`up --nodes 8`, then `up --nodes 4`).

        No slurmd and no kubelet serve them any more, yet a Syncer or scheduler would still
        map Slurm nodes onto them. No kubelet finishes the Pods' deletion, so grace is 0.
        """
        wanted = set(self.slurmd_nodes)
        pods = self.kube_request("GET", f"/api/v1/namespaces/{SLURM_NAMESPACE}/pods?labelSelector={SLURMD_SELECTOR}")
        self._expect(pods, 200)
        for pod in pods.json()["items"]:
            if (name := pod["metadata"]["name"]) not in wanted:
                self._say(f"  slurmd Pod {name}: not in this layout, deleted")
                self._expect(self.kube_request("DELETE", f"/api/v1/namespaces/{SLURM_NAMESPACE}/pods/{name}",
                                               {"gracePeriodSeconds": 0}), 200, 404)
        nodes = self.kube_request("GET", f"/api/v1/nodes?labelSelector={FAKE_KUBELET_SELECTOR}")
        self._expect(nodes, 200)
        for node in nodes.json()["items"]:
            if (name := node["metadata"]["name"]) not in {self.k8s_node_for(n) for n in self.layout.node_names}:
                self._say(f"  Node {name}: not in this layout, deleted")
                self._expect(self.kube_request("DELETE", f"/api/v1/nodes/{name}"), 200, 404)

    def _apply_real_nodeset(self, pods: str) -> None:
        """realnode1's NodeSet, applied: its template is this release's slurmd image (or busybox without images).
        A hand-made Pod of an older dev cluster goes first (the operator takes no name another owner's Pod holds),
        and so does a Slurm record with other GRES than the NodeSet registers (slurmctld keeps a dynamic node's
        first registration, its GRES too, across its restarts): the NodeSet is scaled to none, the node deleted,
        and the NodeSet applied again makes the Pod anew."""
        nodeset = realnode.nodeset(self.root, SLURM_NAMESPACE, self.slurmd_image if self._built_images else None)
        path = f"{pods}/{realnode.SLURM_NODE}"
        resp = self.kube_request("GET", path)
        pod = resp.json() if resp.status_code == 200 else None
        if pod is not None and names.LABEL_NODESET not in (pod["metadata"].get("labels") or {}):
            self._say(f"  slurmd Pod {realnode.SLURM_NODE}: hand-made, deleted for its NodeSet")
            self._delete_pod_and_wait(path)
            pod = None
        if self._real_node_registered_otherwise(nodeset["spec"]["slurm"].get("gres", "(null)")):
            self._scale_real_nodeset_to_none()
            self.slurm("scontrol", "delete", f"nodename={realnode.SLURM_NODE}", check=False)
        elif pod is not None and nodeset_pod.pod_hash(pod) != nodeset_pod.template_hash(read_spec(nodeset).spec):
            # (another image or command: replaced now rather than by the operator's rolling update, which would
            # let `up` return with realnode1 drained for its replacement)
            self._say(f"  slurmd Pod {realnode.SLURM_NODE}: another template now, replaced")
            self._scale_real_nodeset_to_none()
        self._apply_spec(NODESETS, nodeset)  # (the spec replaced: replicas, if a switch set them, go)

    def _scale_real_nodeset_to_none(self) -> None:
        """realnode1's NodeSet scaled to no Pod, and its Pod deleted and gone, whether or not an operator runs (one
        that starts later makes none until the NodeSet is applied again)."""
        path = f"{NODESETS}/{realnode.REAL_NODESET}"
        resp = self.kube_request("PATCH", path, {"spec": {"replicas": 0}}, content_type="application/merge-patch+json")
        self._expect(resp, 200, 404)
        pod = f"/api/v1/namespaces/{SLURM_NAMESPACE}/pods/{realnode.SLURM_NODE}"
        if self.kube_request("GET", pod).status_code == 200:
            self._delete_pod_and_wait(pod)

    def _stop_static_slurmds(self) -> None:
        """The slurmds of a dev cluster made before its stand-in nodes came from NodeSets (static nodes of
        slurm.conf, each a daemon of its own): stopped, since the stand-in kubelet runs a slurmd for each Pod now."""
        for pid_file in sorted((self.run_dir / "pids").glob("slurmd-*.pid")):  # (a larger layout's too)
            if Daemon(pid_file.stem, (), self.run_dir).stop():
                self._say(f"  {pid_file.stem:<16} stopped (its node comes from a NodeSet now)")

    def _apply_stand_in_nodesets(self) -> None:
        """The NodeSets of the stand-in nodes, applied (the hand-made slurmd Pods of an older dev cluster deleted
        first: the operator takes no name another owner's Pod holds), and a NodeSet of a larger layout deleted."""
        pods = f"/api/v1/namespaces/{SLURM_NAMESPACE}/pods"
        for node in self.layout.node_names:
            resp = self.kube_request("GET", f"{pods}/{node}")
            if resp.status_code == 200 and names.LABEL_NODESET not in (resp.json()["metadata"].get("labels") or {}):
                self._say(f"  slurmd Pod {node}: hand-made, deleted for its NodeSet")
                self._expect(self.kube_request("DELETE", f"{pods}/{node}", {"gracePeriodSeconds": 0}), 200, 404)
                wait_until(lambda node=node: self.kube_request("GET", f"{pods}/{node}").status_code == 404, 30,
                           what=f"{pods}/{node} deleted")
        wanted = stand_in_nodesets(self.layout)
        self._apply_crds()  # (each `up`: a checkout may change them while the operator runs on)
        for nodeset in wanted:
            self._apply_spec(NODESETS, nodeset)
        have = self.kube_request("GET", NODESETS)
        self._expect(have, 200)
        for item in have.json()["items"]:
            name = item["metadata"]["name"]
            if name in STAND_IN_NODESETS and name not in {n["metadata"]["name"] for n in wanted}:
                self._expect(self.kube_request("DELETE", f"{NODESETS}/{name}"), 200, 404)

    def _apply_spec(self, collection: str, doc: dict) -> None:
        """``doc`` created, or the spec of the object of its name replaced when it differs: its metadata kept (a
        whole replace would drop the finalizer the operator put there)."""
        path = f"{collection}/{doc['metadata']['name']}"
        current = self.kube_request("GET", path)
        if current.status_code == 404:
            self._expect(self.kube_request("POST", collection, doc), 201)
            return
        self._expect(current, 200)
        if current.json().get("spec") != doc["spec"]:  # (a JSON patch: no resourceVersion the operator's writes race)
            self._expect(self.kube_request("PATCH", path, [{"op": "replace", "path": "/spec", "value": doc["spec"]}],
                                           content_type="application/json-patch+json"), 200)

    def _stand_in_nodes_ok(self) -> bool:
        return self._slurmd_pods_ready() and all(self._slurmd_ok(node) for node in self.layout.node_names)

    def _forget_renamed_nodes(self) -> None:
        """The Nodes of a dev cluster made before its Nodes took their Slurm nodes' names (``worker-N``, ``real-N``),
        with every Pod bound to them (no kubelet serves them any more: the Pods could never finish)."""
        for selector, names_now in ((FAKE_KUBELET_SELECTOR, set(self.layout.node_names)),
                                    (f"{realnode.NODE_LABEL}%3Dtrue",
                                     {realnode.Paths(self.home, n).node_name
                                      for n in range(1, realnode.MAX_REAL_NODES + 1)})):
            nodes = self.kube_request("GET", f"/api/v1/nodes?labelSelector={selector}")
            self._expect(nodes, 200)
            for node in nodes.json()["items"]:
                name = node["metadata"]["name"]
                if name.startswith(("worker-", "real-")) and name not in names_now:
                    self._say(f"  Node {name}: an older name, deleted with its Pods")
                    self._delete_pods_on(name)
                    self._expect(self.kube_request("DELETE", f"/api/v1/nodes/{name}"), 200, 404)

    def _slurmd_pods_ready(self) -> bool:
        resp = self.kube_request("GET", f"/api/v1/namespaces/{SLURM_NAMESPACE}/pods?labelSelector={SLURMD_SELECTOR}")
        phases = {p["metadata"]["name"]: p.get("status", {}).get("phase") for p in resp.json()["items"]}
        return all(phases.get(n) == "Running" for n in self.layout.node_names)

    def _real_slurmd_ok(self) -> bool:
        """Registered and answering: its container runs and is Ready, and Slurm shows the dynamic node, not as
        NOT_RESPONDING. (Slurm alone is not enough: slurmctld keeps a dynamic node's record from an earlier
        registration, and shows it idle for a while after its slurmd is gone: a slurmd image whose slurmd could
        not even start once passed this wait.)"""
        resp = self.kube_request("GET", f"/api/v1/namespaces/{SLURM_NAMESPACE}/pods/{realnode.SLURM_NODE}")
        statuses = (resp.json().get("status") or {}).get("containerStatuses") or [] if resp.status_code == 200 else []
        if not statuses or not all(s.get("ready") and "running" in (s.get("state") or {}) for s in statuses):
            return False
        out = self.slurm("sinfo", "-h", "-n", realnode.SLURM_NODE, "-o", "%T|%E", check=False).stdout.splitlines()
        rows = [line.split("|", 1) for line in out if "|" in line]
        # (drained by the operator for a Pod it replaces: it lifts that drain once the new Pod is Ready; a drain of
        # anyone else's stays, and `up` does not wait for it)
        replacing = nodestate.pending_deletion_prefix(f"{SLURM_NAMESPACE}/{realnode.SLURM_NODE}")
        return bool(rows) and not any(state.endswith("*") or "down" in state
                                      or ("drain" in state and reason.startswith(replacing)) for state, reason in rows)

    def _real_slurmd_pod_says(self) -> str:
        """Why the real Node's slurmd is not up, as its Pod and the kubelet's Warning Events tell it."""
        base = f"/api/v1/namespaces/{SLURM_NAMESPACE}"
        pod = self.kube_request("GET", f"{base}/pods/{realnode.SLURM_NODE}").json()
        states = [s.get("state") for s in (pod.get("status") or {}).get("containerStatuses") or []]
        events = self.kube_request("GET", f"{base}/events?fieldSelector=involvedObject.name%3D{realnode.SLURM_NODE}"
                                          f",type%3DWarning").json().get("items") or []
        said = [f"{e.get('reason')}: {e.get('message')}" for e in events[-3:]]
        return f"Pod {realnode.SLURM_NODE}: containers {states}, Warning Events {said}"

    @staticmethod
    def _expect(resp: requests.Response, *codes: int) -> None:
        if resp.status_code not in codes:
            raise RuntimeError(f"{resp.request.method} {resp.url}: {resp.status_code} {resp.text[:500]}")


def _posted_since(stamp: Optional[str], started: float) -> bool:
    """Whether an RFC 3339 time (whole seconds) is no earlier than ``started``'s second."""
    if not stamp:
        return False
    try:
        posted = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    except ValueError:
        return False
    return posted.timestamp() >= int(started)


def _ready(probe_port: int) -> bool:
    return requests.get(f"http://127.0.0.1:{probe_port}/readyz", timeout=2).status_code == 200


def write_node_tokens(directory: Path, secret: bytes, nodes: Iterable[str]) -> None:
    """One hook token file per Slurm node (root only), as each slurmd Pod would mount its own."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    for node in nodes:
        path = directory / node
        path.write_text(node_token(secret, node) + "\n")
        path.chmod(0o600)


def _ensure_secret(path: Path) -> None:
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_hex(32))
        path.chmod(0o600)


NODESETS = f"/apis/sunk.coreweave.com/v1alpha1/namespaces/{SLURM_NAMESPACE}/nodesets"
STAND_IN_NODESETS = slurmconf.GPU_TYPES  # one NodeSet per GPU type, named after it


def stand_in_nodesets(layout: slurmconf.SlurmLayout) -> list[dict]:
    """The NodeSets that make the stand-in nodes' slurmd Pods: one per GPU type, each taking its nodes' Nodes by
    name, naming each Slurm node after its Node (``NodeName``), registering its GPUs and the feature that puts it
    in the batch partition (slurmconf). The stand-in kubelet runs each Pod's slurmd (``sunk_dev.standin_slurmd``):
    the image is never pulled."""
    nodes_of: dict[str, list[str]] = {}
    for node in layout.node_names:
        nodes_of.setdefault(slurmconf.gpu_type(node), []).append(node)
    return [{
        "apiVersion": "sunk.coreweave.com/v1alpha1", "kind": "NodeSet",
        "metadata": {"name": gpu, "namespace": SLURM_NAMESPACE},
        "spec": {
            "nodeSelector": {kubelet.NODE_LABEL: "true"},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": nodes}]}]}}},
            "naming": {"scheme": "NodeName"},
            "slurm": {"features": [slurmconf.NODE_FEATURES], "gres": slurmconf.gres(nodes[0]),
                      "partitions": [slurmconf.PARTITION]},
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": "slurmd", "app.kubernetes.io/component": "compute"}},
                "spec": {"terminationGracePeriodSeconds": 5, "containers": [{
                    "name": "slurmd", "image": "sunk-dev/slurmd:stand-in",
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
            },
        },
    } for gpu, nodes in nodes_of.items() if gpu in STAND_IN_NODESETS]


def slurmd_pod(slurm_node: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": slurm_node,
            "namespace": SLURM_NAMESPACE,
            "labels": {"app.kubernetes.io/name": "slurmd", "app.kubernetes.io/component": "compute"},
        },
        "spec": {
            "nodeName": DevCluster.k8s_node_for(slurm_node),
            "hostname": slurm_node,
            "terminationGracePeriodSeconds": 5,
            "tolerations": [{"key": "sunk.coreweave.com/lock", "operator": "Exists"}],
            "containers": [{
                "name": "slurmd",
                "image": "sunk-dev/slurmd:24.11",
                "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
            }],
        },
    }

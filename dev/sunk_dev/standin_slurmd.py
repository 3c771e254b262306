"""Real slurmd processes for the NodeSet Pods that the stand-in kubelet serves.

A NodeSet's slurmd Pod on a real Node runs ``slurmd -Z`` in its container. A stand-in Node
has no containers, so the stand-in kubelet (``sunk_dev.kubelet``) runs that slurmd itself, as a
host process in the dev cluster's chroot: a dynamic Slurm node that registers when its Pod
starts and stops answering when its Pod is deleted, as on a real Node. That is what the
operator's flows (label a Node, scale in, roll the template) and benchmarks/nodeset.py need,
on hundreds of Nodes where containers would not fit on this machine.

The Pod's own command is not run (it names an image's paths); what slurmd needs comes from
the ``slurmd`` container's environment, which the operator writes (docs/nodeset.md):
``SUNK_SLURM_NODE_NAME``, ``SUNK_SLURMD_CONF`` and ``SUNK_GRES_CONF``. A node with gres.conf lines
of its own (GPUs from the Node: ``File=/dev/nvidia<minor>``) reads a configuration directory of its
own, ``/run/sunk-standin/<node>`` in the chroot (``slurmd -f``): links to every file of ``/etc/slurm``
but gres.conf, which is the dev cluster's with the node's lines added, as a real Pod's start script
would write it; the device files it names are made as aliases of /dev/null (stand-in Nodes have no
GPUs; the dev cluster constrains no devices, so a job's /dev/null is never taken away with them).
Each slurmd gets a port of its own
(``--conf Port=``), since every stand-in slurmd shares the host's address; a Slurm node keeps its
port for as long as the kubelet runs (slurmctld keeps a dynamic node's first port when it
registers again, and would find a new Pod's slurmd not responding). A slurmd that
exits is started again a second later (``restartPolicy: Always``). Stopping a Pod's slurmd
also kills its jobs' processes (slurmstepd and what it runs), as removing a container does:
left behind, they would run on with no slurmd to report them, and their Slurm node could not
be deleted.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from attrs import frozen

from sunk.model import names

from .procs import chroot_env, start_time

log = logging.getLogger("sunk_dev.kubelet.slurmd")

SLURMD_CONTAINER = "slurmd"
ENV_NODE_NAME = "SUNK_SLURM_NODE_NAME"
ENV_CONF = "SUNK_SLURMD_CONF"
ENV_GRES_CONF = "SUNK_GRES_CONF"
RESTART_DELAY = 1.0
POLL = 0.2  # how often a paused node and an adopted process are looked at
SLURM_ETC = "/etc/slurm"
CONF_DIRS = "/run/sunk-standin"
# Files beside slurm.conf that tests write while slurmds run: linked even before they exist.
LATE_FILES = ("topology.conf", "topology.yaml")
NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
GPU_FILES = re.compile(r"File=/dev/nvidia(?:(\d{1,3})|\[(\d{1,3})-(\d{1,3})\])(?=\s|$)")
DEV_NULL = (1, 3)


@frozen
class SlurmdLaunch:
    """What one stand-in slurmd runs as: a dynamic Slurm node ``node`` with ``conf`` (and ``gres_conf``, its
    gres.conf lines, read from a configuration directory of its own)."""

    node: str
    conf: str
    gres_conf: str = ""

    @property
    def conf_dir(self) -> str | None:
        """The node's own configuration directory in the chroot, or None: it needs none (or its name is no path)."""
        return f"{CONF_DIRS}/{self.node}" if self.gres_conf and NODE_NAME.fullmatch(self.node) else None

    def argv(self, chroot: Path, port: int, cpus: int, memory_mb: int) -> list[str]:
        conf = " ".join(part for part in (self.conf, f"CPUs={cpus}", f"RealMemory={memory_mb}", f"Port={port}")
                        if part)
        own = ["-f", f"{self.conf_dir}/slurm.conf"] if self.conf_dir else []
        return ["chroot", str(chroot), "/usr/sbin/slurmd", *own, "-D", "-Z", "-N", self.node, "--conf", conf]


def gpu_device_files(gres_conf: str) -> list[str]:
    """The NVIDIA device files gres.conf lines name (``File=/dev/nvidia3``, ``File=/dev/nvidia[0-7]``)."""
    files: list[str] = []
    for one, first, last in GPU_FILES.findall(gres_conf):
        minors = [int(one)] if one else list(range(int(first), int(last) + 1))
        files += [f"/dev/nvidia{m}" for m in minors if f"/dev/nvidia{m}" not in files]
    return files


def prepare_conf_dir(chroot: Path, launch: SlurmdLaunch) -> None:
    """The node's configuration directory (module docstring) and its GPUs' device files, if it needs them."""
    if launch.conf_dir is None:
        return
    etc, own = chroot / SLURM_ETC.lstrip("/"), chroot / launch.conf_dir.lstrip("/")
    own.mkdir(parents=True, exist_ok=True)
    for name in sorted({p.name for p in etc.iterdir()} | set(LATE_FILES)):
        if name == "gres.conf":
            continue
        link = own / name
        if not link.is_symlink():
            link.symlink_to(f"{SLURM_ETC}/{name}")  # resolved in the chroot, where slurmd runs
    base = (etc / "gres.conf").read_text() if (etc / "gres.conf").exists() else ""
    (own / "gres.conf").write_text(base + ("" if not base or base.endswith("\n") else "\n") + launch.gres_conf)
    for dev in gpu_device_files(launch.gres_conf):
        path = chroot / dev.lstrip("/")
        if not path.exists():
            os.mknod(path, 0o666 | 0o020000, os.makedev(*DEV_NULL))


def launch_of(pod: Mapping[str, Any]) -> SlurmdLaunch | None:
    """The slurmd a NodeSet's Pod asks for, or None for any other Pod (nothing to run)."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if names.LABEL_NODESET not in labels:
        return None
    for container in (pod.get("spec") or {}).get("containers") or []:
        if container.get("name") != SLURMD_CONTAINER:
            continue
        env = {e.get("name"): e.get("value") for e in container.get("env") or [] if isinstance(e, Mapping)}
        node = env.get(ENV_NODE_NAME)
        if node:
            return SlurmdLaunch(node=str(node), conf=str(env.get(ENV_CONF) or ""),
                                gres_conf=str(env.get(ENV_GRES_CONF) or ""))
    return None


def job_sessions(node: str, proc: Path = Path("/proc")) -> set[int]:
    """The sessions of the job processes of Slurm node ``node`` (slurmd sets ``SLURMD_NODENAME`` in every
    job's environment; each slurmstepd runs its job in a session of its own, slurmstepd included)."""
    needle = f"SLURMD_NODENAME={node}".encode()
    found: set[int] = set()
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.add(os.getsid(int(entry.name)))
        except (OSError, ProcessLookupError):
            continue  # gone meanwhile, or not ours to read
    return found


def kill_sessions(sessions: set[int], proc: Path = Path("/proc")) -> None:
    """SIGKILL every process of ``sessions``, but never of session 0 or 1 or this process's own (a
    process slurmd runs itself, a prolog, shares slurmd's session: it is started in one of its own,
    so that is never this kubelet's or its caller's)."""
    sessions = sessions - {0, 1, os.getsid(0)}
    if not sessions:
        return
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                if os.getsid(int(entry.name)) in sessions:
                    os.kill(int(entry.name), signal.SIGKILL)
            except (OSError, ProcessLookupError):
                continue


@frozen
class SlurmdRecord:
    """A running stand-in slurmd as its kubelet writes it down (``KubeletState``): the Pod it serves, its Slurm
    node, and the process (pid and start time, so a reused pid is never taken for it)."""

    uid: str
    node: str
    pid: int
    start: str

    def alive(self) -> bool:
        return start_time(self.pid) == self.start


class KubeletState:
    """What a stand-in kubelet keeps across its restarts, in a directory of its own: each Slurm node's port (a
    dynamic node keeps its first port in slurmctld's records), a record of each slurmd it runs, so that a
    kubelet started again takes over the slurmds its predecessor left running (a real kubelet's containers
    outlive it), and the Slurm nodes whose slurmd a test paused (``paused/<node>``: stopped, not started again
    until the file goes)."""

    def __init__(self, directory: Path):
        self.directory = directory
        self._records = directory / "slurmds"
        self._paused = directory / "paused"
        self._ports = directory / "ports.json"
        self._records.mkdir(parents=True, exist_ok=True)
        self._paused.mkdir(parents=True, exist_ok=True)

    def ports(self) -> dict[str, int]:
        try:
            data = json.loads(self._ports.read_text())
        except (OSError, ValueError):
            return {}
        return {str(node): int(port) for node, port in data.items()} if isinstance(data, dict) else {}

    def save_ports(self, ports: Mapping[str, int]) -> None:
        tmp = self._ports.with_suffix(".tmp")
        tmp.write_text(json.dumps(dict(sorted(ports.items()))))
        tmp.replace(self._ports)

    def records(self) -> list[SlurmdRecord]:
        found = []
        for path in sorted(self._records.glob("*.json")):
            try:
                data = json.loads(path.read_text())
                found.append(SlurmdRecord(uid=path.stem, node=str(data["node"]), pid=int(data["pid"]),
                                          start=str(data["start"])))
            except (OSError, ValueError, KeyError, TypeError):
                path.unlink(missing_ok=True)
        return found

    def record(self, uid: str, node: str, pid: int) -> None:
        start = start_time(pid)
        if start is None:
            return  # (gone already: nothing to take over)
        tmp = self._records / f"{uid}.tmp"
        tmp.write_text(json.dumps({"node": node, "pid": pid, "start": start}))
        tmp.replace(self._records / f"{uid}.json")

    def forget(self, uid: str) -> None:
        (self._records / f"{uid}.json").unlink(missing_ok=True)

    def paused(self, node: str) -> bool:
        return (self._paused / node).exists()

    def pause(self, node: str) -> None:
        (self._paused / node).touch()

    def unpause(self, node: str) -> None:
        (self._paused / node).unlink(missing_ok=True)

    def unpause_all(self) -> None:
        for path in self._paused.iterdir():
            path.unlink(missing_ok=True)


class StandInSlurmd:
    """One Pod's slurmd, kept running until ``stop``: a supervisor thread restarts it when it exits, unless its
    node is paused (``KubeletState``). ``adopt``: a process of an earlier kubelet, watched until it exits."""

    def __init__(self, launch: SlurmdLaunch, chroot: Path, port: int, cpus: int, memory_mb: int, log_dir: Path,
                 *, uid: str = "", state: KubeletState | None = None, adopt: SlurmdRecord | None = None):
        self.launch = launch
        self._chroot = chroot
        self._argv = launch.argv(chroot, port, cpus, memory_mb)
        self._log_path = log_dir / f"slurmd-{launch.node}.log"
        self._uid, self._state, self._adopted = uid, state, adopt
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._thread = threading.Thread(target=self._supervise, name=f"slurmd-{launch.node}", daemon=True)

    def start(self) -> None:
        prepare_conf_dir(self._chroot, self.launch)
        self._thread.start()

    def _paused(self) -> bool:
        return self._state is not None and self._state.paused(self.launch.node)

    def _supervise(self) -> None:
        adopted = self._adopted
        while adopted is not None and adopted.alive() and not self._stopping.wait(POLL):
            pass  # (not our child: no wait() for it)
        while not self._stopping.is_set():
            if self._paused():
                self._stopping.wait(POLL)
                continue
            with self._lock:
                if self._stopping.is_set():
                    return
                with self._log_path.open("ab") as out:
                    self._proc = subprocess.Popen(self._argv, stdout=out, stderr=subprocess.STDOUT,
                                                  stdin=subprocess.DEVNULL, start_new_session=True,
                                                  env=chroot_env(self._argv, None))
                proc = self._proc
                if self._state is not None:
                    self._state.record(self._uid, self.launch.node, proc.pid)
            code = proc.wait()
            if not self._stopping.is_set() and not self._paused():
                log.warning("slurmd of %s exited with %s; starting it again", self.launch.node, code)
                self._stopping.wait(RESTART_DELAY)

    def stop(self, grace: float) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds: what a kubelet does to a container."""
        with self._lock:
            self._stopping.set()
            proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=max(grace, 0.1))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        elif proc is None and self._adopted is not None:
            end_process(self._adopted, grace)
        if self._state is not None:
            self._state.forget(self._uid)
        kill_sessions(job_sessions(self.launch.node))

    def release(self) -> None:
        """Stop watching, leave the process running (a kubelet that exits leaves its containers). Under the lock,
        so no slurmd is being started meanwhile without its record."""
        with self._lock:
            self._stopping.set()


def end_process(record: SlurmdRecord, grace: float) -> None:
    """SIGTERM the recorded process, SIGKILL it after ``grace`` seconds (never a pid reused by another)."""
    if not record.alive():
        return
    os.kill(record.pid, signal.SIGTERM)
    deadline = time.monotonic() + max(grace, 0.1)
    while record.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    if record.alive():
        os.kill(record.pid, signal.SIGKILL)

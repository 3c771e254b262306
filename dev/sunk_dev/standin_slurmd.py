"""Real slurmd processes for the NodeSet Pods that the stand-in kubelet serves.

A NodeSet's slurmd Pod on a real Node runs ``slurmd -Z`` in its container. A stand-in Node
has no containers, so the stand-in kubelet (``sunk_dev.kubelet``) runs that slurmd itself, as a
host process in the dev cluster's chroot: a dynamic Slurm node that registers when its Pod
starts and stops answering when its Pod is deleted, as on a real Node. That is what the
operator's flows (label a Node, scale in, roll the template) and benchmarks/nodeset.py need,
on hundreds of Nodes where containers would not fit on this machine.

The Pod's own command is not run (it names an image's paths); what slurmd needs comes from
the ``slurmd`` container's environment, which the operator writes (docs/nodeset.md):
``SUNK_SLURM_NODE_NAME`` and ``SUNK_SLURMD_CONF``. Each slurmd gets a port of its own
(``--conf Port=``), since every stand-in slurmd shares the host's address; a Slurm node keeps its
port for as long as the kubelet runs (slurmctld keeps a dynamic node's first port when it
registers again, and would find a new Pod's slurmd not responding). A slurmd that
exits is started again a second later (``restartPolicy: Always``). Stopping a Pod's slurmd
also kills its jobs' processes (slurmstepd and what it runs), as removing a container does:
left behind, they would run on with no slurmd to report them, and their Slurm node could not
be deleted.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from attrs import frozen

from sunk import names

from .procs import chroot_env

log = logging.getLogger("sunk_dev.kubelet.slurmd")

SLURMD_CONTAINER = "slurmd"
ENV_NODE_NAME = "SUNK_SLURM_NODE_NAME"
ENV_CONF = "SUNK_SLURMD_CONF"
RESTART_DELAY = 1.0


@frozen
class SlurmdLaunch:
    """What one stand-in slurmd runs as: a dynamic Slurm node ``node`` with ``conf``."""

    node: str
    conf: str

    def argv(self, chroot: Path, port: int, cpus: int, memory_mb: int) -> list[str]:
        conf = " ".join(part for part in (self.conf, f"CPUs={cpus}", f"RealMemory={memory_mb}", f"Port={port}")
                        if part)
        return ["chroot", str(chroot), "/usr/sbin/slurmd", "-D", "-Z", "-N", self.node, "--conf", conf]


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
            return SlurmdLaunch(node=str(node), conf=str(env.get(ENV_CONF) or ""))
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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


class StandInSlurmd:
    """One Pod's slurmd, kept running until ``stop``: a supervisor thread restarts it when it exits."""

    def __init__(self, launch: SlurmdLaunch, chroot: Path, port: int, cpus: int, memory_mb: int, log_dir: Path):
        self.launch = launch
        self._argv = launch.argv(chroot, port, cpus, memory_mb)
        self._log_path = log_dir / f"slurmd-{launch.node}.log"
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._thread = threading.Thread(target=self._supervise, name=f"slurmd-{launch.node}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _supervise(self) -> None:
        while not self._stopping.is_set():
            with self._lock:
                if self._stopping.is_set():
                    return
                with self._log_path.open("ab") as out:
                    self._proc = subprocess.Popen(self._argv, stdout=out, stderr=subprocess.STDOUT,
                                                  stdin=subprocess.DEVNULL, start_new_session=True,
                                                  env=chroot_env(self._argv, None))
                proc = self._proc
            code = proc.wait()
            if not self._stopping.is_set():
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
        kill_sessions(job_sessions(self.launch.node))

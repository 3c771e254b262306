"""Daemons started by ``sunk-dev``: started with setsid, tracked by PID file, stopped by PID.

Never by name: other people's slurmctld or etcd on the same machine are not ours to stop.
A PID file also records the process start time, so a reused PID is never mistaken for ours.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Optional

from attrs import frozen

# What a Slurm client on the host reads (``sunk-dev env``/``run`` export them): paths seen from outside the
# chroot, which a Slurm command or daemon inside it must not inherit (slurmctld would look for the host's
# slurm.conf path inside the chroot), and the JWT, which made sacctmgr in the chroot authenticate with a
# token of the release that ran when the shell took it: after a switch, slurmdbd's health check failed
# ("jwt_decode failure") and `up` with it. Commands in the chroot authenticate with munge.
HOST_CLIENT_ENV = ("SLURM_CONF", "LD_LIBRARY_PATH", "SLURM_JWT")

_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A loopback port nothing listens on, never one handed out before by this process: the kernel
    may give the same ephemeral port to two binds in a row once the first socket is closed, and a
    syncer given one port for two listeners failed to start ('Address already in use')."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def chroot_env(argv: Sequence[str], env: Optional[Mapping[str, str]]) -> Optional[dict[str, str]]:
    """The environment for ``argv``: as given, or for a command run in a chroot without ``HOST_CLIENT_ENV``."""
    if not argv or os.path.basename(argv[0]) != "chroot":
        return dict(env) if env is not None else None
    return {k: v for k, v in (os.environ if env is None else env).items() if k not in HOST_CLIENT_ENV}


@frozen
class Daemon:
    name: str
    argv: tuple[str, ...]
    run_dir: Path
    env: Optional[Mapping[str, str]] = None

    @property
    def pid_file(self) -> Path:
        return self.run_dir / "pids" / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        return self.run_dir / "logs" / f"{self.name}.log"

    @property
    def argv_file(self) -> Path:
        return self.run_dir / "pids" / f"{self.name}.argv"

    def runs_other_argv(self) -> bool:
        """Whether the live process was started with other arguments than ``argv`` (a dev cluster from an older
        checkout: ``up`` starts it again), or with arguments nobody recorded (one started before they were: once)."""
        try:
            return json.loads(self.argv_file.read_text()) != list(self.argv)
        except (OSError, ValueError):
            return True

    def pid(self) -> Optional[int]:
        """Our live PID, or None (missing file, dead process, or PID reused by another)."""
        try:
            pid_s, start_s = self.pid_file.read_text().split()
            pid = int(pid_s)
        except (OSError, ValueError):
            return None
        return pid if start_time(pid) == start_s else None

    def started_at(self) -> Optional[float]:
        """When our live process was started (wall clock, seconds), or None if none runs."""
        if self.pid() is None:
            return None
        try:
            return self.pid_file.stat().st_mtime
        except OSError:
            return None

    def start(self) -> int:
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as log:
            proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=chroot_env(self.argv, self.env),
                close_fds=True,
            )
        start = None
        for _ in range(50):
            start = start_time(proc.pid)
            if start:
                break
            time.sleep(0.01)
        self.pid_file.write_text(f"{proc.pid} {start or ''}\n")
        self.argv_file.write_text(json.dumps(list(self.argv)))
        return proc.pid

    def stop(self, timeout: float = 15.0) -> bool:
        """SIGTERM, wait, then SIGKILL. Returns True if something of ours was running."""
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and start_time(pid):
            _reap(pid)
            time.sleep(0.05)
        if start_time(pid):
            _signal(pid, signal.SIGKILL)
            while start_time(pid):
                _reap(pid)
                time.sleep(0.05)
        self.pid_file.unlink(missing_ok=True)
        return True

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def start_time(pid: int) -> Optional[str]:
    """Field 22 of /proc/PID/stat; None if gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] == "Z":
        _reap(pid)
        return None
    return fields[19]


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def run(argv: Sequence[str], *, check: bool = True, env: Optional[Mapping[str, str]] = None,
        timeout: float = 120, input: Optional[str] = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # (errors="replace": a job's Extra, in scontrol's output, may be any bytes)
        list(argv), check=check, capture_output=True, text=True, errors="replace", timeout=timeout,
        env=chroot_env(argv, env), input=input,
    )


APT_LOCK = Path("/var/lock/sunk-dev-apt.lock")


def apt_install(packages: Sequence[str], log, env: Optional[Mapping[str, str]] = None) -> None:
    """``apt-get update`` and ``install`` of ``packages``, one sunk-dev process at a time (``make test``
    builds Slurm 25.11 in the background while the tests' ``up`` installs what it needs: two apt-gets at
    once fail on dpkg's lock), and waiting for anyone else's apt too."""
    import fcntl

    APT_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(APT_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        wait = ["-o", "DPkg::Lock::Timeout=600"]
        subprocess.run(["apt-get", *wait, "update", "-qq"], check=True, stdout=log, stderr=log,
                       env=dict(env) if env is not None else None)
        subprocess.run(["apt-get", *wait, "install", "-y", "-qq", *packages], check=True, stdout=log, stderr=log,
                       env=dict(env) if env is not None else None)


def wait_until(check, timeout: float, interval: float = 0.1, what: str = "condition") -> None:
    """Poll ``check`` until it is truthy; only for bringing daemons up, never in product code."""
    deadline = time.monotonic() + timeout
    last: Optional[BaseException] = None
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception as exc:
            last = exc
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}" + (f": {last}" if last else ""))

"""The Debian chroots that carry Slurm (and MariaDB; the default one etcd too), one per release.

bookworm's Slurm (22.05) lacks job Extra and REST v0.0.42; trixie's (24.11) and sid's (26.05)
binaries need a newer glibc, hence a chroot each (``sunk_dev.release``). A chroot is built once
into the cache, keyed by its suite and package list, and only ever configured (never rebuilt) by
``up``. Each holds its release's state (Slurm's spool, MariaDB's data), so releases never share it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Collection
from pathlib import Path
from typing import Optional

from . import slurmbuild
from .procs import apt_install, run
from .release import DEFAULT, SlurmRelease, debian_upstream

MIRROR = "http://deb.debian.org/debian"


def chroot_dir(cache: Path, release: SlurmRelease = DEFAULT) -> Path:
    built = (release.source.sha256, *slurmbuild.CONFIGURE) if release.source is not None else ()
    key = hashlib.sha256(" ".join((release.suite, MIRROR, *release.packages, *built)).encode()).hexdigest()[:12]
    return cache / f"chroot-{release.suite}-{key}"


def chroot_dirs(cache: Path) -> list[Path]:
    """Every finished chroot in the cache, whatever release (this checkout's or another's) made it."""
    return sorted(p for p in cache.glob("chroot-*") if p.is_dir() and not p.name.endswith(".partial"))


def ensure_chroot(cache: Path, release: SlurmRelease = DEFAULT, log=sys.stderr, project: Optional[Path] = None) -> Path:
    """The release's chroot, debootstrapped (and, for a release built from source, built: about 20
    minutes on 2 cores) once."""
    root = chroot_dir(cache, release)
    if (root / ".sunk-complete").exists():
        return root
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f"{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one builder at a time (a background build, a test's `up`)
        return root if (root / ".sunk-complete").exists() else _build_chroot(cache, release, root, log, project)


def _build_chroot(cache: Path, release: SlurmRelease, root: Path, log, project: Optional[Path]) -> Path:
    if shutil.which("debootstrap") is None:
        apt_install(["debootstrap"], log)
    partial = root.with_name(root.name + ".partial")
    if partial.exists():
        unmount_all(partial)
        shutil.rmtree(partial)
    subprocess.run(
        ["debootstrap", "--variant=minbase", f"--include={','.join(release.packages)}", release.suite, str(partial),
         MIRROR],
        check=True, stdout=log, stderr=log,
    )
    if release.source is not None:
        slurmbuild.build_slurm(partial, release, project or Path.cwd(), cache, log)
    (partial / ".sunk-complete").write_text("ok\n")
    partial.rename(root)
    return root


def slurm_version(root: Path) -> str:
    """The Slurm release installed in the chroot (``26.05.5``), from dpkg (or what a source build
    recorded): no Slurm binary runs."""
    if built := slurmbuild.built_version(root):
        return built
    out = run(["chroot", str(root), "dpkg-query", "-W", "-f=${Version}", "slurmctld"], check=False, timeout=30)
    return debian_upstream(out.stdout) if out.returncode == 0 else ""


DEFAULT_MARIADB_SOCKET = "/run/mysqld/mysqld.sock"


def mariadb_socket(cnf: str) -> str:
    """The socket MariaDB's clients (slurmdbd's libmariadb too) use by default, from ``mariadb.cnf``'s
    ``[client-server]`` or ``[client]`` group: trixie's ``/run/mysqld/mysqld.sock``, sid's
    ``/run/mariadbd/mysqld.sock``. slurmdbd.conf names no socket (24.11 cannot), so mariadbd must
    listen where the chroot's clients look."""
    group = ""
    for raw in cnf.splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith("[") and line.endswith("]"):
            group = line[1:-1].strip()
        elif group in ("client-server", "client") and "=" in line:
            key, _, value = line.partition("=")
            if key.strip() == "socket" and value.strip():
                return value.strip()
    return DEFAULT_MARIADB_SOCKET


def chroot_mariadb_socket(root: Path) -> str:
    try:
        return mariadb_socket((root / "etc/mysql/mariadb.cnf").read_text())
    except OSError:
        return DEFAULT_MARIADB_SOCKET


def mount_proc(root: Path) -> None:
    target = root / "proc"
    if not _mounted(target):
        subprocess.run(["mount", "-t", "proc", "proc", str(target)], check=True)


def unmount_all(root: Path) -> None:
    for target in (root / "proc",):
        if _mounted(target):
            subprocess.run(["umount", "-l", str(target)], check=False)


def processes_in(root: Path, proc: Path = Path("/proc")) -> dict[int, str]:
    """Every process whose root directory is ``root`` (pid -> command line): what a chroot still runs.

    A daemon started by ``chroot`` keeps its root, and so does every child it forks, including
    the ones that detach (slurmstepd and the job steps it runs): this finds those after their
    daemon is gone, where a pid file or a process group would not.
    """
    wanted = str(root.resolve())
    found = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.readlink(entry / "root") != wanted:
                continue
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # (gone meanwhile, or a kernel thread)
            continue
        found[int(entry.name)] = command
    return found


def end_processes_in(root: Path, *, keep: Collection[int] = (), grace: float = 5.0) -> dict[int, str]:
    """SIGTERM what ``root`` still runs (but ``keep``), SIGKILL what is left after ``grace``; the ended."""
    targets = {pid: cmd for pid, cmd in processes_in(root).items() if pid not in keep}
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, grace)):
        # Only those still rooted there: a pid that ended on the SIGTERM may be another process's by now.
        for pid in set(targets) & set(processes_in(root)):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and set(processes_in(root)) & set(targets):
            time.sleep(0.1)
        if not set(processes_in(root)) & set(targets):
            break
    return targets


def _mounted(path: Path) -> bool:
    real = str(path.resolve())
    with open("/proc/mounts") as mounts:
        return any(line.split()[1] == real for line in mounts)

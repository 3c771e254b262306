"""The Debian trixie chroot that carries Slurm 24.11, MariaDB and etcd.

bookworm's Slurm (22.05) lacks job Extra and REST v0.0.42; trixie's binaries need a
newer glibc, hence a chroot. It is built once into the cache, keyed by its package
list, and only ever configured (never rebuilt) by ``up``.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

SUITE = "trixie"
MIRROR = "http://deb.debian.org/debian"
PACKAGES = (
    "slurmctld", "slurmd", "slurmrestd", "slurm-client", "slurm-wlm-jwt-plugin", "slurmdbd",
    "mariadb-server", "munge", "etcd-server", "curl", "procps", "iproute2",
)


def chroot_dir(cache: Path) -> Path:
    key = hashlib.sha256(" ".join((SUITE, MIRROR, *PACKAGES)).encode()).hexdigest()[:12]
    return cache / f"chroot-{SUITE}-{key}"


def ensure_chroot(cache: Path, log=sys.stderr) -> Path:
    root = chroot_dir(cache)
    if (root / ".sunk-complete").exists():
        return root
    if shutil.which("debootstrap") is None:
        subprocess.run(["apt-get", "update", "-qq"], check=True, stdout=log, stderr=log)
        subprocess.run(["apt-get", "install", "-y", "-qq", "debootstrap"], check=True, stdout=log, stderr=log)
    partial = root.with_name(root.name + ".partial")
    if partial.exists():
        unmount_all(partial)
        shutil.rmtree(partial)
    subprocess.run(
        ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(partial), MIRROR],
        check=True, stdout=log, stderr=log,
    )
    (partial / ".sunk-complete").write_text("ok\n")
    partial.rename(root)
    return root


def mount_proc(root: Path) -> None:
    target = root / "proc"
    if not _mounted(target):
        subprocess.run(["mount", "-t", "proc", "proc", str(target)], check=True)


def unmount_all(root: Path) -> None:
    for target in (root / "proc",):
        if _mounted(target):
            subprocess.run(["umount", "-l", str(target)], check=False)


def _mounted(path: Path) -> bool:
    real = str(path.resolve())
    with open("/proc/mounts") as mounts:
        return any(line.split()[1] == real for line in mounts)

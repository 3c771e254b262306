"""Slurm from source, and pyslurm against it: the dev cluster's 25.11, which no Debian suite ships.

The tarball (SchedMD's, vendored beside the checkout; its checksum is pinned in
``sunk_dev.release``) is built inside a bookworm chroot, installed there under ``/usr`` like
Debian's packages, so the dev cluster runs its daemons exactly as it runs the other releases'.
bookworm is the host's own suite: the host's Python 3.11 loads pyslurm, which links that build's
``libslurmfull``, and the plugins libslurm loads (auth/munge, auth/jwt) link bookworm's libraries,
which the host installs from its own suite (``HOST_PACKAGES``). A client on the host reads
``client_conf``, slurm.conf with its paths seen from outside the chroot and SlurmUser by the host's
name for its uid (``host_slurm_user``).

Built once into the chroot, which is named by the tarball's checksum (``sunk_dev.chroot``); the
pyslurm wheel once into the cache, named by pyslurm's release and that checksum.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Optional

from .procs import apt_install
from .release import SlurmRelease, SlurmSource

# The vendored sources, in the order looked for: SUNK_SLURM_SOURCE_DIR, beside the checkout (the
# workplace's shared/vendor), the copy the cache keeps once a build found one, and the workplace's
# shared directory where it always is (a clone elsewhere, as CI makes, has none beside it).
SOURCE_DIR_ENV = "SUNK_SLURM_SOURCE_DIR"
WORKPLACE_VENDOR = Path("/work/shared/vendor")
VERSION_FILE = "usr/share/sunk-dev/slurm-version"
LIBDIR = "/usr/lib"  # libslurm, and its plugins in LIBDIR/slurm, as configure's default for --prefix=/usr
CONFIGURE = (
    "./configure", "--prefix=/usr", "--sysconfdir=/etc/slurm", "--localstatedir=/var", "--runstatedir=/run",
    "--with-munge", "--with-jwt", "--with-json", "--with-http-parser", "--with-yaml", "--with-mysql_config=/usr/bin",
    "--enable-multiple-slurmd",  # the dev cluster runs every slurmd on one host, as Debian's build allows
    "--disable-debug", "--disable-x11", "--without-pmix", "--without-hdf5", "--without-rrdtool",
)
# What the host needs for the plugins libslurm loads in a client (bookworm's, as the chroot's).
HOST_PACKAGES = ("libmunge2", "libjwt0", "gcc", "libc6-dev")  # (gcc: the pyslurm wheel is compiled on the host)
CYTHON = "cython<3.1"  # pyslurm 25.11's build does not take Cython 3.1 (ENVIRONMENT.md)


def source_candidates(source: SlurmSource, project: Path, cache: Path,
                      environ: Mapping[str, str] = os.environ) -> list[Path]:
    """Where the tarball may be, in order."""
    dirs = [Path(environ[SOURCE_DIR_ENV])] if environ.get(SOURCE_DIR_ENV) else []
    dirs += [project.parent / "shared" / "vendor", cache / "vendor", WORKPLACE_VENDOR]
    return [d / source.tarball for d in dirs]


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def find_source(source: SlurmSource, project: Path, cache: Path) -> Path:
    """The cache's copy of the tarball, checked against its pinned checksum after it was copied: what is
    built is what was checked (a shared vendored directory could change between a check and a read). A
    later build (another checkout, the CI's clone) needs no vendored directory beside it."""
    tried = []
    kept = cache / "vendor" / source.tarball
    kept.parent.mkdir(parents=True, exist_ok=True)
    for path in source_candidates(source, project, cache):
        if not path.is_file():
            tried.append(f"{path} (missing)")
            continue
        copy = kept.with_name(kept.name + ".partial")
        shutil.copyfile(path, copy)
        got = sha256_file(copy)
        if got != source.sha256:
            copy.unlink()
            tried.append(f"{path} (sha256 {got}, want {source.sha256})")
            continue
        copy.rename(kept)
        return kept
    raise RuntimeError(f"no {source.tarball} with the pinned checksum: tried " + "; ".join(tried)
                       + f" (set {SOURCE_DIR_ENV} to the directory that has it)")


def build_script(source: SlurmSource, jobs: int) -> str:
    """What runs in the chroot: configure, make, install, and leave the tree behind."""
    configure = " ".join(CONFIGURE)
    return "\n".join([
        "set -eu",
        f"cd /usr/src/{source.directory}",
        f"CFLAGS='-O2' {configure}",
        f"make -j{jobs}",
        "make install",
        "ldconfig",
        f"mkdir -p /{Path(VERSION_FILE).parent}",
        f"echo {source.version} > /{VERSION_FILE}",
        f"rm -rf /usr/src/{source.directory}",
    ]) + "\n"


def build_slurm(root: Path, release: SlurmRelease, project: Path, cache: Path, log: IO[str]) -> None:
    """Build and install ``release``'s Slurm into the (not yet finished) chroot ``root``."""
    assert release.source is not None
    tarball = find_source(release.source, project, cache)
    src = root / "usr/src"
    src.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tarball) as archive:
        archive.extractall(src, filter="tar")
    script = root / "usr/src/sunk-build.sh"
    script.write_text(build_script(release.source, jobs=os.cpu_count() or 2))
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}
    subprocess.run(["chroot", str(root), "/bin/bash", "/usr/src/sunk-build.sh"], check=True, stdout=log,
                   stderr=log, env=env)
    script.unlink()


def built_version(root: Path) -> str:
    try:
        return (root / VERSION_FILE).read_text().strip()
    except OSError:
        return ""


# -- the host's side: a client of this Slurm (pyslurm) --------------------------------------------

def client_conf(slurm_conf: str, root: Path, slurm_user: str) -> str:
    """slurm.conf as a client on the host reads it: the chroot's plugins and munge socket by their
    paths from outside, and SlurmUser by the host's name for its uid (``host_slurm_user``). A client
    needs SlurmUser right: auth/munge restricts each credential to SlurmUser's uid, so slurmctld
    cannot decode one made for another ("Unauthorized credential" in munged's log); and libslurm
    refuses a user the host has not. Only clients read it; the daemons keep the chroot's."""
    kept = [line for line in slurm_conf.splitlines()
            if not line.startswith(("PluginDir=", "AuthInfo=", "SlurmUser="))]
    return "\n".join([*kept, f"SlurmUser={slurm_user}", f"PluginDir={root}{LIBDIR}/slurm",
                      f"AuthInfo=socket={root}/run/munge/munge.socket.2"]) + "\n"


HOST_SLURM_USER = "sunk-slurm"  # the name given to the chroot's SlurmUser uid when the host has none


def host_slurm_user(uid: int, log: IO[str]) -> str:
    """The host's name for the chroot's SlurmUser ``uid``, made (a system user, no home, no shell)
    when the host has none."""
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        subprocess.run(["useradd", "--system", "--uid", str(uid), "--no-create-home", "--shell", "/usr/sbin/nologin",
                        "--user-group", HOST_SLURM_USER], check=True, stdout=log, stderr=log)
        return pwd.getpwuid(uid).pw_name


def client_env(root: Path, conf: Path) -> dict[str, str]:
    """What a pyslurm client on the host needs in its environment."""
    return {"SLURM_CONF": str(conf), "LD_LIBRARY_PATH": f"{root}{LIBDIR}:{root}{LIBDIR}/slurm"}


def wheel_dir(cache: Path, release: SlurmRelease) -> Path:
    assert release.source is not None
    return cache / "wheels" / f"pyslurm-{release.pyslurm}-{release.source.sha256[:12]}"


def installed_pyslurm(python: str = sys.executable) -> str:
    """pyslurm's version in ``python``'s environment ("" when it has none)."""
    out = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('pyslurm'))"],
                         capture_output=True, text=True, check=False)
    return out.stdout.strip() if out.returncode == 0 else ""


def ensure_host_packages(log: IO[str]) -> None:
    missing = [p for p in HOST_PACKAGES
               if subprocess.run(["dpkg-query", "-W", "-f=${Status}", p], capture_output=True, text=True,
                                 check=False).stdout.strip() != "install ok installed"]
    if missing:
        apt_install(missing, log)


# pyslurm's sdist on PyPI, by release: what is compiled into the wheel (and the -slurm25.11 image) is
# what was checked (pip --require-hashes).
PYSLURM_SDIST_SHA256 = {"25.11.2": "6e0e4bc639ea3177591b102b77c1dd8df55a9e411ac42ef339a4adb3908cca34"}


def requirement(release: SlurmRelease) -> str:
    """pyslurm's requirement line, pinned by its sdist's hash."""
    return f"pyslurm=={release.pyslurm} --hash=sha256:{PYSLURM_SDIST_SHA256[release.pyslurm]}\n"


def build_args(requirements: Path, target: Path) -> Sequence[str]:
    return ("wheel", "--no-build-isolation", "--no-deps", "--no-cache-dir", "--no-binary", "pyslurm",
            "--require-hashes", "-r", str(requirements), "-w", str(target))


def ensure_wheel(root: Path, release: SlurmRelease, cache: Path, log: IO[str]) -> Path:
    """The pyslurm wheel built against the chroot's Slurm: built once (in a throw-away venv with
    Cython; about 4 minutes on 2 cores), by one builder at a time, and kept."""
    target = wheel_dir(cache, release)
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f"{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        wheels = sorted(target.glob("pyslurm-*.whl")) if target.is_dir() else []
        if wheels:
            return wheels[-1]
        ensure_host_packages(log)
        partial = target.with_name(target.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        with tempfile.TemporaryDirectory(prefix="pyslurm-build-", dir=cache) as tmp:
            venv = Path(tmp) / "venv"
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, stdout=log, stderr=log)
            pip = [str(venv / "bin/python"), "-m", "pip", "-q"]
            subprocess.run([*pip, "install", CYTHON, "wheel", "setuptools"], check=True, stdout=log, stderr=log)
            env = {**os.environ, "SLURM_INCLUDE_DIR": f"{root}/usr/include", "SLURM_LIB_DIR": f"{root}{LIBDIR}"}
            pinned = Path(tmp) / "pyslurm.txt"
            pinned.write_text(requirement(release))
            subprocess.run([*pip, *build_args(pinned, partial)], check=True, stdout=log, stderr=log, env=env)
        partial.rename(target)
        return sorted(target.glob("pyslurm-*.whl"))[-1]


def ensure_pyslurm(root: Path, release: SlurmRelease, cache: Path, log: IO[str],
                   python: str = sys.executable) -> Optional[Path]:
    """pyslurm built against the chroot's Slurm, installed into ``python``'s environment (the one
    that runs the tests and the daemons): the kept wheel, never a rebuild."""
    if not release.pyslurm:
        return None
    ensure_host_packages(log)
    wheel = ensure_wheel(root, release, cache, log)
    if installed_pyslurm(python) != release.pyslurm:
        subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(wheel)],
                       check=True, stdout=log, stderr=log)
    return wheel

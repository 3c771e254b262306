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
pyslurm wheel once into the cache, named by its version and that checksum.

pyslurm is built from its sdist, pinned by hash, with sunk's patch applied (``patches/``, meant
upstream: ``JobSubmitDescription.prefer`` and ``resource_sharing="topo"``, which Slurm's C API has and
pyslurm 25.11.2 does not pass). The wheel's version says so, ``25.11.2+sunk<patch sha256[:8]>``
(``patched_version``): a changed patch is another version, so another wheel, built anew and installed.
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

import attrs

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
CGROUP_PLUGINS = ("cgroup_v1", "cgroup_v2")  # what a SlurmCluster's spec.slurm.cgroup v1 and v2 load
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
        # (configure leaves a plugin out when a library is missing and says so only in its output: the chart's
        # cgroup modes need both)
        *(f"test -e {LIBDIR}/slurm/{plugin}.so || {{ echo 'no {plugin} plugin built' >&2; exit 1; }}"
          for plugin in CGROUP_PLUGINS),
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
    """Named by the wheel's version (pyslurm's release and sunk's patch) and the Slurm it was built against."""
    assert release.source is not None
    return cache / "wheels" / f"pyslurm-{patched_version(release)}-{release.source.sha256[:12]}"


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
# what was checked (pip --require-hashes, and again here after the download).
PYSLURM_SDIST_SHA256 = {"25.11.2": "6e0e4bc639ea3177591b102b77c1dd8df55a9e411ac42ef339a4adb3908cca34"}
# sunk's patch to each release's sdist (module notes), applied before the build.
PATCH_DIR = Path(__file__).parent / "patches"
PYSLURM_PATCHES = {"25.11.2": "pyslurm-25.11.2-prefer-topo.patch"}


def requirement(release: SlurmRelease) -> str:
    """pyslurm's requirement line, pinned by its sdist's hash."""
    return f"pyslurm=={release.pyslurm} --hash=sha256:{PYSLURM_SDIST_SHA256[release.pyslurm]}\n"


def pyslurm_patch(release: SlurmRelease) -> str:
    """sunk's patch to ``release``'s pyslurm, as text ("" when it has none)."""
    name = PYSLURM_PATCHES.get(release.pyslurm)
    return (PATCH_DIR / name).read_text() if name else ""


def patched_version(release: SlurmRelease, patch: Optional[str] = None) -> str:
    """The version of the wheel sunk builds: pyslurm's release, and with a patch a local label naming it
    (``25.11.2+sunk1a2b3c4d``, one alphanumeric segment, so PEP 440 keeps it as written)."""
    patch = pyslurm_patch(release) if patch is None else patch
    if not patch:
        return release.pyslurm
    return f"{release.pyslurm}+sunk{hashlib.sha256(patch.encode()).hexdigest()[:8]}"


def download_args(requirements: Path, target: Path) -> Sequence[str]:
    """pip's download of the pinned sdist (its metadata is prepared in the build's venv, as the build's)."""
    return ("download", "--no-build-isolation", "--no-deps", "--no-cache-dir", "--no-binary", ":all:",
            "--require-hashes", "-r", str(requirements), "-d", str(target))


def build_args(tree: Path, target: Path) -> Sequence[str]:
    """pip's build of the wheel from the patched tree (no index: everything is in the build's venv)."""
    return ("wheel", "--no-build-isolation", "--no-deps", "--no-cache-dir", "--no-index", str(tree),
            "-w", str(target))


class PatchError(ValueError):
    """A patch that does not apply exactly (sunk's patches are made against one pinned sdist: no fuzz)."""


@attrs.frozen
class _Hunk:
    path: str
    old_start: int  # 1-based; for a hunk that removes or keeps nothing, the line it goes after
    old: tuple[str, ...]  # the lines it expects, context and removed
    new: tuple[str, ...]  # the lines it leaves, context and added


def _hunk_counts(header: str) -> tuple[int, int, int]:
    """``@@ -167,6 +167,10 @@`` -> (167, 6, 10); a count left out is 1."""
    try:
        old, new = header.split("@@")[1].split()
        old_start, _, old_len = old[1:].partition(",")
        return int(old_start), int(old_len or 1), int(new[1:].partition(",")[2] or 1)
    except (IndexError, ValueError):
        raise PatchError(f"not a hunk header: {header.rstrip()!r}") from None


def _patch_path(line: str) -> str:
    """The relative path a ``+++ b/path`` line names: never absolute, never out of the tree."""
    path = line[4:].split("\t")[0].strip()
    path = path[2:] if path.startswith("b/") else path
    parts = Path(path).parts
    if not path or Path(path).is_absolute() or ".." in parts:
        raise PatchError(f"a patch may change files inside the tree only: {path!r}")
    return path


def _lines(text: str) -> list[str]:
    """``text``'s lines, each with its newline: split on "\\n" only (``str.splitlines`` also splits on form
    feeds and Unicode separators, which a source file may hold inside a line)."""
    lines = [f"{line}\n" for line in text.split("\n")]
    lines[-1] = lines[-1][:-1]  # (what follows the last newline, if anything)
    return lines if lines[-1] else lines[:-1]


def _read(path: Path) -> str:
    with path.open(encoding="utf-8", newline="") as f:  # (as the bytes are: no newline translation)
        return f.read()


def _write(path: Path, text: str) -> None:
    with path.open("w", encoding="utf-8", newline="") as f:
        f.write(text)


def parse_patch(text: str) -> tuple[_Hunk, ...]:
    """A unified diff's hunks, in order. Text before the first ``--- `` line is its description."""
    lines = _lines(text)
    hunks: list[_Hunk] = []
    path = ""
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            path = _patch_path(lines[i + 1])
            i += 2
            continue
        if not line.startswith("@@"):
            if path and line.strip():
                raise PatchError(f"{path}: a line outside any hunk: {line.rstrip()!r}")
            i += 1
            continue
        if not path:
            raise PatchError("a hunk before any file header")
        old_start, old_len, new_len = _hunk_counts(line)
        old: list[str] = []
        new: list[str] = []
        i += 1
        while len(old) < old_len or len(new) < new_len:
            if i >= len(lines) or lines[i][:1] not in (" ", "-", "+"):
                raise PatchError(f"{path}: the hunk at line {old_start} ends early")
            mark, body = lines[i][0], lines[i][1:]
            if mark != "+":
                old.append(body)
            if mark != "-":
                new.append(body)
            i += 1
        if len(old) != old_len or len(new) != new_len:
            raise PatchError(f"{path}: the hunk at line {old_start} has more lines than its header says")
        hunks.append(_Hunk(path, old_start, tuple(old), tuple(new)))
    if not hunks:
        raise PatchError("no hunks in the patch")
    return tuple(hunks)


def apply_hunks(path: str, original: str, hunks: Sequence[_Hunk]) -> str:
    """``original`` with ``hunks`` (of this one file, in order) applied: each must find exactly the lines it
    expects where its header says."""
    source = _lines(original)
    out: list[str] = []
    at = 0  # the next line of source not yet copied
    for hunk in hunks:
        start = hunk.old_start - 1 if hunk.old else hunk.old_start
        if start < at:
            raise PatchError(f"{path}: the hunk at line {hunk.old_start} overlaps the one before")
        if tuple(source[start:start + len(hunk.old)]) != hunk.old:
            raise PatchError(f"{path}: the hunk at line {hunk.old_start} does not match the file")
        out += source[at:start]
        out += hunk.new
        at = start + len(hunk.old)
    return "".join(out + source[at:])


def apply_patch(tree: Path, patch: str) -> tuple[str, ...]:
    """Apply the unified diff ``patch`` (paths ``a/...``, ``b/...``) to the files under ``tree``; every file is
    checked before any is written. Returns the paths changed."""
    hunks = parse_patch(patch)
    paths = tuple(dict.fromkeys(h.path for h in hunks))
    patched = {}
    for path in paths:
        try:
            original = _read(tree / path)
        except FileNotFoundError:
            raise PatchError(f"{path}: no such file in {tree}") from None
        patched[path] = apply_hunks(path, original, [h for h in hunks if h.path == path])
    for path, text in patched.items():
        _write(tree / path, text)
    return paths


def stamp_version(version_py: str, version: str) -> str:
    """pyslurm's ``pyslurm/version.py`` with ``__version__`` set to ``version`` (its setup.py reads it there)."""
    lines = version_py.splitlines(keepends=True)
    found = [i for i, line in enumerate(lines) if line.startswith("__version__")]
    if len(found) != 1:
        raise PatchError(f"pyslurm/version.py has {len(found)} __version__ lines, not one")
    lines[found[0]] = f'__version__ = "{version}"\n'
    return "".join(lines)


def unpack_patched(sdist: Path, release: SlurmRelease, into: Path) -> Path:
    """The sdist (checked against its pinned hash) unpacked under ``into``, sunk's patch applied and its
    version stamped (``patched_version``): the tree the wheel is built from."""
    want = PYSLURM_SDIST_SHA256[release.pyslurm]
    if (got := sha256_file(sdist)) != want:
        raise RuntimeError(f"{sdist}: sha256 {got}, want {want}")
    with tarfile.open(sdist) as archive:
        archive.extractall(into, filter="data")
    tree = into / f"pyslurm-{release.pyslurm}"
    patch = pyslurm_patch(release)
    if patch:
        apply_patch(tree, patch)
    version_py = tree / "pyslurm/version.py"
    version_py.write_text(stamp_version(version_py.read_text(), patched_version(release, patch)))
    return tree


def build_pyslurm_wheel(root: Path, release: SlurmRelease, target: Path, work: Path, log: IO[str],
                        sdist: Optional[Path] = None) -> Path:
    """Build sunk's pyslurm wheel against the chroot ``root``'s Slurm into ``target``, in a throw-away venv
    with Cython under ``work``: the pinned sdist (downloaded, or ``sdist`` when given, checked alike),
    patched (``unpack_patched``). About 4 minutes on 2 cores."""
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, stdout=log, stderr=log)
    pip = [str(venv / "bin/python"), "-m", "pip", "-q"]
    subprocess.run([*pip, "install", CYTHON, "wheel", "setuptools"], check=True, stdout=log, stderr=log)
    env = {**os.environ, "SLURM_INCLUDE_DIR": f"{root}/usr/include", "SLURM_LIB_DIR": f"{root}{LIBDIR}"}
    if sdist is None:
        pinned = work / "pyslurm.txt"
        pinned.write_text(requirement(release))
        downloads = work / "sdist"
        subprocess.run([*pip, *download_args(pinned, downloads)], check=True, stdout=log, stderr=log, env=env)
        (sdist,) = downloads.glob(f"pyslurm-{release.pyslurm}.tar.gz")
    tree = unpack_patched(sdist, release, work / "src")
    subprocess.run([*pip, *build_args(tree, target)], check=True, stdout=log, stderr=log, env=env)
    (wheel,) = target.glob("pyslurm-*.whl")
    return wheel


def ensure_wheel(root: Path, release: SlurmRelease, cache: Path, log: IO[str]) -> Path:
    """sunk's pyslurm wheel built against the chroot's Slurm (``build_pyslurm_wheel``): built once, by one
    builder at a time, and kept."""
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
            build_pyslurm_wheel(root, release, partial, Path(tmp), log)
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
    if installed_pyslurm(python) != patched_version(release):  # (a stock pyslurm, or another patch's)
        subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(wheel)],
                       check=True, stdout=log, stderr=log)
    return wheel

"""Container images for the real kubelet Node, built without a registry or a container engine.

No registry is reachable from these machines and there is no Docker engine, so the images are
written here as ``docker save`` archives that ``ctr images import`` takes:

- **sunk** (``docker.io/library/sunk:<version>``, what the chart's ``image: sunk`` with the
  chart's appVersion resolves to, so the chart needs no override): a Debian bookworm minbase
  rootfs with python3 (3.11, what the project is tested with), a venv at ``/opt/sunk`` holding
  the dependencies (layer 1, cached by a hash of what goes in), and the project's own wheel
  installed into that venv (layer 2, rebuilt when a source file changes: seconds). It runs as
  uid 65532, as the chart's Pod Security ``restricted`` Pods do.
- **sunk, pyslurm variant** (``docker.io/library/sunk:<version>-slurm<release>``, what the chart's
  ``slurm.backend: pyslurm`` selects): the same two layers with a third between them, built only when
  the dev cluster runs a release built with pyslurm (25.11): the pyslurm wheel built against that
  Slurm, installed into the venv; libslurm and its plugins from that release's chroot
  (``/usr/lib/libslurm*.so*``, ``/usr/lib/slurm/*.so``: the paths libslurm was built for); and
  the Debian libraries they and munged load (``PYSLURM_PACKAGES`` and what they depend on that the
  base lacks), taken from the chroot's own installed files (the chroot is bookworm, as the base).
  A variant of its own, not the default image: pyslurm binds the image to one Slurm release, while
  the REST image serves them all, and the variant needs a Slurm build the default never waits for.
- the real Node's **slurmd** is no dev build: it runs the shipped ``sunk-slurmd:<version>-slurm<release>``
  (``sunk_dev.slurmimages``, what ``make images`` writes), so what the cluster tests run is what an
  operator pushes; the munge socket, slurm.conf and the hooks come from the host by hostPath, as a
  SUNK slurmd Pod mounts them.

Layers are written to files and streamed: a rootfs is hundreds of MB. Pure parts (keys,
exclusions, configs, manifests) come first; the I/O after them.
"""

from __future__ import annotations

import configparser
import fnmatch
import hashlib
import io
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import IO, Optional

import attrs

from . import chroot as devchroot
from . import phases

SUNK_REPOSITORY = "docker.io/library/sunk"  # the chart's default `image.repository: sunk`, normalized
SUNK_SUITE = "bookworm"  # python3.11, the version the project is tested with (trixie has 3.13)
SUNK_PACKAGES = ("python3",)
PYTHON = "3.11"
VENV = "/opt/sunk"
NONROOT_UID = 65532
NONROOT_NAME = "nonroot"
# The product's files that go into its wheel (not dev/, the dev tools'
# distribution): their hash keys the app layer.
SOURCES = ("setup.cfg", "pyproject.toml", "README.md", "sunk", "scheduler", "extender")
BUILD_REQUIREMENTS = ("setuptools>=64", "wheel")  # pyproject.toml's [build-system], from the wheelhouse
# Bumped when how a layer is made changes, so that a cached layer made the old way is not reused.
RECIPE = "1"

# What no layer carries: kernel and runtime file systems, run state, apt's caches.
# Each entry is a directory kept (empty) in the layer, with nothing under it.
ROOTFS_EMPTIED = (
    "proc", "sys", "dev", "run", "tmp", "var/tmp", "var/log", "var/cache/apt", "var/lib/apt/lists",
    "usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale",
)
# And what the slurmd image leaves out of the dev chroot: secrets (the munge key and its seed,
# the JWT key, slurmdbd.conf's database password: slurm.conf and the munge socket come from the
# host by hostPath), and the dev cluster's state (Slurm's spools, MariaDB's and etcd's data,
# jobs' output in /tmp, root's home).
SLURMD_EMPTIED = ROOTFS_EMPTIED + (
    "etc/munge", "etc/slurm", "var/lib/munge", "var/spool/slurmd", "var/spool/slurmctld", "var/lib/slurm",
    "var/lib/mysql", "var/lib/mariadb",  # MariaDB's data (sid's MariaDB keeps it in var/lib/mariadb)
    "var/lib/etcd", "var/lib/sunk-etcd", "root", "home", "etc/ssl/private",
    "etc/sunk", "etc/sunk-bench",  # the hook API's per-node tokens and hooks.env; a benchmark's slurm.conf
    "etc/mysql",  # MariaDB's client credentials (debian.cnf); slurmd needs no database
)
# The top of a rootfs: anything else there (a job's slurm-N.out in the chroot's /) stays out.
ROOT_ENTRIES = ("bin", "boot", "dev", "etc", "home", "lib", "lib32", "lib64", "libx32", "media", "mnt", "opt", "proc",
                "root", "run", "sbin", "srv", "sys", "tmp", "usr", "var")
# Names that must never be in a layer, whatever the exclusions say: the build fails on one.
SECRET_PATTERNS = ("*.key", "*.seed", "slurmdbd.conf", "id_rsa*", "id_ecdsa*", "id_ed25519*", "*.jwt", "*.token",
                   "*/.ssh/*", "etc/ssl/private/*", "*/hooks-tokens/*", "hooks.env", "debian.cnf")

# The pyslurm variant's Debian packages: what libslurm's client plugins link (auth/munge, auth/jwt, the
# JSON and YAML serializers, the HTTP parser) and munged for the chart's sidecar. Their dependencies
# the base lacks come along (``dependency_closure``).
PYSLURM_PACKAGES = ("munge", "libmunge2", "libjwt0", "libjson-c5", "libyaml-0-2", "libhttp-parser2.9")
SLURM_LIBDIR = "usr/lib"  # libslurm's, and its plugins' in SLURM_LIBDIR/slurm (slurmbuild.LIBDIR)
# Of a package's files only these go in (no init scripts, systemd units, docs or /etc defaults).
PACKAGE_KEPT = ("usr/lib/", "usr/bin/", "usr/sbin/")
PACKAGE_DROPPED = ("usr/lib/systemd/", "usr/lib/tmpfiles.d/", "usr/lib/sysusers.d/")

Phase = Callable[[str], AbstractContextManager[IO[str]]]


# -- pure: image configuration and archive manifest -------------------------------------------------

@attrs.frozen
class ImageSpec:
    """What an image says besides its layers: its name, user, environment and command."""

    name: str
    user: str
    env: tuple[str, ...]
    cmd: tuple[str, ...]
    entrypoint: tuple[str, ...] = ()
    working_dir: str = "/"
    ports: tuple[int, ...] = ()  # ExposedPorts (TCP): documentation for whoever runs it, as a Dockerfile's EXPOSE


@attrs.frozen
class Layer:
    """A layer written to a file: its diff_id is the sha256 of the uncompressed tar."""

    path: Path
    diff_id: str
    size: int


def sunk_spec(version: str) -> ImageSpec:
    """sunk's image: the venv first on PATH (the chart runs `command: [sunk-syncer]`), uid 65532.

    No Entrypoint, so a Pod's ``command`` and ``args`` are all that run.
    """
    return ImageSpec(
        name=f"{SUNK_REPOSITORY}:{version}",
        user=f"{NONROOT_UID}:{NONROOT_UID}",
        env=(f"PATH={VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
             "PYTHONUNBUFFERED=1", "LANG=C.UTF-8"),
        cmd=("sunk-syncer", "--help"),
    )


def pyslurm_tag(version: str, release: str) -> str:
    """The pyslurm variant's tag, which the chart's ``slurm.backend: pyslurm`` picks: ``0.1.0-slurm25.11``."""
    return f"{version}-slurm{release}"


def pyslurm_spec(version: str, release: str) -> ImageSpec:
    """sunk's image with libslurm's directory on the loader's path: pyslurm's modules carry the
    RUNPATH of the machine that built them, and libslurmfull lives in ``/usr/lib/slurm``."""
    spec = sunk_spec(version)
    return attrs.evolve(spec, name=f"{SUNK_REPOSITORY}:{pyslurm_tag(version, release)}",
                        env=(*spec.env, f"LD_LIBRARY_PATH=/{SLURM_LIBDIR}/slurm"))


def image_config(spec: ImageSpec, diff_ids: Sequence[str], arch: str) -> dict:
    """The image's config blob: diff_ids bottom layer first, as the layers are applied."""
    config: dict = {"User": spec.user, "Env": list(spec.env), "Cmd": list(spec.cmd), "WorkingDir": spec.working_dir}
    if spec.entrypoint:
        config["Entrypoint"] = list(spec.entrypoint)
    if spec.ports:
        config["ExposedPorts"] = {f"{port}/tcp": {} for port in spec.ports}
    return {
        "architecture": arch, "os": "linux", "config": config,
        "rootfs": {"type": "layers", "diff_ids": list(diff_ids)},
        "history": [{"created_by": "sunk_dev.images"} for _ in diff_ids],
    }


def config_bytes(config: dict) -> bytes:
    """Canonical JSON, so that the same image always has the same ID."""
    return json.dumps(config, sort_keys=True, separators=(",", ":")).encode()


def image_id(config: bytes) -> str:
    return "sha256:" + hashlib.sha256(config).hexdigest()


def layer_member(diff_id: str) -> str:
    return diff_id.removeprefix("sha256:") + "/layer.tar"


def archive_manifest(name: str, config_member: str, diff_ids: Sequence[str]) -> list[dict]:
    """``manifest.json`` of a docker archive: one image, its tag, its layers in order."""
    return [{"Config": config_member, "RepoTags": [name], "Layers": [layer_member(d) for d in diff_ids]}]


def archive_metadata(spec: ImageSpec, diff_ids: Sequence[str], arch: str) -> tuple[str, bytes, bytes]:
    """The config's member name (its digest, as ``docker save`` names it), the config, manifest.json."""
    config = config_bytes(image_config(spec, diff_ids, arch))
    member = image_id(config).removeprefix("sha256:") + ".json"
    return member, config, json.dumps(archive_manifest(spec.name, member, diff_ids)).encode()


def go_arch(machine: str) -> str:
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


# -- pure: cache keys ----------------------------------------------------------------------------

def digest(*parts: str | bytes) -> str:
    """A short hash of the parts, each length-prefixed (so that ("ab", "c") != ("a", "bc"))."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()[:12]


def requirements(setup_cfg: str) -> tuple[str, ...]:
    """install_requires of setup.cfg: what the base layer's venv holds."""
    parser = configparser.ConfigParser()
    parser.read_string(setup_cfg)
    lines = parser.get("options", "install_requires", fallback="").splitlines()
    return tuple(line.strip() for line in lines if line.strip() and not line.strip().startswith("#"))


def base_key(suite: str, mirror: str, packages: Sequence[str], reqs: Sequence[str], arch: str) -> str:
    """The sunk image's base layer (rootfs, python3, the venv with the dependencies)."""
    return digest(RECIPE, suite, mirror, PYTHON, arch, VENV, str(NONROOT_UID), " ".join(sorted(packages)),
                  "\n".join(sorted(reqs)), " ".join(BUILD_REQUIREMENTS), "\n".join(ROOTFS_EMPTIED),
                  " ".join(ROOT_ENTRIES))


def sources_key(files: Iterable[tuple[str, bytes]]) -> str:
    """The project's files that make its wheel, by path and content (order does not matter)."""
    return digest(*(part for name, data in sorted(files) for part in (name, data)))


def app_key(base: str, sources: str) -> str:
    return digest(RECIPE, base, sources)


def pyslurm_key(base: str, chroot_name: str, dpkg_status: bytes, wheel_sha256: str) -> str:
    """The pyslurm layer: the base it goes on, the Slurm build (the chroot, named by its tarball's
    checksum, and its packages), the wheel, and what is taken."""
    return digest(RECIPE, base, chroot_name, dpkg_status, wheel_sha256, " ".join(PYSLURM_PACKAGES),
                  " ".join(PACKAGE_KEPT), " ".join(PACKAGE_DROPPED))


# -- pure: what goes into a layer ------------------------------------------------------------------

def excluded(name: str, emptied: Sequence[str], top: Optional[Sequence[str]] = ROOT_ENTRIES) -> bool:
    """Whether the path ``name`` (relative, no leading slash) stays out of the layer.

    ``top``: the entries allowed at the top (None: any).
    """
    if top is not None and name.partition("/")[0] not in top:
        return True
    return any(name.startswith(directory + "/") for directory in emptied)


def secrets_in(names: Iterable[str]) -> list[str]:
    """The layer members that look like keys or passwords."""
    found = []
    for name in names:
        base = name.rsplit("/", 1)[-1]
        if any(fnmatch.fnmatch(base, p) or fnmatch.fnmatch(name, p) for p in SECRET_PATTERNS):
            found.append(name)
    return found


def passwd_entry(existing: str) -> str:
    """/etc/passwd with the image's non-root user appended (unless it is there)."""
    line = f"{NONROOT_NAME}:x:{NONROOT_UID}:{NONROOT_UID}::/home/{NONROOT_NAME}:/usr/sbin/nologin\n"
    if any(entry.split(":")[2:3] == [str(NONROOT_UID)] for entry in existing.splitlines()):
        return existing
    return existing + ("" if existing.endswith("\n") or not existing else "\n") + line


def group_entry(existing: str) -> str:
    line = f"{NONROOT_NAME}:x:{NONROOT_UID}:\n"
    if any(entry.split(":")[2:3] == [str(NONROOT_UID)] for entry in existing.splitlines()):
        return existing
    return existing + ("" if existing.endswith("\n") or not existing else "\n") + line


def installed_packages(dpkg_status: str) -> dict[str, tuple[tuple[str, ...], ...]]:
    """dpkg's status file: each installed package and its Pre-Depends and Depends, each dependency
    its alternatives' names (versions and architectures dropped)."""
    out: dict[str, tuple[tuple[str, ...], ...]] = {}
    for stanza in dpkg_status.split("\n\n"):
        fields: dict[str, str] = {}
        key = ""
        for line in stanza.splitlines():
            if line[:1] in (" ", "\t") and key:
                fields[key] += " " + line.strip()
            elif ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        if "Package" not in fields or not fields.get("Status", "").endswith(" installed"):
            continue
        deps = ", ".join(d for d in (fields.get("Pre-Depends", ""), fields.get("Depends", "")) if d)
        out[fields["Package"]] = tuple(
            tuple(alt.split("(")[0].strip().split(":")[0] for alt in group.split("|"))
            for group in deps.split(",") if group.strip())
    return out


def dependency_closure(roots: Iterable[str], chroot: Mapping[str, tuple[tuple[str, ...], ...]],
                       base: Iterable[str]) -> tuple[str, ...]:
    """The packages to take from the chroot: ``roots`` and what they depend on, transitively, except
    what the base has. A dependency met by an alternative the base has needs nothing; otherwise its
    first alternative the chroot has installed is taken. A root the chroot lacks is an error."""
    have = set(base)
    missing = [r for r in roots if r not in chroot and r not in have]
    if missing:
        raise ValueError(f"not installed in the chroot: {', '.join(missing)}")
    taken: list[str] = []
    queue = [r for r in roots if r not in have]
    while queue:
        package = queue.pop(0)
        if package in taken:
            continue
        taken.append(package)
        for alternatives in chroot[package]:
            if any(a in have or a in taken for a in alternatives):
                continue
            chosen = next((a for a in alternatives if a in chroot), None)
            if chosen is not None:  # (none: a virtual package the base provides)
                queue.append(chosen)
    return tuple(sorted(taken))


def package_member(path: str, merged_usr: Mapping[str, str]) -> Optional[str]:
    """A path of dpkg's file list as the layer names it, or None when it stays out. On a merged-/usr
    root (``lib -> usr/lib``) the path goes under the directory its top symlink names, so that the
    layer never holds ``lib`` itself (a directory there would hide the base's symlink)."""
    name = listed_member(path, merged_usr)
    if not name.startswith(PACKAGE_KEPT) or name.startswith(PACKAGE_DROPPED):
        return None
    return name


def listed_member(path: str, merged_usr: Mapping[str, str]) -> str:
    """A path of dpkg's file list as a layer names it: relative, under usr on a merged-/usr root."""
    name = path.lstrip("/")
    top, _, rest = name.partition("/")
    if top in merged_usr and rest:
        name = f"{merged_usr[top]}/{rest}"
    return name


def slurm_library(name: str) -> bool:
    """Whether a path of the Slurm build (under ``/usr/lib``) goes into the pyslurm layer: the shared
    libraries libslurm and its plugins, not their static archives or libtool files."""
    directory, _, base = name.rpartition("/")
    if directory == SLURM_LIBDIR:
        return base.startswith("libslurm") and ".so" in base
    return directory == f"{SLURM_LIBDIR}/slurm" and base.endswith(".so")


def parents(names: Iterable[str]) -> list[str]:
    """Every directory above the names, outermost first (a layer's entries for them)."""
    out: set[str] = set()
    for name in names:
        parts = name.split("/")[:-1]
        out.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
    return sorted(out, key=lambda d: (d.count("/"), d))


def download_argv(wheelhouse: Path, reqs: Sequence[str], machine: str) -> list[str]:
    """pip download of the venv's wheels for the image's Python, whatever Python runs sunk-dev."""
    platforms = [f"manylinux_2_{minor}_{machine}" for minor in (36, 34, 31, 28, 17)]
    platforms += [f"manylinux2014_{machine}", f"manylinux2010_{machine}", f"manylinux1_{machine}"]
    return [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-cache-dir",
            "--dest", str(wheelhouse), "--only-binary=:all:", "--python-version", PYTHON,
            "--implementation", "cp", "--abi", "cp" + PYTHON.replace(".", ""),
            *(arg for p in platforms for arg in ("--platform", p)),
            *reqs, "pip", *BUILD_REQUIREMENTS]


# -- I/O: layers -------------------------------------------------------------------------------------

def walk(root: Path, emptied: Sequence[str], top: Optional[Sequence[str]] = ROOT_ENTRIES,
         ) -> Iterator[tuple[Path, str]]:
    """Every path under ``root`` that goes into the layer, depth first in name order.

    Stays on root's file system: a mount inside it (the chroot's /proc) is never read.
    """
    device = root.lstat().st_dev

    def under(directory: Path, rel: str) -> Iterator[tuple[Path, str]]:
        with os.scandir(directory) as it:
            entries = sorted(((f"{rel}/{e.name}" if rel else e.name), e) for e in it)
        for name, entry in entries:
            if excluded(name, emptied, top):
                continue
            yield Path(entry.path), name
            if entry.is_dir(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_dev == device:
                yield from under(Path(entry.path), name)

    return under(root, "")


def _anonymous(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uname = info.gname = ""  # the host's names for these ids mean nothing in the image
    return info


def write_layer(path: Path, members: Iterable[tuple[Path, str]],
                normalize: Callable[[tarfile.TarInfo], tarfile.TarInfo] = _anonymous) -> Layer:
    """Write the members (host path, name in the image) as an uncompressed tar, then hash it.

    ``normalize``: each member's header before it is written (names of owners dropped, by default).
    """
    partial = path.with_name(path.name + ".partial")
    names = []
    with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as tar:
        for source, name in members:
            tar.add(str(source), arcname=name, recursive=False, filter=normalize)
            names.append(name)
    if leaked := secrets_in(names):
        partial.unlink()
        raise RuntimeError(f"refusing to write layer {path}: it would hold secrets: {', '.join(leaked[:10])}")
    partial.rename(path)
    return Layer(path, "sha256:" + _sha256_file(path), path.stat().st_size)


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _save_layer(directory: Path, layer: Layer) -> None:
    (directory / "layer.json").write_text(json.dumps({"diff_id": layer.diff_id, "size": layer.size}))


def _load_layer(directory: Path) -> Optional[Layer]:
    """A layer cached by an earlier build (its record is written last: a crash leaves none)."""
    try:
        record = json.loads((directory / "layer.json").read_text())
    except (OSError, ValueError):
        return None
    path = directory / "layer.tar"
    if not path.exists() or path.stat().st_size != record["size"]:
        return None
    return Layer(path, record["diff_id"], record["size"])


def write_archive(path: Path, spec: ImageSpec, layers: Sequence[Layer], arch: str) -> str:
    """A docker archive of the layers (streamed from their files); returns the image ID.

    Skipped when ``path`` already holds this very image (its ID is recorded beside it).
    """
    config_member, config, manifest = archive_metadata(spec, [layer.diff_id for layer in layers], arch)
    ident = image_id(config)
    stamp = path.with_name(path.name + ".id")
    if path.exists() and stamp.exists() and stamp.read_text() == ident:
        return ident
    partial = path.with_name(path.name + ".partial")
    with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as tar:
        for layer in layers:
            tar.add(str(layer.path), arcname=layer_member(layer.diff_id), recursive=False, filter=_anonymous)
        for member, data in ((config_member, config), ("manifest.json", manifest)):
            info = tarfile.TarInfo(member)
            info.size, info.mtime, info.mode = len(data), 0, 0o644  # (mtime 0: the same image, the same bytes)
            tar.addfile(info, io.BytesIO(data))
    partial.rename(path)
    stamp.write_text(ident)
    return ident


def _run(argv: Sequence[str], log: IO[str], **kwargs) -> None:
    print("+ " + " ".join(argv), file=log, flush=True)
    subprocess.run(list(argv), check=True, stdout=log, stderr=log, **kwargs)


def _chroot(root: Path, argv: Sequence[str], log: IO[str]) -> None:
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}
    _run(["chroot", str(root), *argv], log, env=env)


def _remove(directory: Path) -> None:
    """rm -rf, after unmounting what a killed debootstrap left mounted in it (its /proc, /sys)."""
    if not directory.exists():
        return
    inside = str(directory.resolve()) + "/"
    with open("/proc/mounts") as mounts:
        targets = [line.split()[1] for line in mounts if line.split()[1].startswith(inside)]
    for target in sorted(targets, reverse=True):
        subprocess.run(["umount", "-l", target], check=False)
    shutil.rmtree(directory, ignore_errors=True)


def superseded_slurmd(names: Iterable[str]) -> list[str]:
    """The dev-only slurmd images' layer directories and archives (``slurmd-<hash>``, ``slurmd.tar``, then
    one per release: ``slurmd-<release>-<hash>``, ``slurmd-<release>.tar``, with their stamps): the real
    Node now runs the shipped ``sunk-slurmd`` image (``sunk_dev.slurmimages``), so nothing uses them."""
    old = re.compile(r"slurmd-([0-9]+\.[0-9]+-)?[0-9a-f]{12}|slurmd(-[0-9]+\.[0-9]+)?\.tar(\.id|\.imported|\.partial)?")
    return sorted(name for name in names if old.fullmatch(name))


def _remove_superseded_slurmd(images: Path) -> None:
    for name in superseded_slurmd(p.name for p in images.iterdir()):
        path = images / name
        if path.is_dir():
            _remove(path)
        else:
            path.unlink(missing_ok=True)


def _prune(directory: Path, prefix: str, keep: Path) -> None:
    """Layers of other keys: a dev cache keeps only the current one of each kind."""
    for old in directory.glob(prefix + "*"):
        if old != keep and old.is_dir():
            _remove(old)


# -- I/O: the sunk image ---------------------------------------------------------------------------

@attrs.frozen
class Built:
    """An image written as a docker archive, ready for ``ctr images import``."""

    name: str
    archive: Path
    image_id: str
    layers: tuple[Layer, ...]


def project_files(project: Path) -> Iterator[tuple[str, Path]]:
    """The files of ``SOURCES`` under the project (no bytecode, no build leftovers)."""
    for top in SOURCES:
        path = project / top
        if path.is_file():
            yield top, path
            continue
        for dirpath, dirnames, filenames in os.walk(path):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.endswith(".egg-info"))
            for filename in sorted(filenames):
                if not filename.endswith((".pyc", ".pyo")):
                    full = Path(dirpath) / filename
                    yield str(full.relative_to(project)), full


def ensure_sunk_base(images: Path, project: Path, log: IO[str], mirror: str = devchroot.MIRROR) -> tuple[Path, Layer]:
    """The base rootfs (debootstrap, python3, the venv with the dependencies) and its layer.

    The rootfs is kept beside the layer: the app layer is installed with its Python.
    """
    reqs = requirements((project / "setup.cfg").read_text())
    machine = platform.machine()
    directory = images / f"sunk-base-{base_key(SUNK_SUITE, mirror, SUNK_PACKAGES, reqs, go_arch(machine))}"
    if (layer := _load_layer(directory)) is not None:
        return directory / "rootfs", layer
    _remove(directory)
    directory.mkdir(parents=True)
    rootfs, wheelhouse = directory / "rootfs", directory / "wheels"
    _run(["debootstrap", "--variant=minbase", f"--include={','.join(SUNK_PACKAGES)}", SUNK_SUITE, str(rootfs),
          mirror], log)
    _run(download_argv(wheelhouse, reqs, machine), log)
    (rootfs / "etc/passwd").write_text(passwd_entry((rootfs / "etc/passwd").read_text()))
    (rootfs / "etc/group").write_text(group_entry((rootfs / "etc/group").read_text()))
    home = rootfs / "home" / NONROOT_NAME
    home.mkdir(parents=True, exist_ok=True)
    os.chown(home, NONROOT_UID, NONROOT_UID)
    inside = rootfs / "tmp/wheels"
    shutil.copytree(wheelhouse, inside)
    pip = _pip_in_image(wheelhouse)
    try:
        # Debian's python3 without python3-venv has no ensurepip: the venv gets no pip of its own,
        # and pip runs from its wheel (so no pip is left in the image either).
        _chroot(rootfs, ["python3", "-m", "venv", "--without-pip", VENV], log)
        _chroot(rootfs, [f"{VENV}/bin/python", f"/tmp/wheels/{pip}/pip", "install", "--no-index", "--no-cache-dir",
                         "--disable-pip-version-check", "--find-links", "/tmp/wheels", *reqs], log)
    finally:
        shutil.rmtree(inside, ignore_errors=True)
    layer = write_layer(directory / "layer.tar", walk(rootfs, ROOTFS_EMPTIED))
    _save_layer(directory, layer)
    _prune(images, "sunk-base-", directory)
    return rootfs, layer


def _pip_in_image(wheelhouse: Path) -> str:
    wheels = sorted(wheelhouse.glob("pip-*.whl"))
    if not wheels:
        raise RuntimeError(f"no pip wheel in {wheelhouse}")
    return wheels[-1].name


def ensure_sunk_app(images: Path, project: Path, rootfs: Path, base: Layer, log: IO[str]) -> Layer:
    """The project's wheel installed into the venv: a layer of its own, rebuilt when a source changes."""
    files = list(project_files(project))
    key = app_key(base.diff_id, sources_key((name, path.read_bytes()) for name, path in files))
    directory = images / f"sunk-app-{key}"
    if (layer := _load_layer(directory)) is not None:
        return layer
    _remove(directory)
    directory.mkdir(parents=True)
    wheelhouse = rootfs.parent / "wheels"
    with tempfile.TemporaryDirectory(prefix="sunk-wheel-") as tmp:
        source = Path(tmp) / "src"
        for name, path in files:  # a copy: building in the checkout would leave build/ and egg-info in it
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, source / name)
        _run([sys.executable, "-m", "pip", "wheel", "--disable-pip-version-check", "--no-cache-dir", "--no-deps",
              "--no-index", "--find-links", str(wheelhouse), "--wheel-dir", str(Path(tmp) / "dist"), str(source)],
             log)
        (wheel,) = (Path(tmp) / "dist").glob("*.whl")
        stage = rootfs / "tmp/sunk-app"
        try:
            layer = write_layer(directory / "layer.tar", app_members(_pip_target(rootfs, wheel, stage, log)))
        finally:
            shutil.rmtree(stage, ignore_errors=True)
    _save_layer(directory, layer)
    _prune(images, "sunk-app-", directory)
    return layer


def app_members(target: Path) -> Iterator[tuple[Path, str]]:
    """pip's ``--target`` tree, mapped into the venv: packages to site-packages, scripts to bin."""
    site = f"{VENV.lstrip('/')}/lib/python{PYTHON}/site-packages"
    for path, name in walk(target, (), top=None):
        if name == "bin" or name.startswith("bin/"):
            if name != "bin":
                yield path, f"{VENV.lstrip('/')}/{name}"
        else:
            yield path, f"{site}/{name}"


def _merged_usr(root: Path) -> dict[str, str]:
    """A root's top symlinks into usr (bookworm's ``lib -> usr/lib``, ``bin``, ``sbin``, ``lib64``)."""
    out = {}
    for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = root / top
        if path.is_symlink() and (target := os.readlink(path).lstrip("/")).startswith("usr/"):
            out[top] = target
    return out


def _package_list(chroot_root: Path, package: str) -> list[str]:
    info = chroot_root / "var/lib/dpkg/info"
    for candidate in (info / f"{package}.list", *sorted(info.glob(f"{package}:*.list"))):
        if candidate.exists():
            return candidate.read_text().splitlines()
    raise RuntimeError(f"no dpkg file list of {package} in {chroot_root}")


def pyslurm_members(chroot_root: Path, base_rootfs: Path, target: Path) -> Iterator[tuple[Path, str]]:
    """The pyslurm layer's members: parent directories, libslurm and its plugins, the packages' files,
    and pip's --target tree of the wheel mapped into the venv."""
    taken = dependency_closure(
        PYSLURM_PACKAGES, installed_packages((chroot_root / "var/lib/dpkg/status").read_text()),
        installed_packages((base_rootfs / "var/lib/dpkg/status").read_text()))
    merged = _merged_usr(chroot_root)
    files: dict[str, Path] = {}
    for package in taken:
        for listed in _package_list(chroot_root, package):
            name = package_member(listed, merged)
            source = chroot_root / name if name else None
            if name and source is not None and (source.is_symlink() or source.is_file()):
                files[name] = source
    for path, name in walk(chroot_root / SLURM_LIBDIR, (), top=None):
        full = f"{SLURM_LIBDIR}/{name}"
        if slurm_library(full) and (path.is_file() or path.is_symlink()):
            files[full] = path
    for directory in parents(files):
        yield chroot_root / directory, directory
    for name in sorted(files):
        yield files[name], name
    yield from app_members(target)


def _pip_target(rootfs: Path, wheel: Path, stage: Path, log: IO[str]) -> Path:
    """``wheel`` installed with the image's Python by pip --target into ``stage/target`` (under the rootfs)."""
    wheelhouse = rootfs.parent / "wheels"
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    shutil.copy2(wheel, stage / wheel.name)
    pip = _pip_in_image(wheelhouse)
    shutil.copy2(wheelhouse / pip, stage / pip)
    inside = "/" + str(stage.relative_to(rootfs))
    _chroot(rootfs, [f"{VENV}/bin/python", f"{inside}/{pip}/pip", "install", "--no-index", "--no-deps",
                     "--no-cache-dir", "--disable-pip-version-check", "--target", f"{inside}/target",
                     f"{inside}/{wheel.name}"], log)
    return stage / "target"


def ensure_pyslurm_layer(images: Path, rootfs: Path, base: Layer, chroot_root: Path, wheel: Path,
                         log: IO[str]) -> Layer:
    """The pyslurm layer (see the module's notes), cached by ``pyslurm_key``."""
    key = pyslurm_key(base.diff_id, chroot_root.name, (chroot_root / "var/lib/dpkg/status").read_bytes(),
                      _sha256_file(wheel))
    directory = images / f"sunk-pyslurm-{key}"
    if (layer := _load_layer(directory)) is not None:
        return layer
    _remove(directory)
    directory.mkdir(parents=True)
    stage = rootfs / "tmp/sunk-pyslurm"
    try:
        target = _pip_target(rootfs, wheel, stage, log)
        layer = write_layer(directory / "layer.tar", pyslurm_members(chroot_root, rootfs, target))
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    _save_layer(directory, layer)
    _prune(images, "sunk-pyslurm-", directory)
    return layer


def build_sunk_pyslurm(images: Path, project: Path, version: str, phase: Phase, chroot_root: Path, wheel: Path,
                       release: str, archive: Optional[Path] = None) -> Built:
    """The pyslurm variant: base, pyslurm, app (the app layer last, so a source change rebuilds only it)."""
    with phase("image sunk base") as log:
        rootfs, base = ensure_sunk_base(images, project, log)
    with phase(f"image sunk pyslurm {release}") as log:
        pyslurm = ensure_pyslurm_layer(images, rootfs, base, chroot_root, wheel, log)
    with phase("image sunk app") as log:
        app = ensure_sunk_app(images, project, rootfs, base, log)
    spec = pyslurm_spec(version, release)
    archive = archive or images / f"sunk-slurm{release}.tar"
    with phase(f"image sunk pyslurm {release} archive"):
        ident = write_archive(archive, spec, (base, pyslurm, app), go_arch(platform.machine()))
    return Built(spec.name, archive, ident, (base, pyslurm, app))


def build_sunk(images: Path, project: Path, version: str, phase: Phase, mirror: str = devchroot.MIRROR,
               archive: Optional[Path] = None) -> Built:
    with phase("image sunk base") as log:
        rootfs, base = ensure_sunk_base(images, project, log, mirror)
    with phase("image sunk app") as log:
        app = ensure_sunk_app(images, project, rootfs, base, log)
    spec = sunk_spec(version)
    archive = archive or images / "sunk.tar"
    with phase("image sunk archive"):
        ident = write_archive(archive, spec, (base, app), go_arch(platform.machine()))
    return Built(spec.name, archive, ident, (base, app))


# -- I/O: containerd -----------------------------------------------------------------------------

def import_image(ctr: Callable[..., subprocess.CompletedProcess[str]], built: Built) -> None:
    """``ctr -n k8s.io images import`` (``ctr`` is ``realnode.ctr`` bound to the Node's socket)."""
    ctr("images", "import", "--snapshotter=overlayfs", str(built.archive), timeout=900)  # (hundreds of MB)
    built.archive.with_name(built.archive.name + ".imported").write_text(built.image_id)


def needs_import(have: Iterable[str], built: Built) -> bool:
    """Absent from containerd, or imported before this build (the name now means another image)."""
    stamp = built.archive.with_name(built.archive.name + ".imported")
    return built.name not in set(have) or not stamp.exists() or stamp.read_text() != built.image_id


def build_images(home: Path, project: Path, chroot_root: Path, version: str, phase: Phase,
                 release: str, pyslurm_wheel: Optional[Path] = None) -> list[Built]:
    """Build (or find cached) sunk's image under ``home/images``, and with ``pyslurm_wheel`` (a release built
    with pyslurm) sunk's pyslurm variant for that release. (The real Node's slurmd image is the shipped one,
    ``sunk_dev.slurmimages.build_slurmd_image``.)"""
    images = home / "images"
    images.mkdir(parents=True, exist_ok=True)
    _remove_superseded_slurmd(images)
    built = [build_sunk(images, project, version, phase)]
    if pyslurm_wheel is not None:
        built.append(build_sunk_pyslurm(images, project, version, phase, chroot_root, pyslurm_wheel, release))
    return built


def import_missing(ctr: Callable[..., subprocess.CompletedProcess[str]], built: Iterable[Built]) -> list[str]:
    """Import each image containerd lacks or holds an older build of; returns the names imported."""
    have = ctr("images", "ls", "-q").stdout.split()
    imported = []
    for image in built:
        if needs_import(have, image):
            import_image(ctr, image)
            imported.append(image.name)
    return imported


def ensure_images(home: Path, project: Path, chroot_root: Path, version: str, phase: Phase,
                  ctr: Callable[..., subprocess.CompletedProcess[str]], release: str) -> list[str]:
    """Build what is missing or outdated, import what containerd lacks; returns the names imported."""
    built = build_images(home, project, chroot_root, version, phase, release)
    with phase("images import"):
        return import_missing(ctr, built)


def enabled() -> bool:
    """On unless ``SUNK_DEV_IMAGES=0``: the real Node's slurmd from its own image, sunk's image imported."""
    return os.environ.get("SUNK_DEV_IMAGES", "1") not in ("0", "false", "no")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m sunk_dev.images HOME CHROOT [--slurm 26.05]``: build sunk's image and the release's shipped
    slurmd image (no import), print the archives. The slurmd image is tagged with the release of the chroot's
    Slurm, not ``SUNK_DEV_SLURM``'s (a chroot of another release would be tagged as this one); ``--slurm``
    only checks that they agree. (``sunk-dev images`` writes every image.)"""
    import argparse

    import sunk

    from .chroot import slurm_version
    from .release import of_version

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("home", type=Path)
    parser.add_argument("chroot", type=Path)
    parser.add_argument("--slurm", default=None, help="the chroot's Slurm release (sunk_dev.release), checked")
    args = parser.parse_args(argv)
    try:
        release = of_version(slurm_version(args.chroot), args.slurm)
    except ValueError as e:
        parser.error(str(e))
    project = Path(__file__).resolve().parents[2]
    log_path = args.home / "run" / "logs" / "images.log"
    from .slurmimages import build_slurmd_image

    built_images = build_images(args.home, project, args.chroot, sunk.__version__,
                                lambda name: phases.log_phase(name, log_path), release.name)
    built_images.append(build_slurmd_image(args.home / "images", args.chroot, release, sunk.__version__))
    for built in built_images:
        sizes = " + ".join(f"{layer.size / 1e6:.0f} MB" for layer in built.layers)
        print(f"{built.name} {built.image_id[:19]} {built.archive} ({sizes})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The Slurm images, one definition per role, taken from a Slurm release's chroot (docs/images.md).

Six roles per release: ``slurmctld``, ``slurmd`` (with munged), ``slurmrestd``, ``slurmdbd``,
``login`` (the client commands) and ``mariadb`` (the SlurmCluster's database: Debian's MariaDB server of
the release's suite, with an entrypoint of its own), each named
``docker.io/library/sunk-<role>:<appVersion>-slurm<release>``.
Each is two layers: one **slurm base** shared by the six (the chroot's essential system, libslurm,
its plugins, munge, the users) and one small layer of the role's own files. What goes where is
decided per file from dpkg's records: a file of a package the role needs (its packages and their
``dependency_closure``) goes into the role's layer, or into the base when two roles need it; a file
no package owns (a release built from source installs Slurm under /usr with no package) goes by
the roles' file lists. Whatever nothing asks for stays out: the compiler and build tools of a source
build, etcd, the dev cluster's state, secrets and scripts (MariaDB's server only in sunk-mariadb).

Users, as Slurm allows: slurmctld and slurmdbd run as SlurmUser (``slurm``, with the uid the chroot
gives it); slurmrestd refuses root and SlurmUser, so it has its own user; slurmd stays root (it starts
jobs as their users), and so does munged beside it; login runs as the unprivileged ``nonroot``, and MariaDB
as ``mariadb``, a user of the image's own (Debian's ``mysql`` has another uid per suite). Each uid is the
one the SlurmCluster's Pods run as (sunk.translate.slurmcluster.paths): an image whose user has another
fails the build (``check_rendered_uid``), so a Pod's runAsUser and fsGroup always match its image.

Pure parts first (roles, specs, which file goes into which layer), then the I/O.
"""

from __future__ import annotations

import fnmatch
import json
import os
import platform
import posixpath
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Optional

import attrs

from sunk.translate.slurmcluster import paths as cluster_paths

from . import images
from .images import Built, ImageSpec, Layer
from .release import SlurmRelease

IMAGE_PREFIX = "docker.io/library/sunk-"  # one repository prefix for every image this repository builds
# Bumped when how a Slurm layer is made changes, so that a cached layer made the old way is not reused.
RECIPE = "4"  # (2: the merged-/usr top links always in the base; 4: extrausers, no dev accounts)
BASE = "base"
# slurmrestd refuses to run as root or as SlurmUser: its own user, with the uid the dev cluster gives it.
SLURMRESTD_USER = "slurmrestd"
SLURMRESTD_UID = cluster_paths.SLURMRESTD_UID
SLURM_USER = "slurm"  # Debian's SlurmUser, made by its packages (uid 64030) or by the dev cluster for a source build
MARIADB_USER = "mariadb"
# Accounts the dev cluster adds to its chroots for itself (sunk_dev.cluster: kube, sunk-pods) or that its default
# release's etcd package makes: never an image's (kube has uid 1001, which a SlurmCluster's login user may take).
DEV_ACCOUNTS = ("kube", "sunk-pods", "etcd")
MARIADB_UID = cluster_paths.MARIADB_UID
PORTS = {"slurmctld": 6817, "slurmd": 6818, "slurmdbd": 6819, "slurmrestd": 6820, "mariadb": 3306}
# The uid the SlurmCluster's Pods run each role's image as (slurmd's Pods are the NodeSet template's).
RENDERED_UIDS = {"slurmctld": cluster_paths.SLURM_UID, "slurmdbd": cluster_paths.SLURM_UID,
                 "slurmrestd": cluster_paths.SLURMRESTD_UID, "login": 0,
                 "mariadb": cluster_paths.MARIADB_UID}
# Files of this repository a role's layer carries (its member name -> the file beside this module).
IMAGE_FILES_DIR = Path(__file__).parent / "imagefiles"
MARIADB_ENTRYPOINT = "usr/local/bin/sunk-mariadb-entrypoint"
SLURMD_ENTRYPOINT = "usr/local/bin/sunk-slurmd"
LOGIN_ENTRYPOINT = "usr/local/bin/sunk-login"
SSHD_CONFIG = "etc/ssh/sshd_config"
ROLE_FILES = {"mariadb": ((MARIADB_ENTRYPOINT, "mariadb-entrypoint.sh"),),
              "slurmd": ((SLURMD_ENTRYPOINT, "slurmd-entrypoint.sh"),),
              "login": ((LOGIN_ENTRYPOINT, "login-entrypoint.sh"), (SSHD_CONFIG, "sshd_config"))}
MARIADB_PACKAGES = ("mariadb-server-core", "mariadb-client-core")
ENV = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8")

CLIENT_COMMANDS = tuple(f"usr/bin/{c}" for c in (
    "sacct", "sacctmgr", "salloc", "sattach", "sbatch", "sbcast", "scancel", "scontrol", "scrontab", "sdiag",
    "sinfo", "sprio", "squeue", "sreport", "srun", "sshare", "sstat", "strigger"))

# What every role's Slurm loads, besides the essential system: Debian's plugins (auth/munge, auth/jwt and
# the rest) and munge, or for a release built from source the Debian libraries its plugins link.
# libnss-extrausers: the SlurmCluster's login users, known to login and slurmctld from a ConfigMap
# (sunk.translate.slurmcluster.users), through the base's nsswitch.conf (``with_extrausers``).
DEBIAN_BASE_PACKAGES = ("slurm-wlm-basic-plugins", "slurm-wlm-jwt-plugin", "munge", "libnss-extrausers")
SOURCE_BASE_PACKAGES = (*images.PYSLURM_PACKAGES, "libnss-extrausers")
# Never taken, even when a package depends on them: an init system has nothing to do in a container,
# nor apt without its lists.
SKIPPED_PACKAGES = ("systemd", "apt")
# Files no package owns that the base keeps: name service and loader configuration, the time zone, and
# the record of a source build's release (the users come from ``passwd_of``/``group_of``).
UNOWNED_KEPT = ("etc/ld.so.cache", "etc/localtime", "etc/timezone", "etc/environment",
                "etc/shells", "usr/share/sunk-dev/slurm-version")
GENERATED = ("etc/passwd", "etc/group", "etc/nsswitch.conf")
# Directories kept empty in the base (mount points, and where the daemons keep state and sockets:
# volumes in a Pod), with the chroot's owners and modes.
EMPTY_DIRECTORIES = ("tmp", "run", "proc", "sys", "dev", "home", "var/tmp", "etc/slurm", "etc/munge", "run/munge",
                     "var/lib/munge", "var/log/munge", "var/log/slurm", "var/spool/slurmctld", "var/spool/slurmd",
                     "var/lib/slurm")
# Names that must never be in a Slurm layer: compilers, linkers, make, headers, static libraries, dpkg-dev.
BUILD_TOOL_PATTERNS = ("usr/bin/gcc*", "usr/bin/*-gcc*", "usr/bin/cc", "usr/bin/c++", "usr/bin/g++*",
                       "usr/bin/cpp*", "usr/bin/make", "usr/bin/ld", "usr/bin/ld.bfd", "usr/bin/ld.gold", "usr/bin/as",
                       "usr/bin/*-as",
                       "usr/bin/dpkg-buildpackage", "usr/bin/dpkg-source", "usr/lib/gcc/*", "usr/libexec/gcc/*",
                       "usr/include/*", "*.a", "*.la", "usr/share/perl5/Dpkg/*", "var/cache/apt/*")


@attrs.frozen
class SlurmRole:
    """One Slurm image: what it takes and how it runs.

    ``packages``: the Debian packages of a Debian release's role (their closure comes along);
    ``source_packages``: what a role of a release built from source takes from Debian besides Slurm;
    ``files``: its files that no package owns (a source build's, Debian's alternatives links);
    ``binary``: the file that proves the image is the role's.
    """

    name: str
    image: str
    packages: tuple[str, ...]
    source_packages: tuple[str, ...]
    files: tuple[str, ...]
    user: str
    binary: str
    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...]

    @property
    def ports(self) -> tuple[int, ...]:
        return (PORTS[self.name],) if self.name in PORTS else ()


ROLES: tuple[SlurmRole, ...] = (
    SlurmRole("slurmctld", "sunk-slurmctld", ("slurmctld",), (), ("usr/sbin/slurmctld",), SLURM_USER,
              "usr/sbin/slurmctld", ("/usr/sbin/slurmctld",), ("-D",)),
    # slurmd and munged (the same image, a second container: `command: [munged, -F]`); the prolog and epilog
    # it runs call the hook API with curl and Slurm with scontrol and squeue. slurmd starts through this
    # repository's entrypoint (imagefiles/slurmd-entrypoint.sh): a dynamic node registering as its NodeSet says.
    # (libdbus: the cgroup/v2 plugin of a source build links it; Debian's plugins package brings its own)
    SlurmRole("slurmd", "sunk-slurmd", ("slurmd", "slurm-client", "munge", "curl"), ("munge", "curl", "libdbus-1-3"),
              ("usr/sbin/slurmd", "usr/sbin/slurmstepd", *CLIENT_COMMANDS), "root",
              "usr/sbin/slurmd", (f"/{SLURMD_ENTRYPOINT}",), ()),
    SlurmRole("slurmrestd", "sunk-slurmrestd", ("slurmrestd",), (), ("usr/sbin/slurmrestd",), SLURMRESTD_USER,
              "usr/sbin/slurmrestd", ("/usr/sbin/slurmrestd",), ("0.0.0.0:6820",)),
    SlurmRole("slurmdbd", "sunk-slurmdbd", ("slurmdbd", "slurm-wlm-mysql-plugin"), ("libmariadb3",),
              ("usr/sbin/slurmdbd",), SLURM_USER, "usr/sbin/slurmdbd", ("/usr/sbin/slurmdbd",), ("-D",)),
    # login: sshd as root (its privilege separation), started by this repository's entrypoint
    # (imagefiles/login-entrypoint.sh) with this repository's sshd_config (Debian's is made by its postinst, owned
    # by no package): keys of the SlurmCluster's users only, no forwarding. munged beside it, as ``nonroot``.
    SlurmRole("login", "sunk-login", ("slurm-client", "openssh-server"), ("openssh-server",), CLIENT_COMMANDS, "root",
              "usr/sbin/sshd", (f"/{LOGIN_ENTRYPOINT}",), ()),
    # The SlurmCluster's internal database: the suite's MariaDB server (Debian's in every chroot, a source
    # build's too), started by this repository's entrypoint (imagefiles/mariadb-entrypoint.sh). Its core
    # packages only (mariadbd and mariadb-install-db; my_print_defaults, which that calls): mariadb-server
    # itself adds galera, perl, rsync, socat, gawk and iproute2 (with headers), none of which a server
    # without replication or init scripts runs.
    SlurmRole("mariadb", "sunk-mariadb", MARIADB_PACKAGES, MARIADB_PACKAGES, (), MARIADB_USER,
              "usr/sbin/mariadbd", (f"/{MARIADB_ENTRYPOINT}",), ()),
)
ROLE_NAMES = tuple(role.name for role in ROLES)


def role_named(name: str) -> SlurmRole:
    return next(role for role in ROLES if role.name == name)


# -- pure: names, users, specs ---------------------------------------------------------------------

def slurm_tag(version: str, release: str) -> str:
    """``0.1.0-slurm24.11``: the chart's appVersion and the Slurm release inside."""
    return f"{version}-slurm{release}"


def image_name(role: SlurmRole, version: str, release: str) -> str:
    """``docker.io/library/sunk-slurmctld:0.1.0-slurm24.11``."""
    return f"{IMAGE_PREFIX}{role.image.removeprefix('sunk-')}:{slurm_tag(version, release)}"


def ensure_user(passwd: str, group: str, name: str, uid: int) -> tuple[str, str]:
    """/etc/passwd and /etc/group with a nologin user ``name`` (its own group, gid = uid), unless the name is there."""
    def has(text: str) -> bool:
        return any(line.split(":", 1)[0] == name for line in text.splitlines())

    def appended(text: str, line: str) -> str:
        return text + ("" if text.endswith("\n") or not text else "\n") + line

    if not has(passwd):
        passwd = appended(passwd, f"{name}:x:{uid}:{uid}::/nonexistent:/usr/sbin/nologin\n")
    if not has(group):
        group = appended(group, f"{name}:x:{uid}:\n")
    return passwd, group


def without_accounts(text: str, names: Iterable[str]) -> str:
    """/etc/passwd or /etc/group without the lines of ``names``."""
    dropped = set(names)
    return "".join(f"{line}\n" for line in text.splitlines() if line.split(":", 1)[0] not in dropped)


def image_users(passwd: str, group: str) -> tuple[str, str]:
    """The base layer's users: the chroot's but the dev cluster's (``DEV_ACCOUNTS``), plus slurmrestd's, login's
    and MariaDB's own."""
    passwd, group = without_accounts(passwd, DEV_ACCOUNTS), without_accounts(group, DEV_ACCOUNTS)
    passwd, group = ensure_user(passwd, group, SLURMRESTD_USER, SLURMRESTD_UID)
    passwd, group = ensure_user(passwd, group, MARIADB_USER, MARIADB_UID)
    return ensure_user(passwd, group, images.NONROOT_NAME, images.NONROOT_UID)


def with_extrausers(nsswitch: str) -> str:
    """nsswitch.conf whose passwd and group databases look in libnss-extrausers' files after ``files``."""
    out = []
    for line in nsswitch.splitlines():
        database, _, sources = line.partition(":")
        if database.strip() in ("passwd", "group") and "extrausers" not in sources.split():
            line = f"{line.rstrip()} extrausers"
        out.append(line)
    return "\n".join(out) + "\n"


def image_etc(passwd: str, group: str, nsswitch: str) -> tuple[str, str, str]:
    """The base layer's ``GENERATED`` files, from the chroot's."""
    return (*image_users(passwd, group), with_extrausers(nsswitch))


def user_ids(passwd: str, name: str) -> str:
    """``uid:gid`` of ``name``: the image's User by number (a runtime checks runAsNonRoot by number).
    ValueError when the image has no such user."""
    for line in passwd.splitlines():
        fields = line.split(":")
        if len(fields) >= 4 and fields[0] == name:
            return f"{int(fields[2])}:{int(fields[3])}"
    raise ValueError(f"no user {name!r} in the image's /etc/passwd")


def check_rendered_uid(role: SlurmRole, user: str) -> None:
    """ValueError when the image's ``uid:gid`` is not what the SlurmCluster's Pods run the role as: their
    runAsUser would be another user than the files the image gives its own, and fsGroup another owner."""
    wanted = RENDERED_UIDS.get(role.name)
    if wanted is not None and int(user.split(":")[0]) != wanted:
        raise ValueError(f"the {role.name} image's user {role.user} is {user}, but the SlurmCluster's Pods run it as "
                         f"uid {wanted} (sunk/translate/slurmcluster/paths.py)")


def slurm_spec(role: SlurmRole, version: str, release: str, passwd: str) -> ImageSpec:
    """A role's image: its name, its user by number, its daemon in the foreground, its port."""
    user = user_ids(passwd, role.user)
    check_rendered_uid(role, user)
    return ImageSpec(name=image_name(role, version, release), user=user, env=ENV,
                     cmd=role.cmd, entrypoint=role.entrypoint, ports=role.ports)


def role_files(role: str) -> tuple[tuple[str, Path], ...]:
    """The files of this repository ``role``'s layer carries: member name and source."""
    return tuple((name, IMAGE_FILES_DIR / source) for name, source in ROLE_FILES.get(role, ()))


# -- pure: which file goes into which layer -------------------------------------------------------

def required_packages(dpkg_status: str) -> tuple[str, ...]:
    """The installed packages a minimal Debian system is (Essential, or of priority required), sorted."""
    out = []
    for stanza in dpkg_status.split("\n\n"):
        fields = dict(line.split(":", 1) for line in stanza.splitlines() if ":" in line and line[:1] not in " \t")
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        if "Package" in fields and fields.get("Status", "").endswith(" installed") and (
                fields.get("Essential") == "yes" or fields.get("Priority") == "required"):
            out.append(fields["Package"])
    return tuple(sorted(out))


@attrs.frozen
class LayerPlan:
    """Which packages go into the base and into each role's layer (a package two roles need is the base's)."""

    base: frozenset[str]
    roles: Mapping[str, frozenset[str]]


def plan_packages(dpkg_status: str, from_source: bool, roles: Sequence[SlurmRole] = ROLES) -> LayerPlan:
    chroot = images.installed_packages(dpkg_status)
    roots = [p for p in required_packages(dpkg_status) if p not in SKIPPED_PACKAGES]
    roots += SOURCE_BASE_PACKAGES if from_source else DEBIAN_BASE_PACKAGES
    base = set(images.dependency_closure(roots, chroot, SKIPPED_PACKAGES))
    closures = {role.name: set(images.dependency_closure(
        role.source_packages if from_source else role.packages, chroot, base | set(SKIPPED_PACKAGES)))
        for role in roles}
    shared = {p for name, packages in closures.items() for p in packages
              if any(p in other for o, other in closures.items() if o != name)}
    return LayerPlan(frozenset(base | shared), {name: frozenset(p - shared) for name, p in closures.items()})


def layer_of(name: str, owner: Optional[str], plan: LayerPlan, roles: Sequence[SlurmRole] = ROLES) -> Optional[str]:
    """The layer a file of the chroot goes into (``base`` or a role's name), or None: it stays out.

    A packaged file follows its package; a file no package owns follows the roles' file lists (two roles:
    the base), else the base keeps it only if it is libslurm, a plugin or one of ``UNOWNED_KEPT``.
    """
    if name in GENERATED:
        return None  # (written by image_etc)
    if owner is not None:
        if owner in plan.base:
            return BASE
        return next((role for role, packages in plan.roles.items() if owner in packages), None)
    wanted = [role.name for role in roles if name in role.files]
    if len(wanted) > 1:
        return BASE
    if wanted:
        return wanted[0]
    if images.slurm_library(name) or name in UNOWNED_KEPT:
        return BASE
    return None


def resolve_link(name: str, links: Mapping[str, str], merged_usr: Mapping[str, str]) -> str:
    """Where a chain of symlinks ends, as a layer's member name (``usr/bin/awk`` -> ``etc/alternatives/awk``
    -> ``usr/bin/mawk``): absolute targets are read inside the chroot, on a merged-/usr root under usr."""
    seen = {name}
    while name in links:
        target = links[name]
        name = posixpath.normpath(target.lstrip("/") if target.startswith("/") else
                                  posixpath.join(posixpath.dirname(name), target))
        top, _, rest = name.partition("/")
        if top in merged_usr and rest:
            name = f"{merged_usr[top]}/{rest}"
        if name in seen:
            break
        seen.add(name)
    return name


def with_merged_usr(assigned: Mapping[str, str], merged_usr: Mapping[str, str]) -> dict[str, str]:
    """``assigned`` plus the root's top symlinks into usr (``lib -> usr/lib``, ``bin``, ``sbin``, ``lib64``) in
    the base: every binary's interpreter is ``/lib64/ld-linux-x86-64.so.2``, a link to ``/lib/...``. No package
    owns them on bookworm (the 25.11 build's suite), so the ownership rules alone left ``lib`` out, and the
    25.11 slurmd image's slurmd failed with "exec /usr/sbin/slurmd: no such file or directory"."""
    return {**assigned, **dict.fromkeys(merged_usr, BASE)}


def assign(files: Iterable[str], owners: Mapping[str, str], links: Mapping[str, str],
           merged_usr: Mapping[str, str], plan: LayerPlan, roles: Sequence[SlurmRole] = ROLES) -> dict[str, str]:
    """Every file (not directory) of the chroot that goes into a layer, and its layer. A symlink no
    package owns and no role names (an alternative: ``usr/bin/awk``) goes where its target goes."""
    out: dict[str, str] = {}
    pending = []
    for name in files:
        layer = layer_of(name, owners.get(name), plan, roles)
        if layer is not None:
            out[name] = layer
        elif name in links and name not in owners:
            pending.append(name)
    for name in pending:
        end = resolve_link(name, links, merged_usr)
        if end in out:
            out[name] = out[end]
    return out


def build_tools_in(names: Iterable[str]) -> list[str]:
    """The members that are compilers, build tools or their inputs (headers, static libraries)."""
    return [n for n in names if any(fnmatch.fnmatch(n, p) for p in BUILD_TOOL_PATTERNS)]


def layers_key(chroot_name: str, dpkg_status: bytes, *etc: bytes) -> str:
    """The Slurm layers of a chroot: its packages, its ``GENERATED`` files, and how the layers are made."""
    own = b"".join(name.encode() + b"\0" + path.read_bytes() for role in ROLE_NAMES for name, path in role_files(role))
    return images.digest(RECIPE, chroot_name, dpkg_status, *etc, repr(ROLES), own, " ".join(SKIPPED_PACKAGES),
                         " ".join(UNOWNED_KEPT), " ".join(EMPTY_DIRECTORIES), "\n".join(images.SLURMD_EMPTIED),
                         " ".join(DEBIAN_BASE_PACKAGES), " ".join(SOURCE_BASE_PACKAGES))


def archive_file(name: str) -> str:
    """The archive's file name for an image: ``sunk-slurmctld_0.1.0-slurm24.11.tar``."""
    return name.rsplit("/", 1)[-1].replace(":", "_") + ".tar"


def index(built: Iterable[Built], out: Path) -> tuple[str, str]:
    """``index.json`` and ``images.txt``: each image's name, ID and archive (relative to ``out``)."""
    rows = [{"name": b.name, "image_id": b.image_id, "archive": str(b.archive.relative_to(out))} for b in built]
    text = "".join(f"{r['name']} {r['image_id']} {r['archive']}\n" for r in rows)
    return json.dumps(rows, indent=2) + "\n", text


# -- I/O ------------------------------------------------------------------------------------------

def dpkg_owners(root: Path, merged_usr: Mapping[str, str]) -> dict[str, str]:
    """Each file dpkg installed in the chroot, as a layer names it, and its package."""
    owners: dict[str, str] = {}
    for listing in sorted((root / "var/lib/dpkg/info").glob("*.list")):
        package = listing.stem.split(":")[0]
        for line in listing.read_text().splitlines():
            name = images.listed_member(line, merged_usr)
            if name:
                owners.setdefault(name, package)
    return owners


def _normalized(info):  # type: ignore[no-untyped-def]
    """Reproducible members: no owner names, one mtime (no Python inside to need its sources' mtimes)."""
    info.uname = info.gname = ""
    info.mtime = 0
    return info


def _write_layers(root: Path, release: SlurmRelease, directories: Mapping[str, Path], users: tuple[str, str, str],
                  log: Callable[[str], None]) -> dict[str, Layer]:
    """Walk the chroot once, sort its files into the layers, write each."""
    merged = images._merged_usr(root)
    owners = dpkg_owners(root, merged)
    plan = plan_packages((root / "var/lib/dpkg/status").read_text(), release.source is not None)
    files, links = [], {}
    for path, name in images.walk(root, images.SLURMD_EMPTIED):
        if path.is_symlink():
            links[name] = os.readlink(path)
            files.append(name)
        elif not path.is_dir():
            files.append(name)
    assigned = with_merged_usr(assign(files, owners, links, merged, plan), merged)
    stage = directories[BASE] / "stage"
    stage.mkdir(parents=True, exist_ok=True)
    for name, text in zip(GENERATED, users, strict=True):
        (stage / name).parent.mkdir(parents=True, exist_ok=True)
        (stage / name).write_text(text)
        (stage / name).chmod(0o644)
    out = {}
    for layer, directory in directories.items():
        names = sorted(n for n, where in assigned.items() if where == layer)
        empty = [f"{d}/." for d in EMPTY_DIRECTORIES if (root / d).is_dir() and not (root / d).is_symlink()]
        if layer == BASE:
            names = sorted([*names, *GENERATED])
        if tools := build_tools_in(names):
            raise RuntimeError(f"the {layer} layer would hold build tools: {', '.join(tools[:10])}")
        own = role_files(layer)
        for name, source in own:  # staged: a member's mode is the staged file's
            (stage / name).parent.mkdir(parents=True, exist_ok=True)
            (stage / name).write_bytes(source.read_bytes())
            (stage / name).chmod(0o755 if name.startswith("usr/local/bin/") else 0o644)
        names_own = [name for name, _ in own]
        members = [(root / d, d) for d in images.parents([*names, *names_own, *(empty if layer == BASE else ())])]
        members += [((stage if n in GENERATED else root) / n, n) for n in names]
        members += [(stage / n, n) for n in names_own]
        log(f"slurm layer {layer}: {len(names)} files")
        out[layer] = images.write_layer(directory / "layer.tar", members, normalize=_normalized)
        images._save_layer(directory, out[layer])
    return out


def _role_layers(images_dir: Path, chroot_root: Path, release: SlurmRelease,
                 log: Callable[[str], None]) -> tuple[dict[str, Layer], str]:
    """The base layer and one per role, cached in ``images_dir`` (written again only when the chroot's
    packages or users, or this recipe, change), and the image user line of the chroot's passwd."""
    chroot_etc = [(chroot_root / f).read_text() for f in GENERATED]
    users = image_etc(*chroot_etc)
    key = layers_key(chroot_root.name, (chroot_root / "var/lib/dpkg/status").read_bytes(),
                     *(text.encode() for text in chroot_etc))
    directories = {layer: images_dir / f"slurm-{release.name}-{layer}-{key}" for layer in (BASE, *ROLE_NAMES)}
    layers = {layer: images._load_layer(d) for layer, d in directories.items()}
    if any(layer is None for layer in layers.values()):
        for directory in directories.values():
            images._remove(directory)
            directory.mkdir(parents=True)
        written = _write_layers(chroot_root, release, directories, users, log)
        for layer, directory in directories.items():
            images._prune(images_dir, f"slurm-{release.name}-{layer}-", directory)
            images._remove(directory / "stage")
    else:
        written = {layer: found for layer, found in layers.items() if found is not None}
    return written, users[0]


def _archive(out: Path, role: SlurmRole, layers: Mapping[str, Layer], passwd: str, version: str,
             release: str) -> Built:
    spec = slurm_spec(role, version, release, passwd)
    out.mkdir(parents=True, exist_ok=True)
    archive = out / archive_file(spec.name)
    pair = (layers[BASE], layers[role.name])
    ident = images.write_archive(archive, spec, pair, images.go_arch(platform.machine()))
    return Built(spec.name, archive, ident, pair)


def build_slurm_images(images_dir: Path, out: Path, chroot_root: Path, release: SlurmRelease, version: str,
                       log: Callable[[str], None] = lambda _: None) -> list[Built]:
    """The release's six Slurm images as docker archives in ``out``, their layers cached in ``images_dir``."""
    layers, passwd = _role_layers(images_dir, chroot_root, release, log)
    return [_archive(out, role, layers, passwd, version, release.name) for role in ROLES]


def slurmd_image_name(version: str, release: str) -> str:
    """The shipped slurmd image's name, ``sunk-slurmd:<version>-slurm<release>``."""
    return image_name(role_named("slurmd"), version, release)


def build_slurmd_image(images_dir: Path, chroot_root: Path, release: SlurmRelease, version: str,
                       log: Callable[[str], None] = lambda _: None) -> Built:
    """The shipped slurmd image alone (the dev cluster's real Node runs it), its archive in ``images_dir``."""
    layers, passwd = _role_layers(images_dir, chroot_root, release, log)
    return _archive(images_dir / "slurm-archives", role_named("slurmd"), layers, passwd, version, release.name)


def write_images(home: Path, project: Path, releases: Sequence[SlurmRelease], out: Path, version: str,
                 phase: images.Phase) -> list[Built]:
    """``sunk-dev images``: every image of the releases as a docker archive in ``out``, with
    ``index.json`` and ``images.txt``: the sunk image, its pyslurm variant for a release built with
    pyslurm, and the six Slurm images of each release (chroots and layers cached in ``home``)."""
    from . import chroot as devchroot
    from .slurmbuild import ensure_wheel

    cache = home / "images"
    cache.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    built = [images.build_sunk(cache, project, version, phase,
                               archive=out / archive_file(images.sunk_spec(version).name))]
    for release in releases:
        with phase(f"chroot {release.name}") as log:
            root = devchroot.ensure_chroot(home, release, log=log, project=project)
        if release.pyslurm:
            with phase(f"pyslurm {release.name}") as log:
                wheel = ensure_wheel(root, release, home, log)
            name = images.pyslurm_spec(version, release.name).name
            built.append(images.build_sunk_pyslurm(cache, project, version, phase, root, wheel, release.name,
                                                   archive=out / archive_file(name)))
        with phase(f"images slurm {release.name}") as log:
            built += build_slurm_images(cache, out, root, release, version, lambda line: print(line, file=log))
    listing, text = index(built, out)
    (out / "index.json").write_text(listing)
    (out / "images.txt").write_text(text)
    return built

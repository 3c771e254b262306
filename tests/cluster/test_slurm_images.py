"""The Slurm images of the running release, built from its chroot as ``sunk-dev images`` writes them
(sunk_dev.slurmimages), are what the spec says: each runs its binary (every library it and the auth
plugins load is inside), runs as its user, and holds no compiler, build tool or secret.

Each image is built into the test's directory (its layers cached in the dev cluster's home, as
``sunk-dev images`` caches them: one walk of the chroot the first time, then only archives), then
unpacked and its binary run with ``chroot``.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

import sunk
from sunk.translate.slurmcluster import desired, paths, users
from sunk_dev import images, slurmimages

pytestmark = pytest.mark.cluster

# What spec.slurm.cgroup's modes load in slurmd and slurmstepd (sunk/translate/slurmcluster/slurmconf.py)
CGROUP_PLUGINS = ("cgroup_v1", "cgroup_v2", "proctrack_cgroup", "task_cgroup", "jobacct_gather_cgroup")
VERSION_FLAG = {"login": ("/usr/bin/sbatch", "--version")}
VERSION_TEXT = {"mariadb": "MariaDB"}  # (the server's own version, not Slurm's)
MINIMAL_CONFIG = {
    "login": {"etc/slurm/slurm.conf": "ClusterName=imagetest\nSlurmctldHost=localhost\n"},
    "slurmdbd": {"etc/slurm/slurmdbd.conf": "StorageType=accounting_storage/mysql\nDbdHost=localhost\n"
                                             "SlurmUser=slurm\n"},
}


@pytest.fixture(scope="module")
def slurm_images(dev_cluster, tmp_path_factory) -> dict[str, images.Built]:
    out = tmp_path_factory.mktemp("slurm-images")
    built = slurmimages.build_slurm_images(dev_cluster.home / "images", out, dev_cluster.root, dev_cluster.release,
                                           sunk.__version__, lambda line: print(line, file=sys.stderr))
    return {name: image for name, image in zip(slurmimages.ROLE_NAMES, built, strict=True)}


def unpacked(archive: Path, target: Path) -> tuple[dict, set[str]]:
    """The image's config, and its layers applied in order into ``target``; every member's name."""
    names: set[str] = set()
    with tarfile.open(archive) as outer:
        (manifest,) = json.loads(outer.extractfile("manifest.json").read())  # type: ignore[union-attr]
        config = json.loads(outer.extractfile(manifest["Config"]).read())  # type: ignore[union-attr]
        for member in manifest["Layers"]:
            with tarfile.open(fileobj=outer.extractfile(member)) as layer:
                names |= set(layer.getnames())
                extra = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}
                layer.extractall(target, numeric_owner=True, **extra)  # type: ignore[arg-type]
    return config, names


def in_image(root: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["chroot", str(root), *argv], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"})


@pytest.mark.parametrize("role", slurmimages.ROLE_NAMES)
def test_each_slurm_image_runs_its_binary_as_its_user_without_build_tools(slurm_images, role, tmp_path,
                                                                         dev_cluster):
    spec = slurmimages.role_named(role)
    built = slurm_images[role]
    assert built.name == slurmimages.image_name(spec, sunk.__version__, dev_cluster.release.name)
    config, names = unpacked(built.archive, tmp_path / "root")
    root = tmp_path / "root"
    assert spec.binary in names, f"{built.name} has no {spec.binary}"
    assert not slurmimages.build_tools_in(names), slurmimages.build_tools_in(names)[:10]
    assert not images.secrets_in(names), images.secrets_in(names)[:10]
    assert not any(n.startswith(("usr/bin/gcc", "usr/bin/make", "usr/lib/gcc/")) for n in names)

    user = config["config"]["User"]
    name = next(line.split(":")[0] for line in (root / "etc/passwd").read_text().splitlines()
                if ":".join(line.split(":")[2:4]) == user)
    assert name == spec.user, f"{built.name} runs as {user} ({name}), not {spec.user}"
    assert (user == "0:0") is (role in ("slurmd", "login")), f"{built.name} runs as {user}"  # (login: sshd)

    # (the client commands and slurmdbd read their configuration before they print a version: the smallest
    # that parses, as the mounted ConfigMap and Secret would give them)
    for path, text in MINIMAL_CONFIG.get(role, {}).items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
        if path.endswith("slurmdbd.conf"):
            (root / path).chmod(0o600)
            os.chown(root / path, *(int(i) for i in user.split(":")))
    argv = VERSION_FLAG.get(role, ("/" + spec.binary, "-V"))
    ran = in_image(root, *argv)
    wanted = VERSION_TEXT.get(role, dev_cluster.release.name)
    assert ran.returncode == 0 and wanted in ran.stdout + ran.stderr, (ran.stdout, ran.stderr)
    plugins = sorted(str(p.relative_to(root)) for p in root.glob("usr/lib/**/auth_*.so"))
    assert plugins, "no auth plugin in the image"
    for target in ("/" + spec.binary, *("/" + p for p in plugins)):
        linked = in_image(root, "ldd", target)
        assert "not found" not in linked.stdout, f"{built.name}: {target}: {linked.stdout}"
    if role in ("slurmd", "slurmctld", "slurmdbd", "login"):  # (the SlurmCluster's munged sidecars run from these)
        assert in_image(root, "/usr/sbin/munged", "--version").returncode == 0
    if role == "mariadb":
        assert os.access(root / slurmimages.MARIADB_ENTRYPOINT, os.X_OK)
        assert {"usr/bin/mariadb-install-db", "usr/bin/my_print_defaults"} <= names
    if role == "slurmd":
        assert {"usr/bin/curl", "usr/bin/scontrol", "usr/bin/squeue"} <= names  # (the prolog's and epilog's)


def test_the_same_chroot_gives_the_same_image_ids(slurm_images, dev_cluster, tmp_path):
    """Every layer written again from the chroot, into a cache of its own: the same bytes, the same IDs."""
    again = slurmimages.build_slurm_images(tmp_path / "cache", tmp_path / "out", dev_cluster.root,
                                           dev_cluster.release, sunk.__version__)
    assert [b.image_id for b in again] == [slurm_images[r].image_id for r in slurmimages.ROLE_NAMES]
    base = {b.layers[0].diff_id for b in again}
    assert len(base) == 1, "the five images share one base layer"


@pytest.mark.every_release
def test_the_slurmd_image_carries_every_cgroup_plugin_a_slurmcluster_asks_for_with_its_libraries(
        dev_cluster, tmp_path):
    """cgroup v2 is the chart's default: a build whose configure left a plugin out (25.11 from source, without
    libdbus) gave an image whose slurmd failed at start on every cgroup-v2 Node. (This machine's cgroups are v1:
    the plugins' loading is what is proven here, not a job confined by them.)"""
    built = slurmimages.build_slurmd_image(dev_cluster.home / "images", dev_cluster.root, dev_cluster.release,
                                           sunk.__version__, lambda line: print(line, file=sys.stderr))
    root = tmp_path / "root"
    unpacked(built.archive, root)
    found = {p.stem: p for p in root.glob("usr/lib/**/*.so") if p.stem in CGROUP_PLUGINS}
    assert sorted(found) == sorted(CGROUP_PLUGINS), f"{built.name} lacks {set(CGROUP_PLUGINS) - set(found)}"
    for plugin in found.values():
        linked = in_image(root, "ldd", "/" + str(plugin.relative_to(root)))
        assert linked.returncode == 0 and "not found" not in linked.stdout, f"{built.name}: {plugin}: {linked.stdout}"


@pytest.mark.every_release
def test_the_login_image_runs_sshd_for_the_configmaps_users_whom_slurmctlds_image_knows_too(dev_cluster, tmp_path):
    """Each release's login image: its entrypoint takes the host key and makes the users' homes, and its sshd
    accepts this repository's configuration (``sshd -t``); the login users of a ConfigMap's files resolve in the
    login and slurmctld images (libnss-extrausers, after /etc/passwd); no host key of the chroot came along; and
    every account those images have is a name ``spec.login.users`` refuses (a user of that name would log in as
    the image's account, which ``files`` finds first)."""
    built = dict(zip(slurmimages.ROLE_NAMES,
                     slurmimages.build_slurm_images(dev_cluster.home / "images", tmp_path / "out", dev_cluster.root,
                                                    dev_cluster.release, sunk.__version__), strict=True))
    alice = users.LoginUser("alice", 5001, 5001, ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAEBAQEBAQEBAQEBAQEBAQEBAQEBAQEB"
                                                  "AQEBAQEBAQEB alice",))
    for role in ("login", "slurmctld"):
        root = tmp_path / role
        _, names = unpacked(built[role].archive, root)
        accounts = {line.split(":")[0] for f in ("etc/passwd", "etc/group")
                    for line in (root / f).read_text().splitlines() if line}
        assert accounts <= users.RESERVED_NAMES, sorted(accounts - users.RESERVED_NAMES)
        low, high = users.UID_RANGE  # (and no id a login user may take: its name would be the image's account's)
        ids = {int(line.split(":")[2]) for f in ("etc/passwd", "etc/group")
               for line in (root / f).read_text().splitlines() if line}
        assert not {i for i in ids if low <= i <= high} - users.RESERVED_IDS, sorted(ids)
        (root / "var/lib/extrausers").mkdir(parents=True, exist_ok=True)
        for name, text in users.files([alice]).items():
            (root / "var/lib/extrausers" / name).write_text(text)
        found = in_image(root, "getent", "passwd", "alice")
        assert found.stdout.strip() == "alice:x:5001:5001::/home/alice:/bin/bash", (role, found.stderr)
        assert in_image(root, "getent", "group", "5001").stdout.strip() == "alice:x:5001:", role
        if role != "login":
            continue
        assert not [n for n in names if n.startswith("etc/ssh/ssh_host_")], "a host key of the chroot's"
        keys = root / "etc/sunk/ssh-host-keys"
        keys.mkdir(parents=True)
        (keys / paths.SSH_HOST_KEY).write_bytes(desired.ssh_key_pair(bytes(range(32)))[""])
        (keys / paths.SSH_HOST_KEY).chmod(0o440)  # (as the kubelet leaves it under the Pod's fsGroup)
        os.mknod(root / "dev/null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # (what a container runtime gives)
        checked = in_image(root, "/" + slurmimages.LOGIN_ENTRYPOINT, "-t")
        assert checked.returncode == 0, checked.stdout + checked.stderr
        copied = root / "run/sunk-ssh" / paths.SSH_HOST_KEY
        assert (copied.stat().st_mode & 0o777, copied.stat().st_uid) == (0o600, 0)
        home = (root / "home/alice").stat()
        assert (home.st_uid, home.st_gid, home.st_mode & 0o777) == (5001, 5001, 0o700)

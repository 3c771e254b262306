"""The Slurm images' definition (sunk_dev.slurmimages): per role its name, user, command and port, and
which file of a chroot goes into which layer. What a real chroot gives is tests/cluster/test_slurm_images.py."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
import yaml

from sunk_dev import images
from sunk_dev import slurmimages as si
from sunk_dev.release import RELEASES

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "manifests" / "chart" / "sunk"
PASSWD = "root:x:0:0:root:/root:/bin/bash\nslurm:x:64030:64030::/nonexistent:/usr/sbin/nologin\n"
GROUP = "root:x:0:\nslurm:x:64030:\n"


def _spec(name: str, release: str = "24.11"):
    passwd, _ = si.image_users(PASSWD, GROUP)
    return si.slurm_spec(si.role_named(name), "0.1.0", release, passwd)


# -- specs ----------------------------------------------------------------------------------------

def test_every_role_is_tagged_with_the_charts_app_version_and_the_release():
    version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    names = {role.name: si.image_name(role, version, "24.11") for role in si.ROLES}
    assert names == {
        "slurmctld": f"docker.io/library/sunk-slurmctld:{version}-slurm24.11",
        "slurmd": f"docker.io/library/sunk-slurmd:{version}-slurm24.11",
        "slurmrestd": f"docker.io/library/sunk-slurmrestd:{version}-slurm24.11",
        "slurmdbd": f"docker.io/library/sunk-slurmdbd:{version}-slurm24.11",
        "login": f"docker.io/library/sunk-login:{version}-slurm24.11",
        "mariadb": f"docker.io/library/sunk-mariadb:{version}-slurm24.11",
    }
    assert all(name.startswith(si.IMAGE_PREFIX) for name in names.values())
    # The SlurmCluster's default images, by the chart's repository names: these very ones.
    chart = yaml.safe_load((CHART / "values.yaml").read_text())["slurmCluster"]["images"]
    for role in ("slurmctld", "slurmdbd", "slurmrestd", "login", "slurmd", "mariadb"):
        assert names[role] == f"docker.io/library/{chart[role]['repository']}:{version}-slurm24.11"


@pytest.mark.parametrize(("role", "user", "entrypoint", "cmd", "ports"), [
    ("slurmctld", "64030:64030", ["/usr/sbin/slurmctld"], ["-D"], {"6817/tcp": {}}),
    ("slurmd", "0:0", ["/usr/local/bin/sunk-slurmd"], [], {"6818/tcp": {}}),
    ("slurmrestd", "1999:1999", ["/usr/sbin/slurmrestd"], ["0.0.0.0:6820"], {"6820/tcp": {}}),
    ("slurmdbd", "64030:64030", ["/usr/sbin/slurmdbd"], ["-D"], {"6819/tcp": {}}),
    ("login", "0:0", ["/usr/local/bin/sunk-login"], [], None),
    ("mariadb", "1998:1998", ["/usr/local/bin/sunk-mariadb-entrypoint"], [], {"3306/tcp": {}}),
])
def test_each_role_runs_its_daemon_in_the_foreground_as_its_user_on_its_port(role, user, entrypoint, cmd, ports):
    config = images.image_config(_spec(role), ["sha256:1", "sha256:2"], "amd64")["config"]
    assert (config["User"], config.get("Entrypoint"), config["Cmd"], config.get("ExposedPorts")) == (
        user, entrypoint, cmd, ports)


def test_slurmrestd_runs_as_neither_root_nor_slurm_user_and_the_daemons_as_the_chroots_slurm_uid():
    passwd = PASSWD.replace("64030:64030", "64030:1000")  # (the 25.11 source build's chroot: group 1000)
    users = si.image_users(passwd, GROUP)[0]
    assert si.slurm_spec(si.role_named("slurmctld"), "0.1.0", "25.11", users).user == "64030:1000"
    restd = si.slurm_spec(si.role_named("slurmrestd"), "0.1.0", "25.11", users).user
    assert restd.split(":")[0] not in ("0", "64030")


@pytest.mark.parametrize("role", ["slurmctld", "slurmdbd"])
def test_an_image_whose_user_is_not_the_uid_the_slurmcluster_runs_it_as_fails_the_build(role):
    users = si.image_users(PASSWD.replace("64030:64030", "64031:64031"), GROUP)[0]
    with pytest.raises(ValueError, match=f"the {role} image's user slurm is 64031:64031.*uid 64030"):
        si.slurm_spec(si.role_named(role), "0.1.0", "25.11", users)


def test_every_image_the_slurmcluster_runs_has_the_uid_its_pods_run_as():
    from sunk.translate.slurmcluster import paths
    passwd, _ = si.image_users(PASSWD, GROUP)
    uids = {role: int(si.slurm_spec(si.role_named(role), "0.1.0", "25.11", passwd).user.split(":")[0])
            for role in si.RENDERED_UIDS}
    assert uids == {"slurmctld": paths.SLURM_UID, "slurmdbd": paths.SLURM_UID, "slurmrestd": paths.SLURMRESTD_UID,
                    "login": 0, "mariadb": paths.MARIADB_UID}  # (login: sshd, root; its munged as LOGIN_UID)


def test_every_slurm_image_carries_munged_in_the_shared_base():
    """slurmctld's and slurmdbd's munged sidecars run from their own images: munge is in the base of a
    Debian release and of a source build alike."""
    assert "munge" in si.DEBIAN_BASE_PACKAGES and "munge" in si.SOURCE_BASE_PACKAGES


def test_a_user_the_image_lacks_fails_the_build_naming_it():
    with pytest.raises(ValueError, match="'slurm'"):
        si.user_ids("root:x:0:0::/root:/bin/bash\n", "slurm")


def test_the_dev_clusters_own_accounts_stay_out_of_the_images():
    passwd, group = si.image_users(PASSWD + "kube:x:1001:1001::/x:/usr/sbin/nologin\n"
                                   "sunk-pods:x:65534:65534::/x:/usr/sbin/nologin\netcd:x:995:995::/x:/bin/false\n",
                                   GROUP + "kube:x:1001:\netcd:x:995:\n")
    assert {line.split(":")[0] for line in passwd.splitlines()} == {"root", "slurm", "slurmrestd", "mariadb",
                                                                    "nonroot"}
    assert "kube" not in group and "etcd" not in group and "slurm:x:64030:" in group


def test_image_users_are_added_once_and_an_existing_slurmrestd_is_kept():
    passwd, group = si.image_users(PASSWD, GROUP)
    assert si.image_users(passwd, group) == (passwd, group)
    assert "slurmrestd:x:1999:1999:" in passwd and "slurmrestd:x:1999:\n" in group
    kept, _ = si.image_users(PASSWD + "slurmrestd:x:2500:2500::/x:/bin/false\n", GROUP)
    assert si.user_ids(kept, "slurmrestd") == "2500:2500" and kept.count("slurmrestd:") == 1


def test_the_sunk_images_config_is_unchanged_by_ports():
    config = images.image_config(images.sunk_spec("0.1.0"), ["sha256:1"], "amd64")["config"]
    assert "ExposedPorts" not in config  # (the same image ID as before there were ports)


def test_the_same_inputs_give_the_same_image_id_and_any_change_another():
    def ident(spec, layers=("sha256:a", "sha256:b")):
        return images.image_id(images.config_bytes(images.image_config(spec, layers, "amd64")))
    assert ident(_spec("slurmctld")) == ident(_spec("slurmctld"))
    assert len({ident(_spec(role.name)) for role in si.ROLES}) == len(si.ROLES)
    # The ID is the content's, not the tag's (as docker's): another release's layers give another ID.
    assert ident(_spec("slurmctld", "26.05"), ("sha256:c", "sha256:b")) != ident(_spec("slurmctld"))


def test_the_layers_key_follows_the_chroots_packages_and_users():
    key = si.layers_key("chroot-trixie-1", b"status", b"passwd", b"group", b"nsswitch")
    assert key == si.layers_key("chroot-trixie-1", b"status", b"passwd", b"group", b"nsswitch")
    for changed in (("chroot-trixie-2", b"status", b"passwd", b"group", b"nsswitch"),
                    ("chroot-trixie-1", b"s2", b"passwd", b"group", b"nsswitch"),
                    ("chroot-trixie-1", b"status", b"passwd2", b"group", b"nsswitch"),
                    ("chroot-trixie-1", b"status", b"passwd", b"group", b"nsswitch2")):
        assert si.layers_key(*changed) != key


NSSWITCH = """# /etc/nsswitch.conf
passwd:         files
group:          files
shadow:         files
hosts:          files dns
"""


def test_the_images_look_up_users_and_groups_in_extrausers_after_files_and_nothing_else_changes():
    """The SlurmCluster's login users (sunk.translate.slurmcluster.users) reach login and slurmctld as
    libnss-extrausers' files: after /etc/passwd, so that no name there can be taken over."""
    done = si.with_extrausers(NSSWITCH)
    assert done.splitlines() == ["# /etc/nsswitch.conf", "passwd:         files extrausers",
                                 "group:          files extrausers", "shadow:         files",
                                 "hosts:          files dns"]
    assert si.with_extrausers(done) == done
    etc = si.image_etc(PASSWD, GROUP, NSSWITCH)
    assert etc[:2] == si.image_users(PASSWD, GROUP) and etc[2] == done
    assert si.GENERATED == ("etc/passwd", "etc/group", "etc/nsswitch.conf")


def test_the_login_image_runs_sshd_with_this_repositorys_config_and_entrypoint():
    assert dict(si.role_files("login")) == {si.LOGIN_ENTRYPOINT: si.IMAGE_FILES_DIR / "login-entrypoint.sh",
                                            si.SSHD_CONFIG: si.IMAGE_FILES_DIR / "sshd_config"}
    config = {line.split()[0]: line.split(None, 1)[1] for line in
              (si.IMAGE_FILES_DIR / "sshd_config").read_text().splitlines() if line and not line.startswith("#")}
    assert config["AuthorizedKeysFile"] == "/var/lib/extrausers/authorized_keys.%u"  # (users.py's, nothing else)
    assert (config["PasswordAuthentication"], config["PermitRootLogin"], config["DisableForwarding"],
            config["PermitUserEnvironment"], config["KbdInteractiveAuthentication"]) == ("no", "no", "yes", "no", "no")
    assert config["HostKey"] == "/run/sunk-ssh/ssh_host_ed25519_key"


# -- which file goes where ---------------------------------------------------------------------------

STATUS = """Package: libc6
Status: install ok installed
Priority: required

Package: bash
Status: install ok installed
Essential: yes
Depends: libc6

Package: systemd
Status: install ok installed
Priority: important

Package: libslurm
Status: install ok installed
Priority: optional

Package: slurm-wlm-basic-plugins
Status: install ok installed
Depends: libslurm, systemd | systemd-sysusers

Package: slurm-wlm-jwt-plugin
Status: install ok installed
Depends: slurm-wlm-basic-plugins

Package: munge
Status: install ok installed

Package: libnss-extrausers
Status: install ok installed

Package: openssh-server
Status: install ok installed
Depends: openssh-client, libpam-modules, systemd | systemd-sysv

Package: openssh-client
Status: install ok installed

Package: libpam-modules
Status: install ok installed

Package: slurm-client
Status: install ok installed
Depends: slurm-wlm-basic-plugins, munge

Package: slurmctld
Status: install ok installed
Depends: slurm-client

Package: slurmd
Status: install ok installed
Depends: slurm-wlm-basic-plugins, libhwloc15

Package: libhwloc15
Status: install ok installed

Package: curl
Status: install ok installed
Depends: libcurl4

Package: libcurl4
Status: install ok installed

Package: slurmrestd
Status: install ok installed

Package: slurmdbd
Status: install ok installed
Depends: slurm-wlm-mysql-plugin

Package: slurm-wlm-mysql-plugin
Status: install ok installed
Depends: libmariadb3

Package: libmariadb3
Status: install ok installed

Package: gcc
Status: install ok installed
Priority: optional

Package: mariadb-server
Status: install ok installed
Depends: mariadb-server-core, galera-4

Package: galera-4
Status: install ok installed

Package: mariadb-server-core
Status: install ok installed
Depends: libmariadb3

Package: mariadb-client-core
Status: install ok installed
"""


def test_required_packages_are_the_essential_and_required_ones():
    assert si.required_packages(STATUS) == ("bash", "libc6")


def test_packages_go_to_the_base_when_two_roles_need_them_and_build_tools_nowhere():
    plan = si.plan_packages(STATUS, from_source=False)
    assert {"bash", "libc6", "libslurm", "slurm-wlm-basic-plugins", "munge", "slurm-client",
            "libnss-extrausers"} <= plan.base
    # libmariadb3: slurmdbd's and MariaDB's, so the base's
    assert plan.roles == {"slurmctld": {"slurmctld"}, "slurmd": {"slurmd", "libhwloc15", "curl", "libcurl4"},
                          "slurmrestd": {"slurmrestd"},
                          "login": {"openssh-server", "openssh-client", "libpam-modules"},
                          "slurmdbd": {"slurmdbd", "slurm-wlm-mysql-plugin"},
                          "mariadb": {"mariadb-server-core", "mariadb-client-core"}}
    assert "libmariadb3" in plan.base
    taken = plan.base.union(*plan.roles.values())
    assert not taken & {"gcc", "systemd", "mariadb-server", "galera-4"}  # (MariaDB's server: its core only)


def test_a_source_build_takes_its_libraries_from_debian_and_its_slurm_by_path():
    status = STATUS + "".join(f"\nPackage: {p}\nStatus: install ok installed\n"
                              for p in (*si.SOURCE_BASE_PACKAGES, "libdbus-1-3")
                              if p not in ("munge", "libnss-extrausers"))
    plan = si.plan_packages(status, from_source=True)
    assert set(si.SOURCE_BASE_PACKAGES) <= plan.base and "slurm-client" not in plan.base
    assert "libdbus-1-3" in plan.roles["slurmd"]  # (the cgroup/v2 plugin links it; slurmd alone loads it)
    assert plan.roles["slurmdbd"] == set() and plan.roles["slurmctld"] == set()
    assert plan.roles["mariadb"] == {"mariadb-server-core", "mariadb-client-core"} and "libmariadb3" in plan.base
    layer = {name: si.layer_of(name, None, plan) for name in (
        "usr/sbin/slurmctld", "usr/sbin/slurmstepd", "usr/bin/sbatch", "usr/lib/slurm/auth_munge.so",
        "usr/lib/libslurm.so.44.0.0", "usr/lib/libslurm.a", "usr/include/slurm/slurm.h", "usr/bin/cc",
        "etc/passwd", "etc/shadow", "etc/ld.so.cache", "usr/local/bin/sunk-dev", "slurm-1.out")}
    assert layer == {
        "usr/sbin/slurmctld": "slurmctld", "usr/sbin/slurmstepd": "slurmd",
        "usr/bin/sbatch": "base",  # slurmd's prolog and login both need the client commands
        "usr/lib/slurm/auth_munge.so": "base", "usr/lib/libslurm.so.44.0.0": "base",
        "usr/lib/libslurm.a": None, "usr/include/slurm/slurm.h": None, "usr/bin/cc": None,
        "etc/passwd": None,  # (written from image_etc)
        "etc/shadow": None, "etc/ld.so.cache": "base", "usr/local/bin/sunk-dev": None, "slurm-1.out": None,
    }


def test_an_alternative_goes_where_its_target_goes_and_a_dangling_one_nowhere():
    plan = si.plan_packages(STATUS, from_source=False)
    owners = {"usr/sbin/slurmctld-wlm": "slurmctld", "usr/bin/mawk": "bash", "usr/bin/gcc-14": "gcc"}
    links = {"usr/sbin/slurmctld": "/etc/alternatives/slurmctld",
             "etc/alternatives/slurmctld": "/usr/sbin/slurmctld-wlm",
             "usr/bin/awk": "/etc/alternatives/awk", "etc/alternatives/awk": "/bin/mawk",
             "usr/bin/cc": "/etc/alternatives/cc", "etc/alternatives/cc": "gcc-14-alias",
             "usr/bin/loop": "loop2", "usr/bin/loop2": "loop"}
    got = si.assign([*owners, *links], owners, links, {"bin": "usr/bin"}, plan)
    assert got == {"usr/sbin/slurmctld-wlm": "slurmctld", "usr/bin/mawk": "base",
                   "usr/sbin/slurmctld": "slurmctld", "etc/alternatives/slurmctld": "slurmctld",
                   "usr/bin/awk": "base", "etc/alternatives/awk": "base"}


@pytest.mark.parametrize(("name", "tool"), [
    ("usr/bin/gcc", True), ("usr/bin/gcc-12", True), ("usr/bin/x86_64-linux-gnu-gcc-12", True), ("usr/bin/cc", True),
    ("usr/bin/make", True), ("usr/bin/ld", True), ("usr/bin/ld.bfd", True),
    ("usr/lib/gcc/x86_64-linux-gnu/12/cc1", True),
    ("usr/include/stdio.h", True), ("usr/lib/libslurm.a", True), ("usr/bin/dpkg-buildpackage", True),
    ("usr/bin/ld.so", False), ("usr/sbin/slurmctld", False), ("usr/bin/sbatch", False), ("usr/bin/curl", False),
    ("usr/lib/x86_64-linux-gnu/libc.so.6", False), ("usr/bin/dpkg", False),
])
def test_build_tools_are_recognised(name, tool):
    assert bool(si.build_tools_in([name])) is tool


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_every_release_of_the_dev_cluster_gets_six_images(release):
    assert len({si.image_name(role, "0.1.0", release) for role in si.ROLES}) == 6


# -- archives and the index (small trees under tmp_path) ------------------------------------------------

def test_normalized_layers_of_the_same_files_are_the_same_bytes(tmp_path):
    root = tmp_path / "root"
    (root / "usr/sbin").mkdir(parents=True)
    (root / "usr/sbin/slurmctld").write_bytes(b"ELF")
    first = images.write_layer(tmp_path / "a.tar", images.walk(root, ()), normalize=si._normalized)
    (root / "usr/sbin/slurmctld").touch()  # a later mtime: the same content
    second = images.write_layer(tmp_path / "b.tar", images.walk(root, ()), normalize=si._normalized)
    assert first.diff_id == second.diff_id
    with tarfile.open(first.path) as tar:
        assert {m.mtime for m in tar.getmembers()} == {0}


def test_the_index_names_each_image_its_id_and_archive(tmp_path):
    built = [images.Built("docker.io/library/sunk:0.1.0", tmp_path / si.archive_file("docker.io/library/sunk:0.1.0"),
                          "sha256:1", ()),
             images.Built(si.image_name(si.ROLES[0], "0.1.0", "24.11"),
                          tmp_path / "sunk-slurmctld_0.1.0-slurm24.11.tar", "sha256:2", ())]
    listing, text = si.index(built, tmp_path)
    assert json.loads(listing) == [
        {"name": "docker.io/library/sunk:0.1.0", "image_id": "sha256:1", "archive": "sunk_0.1.0.tar"},
        {"name": "docker.io/library/sunk-slurmctld:0.1.0-slurm24.11", "image_id": "sha256:2",
         "archive": "sunk-slurmctld_0.1.0-slurm24.11.tar"}]
    assert text.splitlines()[1] == "docker.io/library/sunk-slurmctld:0.1.0-slurm24.11 sha256:2 " \
                                   "sunk-slurmctld_0.1.0-slurm24.11.tar"


def test_the_merged_usr_top_links_are_in_the_base_whoever_owns_them():
    """bookworm's ``lib -> usr/lib`` is no package's: without it, /lib64/ld-linux-x86-64.so.2 (a link to
    /lib/x86_64-linux-gnu/...) resolves to nothing and no binary of the image starts."""
    assigned = si.assign(["lib", "lib64", "usr/sbin/slurmd"], {"usr/sbin/slurmd": "slurmd"},
                                  {"lib": "usr/lib", "lib64": "usr/lib64"}, {"lib": "usr/lib", "lib64": "usr/lib64"},
                                  si.LayerPlan(frozenset(), {"slurmd": frozenset({"slurmd"})}))
    assert "lib" not in assigned  # (what the ownership rules alone gave)
    merged = si.with_merged_usr(assigned, {"lib": "usr/lib", "lib64": "usr/lib64"})
    assert merged["lib"] == merged["lib64"] == si.BASE
    assert merged["usr/sbin/slurmd"] == "slurmd"

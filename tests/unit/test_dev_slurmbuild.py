"""Slurm 25.11 from source and pyslurm against it: the pure parts of ``sunk_dev.slurmbuild``."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from sunk_dev import chroot, release, slurmbuild

BUILT = release.RELEASES["25.11"]


def test_the_client_conf_points_at_the_chroots_plugins_and_munge_socket_and_keeps_the_rest():
    conf = ("ClusterName=dev\nSlurmUser=slurm\nPluginDir=/elsewhere\nAuthType=auth/munge\nAuthInfo=socket=/x\n"
            "SlurmctldPort=6817\n")
    client = slurmbuild.client_conf(conf, Path("/cache/chroot-bookworm-abc"), "sunk-slurm")
    lines = client.splitlines()
    assert "ClusterName=dev" in lines and "AuthType=auth/munge" in lines and "SlurmctldPort=6817" in lines
    assert [line for line in lines if line.startswith("PluginDir=")] == [
        "PluginDir=/cache/chroot-bookworm-abc/usr/lib/slurm"]
    assert [line for line in lines if line.startswith("SlurmUser=")] == ["SlurmUser=sunk-slurm"]  # the host uid
    assert [line for line in lines if line.startswith("AuthInfo=")] == [
        "AuthInfo=socket=/cache/chroot-bookworm-abc/run/munge/munge.socket.2"]


def test_a_clients_environment_names_its_conf_and_libslurms_directories():
    env = slurmbuild.client_env(Path("/c/root"), Path("/c/run/slurm-client.conf"))
    assert env == {"SLURM_CONF": "/c/run/slurm-client.conf", "LD_LIBRARY_PATH": "/c/root/usr/lib:/c/root/usr/lib/slurm"}


def test_the_build_script_configures_with_what_sunk_needs_installs_and_records_the_version():
    script = slurmbuild.build_script(BUILT.source, jobs=2)
    assert script.startswith("set -eu\n")
    for flag in ("--with-jwt", "--with-json", "--with-http-parser", "--with-yaml", "--prefix=/usr"):
        assert flag in script
    steps = script.splitlines()
    assert steps.index("make -j2") < steps.index("make install")
    assert "echo 25.11.7 > /usr/share/sunk-dev/slurm-version" in steps
    assert steps[-1] == "rm -rf /usr/src/slurm-25.11.7"


def test_the_chroot_of_a_built_release_is_named_by_its_source_so_another_tarball_builds_anew(tmp_path):
    other = release.SlurmRelease(BUILT.name, BUILT.suite, BUILT.packages,
                                 source=release.SlurmSource(BUILT.source.tarball, "0" * 64), pyslurm=BUILT.pyslurm)
    assert chroot.chroot_dir(tmp_path, BUILT) != chroot.chroot_dir(tmp_path, other)
    assert chroot.chroot_dir(tmp_path, BUILT).name.startswith("chroot-bookworm-")


def test_the_tarball_is_taken_only_with_the_pinned_checksum_and_kept_in_the_cache(tmp_path, monkeypatch):
    content = b"not really slurm"
    source = release.SlurmSource("slurm-25.11.7.tar.xz", hashlib.sha256(content).hexdigest())
    monkeypatch.setattr(slurmbuild, "WORKPLACE_VENDOR", tmp_path / "nowhere")
    project, cache = tmp_path / "checkout" / "main", tmp_path / "cache"
    vendor = project.parent / "shared" / "vendor"
    vendor.mkdir(parents=True)
    (vendor / source.tarball).write_bytes(b"tampered")
    with pytest.raises(RuntimeError, match="sha256 .* want"):
        slurmbuild.find_source(source, project, cache)
    assert not (cache / "vendor" / source.tarball).exists()  # (a copy that failed its check is not kept)
    (vendor / source.tarball).write_bytes(content)
    kept = cache / "vendor" / source.tarball
    assert slurmbuild.find_source(source, project, cache) == kept  # what is built is the copy checked
    assert kept.read_bytes() == content
    (vendor / source.tarball).unlink()  # a later build (another clone) finds the cache's copy
    assert slurmbuild.find_source(source, project, cache) == kept and kept.read_bytes() == content


def test_a_missing_tarball_says_where_it_looked_and_which_variable_to_set(tmp_path, monkeypatch):
    monkeypatch.setattr(slurmbuild, "WORKPLACE_VENDOR", tmp_path / "nowhere")
    with pytest.raises(RuntimeError, match=slurmbuild.SOURCE_DIR_ENV) as caught:
        slurmbuild.find_source(BUILT.source, tmp_path / "main", tmp_path / "cache")
    assert "(missing)" in str(caught.value)


def test_a_command_run_in_a_chroot_never_inherits_the_host_clients_slurm_conf_or_loader_path():
    from sunk_dev.procs import chroot_env

    env = {"SLURM_CONF": "/host/run/slurm-client.conf", "LD_LIBRARY_PATH": "/host/lib", "PATH": "/usr/bin",
           "SLURM_JWT": "a token of whichever release ran when the shell took it"}
    assert chroot_env(["chroot", "/root", "sacctmgr"], env) == {"PATH": "/usr/bin"}
    assert chroot_env(["/usr/sbin/chroot", "--userspec=a:b", "/root", "x"], env) == {"PATH": "/usr/bin"}
    assert chroot_env(["python3", "-m", "scheduler.cli"], env) == env  # a host client keeps them
    assert chroot_env(["python3"], None) is None


def test_apt_installs_wait_for_each_other_and_for_dpkgs_lock(tmp_path, monkeypatch):
    """make test builds 25.11 in the background while the tests' up installs packages: two apt-gets at once
    failed on dpkg's lock."""
    from sunk_dev import procs

    ran: list[list[str]] = []
    monkeypatch.setattr(procs, "APT_LOCK", tmp_path / "apt.lock")
    monkeypatch.setattr(procs.subprocess, "run", lambda argv, **_: ran.append(list(argv)))
    procs.apt_install(["libmunge2", "libjwt0"], log=None)
    assert [argv[:4] for argv in ran] == [["apt-get", "-o", "DPkg::Lock::Timeout=600", "update"],
                                         ["apt-get", "-o", "DPkg::Lock::Timeout=600", "install"]]
    assert ran[1][-2:] == ["libmunge2", "libjwt0"] and (tmp_path / "apt.lock").exists()


def test_the_pyslurm_sdist_is_pinned_by_hash():
    line = slurmbuild.requirement(BUILT)
    assert line.startswith("pyslurm==25.11.2 --hash=sha256:") and len(line.split(":")[-1].strip()) == 64
    args = slurmbuild.build_args(Path("/t/req.txt"), Path("/t/out"))
    assert "--require-hashes" in args and args[args.index("-r") + 1] == "/t/req.txt"

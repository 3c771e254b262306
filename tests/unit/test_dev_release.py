"""The dev cluster's Slurm releases (sunk_dev.release): choice, chroots, images, the switch, failure reports."""

from __future__ import annotations

import hashlib
import io
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import sunk
from sunk_dev import chroot, cli, images, kubebuild, realnode, release, slurmimages
from sunk_dev.cluster import DevCluster
from sunk_dev.procs import Daemon

SID = release.RELEASES["26.05"]
# What the trixie chroot was made of before there were two releases: its cache name must not move
# (a new name debootstraps again and leaves etcd's and MariaDB's data behind in the old one).
TRIXIE_PACKAGES_BEFORE = (
    "slurmctld", "slurmd", "slurmrestd", "slurm-client", "slurm-wlm-jwt-plugin", "slurmdbd",
    "mariadb-server", "munge", "etcd-server", "curl", "procps", "iproute2", "openssh-server", "libnss-extrausers",
)  # (what the cached default chroot is named by: a change debootstraps anew and loses etcd's data, as it did once)


# -- choosing a release ----------------------------------------------------------------------------

def test_the_default_is_24_11_from_trixie_and_26_05_comes_from_sid():
    assert (release.DEFAULT.name, release.DEFAULT.suite) == ("24.11", "trixie")
    assert (SID.name, SID.suite) == ("26.05", "sid")
    assert set(release.RELEASES) == {"24.11", "25.11", "26.05"}


def test_25_11_is_built_from_the_pinned_tarball_with_pyslurm_and_only_it_has_pyslurm():
    built = release.RELEASES["25.11"]
    assert built.suite == "bookworm"  # the host's suite: the host's Python loads pyslurm against it
    assert built.source is not None and built.source.tarball == "slurm-25.11.7.tar.xz"
    assert built.source.directory == "slurm-25.11.7" and built.source.version == "25.11.7"
    assert len(built.source.sha256) == 64
    assert built.pyslurm == "25.11.2"
    assert [r.name for r in release.RELEASES.values() if r.pyslurm] == ["25.11"]
    assert built.describe("25.11.7") == "Slurm 25.11.7 (source, on Debian bookworm)"
    with pytest.raises(RuntimeError, match="build did not finish"):
        release.check_version(built, "")


def test_the_daemons_backend_is_rest_unless_pyslurm_is_asked_of_a_release_that_has_it():
    built = release.RELEASES["25.11"]
    assert release.daemon_backend(built, {}) == "rest"
    assert release.daemon_backend(built, {release.BACKEND_ENV: "pyslurm"}) == "pyslurm"
    with pytest.raises(ValueError, match="has no pyslurm"):
        release.daemon_backend(release.DEFAULT, {release.BACKEND_ENV: "pyslurm"})
    with pytest.raises(ValueError, match="rest or pyslurm"):
        release.daemon_backend(built, {release.BACKEND_ENV: "grpc"})


def test_the_flag_wins_over_the_environment_which_wins_over_the_default():
    env = {release.ENV: "26.05"}
    assert release.chosen("24.11", env) == release.DEFAULT
    assert release.chosen(None, env) == SID
    assert release.chosen(None, {}) == release.DEFAULT
    assert release.chosen(None, {release.ENV: " "}) == release.DEFAULT


def test_an_unknown_release_names_the_ones_there_are():
    with pytest.raises(ValueError, match="24.11, 25.11, 26.05"):
        release.chosen(None, {release.ENV: "25.05"})


def test_the_recorded_release_of_a_cache_made_before_there_were_two_is_the_default():
    assert release.saved({}) == release.DEFAULT
    assert release.saved({"nodes": 4}) == release.DEFAULT
    assert release.saved({"slurm": "26.05"}) == SID


def test_version_prefix_and_description():
    assert SID.version_prefix == "26.05." and SID.matches("26.05.5") and not SID.matches("26.055")
    assert SID.describe("26.05.5") == "Slurm 26.05.5 (Debian sid)"
    assert release.DEFAULT.describe() == "Slurm 24.11 (Debian trixie)"


@pytest.mark.parametrize("dpkg, upstream", [
    ("24.11.5-4", "24.11.5"), ("26.05.5-1+b1", "26.05.5"), ("1:26.05.5-1", "26.05.5"), ("26.05.5", "26.05.5"),
    ("", ""),
])
def test_dpkgs_version_is_read_as_slurms(dpkg, upstream):
    assert release.debian_upstream(dpkg) == upstream


def test_a_chroot_whose_suite_moved_on_is_refused_with_what_to_change():
    assert release.check_version(SID, "26.05.5") == "26.05.5"
    with pytest.raises(RuntimeError, match="sid chroot has Slurm 26.11.1, not 26.05.*dev/sunk_dev/release.py"):
        release.check_version(SID, "26.11.1")
    with pytest.raises(RuntimeError, match=r"\(none\)"):
        release.check_version(release.DEFAULT, "")


def test_the_slurmd_image_is_named_for_the_release_the_chroot_holds():
    assert release.of_version("26.05.5") == SID
    assert release.of_version("24.11.5") == release.DEFAULT
    assert release.of_version("26.05.5", "26.05") == SID
    with pytest.raises(ValueError, match=r"--slurm 24.11 does not match the chroot's Slurm 26.05.5 \(release 26.05"):
        release.of_version("26.05.5", "24.11")
    with pytest.raises(ValueError, match="--slurm 26.05 does not match the chroot's Slurm 26.11.1$"):
        release.of_version("26.11.1", "26.05")
    with pytest.raises(ValueError, match=r"Slurm 26.11.1, none of the dev cluster's releases \(24.11, 25.11, 26.05\)"):
        release.of_version("26.11.1")
    with pytest.raises(ValueError, match=r"Slurm \(none\)"):
        release.of_version("")
    with pytest.raises(ValueError, match="no Slurm release '25.05'"):
        release.of_version("24.11.5", "25.05")


def test_the_image_builder_tags_from_the_chroot_not_the_environment(monkeypatch, tmp_path, capsys):
    built: list[str] = []
    monkeypatch.setenv(release.ENV, "24.11")
    monkeypatch.setattr(chroot, "slurm_version", lambda root: "26.05.5")
    monkeypatch.setattr(images, "build_images", lambda *args: built.append(args[-1]) or [])
    monkeypatch.setattr(slurmimages, "build_slurmd_image",
                        lambda _home, _root, release, _version: images.Built(release.name, tmp_path / "a", "id", ()))
    assert images.main([str(tmp_path), str(tmp_path / "chroot")]) == 0
    assert built == ["26.05"]
    with pytest.raises(SystemExit) as exited:
        images.main([str(tmp_path), str(tmp_path / "chroot"), "--slurm", "24.11"])
    assert exited.value.code == 2 and built == ["26.05"]
    assert "--slurm 24.11 does not match the chroot's Slurm 26.05.5" in capsys.readouterr().err


# -- chroots and images: one per release -------------------------------------------------------------

def test_the_trixie_chroot_keeps_its_cache_name():
    key = hashlib.sha256(" ".join(("trixie", chroot.MIRROR, *TRIXIE_PACKAGES_BEFORE)).encode()).hexdigest()[:12]
    assert release.DEFAULT.packages == TRIXIE_PACKAGES_BEFORE
    assert chroot.chroot_dir(Path("/c")) == Path(f"/c/chroot-trixie-{key}")
    assert chroot.chroot_dir(Path("/c"), release.DEFAULT) == chroot.chroot_dir(Path("/c"))


def test_each_release_has_a_chroot_of_its_own_named_by_its_suite():
    sid = chroot.chroot_dir(Path("/c"), SID)
    assert sid.name.startswith("chroot-sid-") and sid != chroot.chroot_dir(Path("/c"))
    # Slurm's daemons and MariaDB in both; etcd only in the default one (Kubernetes' store stays put).
    assert set(release.SLURM_PACKAGES) <= set(SID.packages) and "etcd-server" not in SID.packages


def test_each_release_has_its_own_shipped_slurmd_image():
    assert slurmimages.slurmd_image_name("0.1.0", "26.05") == "docker.io/library/sunk-slurmd:0.1.0-slurm26.05"
    assert slurmimages.slurmd_image_name("0.1.0", "24.11") != slurmimages.slurmd_image_name("0.1.0", "26.05")


def test_the_dev_only_slurmd_images_caches_are_what_goes():
    names = ["slurmd-09221ecf4565", "slurmd.tar", "slurmd.tar.id", "slurmd.tar.imported", "slurmd-24.11-09221ecf4565",
             "slurmd-24.11.tar", "slurmd-24.11.tar.id", "sunk.tar", "sunk-base-685aba83113f", "slurmd-26.05.tar",
             "slurm-24.11-slurmd-09221ecf4565", "slurm-archives", "slurm-24.11-base-09221ecf4565"]
    assert images.superseded_slurmd(names) == [
        "slurmd-09221ecf4565", "slurmd-24.11-09221ecf4565", "slurmd-24.11.tar", "slurmd-24.11.tar.id",
        "slurmd-26.05.tar", "slurmd.tar", "slurmd.tar.id", "slurmd.tar.imported"]


def test_a_slurmd_pod_of_another_chroot_or_image_is_another_template():
    """What `up` replaces realnode1's Pod by: the template hash of its NodeSet, which another release's image or
    chroot changes."""
    from sunk.translate.nodeset import pod as nodeset_pod
    from sunk.translate.nodeset.spec import read_spec
    from sunk_dev import realnode

    trixie, sid = chroot.chroot_dir(Path("/c")), chroot.chroot_dir(Path("/c"), SID)

    def template(root: Path, name: str | None) -> str:
        image = slurmimages.slurmd_image_name("0.1.0", name) if name else None
        nodeset = realnode.nodeset(root, "slurm", image)
        return nodeset_pod.template_hash(read_spec({**nodeset, "metadata": {**nodeset["metadata"], "uid": "u"}}).spec)

    assert template(trixie, "24.11") == template(trixie, "24.11")
    assert template(trixie, "24.11") != template(sid, "24.11")
    assert template(trixie, "24.11") != template(trixie, "26.05")
    # the busybox slurmd chroots into the whole root: another root is another Pod too
    assert template(trixie, None) != template(sid, None)


# -- DevCluster: which release, and the switch ------------------------------------------------------

def _sleeper(run_dir: Path, name: str) -> Daemon:
    daemon = Daemon(name, (sys.executable, "-c", "import time; time.sleep(60)"), run_dir)
    daemon.start()
    return daemon


def test_without_a_release_the_cluster_is_the_one_the_last_up_recorded(tmp_path):
    assert DevCluster(tmp_path).release == release.DEFAULT
    (tmp_path / "run").mkdir()
    (tmp_path / "run/layout.json").write_text(json.dumps({"nodes": 4, "slurm": "26.05"}))
    cluster = DevCluster(tmp_path)
    assert cluster.release == SID and cluster.root == chroot.chroot_dir(tmp_path, SID)
    assert cluster.kube_root == chroot.chroot_dir(tmp_path)  # etcd's, whichever Slurm runs
    assert DevCluster(tmp_path, slurm=release.DEFAULT).root == cluster.kube_root
    assert cluster.slurmd_image == slurmimages.slurmd_image_name(sunk.__version__, "26.05")


def test_tests_get_the_release_the_environment_names(tmp_path, monkeypatch):
    monkeypatch.setenv("SUNK_DEV_HOME", str(tmp_path))
    monkeypatch.setenv(release.ENV, "26.05")
    assert DevCluster.for_tests().release == SID
    monkeypatch.delenv(release.ENV)
    (tmp_path / "run").mkdir()
    (tmp_path / "run/layout.json").write_text(json.dumps({"nodes": 4, "slurm": "26.05"}))
    assert DevCluster.for_tests().release == release.DEFAULT  # never "whatever runs"


def test_switching_stops_the_slurm_side_and_leaves_kubernetes_running(tmp_path, monkeypatch):
    monkeypatch.setenv("SUNK_DEV_REAL_NODE", "0")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "layout.json").write_text(json.dumps({"nodes": 2, "phantom_nodes": 0, "with_sunk": False}))
    (run_dir / "slurm.conf.applied").write_text("what 24.11's slurmctld read\n")
    names = [c.daemon.name for c in DevCluster(tmp_path, nodes=2, slurm=SID, log=io.StringIO()).slurm_side()]
    assert sorted(names) == sorted(["munged", "mariadb", "slurmdbd", "slurmctld", "slurmrestd", "kubelet",
                                    "sunk-operator"])
    slurm_side = [_sleeper(run_dir, name) for name in names]
    kube_side = [_sleeper(run_dir, name) for name in ("etcd", "kube-apiserver", "kube-controller-manager")]
    try:
        cluster = DevCluster(tmp_path, slurm=SID, log=io.StringIO())
        assert cluster._running_release == release.DEFAULT
        cluster._switch_slurm(release.DEFAULT)
        assert [d.name for d in slurm_side if d.pid()] == []
        assert all(d.pid() for d in kube_side)
        assert not (run_dir / "slurm.conf.applied").exists()
        assert cluster._running_release is None
    finally:
        for daemon in slurm_side + kube_side:
            daemon.stop(timeout=5)


def test_up_reads_what_runs_again_once_it_holds_the_claim(tmp_path):
    """Made before the claim, the cluster must not act on what ran then: another session may have
    switched releases since (``up`` calls ``_observe`` first)."""
    run_dir = tmp_path / "run"
    cluster = DevCluster(tmp_path, slurm=release.DEFAULT, log=io.StringIO())
    assert cluster._running_release is None
    run_dir.mkdir(exist_ok=True)
    (run_dir / "layout.json").write_text(json.dumps({"nodes": 2, "phantom_nodes": 0, "slurm": "26.05"}))
    slurmctld = _sleeper(run_dir, "slurmctld")
    try:
        assert cluster._observe() == SID
        assert cluster._running_release == SID and cluster.layout.nodes == 2
        assert cluster.release == release.DEFAULT  # (what was asked for stays asked for)
    finally:
        slurmctld.stop(timeout=5)
    assert cluster._observe() == SID and cluster._running_release is None and cluster.layout.nodes == 4


class _Switched(Exception):
    pass


def test_up_switches_from_what_runs_when_it_runs_not_when_the_cluster_was_made(tmp_path, monkeypatch):
    """``up`` itself reads what runs: made before another session switched to 26.05, an ``up`` for
    24.11 still switches back from 26.05."""
    run_dir = tmp_path / "run"
    cluster = DevCluster(tmp_path, slurm=release.DEFAULT, log=io.StringIO())
    assert cluster._running_release is None
    run_dir.mkdir(exist_ok=True)
    (run_dir / "layout.json").write_text(json.dumps({"nodes": 4, "phantom_nodes": 0, "slurm": "26.05"}))
    monkeypatch.setenv("SUNK_DEV_REAL_NODE", "0")
    monkeypatch.setattr(chroot, "ensure_chroot", lambda home, r, log=None, project=None: chroot.chroot_dir(home, r))
    monkeypatch.setattr(chroot, "slurm_version", lambda root: "24.11.5")

    def no_build(*_args, **_kwargs):
        raise AssertionError("up went on without switching from the release that runs")

    monkeypatch.setattr(kubebuild, "build", no_build)
    switched: list[release.SlurmRelease] = []

    def switch(self, running):
        switched.append(running)
        raise _Switched

    monkeypatch.setattr(DevCluster, "_switch_slurm", switch)
    slurmctld = _sleeper(run_dir, "slurmctld")
    try:
        with pytest.raises(_Switched):
            cluster.up()
    finally:
        slurmctld.stop(timeout=5)
    assert switched == [SID]


def test_up_refuses_while_a_release_this_checkout_does_not_know_runs(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "layout.json").write_text(json.dumps({"nodes": 4, "slurm": "27.05"}))
    slurmctld = _sleeper(run_dir, "slurmctld")
    try:
        with pytest.raises(RuntimeError, match="'27.05'.*sunk-dev down"):
            DevCluster(tmp_path, slurm=release.DEFAULT, log=io.StringIO()).up()
    finally:
        slurmctld.stop(timeout=5)


def test_a_release_this_checkout_does_not_know_is_taken_for_the_default_with_a_warning(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run/layout.json").write_text(json.dumps({"nodes": 4, "slurm": "27.05"}))
    log = io.StringIO()
    cluster = DevCluster(tmp_path, log=log)  # (`down` and `status` make one: they must not fail)
    assert cluster.release == release.DEFAULT
    assert "'27.05'" in log.getvalue() and "does not know" in log.getvalue()


def test_the_switch_removes_the_old_releases_hooks_before_it_kills_its_jobs(tmp_path, monkeypatch):
    monkeypatch.setenv("SUNK_DEV_REAL_NODE", "0")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "layout.json").write_text(json.dumps({"nodes": 1, "phantom_nodes": 0, "slurm": "24.11"}))
    old_root = chroot.chroot_dir(tmp_path, release.DEFAULT)
    hooks = [old_root / f"etc/slurm/{kind}.d/50-sunk-lock" for kind in ("prolog", "epilog")]
    for hook in hooks:
        hook.parent.mkdir(parents=True)
        hook.write_text("#!/bin/sh\n")
    seen: list[bool] = []
    monkeypatch.setattr(DevCluster, "_end_jobs", lambda self, root: seen.append(any(h.exists() for h in hooks)))
    slurmctld = _sleeper(run_dir, "slurmctld")
    try:
        DevCluster(tmp_path, slurm=SID, log=io.StringIO())._switch_slurm(release.DEFAULT)
    finally:
        slurmctld.stop(timeout=5)
    assert seen == [False]  # (an epilog calling the stopped Syncer would fail and drain its node)


def test_every_finished_chroot_is_found_whatever_release_made_it(tmp_path):
    made = [chroot.chroot_dir(tmp_path, r) for r in release.RELEASES.values()] + [tmp_path / "chroot-forky-0123"]
    for root in made:
        root.mkdir()
    (tmp_path / "chroot-sid-4567.partial").mkdir()
    (tmp_path / "chroot-notes").write_text("a file")
    assert chroot.chroot_dirs(tmp_path) == sorted(made)


def test_the_release_is_recorded_with_the_layout(tmp_path):
    DevCluster(tmp_path, slurm=SID)._save_layout()
    assert json.loads((tmp_path / "run/layout.json").read_text())["slurm"] == "26.05"
    assert DevCluster(tmp_path).release == SID


def test_the_clis_up_holds_the_clusters_claim(tmp_path, monkeypatch):
    """A test session or benchmark holding the cluster must not see `sunk-dev up` switch Slurm under it."""
    import fcntl

    held: list[bool] = []

    def up(self):
        with open(self.run_dir / "cluster.claim", "a+") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                held.append(True)
            else:
                held.append(False)

    monkeypatch.setattr(DevCluster, "up", up)
    monkeypatch.setattr(cli, "_print_status", lambda cluster: 0)
    assert cli.main(["--home", str(tmp_path), "up"]) == 0
    assert held == [True]


def test_the_cli_refuses_a_release_it_does_not_have(capsys):
    with pytest.raises(SystemExit):
        cli.main(["up", "--slurm", "25.05"])
    assert "invalid choice" in capsys.readouterr().err


# -- failure reports -----------------------------------------------------------------------------------

def test_a_failed_tests_summary_line_and_report_name_the_release():
    crash = SimpleNamespace(message="AssertionError: assert 'IDLE' == 'DRAIN'")
    report = SimpleNamespace(sections=[], longrepr=SimpleNamespace(reprcrash=crash))
    text = SID.describe("26.05.5")
    release.tag_failure(report, text)
    assert crash.message == "[Slurm 26.05.5] AssertionError: assert 'IDLE' == 'DRAIN'"
    assert report.sections == [("Slurm release", "failed against Slurm 26.05.5 (Debian sid)")]
    release.tag_failure(report, text)  # (a second phase of the same test: setup, then teardown)
    assert crash.message.count("[Slurm") == 1


def test_a_failure_without_a_crash_line_gets_the_section():
    report = SimpleNamespace(sections=[], longrepr="collection error")
    release.tag_failure(report, "Slurm 24.11 (Debian trixie)")
    assert report.sections == [("Slurm release", "failed against Slurm 24.11 (Debian trixie)")]


# -- MariaDB: sid's is not where trixie's is ---------------------------------------------------------

TRIXIE_CNF = "[client-server]\n# Port or socket location where to connect\nsocket = /run/mysqld/mysqld.sock\n"
SID_CNF = "[client-server]\n# port = 3306\nsocket = /run/mariadbd/mysqld.sock\n\n!includedir /etc/mysql/conf.d/\n"


@pytest.mark.parametrize("cnf, socket", [
    (TRIXIE_CNF, "/run/mysqld/mysqld.sock"),
    (SID_CNF, "/run/mariadbd/mysqld.sock"),
    ("[client]\nsocket=/x/y.sock # here\n", "/x/y.sock"),
    ("[mariadbd]\nsocket = /server/only.sock\n", chroot.DEFAULT_MARIADB_SOCKET),  # (a server's, not the clients')
    ("# socket = /commented.sock\n", chroot.DEFAULT_MARIADB_SOCKET),
])
def test_mariadb_listens_where_the_chroots_clients_look(cnf, socket):
    """slurmdbd connects to "localhost" through libmariadb's default socket, which sid moved to
    /run/mariadbd: mariadbd is started on the chroot's own."""
    assert chroot.mariadb_socket(cnf) == socket


def test_the_socket_of_a_chroot_without_mariadb_cnf_is_the_default(tmp_path):
    assert chroot.chroot_mariadb_socket(tmp_path) == chroot.DEFAULT_MARIADB_SOCKET
    (tmp_path / "etc/mysql").mkdir(parents=True)
    (tmp_path / "etc/mysql/mariadb.cnf").write_text(SID_CNF)
    assert chroot.chroot_mariadb_socket(tmp_path) == "/run/mariadbd/mysqld.sock"


def test_no_slurmd_image_carries_mariadbs_data_wherever_its_release_keeps_it():
    for data in ("var/lib/mysql/mysql/global_priv.MAD", "var/lib/mariadb/mysql/global_priv.MAD"):
        assert images.excluded(data, images.SLURMD_EMPTIED)


@pytest.mark.parametrize("sunk_runs", [True, False])
def test_down_ends_the_demos_workloads_first_while_its_scheduler_runs(tmp_path, monkeypatch, sunk_runs):
    """`make demo`, `sunk-dev down`, `make test`: the demo's Deployments outlived `down`, and their Pods took the
    real Node from the chart's own. They end first, while the scheduler that would end their jobs still runs;
    without sunk's daemons there is nothing to end them with (and nothing of the demo's to end)."""
    monkeypatch.setenv("SUNK_DEV_REAL_NODE", "0")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "layout.json").write_text(json.dumps({"nodes": 1, "phantom_nodes": 0, "with_sunk": True}))
    cluster = DevCluster(tmp_path, log=io.StringIO())
    sunk = [_sleeper(run_dir, c.daemon.name) for c in cluster._sunk_components()] if sunk_runs else []
    order: list[str] = []
    monkeypatch.setattr(DevCluster, "end_demo_workloads",
                        lambda self, root=None: order.append("demo ended, sunk " +
                                                             ("running" if all(d.pid() for d in sunk) else "stopped")))
    monkeypatch.setattr(chroot, "chroot_dirs", lambda home: [])
    monkeypatch.setattr(realnode, "unmount_kubelet_root", lambda paths: None)
    try:
        stopped = cluster.down()
    finally:
        for daemon in sunk:
            daemon.stop(timeout=5)
    assert order == (["demo ended, sunk running"] if sunk_runs else [])
    assert set(d.name for d in sunk) <= set(stopped)


def test_a_daemon_knows_when_it_runs_with_other_arguments(tmp_path):
    """``up`` starts again a daemon whose arguments changed (a checkout that adds a flag), and one whose
    arguments nobody recorded (started by a checkout from before they were: it may run any of them)."""
    daemon = _sleeper(tmp_path, "d")
    try:
        assert not daemon.runs_other_argv()
        changed = Daemon("d", (*daemon.argv, "--new-flag"), tmp_path)
        assert changed.pid() == daemon.pid() and changed.runs_other_argv()
        daemon.argv_file.unlink()
        assert daemon.runs_other_argv()
    finally:
        daemon.stop()

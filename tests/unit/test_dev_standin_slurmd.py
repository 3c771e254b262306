"""The stand-in kubelet runs a real slurmd for a NodeSet's slurmd Pod, and nothing for any other Pod."""

from __future__ import annotations

from pathlib import Path

import pytest

from sunk.model import names
from sunk.translate.nodeset import pod as nodeset_pod
from sunk.translate.nodeset.spec import NodeSetSpec
from sunk_dev.standin_slurmd import SlurmdLaunch, gpu_device_files, launch_of, prepare_conf_dir


def nodeset_made_pod() -> dict:
    spec = NodeSetSpec(name="pool", namespace="slurm", uid="u1", features=("real",), gres="gpu:2",
                       template={"spec": {"containers": [{"name": "slurmd", "image": "slurmd"},
                                                         {"name": "munged", "image": "munge"}]}})
    return nodeset_pod.desired_pod(spec, "k8s-node-1", "pool-0-7", nodeset_pod.template_hash(spec))


def test_a_nodeset_pod_runs_slurmd_as_its_slurm_node_with_the_operators_conf():
    launch = launch_of(nodeset_made_pod())
    assert launch == SlurmdLaunch(node="pool-0-7", conf="Feature=real Gres=gpu:2",
                                  gres_conf="NodeName=pool-0-7 Name=gpu File=/dev/nvidia[0-1]\n")


def test_the_argv_is_a_dynamic_slurmd_in_the_chroot_on_a_port_of_its_own():
    argv = SlurmdLaunch(node="n1", conf="Feature=real").argv(Path("/root/chroot"), 17999, 4, 4000)
    assert argv == ["chroot", "/root/chroot", "/usr/sbin/slurmd", "-D", "-Z", "-N", "n1", "--conf",
                    "Feature=real CPUs=4 RealMemory=4000 Port=17999"]
    assert SlurmdLaunch(node="n1", conf="").argv(Path("/c"), 1, 2, 3)[-1] == "CPUs=2 RealMemory=3 Port=1"


def test_a_node_with_gres_lines_reads_a_configuration_directory_of_its_own():
    launch = SlurmdLaunch(node="n1", conf="Gres=gpu:2", gres_conf="NodeName=n1 Name=gpu File=/dev/nvidia[0-1]\n")
    assert launch.conf_dir == "/run/sunk-standin/n1"
    assert launch.argv(Path("/c"), 1, 2, 3)[:5] == ["chroot", "/c", "/usr/sbin/slurmd", "-f",
                                                     "/run/sunk-standin/n1/slurm.conf"]
    assert SlurmdLaunch(node="n1", conf="").conf_dir is None  # no lines: the shared /etc/slurm, as before
    assert SlurmdLaunch(node="../x", conf="", gres_conf="x").conf_dir is None  # a name that is no path


@pytest.mark.parametrize(("gres_conf", "files"), [
    ("NodeName=n Name=gpu File=/dev/nvidia[0-2]\n", ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2"]),
    ("NodeName=n Name=gpu Type=a File=/dev/nvidia0\nNodeName=n Name=gpu Type=b File=/dev/nvidia[1-2]\n",
     ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2"]),
    ("NodeName=n Name=nic Count=2\n", []),
    ("NodeName=n Name=gpu File=/etc/passwd\n", []),  # only NVIDIA device files are ever made
    ("NodeName=n Name=gpu File=/dev/nvidia0/../x\n", []),
])
def test_the_gpu_device_files_made_are_the_nvidia_ones_the_lines_name(gres_conf, files):
    assert gpu_device_files(gres_conf) == files


def test_the_configuration_directory_links_the_clusters_files_and_adds_the_nodes_gres_lines(tmp_path, monkeypatch):
    made: list[str] = []
    monkeypatch.setattr("sunk_dev.standin_slurmd.os.mknod", lambda path, *_: made.append(str(path)))
    etc = tmp_path / "etc/slurm"
    etc.mkdir(parents=True)
    (etc / "slurm.conf").write_text("ClusterName=dev\n")
    (etc / "gres.conf").write_text("AutoDetect=off\nNodeName=node1 Name=gpu File=/dev/fakegpu[0-1]")
    (tmp_path / "dev").mkdir()
    lines = "NodeName=n1 Name=gpu Type=a100 File=/dev/nvidia[0-1]\n"
    prepare_conf_dir(tmp_path, SlurmdLaunch(node="n1", conf="", gres_conf=lines))
    own = tmp_path / "run/sunk-standin/n1"
    assert {p.name: str(p.readlink()) for p in own.iterdir() if p.is_symlink()} == {
        "slurm.conf": "/etc/slurm/slurm.conf", "topology.conf": "/etc/slurm/topology.conf",
        "topology.yaml": "/etc/slurm/topology.yaml"}
    assert (own / "gres.conf").read_text() == (
        "AutoDetect=off\nNodeName=node1 Name=gpu File=/dev/fakegpu[0-1]\n" + lines)
    assert made == [str(tmp_path / "dev/nvidia0"), str(tmp_path / "dev/nvidia1")]
    prepare_conf_dir(tmp_path, SlurmdLaunch(node="n1", conf="", gres_conf=lines))  # a restart: the same, no error
    assert (own / "gres.conf").read_text().endswith(lines)


def test_other_pods_run_nothing():
    pod = nodeset_made_pod()
    plain = {**pod, "metadata": {**pod["metadata"], "labels": {"app": "web"}}}
    assert launch_of(plain) is None  # not a NodeSet's
    no_slurmd = {**pod, "spec": {**pod["spec"], "containers": [{"name": "munged", "image": "munge"}]}}
    assert launch_of(no_slurmd) is None
    no_env = {**pod, "spec": {**pod["spec"], "containers": [{"name": "slurmd", "image": "slurmd"}]}}
    assert launch_of(no_env) is None
    assert launch_of({"metadata": {"labels": {names.LABEL_NODESET: "x"}}}) is None


def test_stopping_a_nodes_slurmd_kills_its_jobs_sessions_and_only_those():
    """A job's processes (slurmstepd's session, SLURMD_NODENAME in the job's environment) die with the
    Pod's slurmd, as with a container; another node's job lives on."""
    import os
    import subprocess
    import sys

    script = "import time; time.sleep(60)"
    mine = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "SLURMD_NODENAME": "pool-9-9"},
                            start_new_session=True)
    other = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "SLURMD_NODENAME": "pool-9-90"},
                             start_new_session=True)
    try:
        import time

        from sunk_dev.standin_slurmd import job_sessions, kill_sessions
        deadline = time.monotonic() + 10
        while os.getsid(mine.pid) not in job_sessions("pool-9-9") and time.monotonic() < deadline:
            time.sleep(0.05)
        sessions = job_sessions("pool-9-9")
        assert sessions == {os.getsid(mine.pid)}
        kill_sessions(sessions)
        assert mine.wait(10) == -9
        assert other.poll() is None
    finally:
        for proc in (mine, other):
            proc.kill()
            proc.wait()


def test_the_callers_own_session_is_never_killed():
    """A process slurmd runs itself (a prolog) shares slurmd's session; a match in this process's own session
    (here: a child not in a session of its own) is never killed, nor is session 0 or 1."""
    import os
    import subprocess
    import sys

    from sunk_dev.standin_slurmd import job_sessions, kill_sessions

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             env={**os.environ, "SLURMD_NODENAME": "pool-own-session"})
    try:
        import time
        deadline = time.monotonic() + 10
        while not job_sessions("pool-own-session") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert job_sessions("pool-own-session") == {os.getsid(0)}
        kill_sessions(job_sessions("pool-own-session") | {0, 1})
        time.sleep(0.2)
        assert child.poll() is None
    finally:
        child.kill()
        child.wait()


def _sleeper(tmp_path: Path, node: str, state, adopt=None):
    """A StandInSlurmd whose "slurmd" is a sleeping Python (the supervision is what is tested, not slurmd)."""
    import sys

    from sunk_dev.standin_slurmd import StandInSlurmd

    slurmd = StandInSlurmd(SlurmdLaunch(node=node, conf=""), tmp_path, 1, 1, 1, tmp_path, uid=f"uid-{node}",
                           state=state, adopt=adopt)
    slurmd._argv = [sys.executable, "-c", "import time; time.sleep(60)"]
    return slurmd


def _until(predicate, timeout: float = 10.0):
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_the_kubelet_state_keeps_ports_records_and_pauses(tmp_path):
    import os

    from sunk_dev.standin_slurmd import KubeletState

    state = KubeletState(tmp_path / "state")
    assert state.ports() == {} and state.records() == []
    state.save_ports({"node2": 40002, "node1": 40001})
    assert KubeletState(tmp_path / "state").ports() == {"node1": 40001, "node2": 40002}
    state.record("u1", "node1", os.getpid())
    (record,) = KubeletState(tmp_path / "state").records()
    assert (record.uid, record.node, record.pid) == ("u1", "node1", os.getpid()) and record.alive()
    (tmp_path / "state" / "slurmds" / "bad.json").write_text("{not json")
    assert [r.uid for r in state.records()] == ["u1"]  # (an unreadable record is dropped, not fatal)
    assert not (tmp_path / "state" / "slurmds" / "bad.json").exists()
    state.forget("u1")
    assert state.records() == []
    state.pause("node1")
    assert state.paused("node1") and not state.paused("node2")
    state.unpause("node1")
    assert not state.paused("node1")


def test_a_record_of_a_reused_pid_is_not_alive(tmp_path):
    import os

    from sunk_dev.standin_slurmd import SlurmdRecord

    assert not SlurmdRecord(uid="u", node="n", pid=os.getpid(), start="1").alive()


def test_a_paused_slurmd_stays_stopped_until_the_pause_is_lifted(tmp_path):
    import os
    import signal

    from sunk_dev.standin_slurmd import KubeletState

    state = KubeletState(tmp_path / "state")
    slurmd = _sleeper(tmp_path, "nodep", state)
    slurmd.start()
    try:
        _until(lambda: [r.node for r in state.records()] == ["nodep"])
        (first,) = state.records()
        state.pause("nodep")
        os.kill(first.pid, signal.SIGTERM)
        _until(lambda: not first.alive())
        import time
        time.sleep(1.5)  # (longer than the restart delay: a slurmd not paused would be back by now)
        assert [r.pid for r in state.records() if r.alive()] == []
        state.unpause("nodep")
        _until(lambda: any(r.alive() and r.pid != first.pid for r in state.records()))
    finally:
        slurmd.stop(grace=1)
    assert state.records() == []


def test_a_slurmd_left_running_is_taken_over_stopped_with_its_pod_or_left_again(tmp_path):
    """A kubelet started again watches the slurmd its predecessor left (no second one starts while it lives),
    stops it as its own, and a kubelet that exits with keep_slurmds leaves it running."""
    import subprocess
    import sys

    from sunk_dev.standin_slurmd import KubeletState

    state = KubeletState(tmp_path / "state")
    left = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        state.record("uid-nodea", "nodea", left.pid)
        (record,) = state.records()
        slurmd = _sleeper(tmp_path, "nodea", state, adopt=record)
        slurmd.start()
        import time
        time.sleep(0.5)
        assert [r.pid for r in state.records()] == [left.pid]  # (watched, not started twice)
        slurmd.release()
        assert left.poll() is None
        again = _sleeper(tmp_path, "nodea", state, adopt=record)
        again.start()
        again.stop(grace=2)
        assert not record.alive()  # (its exit status is not ours to read: alive() reaped the zombie)
        assert state.records() == []
    finally:
        left.kill()
        left.wait()

"""The stand-in kubelet runs a real slurmd for a NodeSet's slurmd Pod, and nothing for any other Pod."""

from __future__ import annotations

from pathlib import Path

from sunk import names
from sunk.translate.nodeset import pod as nodeset_pod
from sunk.translate.nodeset.spec import NodeSetSpec
from sunk_dev.standin_slurmd import SlurmdLaunch, launch_of


def nodeset_made_pod() -> dict:
    spec = NodeSetSpec(name="pool", namespace="slurm", uid="u1", features=("real",), gres="gpu:2",
                       template={"spec": {"containers": [{"name": "slurmd", "image": "slurmd"},
                                                         {"name": "munged", "image": "munge"}]}})
    return nodeset_pod.desired_pod(spec, "k8s-node-1", "pool-0-7", nodeset_pod.template_hash(spec))


def test_a_nodeset_pod_runs_slurmd_as_its_slurm_node_with_the_operators_conf():
    launch = launch_of(nodeset_made_pod())
    assert launch == SlurmdLaunch(node="pool-0-7", conf="Feature=real Gres=gpu:2")


def test_the_argv_is_a_dynamic_slurmd_in_the_chroot_on_a_port_of_its_own():
    argv = SlurmdLaunch(node="n1", conf="Feature=real").argv(Path("/root/chroot"), 17999, 4, 4000)
    assert argv == ["chroot", "/root/chroot", "/usr/sbin/slurmd", "-D", "-Z", "-N", "n1", "--conf",
                    "Feature=real CPUs=4 RealMemory=4000 Port=17999"]
    assert SlurmdLaunch(node="n1", conf="").argv(Path("/c"), 1, 2, 3)[-1] == "CPUs=2 RealMemory=3 Port=1"


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

"""A SlurmCluster's Pods as a kubelet starts them: munged beside each daemon that speaks munge, every container
as its image's user with its fresh volumes made its own (fsGroup), slurmdbd's own slurmdbd.conf with the
password, MariaDB's password as a file, and the cgroup plugins of spec.slurm.cgroup."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from slurmcluster_fakes import IMAGES, cluster

from sunk.translate.slurmcluster import desired, paths
from sunk.translate.slurmcluster.plan import Facts, decide
from sunk.translate.slurmcluster.slurmconf import render
from sunk.translate.slurmcluster.spec import read_spec


def pods(obj: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Each workload's Pod spec by component."""
    plan = decide(Facts(obj or cluster(), ["gpu"]))
    assert plan.spec is not None, plan.problems
    return {o["metadata"]["labels"]["app.kubernetes.io/component"]: o["spec"]["template"]["spec"]
            for o in plan.objects if o["kind"] in ("StatefulSet", "Deployment")}


def containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod.get("initContainers", []), *pod["containers"]]


def mount_paths(container: dict[str, Any]) -> dict[str, str]:
    return {m["mountPath"]: m["name"] for m in container["volumeMounts"]}


@pytest.mark.parametrize("component", ["slurmctld", "slurmdbd", "login"])
def test_each_daemon_speaking_munge_has_munged_from_its_own_image_and_sees_only_its_socket(component):
    pod = pods()[component]
    (munged,) = [c for c in pod["initContainers"] if c["name"] == "munged"]
    (daemon,) = pod["containers"]
    assert munged["restartPolicy"] == "Always" and munged["image"] == daemon["image"] == IMAGES[component]
    assert mount_paths(munged)["/etc/munge-key"] == "sunk-munge-key"
    assert mount_paths(daemon)["/run/munge"] == mount_paths(munged)["/run/munge"] == "sunk-munge-socket"
    socket = next(v for v in pod["volumes"] if v["name"] == "sunk-munge-socket")
    assert "emptyDir" in socket
    # the key is munged's alone
    for container in containers(pod):
        if container is not munged:
            assert "sunk-munge-key" not in mount_paths(container).values(), container["name"]


def test_munged_starts_before_the_daemon_and_after_slurmdbds_conf_is_written():
    order = [c["name"] for c in pods()["slurmdbd"]["initContainers"]]
    assert order == ["slurmdbd-conf", "munged"]  # a native sidecar after a run-to-completion init container


def test_slurmrestd_has_munged_for_its_auth_plugin_and_no_jwt_key():
    """slurm.conf's AuthType (auth/munge) is loaded by slurmrestd too, and its init needs munged."""
    pod = pods()["slurmrestd"]
    assert [c["name"] for c in pod["initContainers"]] == ["munged"]
    assert set(mount_paths(pod["containers"][0])) == {"/etc/slurm", "/run/munge"}
    assert pod["containers"][0]["args"] == ["-a", "rest_auth/jwt", "0.0.0.0:6820"]


def test_slurmrestd_does_not_unshare_what_a_restricted_pods_seccomp_refuses():
    """Seen on the dev cluster's real kubelet: 'fatal: Unable to unshare System V namespace: Operation not
    permitted' under RuntimeDefault seccomp; never the development-only disable_user_check."""
    env = {e["name"]: e["value"] for e in pods()["slurmrestd"]["containers"][0]["env"]}
    assert env["SLURMRESTD_SECURITY"] == "disable_unshare_sysv,disable_unshare_files"


def test_slurmrestd_passes_tokens_on_as_auth_jwt():
    """Without SLURM_JWT=daemon, slurmrestd hands a client's JWT to auth/munge, which refuses it: every
    REST call, sunk's daemons' included, answered 401 (seen on the real kubelet, tests/cluster)."""
    env = {e["name"]: e["value"] for e in pods()["slurmrestd"]["containers"][0]["env"]}
    assert env["SLURM_JWT"] == "daemon"


@pytest.mark.parametrize("component, uid", [
    ("slurmctld", paths.SLURM_UID), ("slurmdbd", paths.SLURM_UID), ("slurmrestd", paths.SLURMRESTD_UID),
    ("mariadb", paths.MARIADB_UID)])
def test_every_container_runs_restricted_as_its_images_user_who_owns_the_pods_fresh_volumes(component, uid):
    pod = pods()[component]
    assert pod["securityContext"]["fsGroup"] == uid
    for container in containers(pod):
        context = container["securityContext"]
        assert (context["runAsUser"], context["runAsGroup"], context["runAsNonRoot"]) == (uid, uid, True)
        assert context["allowPrivilegeEscalation"] is False and context["capabilities"] == {"drop": ["ALL"]}


# Pod Security "baseline" allows adding these capabilities, and no other.
BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                         "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}


def test_the_login_pods_sshd_is_root_within_baseline_and_its_munged_is_restricted():
    pod = pods()["login"]
    (login,) = pod["containers"]
    (munged,) = pod["initContainers"]
    sshd = login["securityContext"]
    assert (sshd["runAsUser"], sshd["runAsNonRoot"], sshd["allowPrivilegeEscalation"]) == (0, False, False)
    assert sshd["capabilities"]["drop"] == ["ALL"]
    assert set(sshd["capabilities"]["add"]) <= BASELINE_CAPABILITIES - {"DAC_OVERRIDE", "SETFCAP", "MKNOD"}
    assert sshd["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "privileged" not in sshd and "hostPID" not in pod and "hostNetwork" not in pod
    context = munged["securityContext"]
    assert (context["runAsUser"], context["runAsNonRoot"], context["capabilities"]) == (paths.LOGIN_UID, True,
                                                                                          {"drop": ["ALL"]})
    assert pod["securityContext"] == {"fsGroup": paths.LOGIN_GID}  # (the key: mode 0440 for munged's group)
    assert pod["automountServiceAccountToken"] is False  # (no user of the login Pod holds a Kubernetes token)


def test_the_login_pod_mounts_the_users_and_its_host_key_and_slurmctld_the_users():
    found = pods()
    login = found["login"]
    mounts = mount_paths(login["containers"][0])
    assert mounts[paths.USERS_DIR] == "login-users" and mounts[paths.SSH_HOST_KEYS_DIR] == "ssh-host-keys"
    volumes = {v["name"]: v for v in login["volumes"]}
    assert volumes["login-users"] == {"name": "login-users", "configMap": {"name": "sc-login-users"}}
    assert volumes["ssh-host-keys"]["secret"] == {"secretName": "sc-login-host-keys", "defaultMode": 0o400,
                                                  "items": [{"key": paths.SSH_HOST_KEY, "path": paths.SSH_HOST_KEY}]}
    assert login["containers"][0]["ports"] == [{"name": "ssh", "containerPort": 22}]
    ctld = found["slurmctld"]
    assert mount_paths(ctld["containers"][0])[paths.USERS_DIR] == "login-users"
    assert {"name": "login-users", "configMap": {"name": "sc-login-users"}} in ctld["volumes"]
    for component in ("slurmdbd", "slurmrestd", "mariadb"):  # (who needs no user's name)
        assert paths.USERS_DIR not in mount_paths(found[component]["containers"][0]), component


def test_the_login_service_serves_ssh_as_the_spec_says():
    obj = cluster()
    obj["spec"]["login"] = {"service": {"type": "LoadBalancer"}}
    plan = decide(Facts(obj, ["gpu"]))
    (service,) = [o for o in plan.objects if o["kind"] == "Service" and o["metadata"]["name"] == "sc-login"]
    assert service["spec"]["type"] == "LoadBalancer" and service["spec"]["externalTrafficPolicy"] == "Local"
    assert service["spec"]["ports"] == [{"name": "login", "port": 22, "targetPort": 22, "protocol": "TCP"}]
    assert service["spec"]["selector"]["app.kubernetes.io/component"] == "login"


def test_what_the_daemons_write_is_a_volume_of_the_pod():
    found = pods()
    ctld = mount_paths(found["slurmctld"]["containers"][0])
    assert ctld[paths.STATE_DIR] == "state" and ctld[paths.SLURMCTLD_RUN_DIR] == "slurmctld-run"
    assert {"name": "slurmctld-run", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}} in \
        found["slurmctld"]["volumes"]
    assert mount_paths(found["mariadb"]["containers"][0])["/var/lib/mysql"] == "data"
    dbd = mount_paths(found["slurmdbd"]["containers"][0])
    assert dbd[paths.SLURMDBD_RUN_DIR] == "slurmdbd-run"
    conf = render(read_spec(cluster(), ("gpu",)).spec)  # type: ignore[arg-type]
    assert f"PidFile={paths.SLURMDBD_RUN_DIR}/slurmdbd.pid" in conf.data["slurmdbd.conf"].splitlines()
    # slurmctld runs as SlurmUser, which cannot write /run: its pid file goes into its own emptyDir
    assert f"SlurmctldPidFile={paths.SLURMCTLD_RUN_DIR}/slurmctld.pid" in conf.data["slurm.conf"].splitlines()


def test_slurmdbd_reads_the_conf_its_init_container_wrote_and_never_the_password_secret():
    pod = pods()["slurmdbd"]
    (dbd,) = pod["containers"]
    writer = pod["initContainers"][0]
    assert {"name": "SLURM_CONF", "value": "/etc/slurm-dbd/slurm.conf"} in dbd["env"]
    assert mount_paths(dbd)["/etc/slurm-dbd"] == mount_paths(writer)["/etc/slurm-dbd"] == "slurmdbd-conf"
    assert next(m for m in dbd["volumeMounts"] if m["mountPath"] == "/etc/slurm-dbd")["readOnly"] is True
    assert "db-password" not in mount_paths(dbd).values()
    assert writer["image"] == IMAGES["slurmdbd"]
    assert writer["command"][:3] == ["/bin/sh", "-c", desired.SLURMDBD_CONF_SCRIPT]
    assert writer["command"][4:] == ["/etc/slurm", "/var/run/sunk/db/password", "/etc/slurm-dbd"]
    assert next(v for v in pod["volumes"] if v["name"] == "slurmdbd-conf")["emptyDir"]["medium"] == "Memory"


def test_mariadb_is_the_clusters_image_with_its_password_from_a_file():
    (maria,) = pods()["mariadb"]["containers"]
    env = {e["name"]: e.get("value") for e in maria["env"]}
    assert env == {"MARIADB_DATABASE": "slurm_acct_db", "MARIADB_USER": "slurm",
                   "MARIADB_PASSWORD_FILE": "/var/run/sunk/db/password"}
    assert maria["image"] == IMAGES["mariadb"]


# ---- the init container's script, run -------------------------------------------------------------------


def write_conf(tmp_path: Path, password: bytes) -> subprocess.CompletedProcess[str]:
    config, secret, out = tmp_path / "config", tmp_path / "secret", tmp_path / "out"
    for d in (config, secret, out):
        d.mkdir(exist_ok=True)
    (config / "slurmdbd.conf").write_text("DbdHost=sc-slurmdbd-0\nStorageUser=slurm\n")
    (config / "slurm.conf").write_text("ClusterName=sc\n")
    (secret / "password").write_bytes(password)
    return subprocess.run(["/bin/sh", "-c", desired.SLURMDBD_CONF_SCRIPT, "slurmdbd-conf", str(config),
                           str(secret / "password"), str(out)], capture_output=True, text=True, check=False)


@pytest.mark.parametrize("password", [b"Ab3xYz09", b"Ab3xYz09\n", b"p@ss:w0rd/+=%!~(x)*^[]"])
def test_the_script_appends_the_password_to_a_private_copy_with_slurm_conf_beside(tmp_path, password):
    done = write_conf(tmp_path, password)
    assert done.returncode == 0, done.stderr
    written = tmp_path / "out" / "slurmdbd.conf"
    assert written.read_text() == ("DbdHost=sc-slurmdbd-0\nStorageUser=slurm\n"
                                   f"StoragePass={password.decode().rstrip()}\n")
    assert stat.S_IMODE(written.stat().st_mode) == 0o600 and written.stat().st_uid == os.getuid()
    assert os.readlink(tmp_path / "out" / "slurm.conf") == str(tmp_path / "config" / "slurm.conf")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["slurm.conf", "slurmdbd.conf"]


@pytest.mark.parametrize("password", [b"", b"\n", b"two words", b'a"b', b"a'b", b"a#b", b"a\\b", b"a\nStorageHost=x",
                                      b"tab\tbed", "caf\u00e9".encode()])
def test_the_script_refuses_a_password_that_would_not_be_one_plain_value_and_writes_nothing(tmp_path, password):
    done = write_conf(tmp_path, password)
    assert done.returncode != 0
    assert "cannot take unquoted" in done.stderr
    assert list((tmp_path / "out").iterdir()) == []


# ---- spec.slurm.cgroup ----------------------------------------------------------------------------------------


def files(**slurm: Any) -> dict[str, list[str]]:
    read = read_spec(cluster(slurm={"release": "25.11", **slurm}), ("gpu",))
    assert read.spec is not None, read.problems
    return {name: [line for line in text.splitlines() if not line.startswith("#")]
            for name, text in render(read.spec).data.items()}


@pytest.mark.parametrize("cgroup, plugin, proctrack, task, gather", [
    (None, "cgroup/v2", "proctrack/cgroup", "task/cgroup,task/affinity", "jobacct_gather/cgroup"),
    ("v2", "cgroup/v2", "proctrack/cgroup", "task/cgroup,task/affinity", "jobacct_gather/cgroup"),
    ("v1", "cgroup/v1", "proctrack/cgroup", "task/cgroup,task/affinity", "jobacct_gather/cgroup"),
    ("none", "disabled", "proctrack/linuxproc", "task/affinity", "jobacct_gather/linux"),
])
def test_the_cgroup_mode_picks_cgroup_conf_and_the_process_plugins(cgroup, plugin, proctrack, task, gather):
    found = files(**({} if cgroup is None else {"cgroup": cgroup}))
    assert f"CgroupPlugin={plugin}" in found["cgroup.conf"]
    assert {f"ProctrackType={proctrack}", f"TaskPlugin={task}", f"JobAcctGatherType={gather}"} <= set(
        found["slurm.conf"])
    constrained = [line for line in found["cgroup.conf"] if line.startswith("Constrain")]
    assert (constrained == []) == (cgroup == "none")
    assert ("IgnoreSystemd=yes" in found["cgroup.conf"]) == (cgroup in (None, "v2"))


@pytest.mark.parametrize("value, said", [("v3", "'v3' is not one of v2, v1, none"), ("V2", "'V2' is not one of"),
                                         (2, "spec.slurm.cgroup must be a string")])
def test_an_unknown_cgroup_mode_is_a_clear_problem(value, said):
    read = read_spec(cluster(slurm={"release": "25.11", "cgroup": value}), ("gpu",))
    assert read.spec is None
    assert [p for p in read.problems if said in p], read.problems


def test_an_author_cannot_set_the_process_plugins_the_cgroup_mode_sets():
    for line in ("ProctrackType=proctrack/pgid", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none"):
        read = read_spec(cluster(slurmConfig=[line]), ("gpu",))
        assert read.spec is None and [p for p in read.problems if "spec.slurm.cgroup" in p], line


LOCK = {"key": "sunk.coreweave.com/lock", "operator": "Exists"}


def test_every_control_plane_pod_is_placed_as_the_spec_says_and_nothing_else_is():
    placement = {"nodeSelector": {"node-role.example/slurm-control": "true"},
                 "tolerations": [LOCK, {"key": "dedicated", "value": "slurm", "effect": "NoSchedule"},
                                 {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                                  "effect": "NoExecute", "tolerationSeconds": 30}]}
    placed = pods(cluster(placement=placement))
    assert set(placed) == {"slurmctld", "slurmdbd", "mariadb", "slurmrestd", "login"}
    for component, pod in placed.items():
        assert pod["nodeSelector"] == placement["nodeSelector"], component
        assert pod["tolerations"] == placement["tolerations"], component
    for pod in pods().values():
        assert "nodeSelector" not in pod and "tolerations" not in pod


def test_a_placement_never_shares_its_objects_with_the_spec_it_came_from():
    obj = cluster(placement={"nodeSelector": {"a": "b"}, "tolerations": [dict(LOCK)]})
    pod = pods(obj)["slurmctld"]
    pod["tolerations"][0]["key"], pod["nodeSelector"]["a"] = "x", "y"
    again = pods(obj)["slurmctld"]
    assert again["tolerations"] == [LOCK] and again["nodeSelector"] == {"a": "b"}


@pytest.mark.parametrize("placement, said", [
    ({"nodeSelector": {"bad key!": "x"}}, "spec.placement.nodeSelector: 'bad key!' is not a label key"),
    ({"nodeSelector": {"a": "-x"}}, "spec.placement.nodeSelector.a: '-x' is not a label value"),
    ({"nodeSelector": ["a"]}, "spec.placement.nodeSelector: must map label keys to values"),
    ({"tolerations": {"key": "a"}}, "spec.placement.tolerations: must be a list"),
    ({"tolerations": [{"key": "a", "operator": "Exists", "value": "b"}]},
     "spec.placement.tolerations[0].value: must be empty when operator is Exists"),
    ({"tolerations": [{"value": "b"}]}, "spec.placement.tolerations[0].operator: must be Exists when key is empty"),
    ({"tolerations": [{"key": "a", "operator": "In"}]}, "spec.placement.tolerations[0].operator: must be one of"),
    ({"tolerations": [{"key": "a", "effect": "NoSchedule", "tolerationSeconds": 5}]},
     "spec.placement.tolerations[0].tolerationSeconds: only with effect NoExecute"),
    ({"tolerations": [{"key": "a", "effect": "Evict"}]}, "spec.placement.tolerations[0].effect: must be one of"),
    ({"tolerations": [{"key": "a", "nodeName": "n1"}]}, "spec.placement.tolerations[0]: unknown field nodeName"),
    ({"tolerations": [LOCK] * 33}, "spec.placement.tolerations: at most 32"),
])
def test_a_placement_the_apiserver_would_refuse_is_a_problem_and_plans_nothing(placement, said):
    plan = decide(Facts(cluster(placement=placement), ["gpu"]))
    assert plan.spec is None and plan.objects == ()
    assert any(p.startswith(said) for p in plan.problems), plan.problems

"""The chart's ``slurm.backend: pyslurm``: every daemon that speaks to Slurm gets Slurm's C API, its
slurm.conf and a munged beside it, and no REST flag or JWT; what it needs and lacks fails the render.

Rendered by the real helm (sunk_dev.chart), as tests/unit/test_chart.py renders the REST default.
"""

from __future__ import annotations

import argparse
from typing import Any

import pytest

import sunk
from sunk.commands.operator import build_parser as operator_parser
from sunk.commands.scheduler import add_common_arguments
from sunk.commands.syncer import build_parser as syncer_parser
from sunk.commands.syncer import release_parser
from sunk.slurm.settings import settings_from
from sunk_dev import chart
from sunk_dev.chart import find, flags, merged

HELM = chart.helm_binary()
UID = 64030  # a SlurmUser's uid, as Debian's slurm packages make it
PYSLURM = {"slurm": {"backend": "pyslurm", "pyslurm": {"configMap": "slurm-conf", "mungeKeySecret": "munge-key",
                                                       "slurmUserId": UID}}}
# Each Pod's uid under the default slurm.pyslurm.users: the Syncer (and its uninstall Job) and the operator their
# own users (AdminLevel=Admin), the scheduler and the extender SlurmUser's (only it and root submit for others).
SYNCER_UID, OPERATOR_UID = 64201, 64202
UIDS = {"sunk-syncer": SYNCER_UID, "sunk-release-nodes": SYNCER_UID, "sunk-operator": OPERATOR_UID,
        "sunk-scheduler": UID, "sunk-extender": UID}
EVERYTHING = {"extender": {"enabled": True}, "operator": {"enabled": True}}
# The Pods that speak to Slurm (kind, name, container), each with munged beside it under pyslurm.
SLURM_PODS = [("Deployment", "sunk-syncer", "syncer"), ("Deployment", "sunk-scheduler", "scheduler"),
              ("Deployment", "sunk-extender", "extender"), ("Deployment", "sunk-operator", "operator"),
              ("Job", "sunk-release-nodes", "release-nodes")]
REST_FLAGS = ("--slurm-api-base", "--slurm-auth-token-file", "--slurm-jwt-key-file", "--slurm-user",
              "--slurm-auth-token")


def render(values: dict[str, Any]) -> list[dict[str, Any]]:
    return chart.render(values, helm=HELM)


def refusal(values: dict[str, Any]) -> str:
    with pytest.raises(chart.RenderError) as caught:
        chart.render(values, helm=HELM)
    return str(caught.value)


def pod_spec(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return find(docs, kind, name)["spec"]["template"]["spec"]


def container(spec: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in spec["containers"] if c["name"] == name)


def volume(spec: dict[str, Any], name: str) -> dict[str, Any]:
    return next(v for v in spec["volumes"] if v["name"] == name)


def mount_of(c: dict[str, Any], volume_name: str) -> str:
    (path,) = [m["mountPath"] for m in c.get("volumeMounts") or [] if m["name"] == volume_name]
    return path


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    return render(merged(EVERYTHING, PYSLURM))


@pytest.mark.parametrize(("kind", "name", "main"), SLURM_PODS, ids=[p[1] for p in SLURM_PODS])
def test_each_slurm_daemon_takes_pyslurm_and_no_rest_flag_or_jwt(docs, kind, name, main):
    spec = pod_spec(docs, kind, name)
    daemon = container(spec, main)
    args = daemon["args"]
    assert "--slurm-backend=pyslurm" in args
    assert not [a for a in args if a.partition("=")[0] in REST_FLAGS]
    assert "slurm-auth" not in {v["name"] for v in spec["volumes"]}
    assert not [e for e in daemon.get("env") or [] if "JWT" in e["name"]]


@pytest.mark.parametrize(("kind", "name", "main"), SLURM_PODS, ids=[p[1] for p in SLURM_PODS])
def test_slurm_conf_comes_from_the_named_configmap_where_slurm_conf_points(docs, kind, name, main):
    spec = pod_spec(docs, kind, name)
    daemon = container(spec, main)
    env = {e["name"]: e.get("value") for e in daemon["env"]}
    conf_volume = volume(spec, "slurm-conf")
    assert conf_volume["configMap"]["name"] == "slurm-conf"
    assert conf_volume["configMap"]["items"] == [{"key": "slurm.conf", "path": "slurm.conf"}]
    assert env["SLURM_CONF"] == mount_of(daemon, "slurm-conf") + "/slurm.conf"


@pytest.mark.parametrize(("kind", "name", "main"), SLURM_PODS, ids=[p[1] for p in SLURM_PODS])
def test_munged_runs_beside_the_daemon_with_the_clusters_key_and_shares_its_socket(docs, kind, name, main):
    spec = pod_spec(docs, kind, name)
    daemon = container(spec, main)
    (munged,) = spec["initContainers"]
    # A native sidecar: started (its socket there) before the daemon, and no reason for a Job's Pod to stay.
    assert munged["restartPolicy"] == "Always"
    assert munged["command"][0] == "munged"
    options = flags(munged["command"][1:])
    key_volume = volume(spec, "munge-key")["secret"]
    assert key_volume["secretName"] == "munge-key"
    assert key_volume["items"] == [{"key": "munge.key", "path": "munge.key"}]
    assert key_volume["defaultMode"] == 0o400
    assert options["key-file"] == mount_of(munged, "munge-key") + "/munge.key"
    # The socket where libslurm's auth/munge looks by default, in the one emptyDir both mount.
    assert options["socket"] == "/run/munge/munge.socket.2"
    assert mount_of(munged, "munge-socket") == mount_of(daemon, "munge-socket") == "/run/munge"
    assert "emptyDir" in volume(spec, "munge-socket")
    assert munged["startupProbe"]["exec"]["command"] == ["test", "-S", options["socket"]]
    # Its files go where it may write (the root file system is read-only).
    for option in ("pid-file", "seed-file", "log-file"):
        assert options[option].startswith(mount_of(munged, "munge-state") + "/"), option
    assert not [m for m in daemon["volumeMounts"] if m["name"] in ("munge-key", "munge-state")]


@pytest.mark.parametrize(("kind", "name", "main"), SLURM_PODS, ids=[p[1] for p in SLURM_PODS])
def test_the_daemon_and_munged_run_as_their_components_uid_hardened_for_restricted(docs, kind, name, main):
    spec = pod_spec(docs, kind, name)
    for c in (container(spec, main), spec["initContainers"][0]):
        context = c["securityContext"]
        assert context["runAsUser"] == UIDS[name] and context["runAsNonRoot"] is True
        assert context["allowPrivilegeEscalation"] is False and context["readOnlyRootFilesystem"] is True
        assert context["capabilities"] == {"drop": ["ALL"]}
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}
        assert c["resources"]["limits"] and c["resources"]["requests"]


def uid_of(docs: list[dict[str, Any]], kind: str, name: str) -> int:
    (uid,) = {c["securityContext"]["runAsUser"] for c in [*pod_spec(docs, kind, name)["containers"],
                                                           *pod_spec(docs, kind, name)["initContainers"]]}
    return int(uid)


def test_the_components_that_need_no_slurmuser_each_run_as_a_uid_of_their_own_neither_root_nor_slurmuser(docs):
    """Issue 36: a SlurmUser munge credential is worth root on the slurmds, and one uid for every daemon made a
    compromise of any of them a compromise of the Slurm cluster."""
    syncer, operator = uid_of(docs, "Deployment", "sunk-syncer"), uid_of(docs, "Deployment", "sunk-operator")
    assert len({syncer, operator, UID, 0}) == 4
    assert uid_of(docs, "Job", "sunk-release-nodes") == syncer
    # Placing a job for another user is root's and SlurmUser's alone (slurmctld's _valid_id): the two that do.
    assert uid_of(docs, "Deployment", "sunk-scheduler") == uid_of(docs, "Deployment", "sunk-extender") == UID


def test_a_scheduler_given_a_uid_of_its_own_runs_as_it_under_its_name():
    extender = {"name": "sunk-ext", "uid": 64203}
    values = merged(EVERYTHING, PYSLURM, {"slurm": {"pyslurm": {"users": {"extender": extender}}}})
    docs = render(values)
    assert uid_of(docs, "Deployment", "sunk-extender") == 64203
    assert uid_of(docs, "Deployment", "sunk-scheduler") == UID
    assert ["sunk-ext", "x", "64203"] in [e[:3] for e in passwd_of(docs)]


@pytest.mark.parametrize(("user", "given", "says"), [
    ("syncer", {"uid": UID}, "SlurmUser's"),  # the attack: the Syncer back on SlurmUser's uid
    ("operator", {"uid": UID}, "SlurmUser's"),
    ("syncer", {"uid": None}, "slurm.pyslurm.users.syncer.uid"),  # null: SlurmUser's
    ("operator", {"uid": SYNCER_UID, "name": "sunk-op"}, "already syncer's"),
    ("scheduler", {"uid": OPERATOR_UID, "name": "sunk-sched"}, "already operator's"),
    ("extender", {"uid": 64210}, "slurm.pyslurm.users.extender.name"),  # a uid of its own needs its name
    ("operator", {"name": "sunk-syncer"}, "names another user"),
    ("operator", {"name": "slurm"}, "names another user"),
    ("syncer", {"name": "root"}, "names another user"),
])
def test_a_component_user_that_is_shared_slurmuser_or_unnamed_is_refused(user, given, says):
    values = merged(EVERYTHING, PYSLURM, {"slurm": {"pyslurm": {"users": {user: given}}}})
    assert says in refusal(values)


@pytest.mark.parametrize(("user", "uid"), [("syncer", 0), ("scheduler", 0), ("extender", -1)])
def test_root_is_refused_for_every_component(user, uid):
    values = merged(EVERYTHING, PYSLURM, {"slurm": {"pyslurm": {"users": {user: {"name": "x", "uid": uid}}}}})
    assert f"/slurm/pyslurm/users/{user}/uid" in refusal(values)


def test_the_old_one_uid_for_every_daemon_fails_the_render_saying_what_replaces_it():
    message = refusal(merged(PYSLURM, {"slurm": {"pyslurm": {"runAsUser": UID}}}))
    assert "runAsUser is gone" in message and "slurmUserId" in message and "users.syncer" in message


def test_the_pods_that_do_not_speak_to_slurm_keep_the_images_uid_and_no_munged(docs):
    for kind, name in (("Job", "sunk-ensure-secrets"), ("Deployment", "sunk-kube-scheduler")):
        spec = pod_spec(docs, kind, name)
        assert "initContainers" not in spec
        assert {c["securityContext"]["runAsUser"] for c in spec["containers"]} == {65532}


@pytest.mark.parametrize(("kind", "name", "main"), SLURM_PODS, ids=[p[1] for p in SLURM_PODS])
def test_the_image_is_the_variant_carrying_pyslurm_for_the_release_and_munged_runs_it_too(docs, kind, name, main):
    spec = pod_spec(docs, kind, name)
    image = f"sunk:{sunk.__version__}-slurm25.11"
    assert container(spec, main)["image"] == spec["initContainers"][0]["image"] == image


def test_an_image_tag_given_is_taken_as_it_is_and_munged_may_have_its_own():
    values = merged(PYSLURM, {"image": {"tag": "mine"}, "slurm": {"pyslurm": {"mungeImage": "munge:1"}}})
    spec = pod_spec(render(values), "Deployment", "sunk-scheduler")
    assert container(spec, "scheduler")["image"] == "sunk:mine"
    assert spec["initContainers"][0]["image"] == "munge:1"


def test_no_slurm_token_secret_is_rendered_under_pyslurm():
    docs = render(PYSLURM)  # (MINIMAL's slurm.auth.token is given, and unused)
    assert not [d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"].endswith("-slurm-token")]


def test_rest_stays_the_default_with_no_munged_or_slurm_conf():
    docs = render(EVERYTHING)
    for kind, name, main in SLURM_PODS:
        spec = pod_spec(docs, kind, name)
        args = container(spec, main)["args"]
        assert "initContainers" not in spec and "--slurm-backend=pyslurm" not in args
        assert any(a.startswith("--slurm-api-base=") for a in args)
        assert not {"slurm-conf", "munge-key", "munge-socket"} & {v["name"] for v in spec["volumes"]}
        assert container(spec, main)["image"] == f"sunk:{sunk.__version__}"


def scheduling_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sunk-scheduler", exit_on_error=False)
    add_common_arguments(parser, default_name="sunk-scheduler")
    return parser


EXTENDER_ONLY = {"--bind-address", "--tls-cert-file", "--tls-key-file", "--client-ca-file"}


def test_every_daemon_parses_its_rendered_flags_into_the_pyslurm_backend(docs):
    parsers = {"sunk-syncer": syncer_parser, "sunk-scheduler": scheduling_parser,
               "sunk-extender": scheduling_parser, "sunk-operator": operator_parser}
    for name, make in parsers.items():
        parser = make()
        args = chart.container_args(docs, name)
        parsed, unknown = parser.parse_known_args(args)
        assert {u.partition("=")[0] for u in unknown} <= (EXTENDER_ONLY if name == "sunk-extender" else set())
        assert settings_from(parsed, parser).backend == "pyslurm", name
    hook = container(pod_spec(docs, "Job", "sunk-release-nodes"), "release-nodes")["args"]
    parser = release_parser()
    assert settings_from(parser.parse_args(hook[1:]), parser).backend == "pyslurm"


@pytest.mark.parametrize(("missing", "names"), [
    ("configMap", "slurm.pyslurm.configMap"),
    ("mungeKeySecret", "slurm.pyslurm.mungeKeySecret"),
    ("slurmUserId", "slurm.pyslurm.slurmUserId"),
])
def test_pyslurm_without_what_it_needs_fails_naming_the_value(missing, names):
    values = merged(PYSLURM, {"slurm": {"pyslurm": {missing: None if missing == "slurmUserId" else ""}}})
    assert names in refusal(values)


def test_pyslurm_without_a_slurmrestd_url_or_token_renders():
    values = merged(PYSLURM, {"slurm": {"api": {"url": ""}, "auth": {"token": ""}}})
    assert find(render(values), "Deployment", "sunk-syncer")


@pytest.mark.parametrize("uid", [0, -1, "65532"])
def test_a_root_or_no_slurmuser_uid_is_refused(uid):
    assert "slurmUserId" in refusal(merged(PYSLURM, {"slurm": {"pyslurm": {"slurmUserId": uid}}}))


def test_an_unknown_backend_is_refused():
    message = refusal({"slurm": {"backend": "grpc"}})
    assert "/slurm/backend" in message and "'rest', 'pyslurm'" in message


def test_the_operators_topology_renders_under_pyslurm():
    """pyslurm reconfigures too (slurm_reconfigure), so the operator's topology is allowed under it."""
    values = merged(PYSLURM, {"operator": {"enabled": True, "topology": {"type": "block", "configMap": "topo"}}})
    args = container(pod_spec(render(values), "Deployment", "sunk-operator"), "operator")["args"]
    assert "--topology=block" in args and "--slurm-backend=pyslurm" in args


def test_a_slurm_cluster_under_pyslurm_is_refused_saying_why():
    """sunk reaches a SlurmCluster's slurmctld through its slurmrestd; pyslurm would read another slurm.conf."""
    message = refusal(merged(PYSLURM, {"operator": {"enabled": True}, "slurmCluster": {"enabled": True}}))
    assert "slurmCluster.enabled" in message and "slurm.backend rest" in message


def passwd_of(docs: list[dict[str, Any]]) -> list[list[str]]:
    return [line.split(":") for line in find(docs, "ConfigMap", "sunk-slurm-passwd")["data"]["passwd"].splitlines()]


@pytest.mark.parametrize(("kind", "name", "main"), SLURM_PODS, ids=[p[1] for p in SLURM_PODS])
def test_slurm_confs_slurmuser_is_a_user_the_daemons_know_by_name_and_uid(docs, kind, name, main):
    """libslurm refuses a slurm.conf whose SlurmUser the image does not know ("Invalid user for SlurmUser"), and
    munge credentials are restricted to SlurmUser's uid: the daemons' /etc/passwd names it."""
    spec = pod_spec(docs, kind, name)
    assert volume(spec, "slurm-passwd")["configMap"]["name"] == "sunk-slurm-passwd"
    mounted = [m for m in container(spec, main)["volumeMounts"] if m["name"] == "slurm-passwd"]
    assert mounted == [{"name": "slurm-passwd", "mountPath": "/etc/passwd", "subPath": "passwd", "readOnly": True}]
    assert [e[:3] for e in passwd_of(docs)] == [["root", "x", "0"], ["nonroot", "x", "65532"], ["slurm", "x", str(UID)],
                                                ["sunk-syncer", "x", str(SYNCER_UID)],
                                                ["sunk-operator", "x", str(OPERATOR_UID)]]


def test_a_slurmuser_of_another_name_is_named_and_run_as_by_the_scheduler():
    values = merged(PYSLURM, {"slurm": {"pyslurm": {"slurmUser": "slurmadm", "slurmUserId": 990}}})
    docs = render(values)
    entries = {e[0]: e[2] for e in passwd_of(docs)}
    assert entries["slurmadm"] == "990" and "slurm" not in entries
    assert uid_of(docs, "Deployment", "sunk-scheduler") == 990
    assert "slurmUser" in refusal(merged(PYSLURM, {"slurm": {"pyslurm": {"slurmUser": "bad:name\nroot"}}}))

"""A NodeSet naming a SlurmCluster (``spec.slurmCluster``): what the operator adds to its slurmd Pods, what the
template keeps, and the NodeSet frozen while the cluster cannot be used (issue 34 item 3)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from nodeset_fakes import node, nodeset, pod_for
from slurmcluster_fakes import IMAGES, cluster

from sunk.translate.nodeset import pod as podlib
from sunk.translate.nodeset.plan import Facts, decide
from sunk.translate.nodeset.spec import read_spec
from sunk.translate.slurmcluster import mounts as lent
from sunk.translate.slurmcluster.plan import Facts as ClusterFacts
from sunk.translate.slurmcluster.plan import decide as cluster_decide

Obj = dict[str, Any]


def W(i: int) -> Obj:
    return node(f"worker-{i}", f"10.0.3.{i}")


def cond(plan: Any, ctype: str) -> Obj:
    return next(c for c in plan.conditions if c["type"] == ctype)


def applied(the_cluster: Obj, *, valid: str = "True", observed: Any = "same") -> Obj:
    """``the_cluster`` as its reconciler leaves it once applied: SpecValid and observedGeneration."""
    out = copy.deepcopy(the_cluster)
    out["status"] = {"observedGeneration": out["metadata"]["generation"] if observed == "same" else observed,
                     "conditions": [{"type": "SpecValid", "status": valid, "reason": "Valid"}]}
    return out


def sc(**spec: Any) -> Obj:
    return applied(cluster(hooks={"configMap": "sunk-slurm-hooks"}, **spec))


def of_cluster(ns: Obj, the_cluster: Obj | None = None, watched: str = "sc", **kw: Any) -> Facts:
    return Facts(ns, [W(1)], slurm={}, cluster=the_cluster if the_cluster is not None else sc(),
                 cluster_nodesets=["gpu"], watched_cluster=watched, **kw)


def created(ns: Obj, the_cluster: Obj | None = None) -> Obj:
    (pod,) = decide(of_cluster(ns, the_cluster)).create
    return dict(pod["spec"])


def slurmd(pod_spec: Obj) -> Obj:
    return next(c for c in pod_spec["containers"] if c["name"] == "slurmd")


def volume(pod_spec: Obj, name: str) -> Obj:
    (found,) = [v for v in pod_spec.get("volumes") or [] if v["name"] == name]
    return found


def mount_paths(container: Obj) -> dict[str, str]:
    return {m["mountPath"]: m["name"] for m in container.get("volumeMounts") or []}


def test_the_slurmd_pod_gets_the_clusters_configuration_munge_key_and_hooks():
    pod = created(nodeset(slurmCluster="sc"))
    config = volume(pod, lent.VOLUME_CONFIG)["projected"]["sources"]
    assert config == [{"configMap": {"name": "sc-slurm-config"}},
                      {"configMap": {"name": "sunk-slurm-hooks", "items": [
                          {"key": "prolog.sh", "path": "prolog.d/50-sunk.sh", "mode": 0o755},
                          {"key": "epilog.sh", "path": "epilog.d/50-sunk.sh", "mode": 0o755}]}}]
    assert volume(pod, lent.VOLUME_MUNGE_KEY)["secret"]["secretName"] == "sc-munge-key"
    assert volume(pod, lent.VOLUME_HOOKS_ENV)["configMap"]["name"] == "sunk-slurm-hooks"
    container = slurmd(pod)
    assert mount_paths(container) == {"/etc/slurm": lent.VOLUME_CONFIG, "/run/munge": lent.VOLUME_MUNGE_SOCKET,
                                      "/etc/sunk": lent.VOLUME_HOOKS_ENV,
                                      podlib.HOOKS_TOKEN_DIR: podlib.HOOKS_TOKEN_VOLUME}
    assert {"name": "SLURM_CONF", "value": "/etc/slurm/slurm.conf"} in container["env"]
    (munged,) = pod["initContainers"]
    assert munged["name"] == "munged" and munged["restartPolicy"] == "Always"
    assert munged["image"] == IMAGES["slurmd"] != container["image"]  # the cluster's image, not the template's
    assert "securityContext" not in munged  # the slurmd image's user, root, reads the key of mode 0400
    assert mount_paths(munged)["/etc/munge-key"] == lent.VOLUME_MUNGE_KEY
    assert lent.VOLUME_MUNGE_KEY not in mount_paths(container).values()  # the operator mounts it into munged only


def test_munged_runs_the_clusters_slurmd_image_whatever_the_template_runs():
    ns = nodeset(slurmCluster="sc")
    ns["spec"]["template"]["spec"]["containers"][0]["image"] = "evil.example/copies-the-key:1"
    pod = created(ns, sc(images={**IMAGES, "slurmd": "registry.example/their-slurmd:2"}))
    (munged,) = pod["initContainers"]
    assert munged["image"] == "registry.example/their-slurmd:2"


def test_a_new_slurmd_image_of_the_cluster_rolls_the_pods():
    spec = read_spec(nodeset(slurmCluster="sc")).spec
    one = lent.NodeMounts("sc", "sc-slurm-config", "sc-munge-key", "slurmd:1", "hooks")
    assert podlib.template_hash(spec, one) != podlib.template_hash(spec, one.__class__(
        "sc", "sc-slurm-config", "sc-munge-key", "slurmd:2", "hooks"))


def test_the_prolog_and_epilog_are_where_slurm_conf_says():
    plan = cluster_decide(ClusterFacts(sc(), ["gpu"]))
    assert plan.config is not None
    conf = plan.config.data["slurm.conf"]
    assert "Prolog=/etc/slurm/prolog.d/*" in conf and "Epilog=/etc/slurm/epilog.d/*" in conf
    assert lent.PROLOG_FILE.startswith("prolog.d/") and lent.EPILOG_FILE.startswith("epilog.d/")


def test_the_nodes_register_with_the_feature_the_clusters_partitions_select():
    ns = nodeset(slurmCluster="sc")
    (pod,) = decide(of_cluster(ns)).create
    env = {e["name"]: e["value"] for e in slurmd(pod["spec"])["env"]}
    assert env["SUNK_SLURM_FEATURES"] == "h100,nodeset-gpu"
    assert "Feature=h100,nodeset-gpu" in env["SUNK_SLURMD_CONF"]
    conf = cluster_decide(ClusterFacts(sc(), ["gpu"])).config
    assert conf is not None and "NodeSet=ns-gpu Feature=nodeset-gpu" in conf.data["slurm.conf"]


def test_a_cluster_without_hooks_lends_no_prolog_or_hooks_env():
    pod = created(nodeset(slurmCluster="sc"), applied(cluster()))
    assert volume(pod, lent.VOLUME_CONFIG)["projected"]["sources"] == [{"configMap": {"name": "sc-slurm-config"}}]
    assert "/etc/sunk" not in mount_paths(slurmd(pod))


def test_the_clusters_own_munge_secret_is_the_one_mounted():
    pod = created(nodeset(slurmCluster="sc"), sc(keys={"munge": {"existingSecret": "their-munge"}}))
    assert volume(pod, lent.VOLUME_MUNGE_KEY)["secret"]["secretName"] == "their-munge"


def test_no_cluster_named_leaves_the_pod_as_it_was():
    ns = nodeset()
    spec = read_spec(ns).spec
    before = podlib.desired_pod(spec, "worker-1", "g-3-1", podlib.template_hash(spec))
    (pod,) = decide(of_cluster(ns)).create  # a cluster in the cache changes nothing for a NodeSet not naming it
    assert pod == before
    assert "initContainers" not in pod["spec"] and not any(c["type"] == "ClusterFound" for c in decide(
        of_cluster(ns)).conditions)


def with_template(**change: Any) -> Obj:
    ns = nodeset(slurmCluster="sc")
    spec = ns["spec"]["template"]["spec"]
    for key, value in change.items():
        if key == "mounts":
            spec["containers"][0]["volumeMounts"] = value
        elif key == "env":
            spec["containers"][0]["env"] = value
        else:
            spec[key] = value
    return ns


@pytest.mark.parametrize("change, kept_path, skipped", [
    # the template's own configuration (a subPath file under /etc/slurm): no config volume, no SLURM_CONF
    ({"volumes": [{"name": "conf", "configMap": {"name": "mine"}}],
      "mounts": [{"name": "conf", "mountPath": "/etc/slurm/slurm.conf", "subPath": "slurm.conf"}]},
     "/etc/slurm/slurm.conf", lent.VOLUME_CONFIG),
    # its own munged beside slurmd (the docs' older example)
    ({"initContainers": [{"name": "munged", "image": "their/munge"}]}, None, lent.VOLUME_MUNGE_KEY),
    ({"containers": [{"name": "slurmd", "image": "s"}, {"name": "munged", "image": "m"}]}, None,
     lent.VOLUME_MUNGE_KEY),
    # its own socket directory
    ({"volumes": [{"name": "sock", "emptyDir": {}}], "mounts": [{"name": "sock", "mountPath": "/run/munge"}]},
     "/run/munge", lent.VOLUME_MUNGE_KEY),
    ({"volumes": [{"name": "e", "configMap": {"name": "mine"}}], "mounts": [{"name": "e", "mountPath": "/etc/sunk/"}]},
     "/etc/sunk/", lent.VOLUME_HOOKS_ENV),
])
def test_what_the_template_sets_for_a_path_or_name_wins(change, kept_path, skipped):
    pod = created(with_template(**change))
    names = {v["name"] for v in pod["volumes"]}
    assert skipped not in names
    if kept_path is not None:
        assert kept_path in mount_paths(slurmd(pod))
    added = {lent.VOLUME_CONFIG, lent.VOLUME_MUNGE_KEY, lent.VOLUME_HOOKS_ENV} - {skipped}
    assert added <= names  # the other parts still come


def test_the_templates_own_slurm_conf_variable_wins():
    pod = created(with_template(env=[{"name": "SLURM_CONF", "value": "/opt/slurm.conf"}]))
    assert [e for e in slurmd(pod)["env"] if e["name"] == "SLURM_CONF"] == [
        {"name": "SLURM_CONF", "value": "/opt/slurm.conf"}]


def hostile_templates() -> list[tuple[Obj, str]]:
    secret = {"secret": {"secretName": "someone-elses"}}
    return [
        # a volume under the operator's munge key name, holding another Secret, for the operator's munged to read
        ({"volumes": [{"name": lent.VOLUME_MUNGE_KEY, **secret}]}, "template.spec.volumes[0].name"),
        # the socket's or the configuration's name taken: the operator's mounts would show the template's volume
        ({"volumes": [{"name": lent.VOLUME_MUNGE_SOCKET, **secret}]}, "template.spec.volumes[0].name"),
        ({"volumes": [{"name": lent.VOLUME_CONFIG, **secret}]}, "template.spec.volumes[0].name"),
        # slurmd, a second container or an init container mounting the operator's munge key: it would read the key
        ({"mounts": [{"name": lent.VOLUME_MUNGE_KEY, "mountPath": "/stolen"}]},
         "template.spec.containers[0].volumeMounts[0].name"),
        ({"containers": [{"name": "slurmd", "image": "s"}, {"name": "thief", "image": "t", "volumeMounts": [
            {"name": lent.VOLUME_MUNGE_KEY, "mountPath": "/stolen", "readOnly": True}]}]},
         "template.spec.containers[1].volumeMounts[0].name"),
        ({"initContainers": [{"name": "copy", "image": "t", "volumeMounts": [
            {"name": lent.VOLUME_MUNGE_KEY, "mountPath": "/k"}]}]},
         "template.spec.initContainers[0].volumeMounts[0].name"),
        ({"containers": [{"name": "slurmd", "image": "s", "volumeDevices": [
            {"name": lent.VOLUME_MUNGE_STATE, "devicePath": "/dev/x"}]}]},
         "template.spec.containers[0].volumeDevices[0].name"),
        ({"mounts": [{"name": lent.VOLUME_HOOKS_ENV, "mountPath": "/x"}]},
         "template.spec.containers[0].volumeMounts[0].name"),
    ]


@pytest.mark.parametrize("hostile, where", hostile_templates())
def test_a_template_using_a_reserved_volume_name_is_refused_and_no_pod_changes(hostile, where):
    ns = with_template(**hostile)
    old = pod_for(nodeset(), "worker-1", "g-3-1")  # outdated: it would be rolled were the spec taken
    plan = decide(Facts(ns, [W(1), W(2)], [old], slurm={}, cluster=sc(), cluster_nodesets=["gpu"],
                        watched_cluster="sc"))
    assert not (plan.create or plan.mark or plan.drain or plan.undrain or plan.delete)
    valid = cond(plan, "SpecValid")
    assert valid["status"] == "False" and f"spec.{where}" in valid["message"] and "reserves" in valid["message"]


def test_reserved_volume_names_are_free_without_a_cluster():
    ns = with_template(volumes=[{"name": lent.VOLUME_MUNGE_KEY, "secret": {"secretName": "mine"}}],
                       mounts=[{"name": lent.VOLUME_MUNGE_KEY, "mountPath": "/etc/munge"}])
    del ns["spec"]["slurmCluster"]
    assert read_spec(ns).problems == ()  # the operator lends nothing, so nothing of the template is its


def test_every_volume_the_operator_lends_is_reserved():
    mounts = lent.NodeMounts("sc", "sc-slurm-config", "sc-munge-key", "slurmd:1", "hooks")
    lent_names = {v["name"] for part in lent.slurmd_parts(mounts) for v in part.volumes}
    assert lent_names == set(lent.RESERVED_VOLUMES)


@pytest.mark.parametrize("junk", [None, "x", 3, {"volumes": "x", "containers": ["x", {"volumeMounts": 7}]}])
def test_reserved_volume_uses_reads_junk_as_nothing(junk):
    assert lent.reserved_volume_uses(junk) == []


@pytest.mark.parametrize("value", ["../sc", "SC", "sc.other", "a" * 41, 7, ["sc"]])
def test_a_cluster_name_that_is_not_a_name_is_a_spec_problem(value):
    ns = nodeset(slurmCluster=value)
    plan = decide(of_cluster(ns))
    assert not plan.create and cond(plan, "SpecValid")["status"] == "False"
    assert "spec.slurmCluster" in cond(plan, "SpecValid")["message"]


def unusable() -> list[tuple[Obj | None, str, str]]:
    deleting = sc()
    deleting["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    refused = sc()
    refused["status"] = {"conditions": [{"type": "SpecValid", "status": "False", "reason": "SecretNotLabelled"}]}
    never_reconciled = sc()
    del never_reconciled["status"]
    no_condition = sc()
    no_condition["status"]["conditions"] = []
    edited = sc()  # a new spec its reconciler has not applied yet: what it lends may not exist
    edited["metadata"]["generation"] = 3
    return [(None, "sc", lent.NOT_FOUND), (sc(), "", lent.NOT_WATCHED), (sc(), "other", lent.NOT_WATCHED),
            (deleting, "sc", lent.DELETING), (sc(slurm={"release": "20.11"}), "sc", lent.INVALID),
            (refused, "sc", lent.INVALID), (applied(sc(), valid="False"), "sc", lent.INVALID),
            (never_reconciled, "sc", lent.NOT_OBSERVED), (no_condition, "sc", lent.NOT_OBSERVED),
            (edited, "sc", lent.NOT_OBSERVED), (applied(sc(), observed=1), "sc", lent.NOT_OBSERVED),
            (applied(sc(), observed="2"), "sc", lent.NOT_OBSERVED),
            (applied(sc(), observed=None), "sc", lent.NOT_OBSERVED),
            (applied(sc(), valid="Unknown"), "sc", lent.NOT_OBSERVED)]


@pytest.mark.parametrize("the_cluster, watched, reason", unusable())
def test_a_cluster_that_cannot_be_used_freezes_the_nodeset(the_cluster, watched, reason):
    ns = nodeset(slurmCluster="sc")
    old = pod_for(nodeset(), "worker-1", "g-3-1")  # a Pod of before the cluster was named: outdated
    gone = pod_for(nodeset(), "worker-9", "g-3-9")  # a Pod on a Node that no longer matches
    facts = Facts(ns, [W(1), W(2)], [old, gone], slurm={}, cluster=the_cluster, cluster_nodesets=["gpu"],
                  watched_cluster=watched)
    plan = decide(facts)
    assert not (plan.create or plan.mark or plan.drain or plan.undrain or plan.delete)
    found = cond(plan, "ClusterFound")
    assert found["status"] == "False" and found["reason"] == reason
    assert [e.reason for e in plan.events] == [reason]


def test_a_found_cluster_says_so_and_rolls_pods_made_without_it():
    ns = nodeset(slurmCluster="sc")
    old = pod_for(nodeset(), "worker-1", "g-3-1")
    plan = decide(Facts(ns, [W(1)], [old], slurm={}, cluster=sc(), cluster_nodesets=["gpu"], watched_cluster="sc"))
    assert cond(plan, "ClusterFound") == {"type": "ClusterFound", "status": "True", "reason": "Found",
                                          "message": "SlurmCluster sc"}
    assert [m.why for m in plan.mark] == ["update: the NodeSet's template changed"]


def test_the_template_hash_follows_what_the_cluster_lends():
    spec = read_spec(nodeset(slurmCluster="sc")).spec
    one = lent.NodeMounts("sc", "sc-slurm-config", "sc-munge-key", "slurmd:1", "hooks")
    assert podlib.template_hash(spec, one) != podlib.template_hash(spec, one.__class__(
        "sc", "sc-slurm-config", "other-munge", "slurmd:1", "hooks"))
    plain = read_spec(nodeset()).spec
    assert podlib.template_hash(plain) == podlib.template_hash(plain, None)  # unnamed: the hash of before


def test_the_nodeset_and_the_clusters_own_objects_agree_on_the_names():
    plan = cluster_decide(ClusterFacts(sc(keys={"munge": {"existingSecret": "m"}}), ["gpu"]))
    assert plan.spec is not None
    lends = lent.node_mounts(plan.spec)
    by_kind = {(o["kind"], o["metadata"]["name"]) for o in plan.objects}
    assert ("ConfigMap", lends.config_configmap) in by_kind
    ctld = next(o for o in plan.objects if o["kind"] == "StatefulSet" and o["metadata"]["name"] == "sc-slurmctld")
    secrets = {v["secret"]["secretName"] for v in ctld["spec"]["template"]["spec"]["volumes"] if "secret" in v}
    assert lends.munge_secret == "m" and "m" in secrets


def test_deleting_a_nodeset_proceeds_without_its_cluster():
    ns = nodeset(slurmCluster="sc", deleting=True)
    pod = pod_for(nodeset(), "worker-1", "g-3-1")
    plan = decide(Facts(ns, [W(1)], [pod], slurm={}, cluster=None, watched_cluster="sc"))
    assert [m.why for m in plan.mark] == ["the NodeSet is being deleted"]


def test_the_template_is_not_mutated():
    ns = nodeset(slurmCluster="sc")
    before = copy.deepcopy(ns)
    decide(of_cluster(ns))
    assert ns == before

"""The Slurm identity policy against the real apiserver and real Slurm: no Pod picks its own Slurm identity.

Two lines, tested apart: the chart's ValidatingAdmissionPolicy (rendered from the chart, applied to the real
apiserver) refuses such Pods at creation; the scheduler (run with the policy file the chart mounts, and a
scheduler name the admission policy does not cover, so its Pods reach it whatever they ask) gives them no
job, an Event and PodScheduled=False. The default rule is the chart's default (a non-root identity, no
other user, no priority): the policy of an operator who wrote none.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from kube_testns import applied_admission_policy, create_namespace, purge_namespace
from slurmtools import slurm_job, wait_for
from test_scheduler import (
    events_for,
    get_pod,
    job_id_of,
    jobs_for_pod,
    placed,
    pod_manifest,
    scheduler_process,
    serving,
)

from sunk.kube import client as kc
from sunk.kube.resources import PODS
from sunk.model import names
from sunk_dev import chart

PORTS = {"hooks": 18920, "metrics": 18921, "probes": 18922}
ADMITTED_SCHEDULER = "sunk-identity-admission-test"  # the name the admission policy covers
SCHEDULER = "sunk-identity-test"  # the scheduler's: Pods named for it reach it, whatever they ask
KUBE_UID = 1001  # the dev cluster's tenant user, with a Slurm association
NOBODY = 65534


@pytest.fixture(scope="module")
def namespaces(kube_api):
    """(a namespace with a rule of its own: kube's identity, users 1000-1999; one under the default rule)."""
    made = (create_namespace(kube_api), create_namespace(kube_api))
    yield made
    for namespace in made:
        purge_namespace(kube_api, namespace)


@pytest.fixture(scope="module")
def policy(namespaces):
    """The identityPolicy value: the chart's default rule, and a rule for the first namespace."""
    default = chart.render()  # (the chart's own default rule, as it renders it into the ConfigMap)
    config = next(d for d in default if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("identity-policy"))
    value = json.loads(config["data"]["policy.json"])
    assert value["default"] == {"identity": {"userId": NOBODY, "groupId": NOBODY}}
    value["namespaces"] = {namespaces[0]: {"identity": {"userId": KUBE_UID, "groupId": KUBE_UID},
                                           "userIds": ["1000-1999"]}}
    return value


@pytest.fixture(scope="module")
def admission(kube_api, policy):
    """The chart's ValidatingAdmissionPolicy and its binding for ``policy``, applied as the chart applies them."""
    docs = chart.render({"identityPolicy": policy, "scheduler": {"name": ADMITTED_SCHEDULER}},
                        extra_args=["--api-versions", "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"])
    with applied_admission_policy(kube_api, docs, "-identity-policy"):
        yield


@pytest.fixture(scope="module")
def scheduler(kube_api, dev_cluster, namespaces, policy, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("identity")
    policy_file = tmp / "policy.json"
    policy_file.write_text(json.dumps(policy))
    proc = scheduler_process(dev_cluster, namespaces[0], tmp, name="sunk-scheduler-identity", ports=PORTS,
                             extra_args=(f"--scheduler-name={SCHEDULER}", f"--watch-namespace={','.join(namespaces)}",
                                         f"--identity-policy={policy_file}"))
    with serving(kube_api, dev_cluster, proc, namespaces, purge=False):  # (the namespaces fixture purges)
        yield proc


def create(kube_api, namespace, scheduler_name, **annotations):
    manifest = pod_manifest(f"p-{uuid.uuid4().hex[:6]}", annotations={
        f"{names.DOMAIN}/{key.replace('_', '-')}": value for key, value in annotations.items()})
    manifest["spec"]["schedulerName"] = scheduler_name
    return kc.create(kube_api, PODS, manifest, namespace)


def refused_at_admission(kube_api, namespace, **annotations) -> str:
    """The apiserver's refusal of such a Pod for the admission-covered scheduler ('' if it was admitted)."""
    try:
        pod = create(kube_api, namespace, ADMITTED_SCHEDULER, **annotations)
    except kc.ApiError as exc:
        assert exc.status in (403, 422), exc
        return exc.message
    kc.delete(kube_api, PODS, pod["metadata"]["name"], namespace)
    return ""


def test_admission_refuses_root_and_other_users_the_policy_does_not_allow(kube_api, namespaces, admission):
    own, other = namespaces
    # The binding takes effect once the apiserver has compiled the policy: wait for the first refusal.
    message = wait_for(lambda: refused_at_admission(kube_api, other, user_id="0"), 30, "the policy to take effect")
    assert "user-id" in message and "the default rule" in message
    assert "user-id" in refused_at_admission(kube_api, own, user_id="2000")
    assert "priority" in refused_at_admission(kube_api, other, priority="10")
    assert "group" in refused_at_admission(kube_api, own, user_id="1500", group_id="0")
    for namespace, asked in ((own, {"user_id": "1500"}), (own, {}), (other, {}),
                             (other, {"user_id": str(NOBODY)})):
        assert refused_at_admission(kube_api, namespace, **asked) == "", (namespace, asked)


def refused_by_the_scheduler(kube_api, dev_cluster, namespace, needle, **annotations) -> None:
    pod = create(kube_api, namespace, SCHEDULER, **annotations)
    name = pod["metadata"]["name"]
    event = wait_for(lambda: [e for e in events_for(kube_api, namespace, name) if e["reason"] == "FailedValidation"],
                     20, "a FailedValidation event")[0]
    assert needle in event["message"] and event["type"] == "Warning"
    # The Event and the condition are two writes: wait for the second rather than race it.
    wait_for(lambda: any(c["type"] == "PodScheduled" and c["status"] == "False" and needle in c["message"]
                         for c in get_pod(kube_api, namespace, name)["status"].get("conditions") or []),
             10, "the PodScheduled=False condition naming the refusal")
    time.sleep(2)  # give a wrong implementation the time to submit anyway
    assert jobs_for_pod(dev_cluster, pod["metadata"]["uid"]) == []


def test_the_scheduler_gives_root_no_job_without_a_policy_that_allows_it(kube_api, dev_cluster, namespaces,
                                                                        scheduler):
    refused_by_the_scheduler(kube_api, dev_cluster, namespaces[1], "user 0 (root) is not allowed", user_id="0")


def test_the_scheduler_refuses_a_user_outside_the_namespaces_range_and_a_priority(kube_api, dev_cluster,
                                                                                 namespaces, scheduler):
    refused_by_the_scheduler(kube_api, dev_cluster, namespaces[0], "user 2000 is not allowed", user_id="2000")
    refused_by_the_scheduler(kube_api, dev_cluster, namespaces[1], "may not set its job's priority", priority="5")


def test_a_pod_that_asks_nothing_runs_as_the_configured_non_root_identity(kube_api, dev_cluster, namespaces,
                                                                         scheduler):
    pod = create(kube_api, namespaces[1], SCHEDULER)
    job_id, _ = placed(kube_api, dev_cluster, namespaces[1], pod["metadata"]["name"])
    job = slurm_job(dev_cluster, job_id)
    assert (job["user_id"], job["group_id"]) == (NOBODY, NOBODY)


def test_a_user_inside_the_namespaces_range_is_scheduled_as_that_user(kube_api, dev_cluster, namespaces, scheduler):
    pod = create(kube_api, namespaces[0], SCHEDULER, user_id=str(KUBE_UID))
    job = slurm_job(dev_cluster, job_id_of(kube_api, dev_cluster, namespaces[0], pod["metadata"]["name"]))
    assert (job["user_id"], job["user_name"], job["group_id"]) == (KUBE_UID, "kube", KUBE_UID)
    default = create(kube_api, namespaces[0], SCHEDULER)
    job = slurm_job(dev_cluster, job_id_of(kube_api, dev_cluster, namespaces[0], default["metadata"]["name"]))
    assert job["user_id"] == KUBE_UID  # the namespace's own identity

"""The placeholder job as submitted: the Pod's job plus the environment its script reads."""

from __future__ import annotations

import re
from importlib import resources

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sunk.model import names
from sunk.translate import placeholder
from sunk.translate.gang import KIND_JOB, Gang
from sunk.translate.identity import PlaceholderIdentity
from sunk.translate.keys import PodKey
from sunk.translate.podjob import Identity, pod_to_job
from sunk.translate.policy import IdentityPolicy, NamespaceRule

SCRIPT = "#!/bin/bash\n"
POLICY = IdentityPolicy(default=NamespaceRule(identity=Identity(1001, 1001)))
KILL_WAIT = 30


def make_pod(annotations=None, grace=5, cpu="1"):
    return {"metadata": {"name": "web", "namespace": "team", "uid": "uid-123", "annotations": annotations or {}},
            "spec": {"terminationGracePeriodSeconds": grace,
                     "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}}


def settings(**changes):
    return placeholder.Settings(**{"script": SCRIPT, "kill_wait_seconds": KILL_WAIT, "scheduler": "sched",
                                   "hooks_url": "http://hooks:8000", "policy": POLICY, **changes})


def request(pod=None, hook_token="token-of-uid-123", **changes):
    return placeholder.job_request(make_pod() if pod is None else pod, settings(**changes), hook_token=hook_token)


def env(req):
    return dict(item.split("=", 1) for item in req.environment)


def test_the_environment_is_exactly_what_the_script_reads_in_order():
    assert request().environment == (
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "SUNK_HOOKS_URL=http://hooks:8000",
        "SUNK_HOOK_TOKEN=token-of-uid-123",
        "SUNK_POD_UID=uid-123",
        f"SUNK_KILL_WAIT={KILL_WAIT}",
        "SUNK_POD=team/web",
    )


def test_the_hooks_ca_is_set_only_when_given():
    assert "SUNK_HOOKS_CA" not in env(request())
    assert "SUNK_HOOKS_CA" not in env(request(hooks_ca_file=""))
    with_ca = request(hooks_ca_file="/etc/sunk/hooks-ca.pem")
    assert with_ca.environment[-1] == "SUNK_HOOKS_CA=/etc/sunk/hooks-ca.pem"
    assert with_ca.environment[:-1] == request().environment


def test_every_variable_the_script_requires_is_set():
    script = resources.files("sunk").joinpath("scripts/placeholder.sh").read_text()
    required = set(re.findall(r'"\$\{(SUNK_[A-Z_]+):\?\}"', script))
    assert required == {"SUNK_HOOKS_URL", "SUNK_HOOK_TOKEN", "SUNK_KILL_WAIT", "SUNK_POD"}
    used = set(re.findall(r"SUNK_[A-Z_]+", script)) - {"SUNK_DRAIN_MARGIN"}  # (a test knob, with a default)
    assert used - {"SUNK_GANG"} <= set(env(request(hooks_ca_file="/ca.pem")))
    gang = placeholder.gang_job_request(Gang(KIND_JOB, "team", "train", "job/u", job_uid="u"), [make_pod()],
                                        settings(hooks_ca_file="/ca.pem"), size=1, hook_token="t")
    assert used <= set(env(gang))  # a gang's job sets every one of them


def test_the_token_is_taken_as_given_never_recomputed():
    assert env(request(hook_token="abc"))["SUNK_HOOK_TOKEN"] == "abc"


def test_the_identity_is_the_jobs_admin_comment_with_the_scheduler_named_and_never_in_its_extra():
    """The script no longer marks the job started, so it needs no copy of the identity; Extra stays the user's."""
    req = request(scheduler="other-sched")
    identity = PlaceholderIdentity.parse(req.admin_comment)
    assert identity == PlaceholderIdentity(PodKey("uid-123"), "team", name="web", scheduler="other-sched")
    assert req.extra is None
    assert "SUNK_EXTRA" not in env(req)


def test_the_kill_wait_is_the_one_validated_against():
    assert env(request(kill_wait_seconds=60))["SUNK_KILL_WAIT"] == "60"
    with pytest.raises(ValueError, match="terminationGracePeriodSeconds"):
        request(make_pod(grace=30), kill_wait_seconds=30)
    assert request(make_pod(grace=30), kill_wait_seconds=60).name == "k8s:team/web"


def test_everything_else_is_the_pods_job():
    pod = make_pod({names.ANN_ACCOUNT: "acct", names.ANN_QOS: "high", names.ANN_TIMEOUT: "90"})
    expected = pod_to_job(pod, identity=Identity(1001, 1001, "acct"), script=SCRIPT, kill_wait_seconds=KILL_WAIT,
                          scheduler="sched")
    req = request(pod)
    assert attrs.evolve(req, environment=expected.environment) == expected
    assert req.script == SCRIPT and req.requeue is False


@pytest.mark.parametrize(("annotations", "default", "partition"), [
    ({}, None, None),
    ({}, "", None),
    ({}, "batch", "batch"),
    ({names.ANN_PARTITION: "gpu"}, "batch", "gpu"),
    ({names.ANN_PARTITION: "gpu"}, None, "gpu"),
    ({names.ANN_PARTITION: "  "}, "batch", "batch"),  # a blank annotation names no partition
], ids=["none", "empty-default", "default", "pod-wins", "pod-only", "blank-annotation"])
def test_the_default_partition_applies_only_when_the_pod_names_none(annotations, default, partition):
    assert request(make_pod(annotations), default_partition=default).partition == partition


def test_an_invalid_pod_is_refused_with_every_problem():
    with pytest.raises(ValueError, match=r"cpu.*; .*priority|priority.*; .*cpu"):
        request(make_pod({names.ANN_PRIORITY: "high"}, cpu="0"))


@given(uid=st.from_regex(r"\A[a-z0-9]([a-z0-9-]{0,34}[a-z0-9])?\Z"), token=st.from_regex(r"\A[0-9a-f]{64}\Z"),
       url=st.sampled_from(["http://127.0.0.1:8000", "https://sunk-scheduler.slurm.svc:8000"]))
def test_each_variable_is_set_once(uid, token, url):
    pod = make_pod()
    pod["metadata"]["uid"] = uid
    req = request(pod, hook_token=token, hooks_url=url, hooks_ca_file="/ca.pem")
    keys = [item.split("=", 1)[0] for item in req.environment]
    assert len(keys) == len(set(keys))
    assert env(req)["SUNK_POD_UID"] == uid and env(req)["SUNK_HOOK_TOKEN"] == token

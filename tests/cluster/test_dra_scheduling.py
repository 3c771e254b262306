"""Issue 38: GPUs through ResourceClaims, on the real Node (real slurmd, kubelet, containerd and the upstream DRA
test driver), with sunk-scheduler as deployed (the chart's RBAC for ``scheduler.draDeviceMapping``).

Slurm stays the one accountant of realnode1's four GPUs: a batch job and Pods share the node at once, each on the
GPUs Slurm gave it; a Pod's claim names exactly the devices of the GRES indices its placeholder's record names
(checked against the kubelet's own record of what the driver prepared), a Pod that does not fit waits in Slurm and
then gets the device freed, and a Pod deleted releases its claim and its job.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_testns import applied_admission_policy, create_namespace, delete_jobs, purge_namespace
from procs import Process, secret_file
from rbac_harness import (
    apply,
    apply_manifest,
    as_service_account,
    assert_never_forbidden,
    deployment_args,
    kubeconfig_for,
    rendered,
)
from slurmtools import slurm_job, state, wait_for
from syncer_harness import TEST_LABEL, Cluster, free_port, never, restore_slurm_node
from test_dra_devices import _kubelet_prepared_devices
from test_scheduler import SCHEDULER, end_pods, events_for, get_pod, job_id_of, scheduler_process, serving

from scheduler.claims import DELETE_PROTECTION
from sunk.kube import client as kc
from sunk.kube.resources import JOBS, LEASES, PODS, RESOURCECLAIMS, Resource
from sunk.model import names
from sunk.model.slurm import JobRequest
from sunk.slurm import connect
from sunk.translate import dra
from sunk_dev import chart, realnode
from sunk_dev.tls import issue, make_ca

pytestmark = pytest.mark.skipif(not realnode.enabled(), reason="SUNK_DEV_REAL_NODE=0: no real kubelet Node")

TEMPLATES = Resource("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate")
# The test driver's DeviceClass as the GRES type of the real Node's GPUs (gpu:fake:4): a claim asks gres/gpu:fake:N.
MAPPING_FLAG = (f"driver={realnode.DRA_DRIVER},device-class={realnode.DEVICE_CLASS}:{realnode.GPU_TYPE},"
                f"name={realnode.DEVICE_NAME}")
MAPPING = dra.DeviceMapping.parse(MAPPING_FLAG)


@pytest.fixture(scope="module")
def namespace(kube_api):
    ns = create_namespace(kube_api)
    yield ns
    purge_namespace(kube_api, ns)


@pytest.fixture(scope="module")
def claim_policy(kube_api):
    """The chart's claim policy for the mapping, with both sunk-scheduler and sunk-extender enabled (only they
    allocate the test driver's devices), applied for the module as the chart applies it: their own writes must
    pass it."""
    docs = chart.render({"scheduler": {"draDeviceMapping": MAPPING_FLAG}, "extender": {"enabled": True}},
                        extra_args=["--api-versions", "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"])
    with applied_admission_policy(kube_api, docs, "-sunk-dra-claims"):
        yield


@pytest.fixture(scope="module")
def scheduler(kube_api, dev_cluster, namespace, tmp_path_factory, claim_policy):
    """sunk-scheduler with --dra-device-mapping as the chart passes it, as its ServiceAccount with the chart's RBAC
    for scheduler.draDeviceMapping, under the chart's claim policy: every claim write and read runs as it, and a
    403 fails the module."""
    tmp = tmp_path_factory.mktemp("dra-scheduler")
    lease = f"sunk-scheduler-dra-{uuid.uuid4().hex[:6]}"
    account, kubeconfig = as_service_account(kube_api, dev_cluster, "scheduler-rbac.yaml", tmp, leases=[lease],
                                             values={"scheduler": {"draDeviceMapping": MAPPING_FLAG}})
    ports = {"hooks": free_port(), "metrics": free_port(), "probes": free_port()}
    proc = scheduler_process(dev_cluster, namespace, tmp, name="sunk-scheduler-dra", ports=ports, extra_args=(
        f"--kubeconfig={kubeconfig}", f"--leader-election-namespace={account['namespace']}",
        f"--leader-election-id={lease}", f"--dra-device-mapping={MAPPING_FLAG}"))
    with serving(kube_api, dev_cluster, proc, namespace, purge=False):
        yield proc
    assert_never_forbidden(proc.log)


@pytest.fixture
def slurm(slurm_rest):
    client = connect("rest", url=slurm_rest.url, token=slurm_rest.token, user=slurm_rest.user)
    try:
        yield client
    finally:
        client.close()


def claim(name: str, count: int, device_class: str = realnode.DEVICE_CLASS) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                "deviceClassName": device_class, "count": count}}]}}}


def template(name: str, count: int) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
            "spec": {"spec": claim(name, count)["spec"]}}


def gpu_pod(name: str, source: dict[str, str]) -> dict[str, Any]:
    """A Pod of sunk-scheduler on the real Node's partition, its GPUs from one claim (named, or a template's)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": {names.ANN_PARTITION: realnode.SLURM_PARTITION}},
            "spec": {"schedulerName": SCHEDULER, "terminationGracePeriodSeconds": 2,
                     "resourceClaims": [{"name": "gpus", **source}],
                     "containers": [{"name": "main", "image": realnode.BUSYBOX_IMAGE, "imagePullPolicy": "Never",
                                     "command": ["/bin/sleep", "3600"],
                                     "resources": {"requests": {"cpu": "1", "memory": "64Mi"},
                                                   "claims": [{"name": "gpus"}]}}]}}


def devices_of(claim_obj: dict[str, Any]) -> list[str]:
    results = (((claim_obj.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or ()
    return sorted(r["device"] for r in results)


def names_of(indices: tuple[int, ...] | list[int]) -> list[str]:
    return sorted(realnode.DEVICE_NAME.format(index=i) for i in indices)


def claim_of(api, namespace: str, pod_name: str) -> dict[str, Any]:
    """The Pod's one claim (a template's, once kube-controller-manager made it)."""
    pod = get_pod(api, namespace, pod_name)
    (entry,) = dra.pod_claims(pod)
    assert entry.claim, f"{pod_name}'s claim is not made yet"
    return kc.get(api, RESOURCECLAIMS, entry.claim, namespace)


def running(api, namespace: str, name: str) -> bool:
    return ((get_pod(api, namespace, name) or {}).get("status") or {}).get("phase") == "Running"


def batch_job(slurm, gpus: int, tag: str) -> int:
    """A Slurm batch job on realnode1 holding ``gpus`` GPUs; it notes its CUDA_VISIBLE_DEVICES in its Comment."""
    script = "#!/bin/sh\nscontrol update JobId=$SLURM_JOB_ID Comment=\"cuda=$CUDA_VISIBLE_DEVICES\"\nsleep 300\n"
    return slurm.submit_job(JobRequest(
        name=f"dra-batch-{tag}", script=script, partition=realnode.SLURM_PARTITION, gpus_per_node=gpus,
        gpu_type=realnode.GPU_TYPE, required_nodes=(realnode.SLURM_NODE,), memory_per_node=64, time_limit=10))


def held_indices(slurm, job_id: int) -> list[int]:
    (allocation,) = slurm.get_job_allocations(job_id).allocations
    assert allocation.node == realnode.SLURM_NODE, allocation
    return list(dra.granted_indices(allocation.gres, MAPPING))


def driver_environment(home: Path, claim_obj: dict[str, Any]) -> dict[str, str]:
    """The environment the DRA test driver prepared for a claim's request ``gpus`` (its CDI spec, written from the
    allocation's config when the kubelet asked it to prepare the claim; the dev cluster's containerd 1.6 does not
    inject CDI devices, so the container itself does not show it)."""
    spec = realnode.Paths(home).base / "cdi" / f"{realnode.DRA_DRIVER}-{claim_obj['metadata']['uid']}-gpus.json"
    if not spec.exists():
        return {}
    edits = [d.get("containerEdits") or {} for d in json.loads(spec.read_text()).get("devices") or ()]
    return dict(e.split("=", 1) for edit in edits for e in edit.get("env") or () if "=" in e)


def test_a_batch_job_and_pods_share_the_node_each_on_the_gpus_slurm_gave_it(kube_api, dev_cluster, namespace,
                                                                             scheduler, slurm):
    tag = uuid.uuid4().hex[:6]
    batch = batch_job(slurm, 1, tag)
    try:
        job = wait_for(lambda: (j := slurm.get_job(batch)).state == "RUNNING" and j.comment and j, 60,
                       f"batch job {batch} RUNNING with its CUDA_VISIBLE_DEVICES noted")
        (freed,) = held_indices(slurm, batch)
        assert job.comment == f"cuda={freed}"

        # A Pod claiming 3: the rest of the node. Its claim names exactly its placeholder's GRES indices. It carries
        # a config of its own (the driver's opaque parameters), sent as Python's json.dumps writes it ('{"mode":
        # "..."}', spaced): the apiserver keeps those bytes and refuses any merge patch of the claim, so sunk writes
        # its finalizer in protobuf.
        three_claim = claim(f"three-{tag}", 3)
        three_claim["spec"]["devices"]["config"] = [{"opaque": {"driver": realnode.DRA_DRIVER,
                                                                "parameters": {"mode": f"three-{tag}"}}}]
        kc.create(kube_api, RESOURCECLAIMS, three_claim, namespace)
        kc.create(kube_api, PODS, gpu_pod(f"three-{tag}", {"resourceClaimName": f"three-{tag}"}), namespace)
        three_job = job_id_of(kube_api, dev_cluster, namespace, f"three-{tag}")
        wait_for(lambda: running(kube_api, namespace, f"three-{tag}"), 90, "the 3-GPU Pod Running on the real Node")
        three = held_indices(slurm, three_job)
        assert len(three) == 3 and freed not in three, (three, freed)
        assert slurm_job(dev_cluster, three_job)["tres_per_node"] == f"gres/gpu:{realnode.GPU_TYPE}:3"
        allocated = claim_of(kube_api, namespace, f"three-{tag}")
        assert devices_of(allocated) == names_of(three)
        assert dra.allocated_on(allocated) == realnode.NODE_NAME
        assert "resource.kubernetes.io/delete-protection" in allocated["metadata"]["finalizers"]
        assert f"{namespace}/three-{tag}: the apiserver will not merge-patch it" in scheduler.log.read_text()
        assert _kubelet_prepared_devices(dev_cluster.home, allocated["metadata"]["uid"]) == names_of(three)
        # The class's config, then the claim's, reached the driver (as kube-scheduler would have written them).
        prepared = driver_environment(dev_cluster.home, allocated)
        assert prepared.get("user_mode") == f"three-{tag}", prepared
        assert {f"admin_{k}": v for k, v in realnode.DEVICE_CLASS_PARAMETERS.items()}.items() <= prepared.items()
        assert slurm.get_job(batch).state == "RUNNING"  # both at once

        # A Pod claiming 1, from a template: Slurm has no GPU left on the node, so it waits there...
        kc.create(kube_api, TEMPLATES, template(f"one-{tag}", 1), namespace)
        kc.create(kube_api, PODS, gpu_pod(f"one-{tag}", {"resourceClaimTemplateName": f"one-{tag}"}), namespace)
        one_job = job_id_of(kube_api, dev_cluster, namespace, f"one-{tag}")
        wait_for(lambda: state(slurm_job(dev_cluster, one_job)) == "PENDING"
                 and slurm_job(dev_cluster, one_job).get("state_reason") == "Resources", 30,
                 "the 1-GPU Pod's job pending on Resources")
        assert not (get_pod(kube_api, namespace, f"one-{tag}")["spec"].get("nodeName"))
        # ... until the batch job ends: it gets exactly the GPU the batch job held.
        slurm.cancel_job(batch)
        wait_for(lambda: running(kube_api, namespace, f"one-{tag}"), 90, "the 1-GPU Pod Running once the GPU is free")
        assert held_indices(slurm, one_job) == [freed]
        one = claim_of(kube_api, namespace, f"one-{tag}")
        assert devices_of(one) == names_of([freed])
        assert _kubelet_prepared_devices(dev_cluster.home, one["metadata"]["uid"]) == names_of([freed])

        # A Pod deleted: its claim is released (deallocated by kube-controller-manager: the finalizer sunk wrote
        # tells it the allocation is a scheduler's) and its Slurm job ends.
        kc.delete(kube_api, PODS, f"three-{tag}", namespace)
        wait_for(lambda: not (kc.get(kube_api, RESOURCECLAIMS, f"three-{tag}", namespace).get("status") or {}).get(
            "allocation"), 60, "the 3-GPU claim deallocated once its Pod is gone")
        wait_for(lambda: state(slurm_job(dev_cluster, three_job)) in ("CANCELLED", "COMPLETED", None), 60,
                 "the 3-GPU Pod's job ended")
        assert not [e for e in events_for(kube_api, namespace, f"three-{tag}") if e["type"] == "Warning"]
    finally:
        slurm.cancel_job(batch)
        end_pods(kube_api, dev_cluster, namespace)  # (the next test starts from an idle real Node)


EXTENDER_PROFILE = "sunk-extender-dra"
DRA_VALUES = {"scheduler": {"draDeviceMapping": MAPPING_FLAG}}  # (over the harness's: the extender enabled)


@pytest.fixture(scope="module")
def extender(kube_api, dev_cluster, namespace, tmp_path_factory, claim_policy):
    """sunk-extender and the kube-scheduler that calls it, as the chart deploys them with
    ``scheduler.draDeviceMapping``: the extender's flags (``--dra-device-mapping`` among them), its ServiceAccount
    with the chart's RBAC (the DRA role bound to it too), under the claim policy; kube-scheduler from the chart's
    own KubeSchedulerConfiguration (its DynamicResources plugin off), as its ServiceAccount. Only addresses, paths,
    the profile's and the Lease's names are this machine's."""
    tmp = tmp_path_factory.mktemp("dra-extender")
    lease = f"sunk-extender-dra-{uuid.uuid4().hex[:6]}"
    for doc in rendered("scheduler-rbac.yaml", DRA_VALUES):  # (the Pod rules and the DRA role it binds to both)
        if not any("leases" in rule.get("resources", ()) for rule in doc.get("rules") or ()):
            apply(kube_api, doc)  # (not sunk-scheduler's Lease Role: the module's scheduler has its Lease added there)
    accounts = {d["metadata"]["name"]: d["metadata"]
                for d in apply_manifest(kube_api, "extender-rbac.yaml", leases=[lease], values=DRA_VALUES)
                if d["kind"] == "ServiceAccount"}
    ca = make_ca(tmp)
    server, client = issue(ca, tmp, "sunk-extender"), issue(ca, tmp, "sunk-kube-scheduler", client=True)
    ports = {"verbs": free_port(), "hooks": free_port(), "metrics": free_port(), "probes": free_port()}
    env = dev_cluster.env()
    docs = rendered("extender.yaml", DRA_VALUES)
    args = deployment_args("extender.yaml", "sunk-extender", {
        "--scheduler-name": EXTENDER_PROFILE,
        "--bind-address": f"127.0.0.1:{ports['verbs']}",
        "--tls-cert-file": str(server.cert), "--tls-key-file": str(server.key), "--client-ca-file": str(server.ca),
        "--slurm-api-base": env["SLURM_REST_URL"], "--slurm-auth-token-file": env["SLURM_JWT_FILE"],
        "--hooks-api-bind-address": f"127.0.0.1:{ports['hooks']}", "--hooks-url": f"http://127.0.0.1:{ports['hooks']}",
        "--hook-secret-file": str(secret_file(dev_cluster.run_dir, "test-hook.secret")),
        "--identity-policy": str(dev_cluster.identity_policy_file()),
        "--metrics-bind-address": f"127.0.0.1:{ports['metrics']}",
        "--health-probe-bind-address": f"127.0.0.1:{ports['probes']}",
    }, docs=docs)
    assert f"--dra-device-mapping={MAPPING_FLAG}" in args
    account = accounts["sunk-extender"]
    extender_config = kubeconfig_for(kube_api, dev_cluster, account["namespace"], account["name"],
                                     tmp / "extender.kubeconfig")
    proc = Process("sunk-extender-dra", "sunk.commands.extender", [
        *args, f"--kubeconfig={extender_config}", f"--leader-election-namespace={account['namespace']}",
        f"--leader-election-id={lease}", "--zap-log-level=debug"],
        ready_url=f"http://127.0.0.1:{ports['probes']}/readyz", log_dir=tmp)

    # kube-scheduler's configuration as the chart writes it, pointed at this machine.
    shipped = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith(
        "-kube-scheduler-config"))
    config = yaml.safe_load(shipped["data"]["config.yaml"])
    assert config["profiles"][0]["plugins"] == {"multiPoint": {"disabled": [{"name": "DynamicResources"}]}}
    ks_account = accounts["sunk-kube-scheduler"]
    config["clientConnection"] = {"kubeconfig": str(kubeconfig_for(
        kube_api, dev_cluster, ks_account["namespace"], ks_account["name"], tmp / "kube-scheduler.kubeconfig"))}
    config["leaderElection"] = {"leaderElect": False}
    config["profiles"][0]["schedulerName"] = EXTENDER_PROFILE
    (call,) = config["extenders"]
    call["urlPrefix"] = f"https://127.0.0.1:{ports['verbs']}"
    call["tlsConfig"] = {"certFile": str(client.cert), "keyFile": str(client.key), "caFile": str(client.ca)}
    (tmp / "kube-scheduler.yaml").write_text(yaml.safe_dump(config))
    with serving(kube_api, dev_cluster, proc, namespace, purge=False):
        log = open(tmp / "kube-scheduler.log", "wb")
        kube_scheduler = subprocess.Popen(
            [str(dev_cluster.kube_scheduler_binary), f"--config={tmp / 'kube-scheduler.yaml'}", "--secure-port=0",
             "--v=2"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            time.sleep(2)
            assert kube_scheduler.poll() is None, (tmp / "kube-scheduler.log").read_text()[-3000:]
            yield proc
        finally:
            kube_scheduler.terminate()
            kube_scheduler.wait(20)
            log.close()
    _delete_lease(kube_api, account["namespace"], lease)
    assert_never_forbidden(proc.log)
    assert_never_forbidden(tmp / "kube-scheduler.log")


def _delete_lease(api, namespace: str, name: str) -> None:
    try:
        kc.delete(api, LEASES, name, namespace)
    except kc.ApiError as exc:
        if not exc.not_found:
            raise


def test_the_extender_fills_a_claim_from_slurms_allocation_and_kube_scheduler_binds_it(
        kube_api, dev_cluster, namespace, extender, slurm):
    """Issue 38 item 4: a Pod of the extender's kube-scheduler profile claiming 2 GPUs beside a batch job holding
    1: kube-scheduler (its DRA plugin off) leaves the claim alone, the extender's /bind fills it with exactly the
    devices of the placeholder's GRES indices, and the kubelet runs the Pod on them."""
    tag = uuid.uuid4().hex[:6]
    batch = batch_job(slurm, 1, tag)
    try:
        wait_for(lambda: slurm.get_job(batch).state == "RUNNING", 60, f"batch job {batch} RUNNING")
        (freed,) = held_indices(slurm, batch)
        kc.create(kube_api, RESOURCECLAIMS, claim(f"two-{tag}", 2), namespace)
        pod = gpu_pod(f"two-{tag}", {"resourceClaimName": f"two-{tag}"})
        pod["spec"]["schedulerName"] = EXTENDER_PROFILE
        kc.create(kube_api, PODS, pod, namespace)
        two_job = job_id_of(kube_api, dev_cluster, namespace, f"two-{tag}")
        wait_for(lambda: running(kube_api, namespace, f"two-{tag}"), 90,
                 "the 2-GPU Pod of the extender's profile Running on the real Node")
        two = held_indices(slurm, two_job)
        assert len(two) == 2 and freed not in two, (two, freed)
        allocated = claim_of(kube_api, namespace, f"two-{tag}")
        assert devices_of(allocated) == names_of(two)
        assert dra.allocated_on(allocated) == realnode.NODE_NAME
        assert _kubelet_prepared_devices(dev_cluster.home, allocated["metadata"]["uid"]) == names_of(two)
        # Bound by kube-scheduler through the extender's /bind (the Scheduled Event is kube-scheduler's).
        scheduled = [e for e in events_for(kube_api, namespace, f"two-{tag}") if e["reason"] == "Scheduled"]
        assert scheduled and all((e.get("reportingComponent") or (e.get("source") or {}).get("component") or "")
                                 == EXTENDER_PROFILE for e in scheduled), scheduled
        assert slurm.get_job(batch).state == "RUNNING"
        kc.delete(kube_api, PODS, f"two-{tag}", namespace)
        wait_for(lambda: not (kc.get(kube_api, RESOURCECLAIMS, f"two-{tag}", namespace).get("status") or {}).get(
            "allocation"), 60, "the claim deallocated once its Pod is gone")
        wait_for(lambda: state(slurm_job(dev_cluster, two_job)) in ("CANCELLED", "COMPLETED", None), 60,
                 "the Pod's job ended")
    finally:
        slurm.cancel_job(batch)
        end_pods(kube_api, dev_cluster, namespace)


def test_a_batch_job_of_one_pod_gets_its_gpus_through_its_claim_template(kube_api, dev_cluster, namespace, scheduler,
                                                                         slurm):
    """A batch/v1 Job's Pod is a gang's member (a gang of one here: there is one real Node): its claim, made from the
    template by kube-controller-manager, is waited for, asks the gang's job for its GPUs, and is filled with exactly
    the devices of the job's GRES indices on the node; the Job deleted, the claim goes with its Pod and the job ends."""
    tag = uuid.uuid4().hex[:6]
    kc.create(kube_api, TEMPLATES, template(f"job-{tag}", 2), namespace)
    pod = gpu_pod("unused", {"resourceClaimTemplateName": f"job-{tag}"})
    kc.create(kube_api, JOBS, {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": f"train-{tag}"}, "spec": {
        "parallelism": 1, "completions": 1, "backoffLimit": 0,
        "template": {"metadata": {"annotations": pod["metadata"]["annotations"]},
                     "spec": {**pod["spec"], "restartPolicy": "Never"}}}}, namespace)
    try:
        def running_member() -> dict[str, Any] | None:
            found = kc.list_objects(kube_api, PODS, namespace,
                                    label_selector=f"batch.kubernetes.io/job-name=train-{tag}")
            return found[0] if len(found) == 1 and (found[0].get("status") or {}).get("phase") == "Running" else None

        member = wait_for(running_member, 90, "the Job's Pod Running on the real Node")
        name = member["metadata"]["name"]
        job_id = int(member["metadata"]["annotations"][names.ANN_JOB_ID])
        assert member["spec"]["nodeName"] == realnode.NODE_NAME
        held = held_indices(slurm, job_id)
        assert len(held) == 2, held
        allocated = claim_of(kube_api, namespace, name)
        assert devices_of(allocated) == names_of(held)
        assert _kubelet_prepared_devices(dev_cluster.home, allocated["metadata"]["uid"]) == names_of(held)
        assert not [e for e in events_for(kube_api, namespace, name) if e["type"] == "Warning"]
        claim_name = allocated["metadata"]["name"]
        delete_jobs(kube_api, namespace)
        wait_for(lambda: not [c for c in kc.list_objects(kube_api, RESOURCECLAIMS, namespace)
                              if c["metadata"]["name"] == claim_name], 90, "the template's claim gone with its Pod")
        wait_for(lambda: state(slurm_job(dev_cluster, job_id)) in ("CANCELLED", "COMPLETED", None), 60,
                 "the gang's job ended")
    finally:
        delete_jobs(kube_api, namespace)
        end_pods(kube_api, dev_cluster, namespace)


def test_a_claim_of_a_class_slurm_does_not_fill_is_refused_on_the_pod(kube_api, dev_cluster, namespace, scheduler):
    tag = uuid.uuid4().hex[:6]
    other = claim(f"other-{tag}", 1)
    other["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "not-slurms.example.com"
    kc.create(kube_api, RESOURCECLAIMS, other, namespace)
    kc.create(kube_api, PODS, gpu_pod(f"other-{tag}", {"resourceClaimName": f"other-{tag}"}), namespace)
    event = wait_for(lambda: next((e for e in events_for(kube_api, namespace, f"other-{tag}")
                                   if e["reason"] == "FailedValidation"), None), 30, "a FailedValidation Event")
    assert "DeviceClass 'not-slurms.example.com' is not one Slurm allocates" in event["message"]
    conditions = get_pod(kube_api, namespace, f"other-{tag}")["status"].get("conditions") or []
    assert any(c["type"] == "PodScheduled" and c["status"] == "False" for c in conditions)
    end_pods(kube_api, dev_cluster, namespace)


def test_a_tenants_claim_built_to_stall_the_informers_is_refused_on_its_pod_and_stalls_nothing(
        kube_api, dev_cluster, namespace, scheduler, tmp_path):
    """A claim a tenant may write and the apiserver stores: opaque parameters nested 3,000 deep, past the 1,000
    levels Python's JSON decoder allows by default. Its watch event once came again forever (a RecursionError): the
    claims informer of every daemon stalled, for every tenant. It is refused on its own Pod, with why, and another
    Pod's claim is still filled. (A number past Python's 4,300 digits, the decoder's other limit, never gets this
    far: kube-apiserver 1.34 fails the create of any number beyond a float64's range, in its managedFields.)"""
    tag = uuid.uuid4().hex[:6]
    hostile = {f"deep-{tag}": ('{"layers":' + "[" * 3_000 + "]" * 3_000 + "}", "nests deeper than 64 levels")}
    try:
        for name, (parameters, _why) in hostile.items():
            config = f',"config":[{{"opaque":{{"driver":"{realnode.DRA_DRIVER}","parameters":{parameters}}}}}]}}}}}}'
            raw = json.dumps(claim(name, 1))[:-3] + config
            (tmp_path / name).write_text(raw)  # (posted as written: no client decodes and re-encodes it)
            dev_cluster.kubectl("create", "--raw", RESOURCECLAIMS.path(namespace), "-f", str(tmp_path / name))
            kc.create(kube_api, PODS, gpu_pod(name, {"resourceClaimName": name}), namespace)
        for name, (_parameters, why) in hostile.items():
            event = wait_for(lambda name=name: next((e for e in events_for(kube_api, namespace, name)
                                                     if e["reason"] == "FailedValidation"), None), 30,
                             f"{name}: a FailedValidation Event")
            assert why in event["message"], event["message"]
        kc.create(kube_api, RESOURCECLAIMS, claim(f"plain-{tag}", 1), namespace)
        kc.create(kube_api, PODS, gpu_pod(f"plain-{tag}", {"resourceClaimName": f"plain-{tag}"}), namespace)
        wait_for(lambda: running(kube_api, namespace, f"plain-{tag}"), 90, "another Pod's claim filled, Running")
        assert len(devices_of(kc.get(kube_api, RESOURCECLAIMS, f"plain-{tag}", namespace))) == 1
        log = scheduler.log.read_text(errors="replace")
        assert "RecursionError" not in log and "does not decode" not in log and "kept whole" not in log, log[-3000:]
    finally:
        end_pods(kube_api, dev_cluster, namespace)


SYNCER_VALUES = {"fullnameOverride": "sunk-dra", "scheduler": {"draDeviceMapping": MAPPING_FLAG},
                 "syncer": {"nodePermissions": {"enabled": False}, "nodeLocking": {"enabled": False}}}


def sunk_dra_drained(cluster: Cluster) -> str | None:
    node = cluster.node(realnode.SLURM_NODE)
    return node.reason if node.drained and node.reason.startswith(f"k8s: sunk-dra: Node {realnode.NODE_NAME}:") \
        else None


def stand_in_slurmd(namespace: str, run_id: str) -> dict[str, Any]:
    """realnode1's slurmd Pod as the test's Syncer sees it (its own namespace and label): busybox on the real Node,
    so its kubelet runs it and it is Ready; the real slurmd Pod in slurm, the NodeSet's, is left alone."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": realnode.SLURM_NODE, "namespace": namespace,
        "labels": {"app.kubernetes.io/name": "slurmd", TEST_LABEL: run_id}},
        "spec": {"nodeName": realnode.NODE_NAME, "hostname": realnode.SLURM_NODE, "terminationGracePeriodSeconds": 1,
                 "tolerations": [{"operator": "Exists"}],
                 "containers": [{"name": "slurmd", "image": realnode.BUSYBOX_IMAGE, "imagePullPolicy": "Never",
                                 "command": ["/bin/sleep", "3600"]}]}}


def test_a_device_another_claim_holds_drains_the_node_and_the_syncer_lifts_it_once_they_agree(
        kube_api, dev_cluster, namespace, scheduler, tmp_path):
    """kube-scheduler's work, done by hand: a Pod of another scheduler on the real Node with a claim holding all four
    devices, which Slurm does not know of. A Pod of sunk's then gets a GRES index whose device that claim holds: it
    is not bound, realnode1 is drained (``k8s: sunk-dra``) and its job cancelled. The Syncer as deployed with the
    same mapping keeps the drain while the claim holds the devices, and lifts it once kube-controller-manager has
    deallocated it (the other Pod gone)."""
    tag = uuid.uuid4().hex[:6]
    cluster = Cluster(dev_cluster, kube_api, namespace)
    theirs = claim(f"theirs-{tag}", 4)
    theirs["metadata"]["finalizers"] = [DELETE_PROTECTION]
    theirs = kc.create(kube_api, RESOURCECLAIMS, theirs, namespace)
    other = gpu_pod(f"theirs-{tag}", {"resourceClaimName": f"theirs-{tag}"})
    del other["spec"]["schedulerName"]
    del other["metadata"]["annotations"]
    other["spec"]["nodeName"] = realnode.NODE_NAME
    other = kc.create(kube_api, PODS, other, namespace)
    results = [{"request": "gpus", "driver": realnode.DRA_DRIVER, "pool": realnode.NODE_NAME,
                "device": realnode.DEVICE_NAME.format(index=i)} for i in range(realnode.DRA_DEVICES)]
    theirs["status"] = dra.claim_status(results, realnode.NODE_NAME, other)
    kc.replace(kube_api, RESOURCECLAIMS, theirs, subresource="status")
    wait_for(lambda: running(kube_api, namespace, f"theirs-{tag}"), 90, "the other scheduler's Pod Running")

    syncer_ns = create_namespace(kube_api)
    run_id = uuid.uuid4().hex[:8]
    proc = None
    try:
        kc.create(kube_api, PODS, gpu_pod(f"mine-{tag}", {"resourceClaimName": f"mine-{tag}"}), namespace)
        kc.create(kube_api, RESOURCECLAIMS, claim(f"mine-{tag}", 1), namespace)
        reason = wait_for(lambda: sunk_dra_drained(cluster), 60, "realnode1 drained for the device mismatch")
        assert "which another ResourceClaim holds: Slurm counts it free" in reason and tag not in reason, reason
        assert "DeviceMismatch" in {e["reason"] for e in events_for(kube_api, namespace, f"mine-{tag}")}
        wait_for(lambda: get_pod(kube_api, namespace, f"mine-{tag}") is None, 60,
                 "the Pod gone with its cancelled job (its owner would make it again)")
        assert not (kc.get(kube_api, RESOURCECLAIMS, f"mine-{tag}", namespace).get("status") or {}).get("allocation")

        account, kubeconfig = as_service_account(kube_api, dev_cluster, "syncer-rbac.yaml", tmp_path,
                                                 values=SYNCER_VALUES)
        env = dev_cluster.env()
        hooks, metrics, probes = free_port(), free_port(), free_port()
        args = deployment_args("syncer.yaml", "sunk-dra-syncer", {
            "--slurm-api-base": env["SLURM_REST_URL"], "--slurm-auth-token-file": env["SLURM_JWT_FILE"],
            "--watch-namespace": syncer_ns, "--slurmd-selector": f"app.kubernetes.io/name=slurmd,{TEST_LABEL}={run_id}",
            "--hooks-api-bind-address": f"127.0.0.1:{hooks}", "--metrics-bind-address": f"127.0.0.1:{metrics}",
            "--health-probe-bind-address": f"127.0.0.1:{probes}",
            # (the chart names its own schedulers; this module's is the test's)
            "--scheduler-names": SCHEDULER}, docs=rendered("syncer.yaml", SYNCER_VALUES))
        assert f"--dra-device-mapping={MAPPING_FLAG}" in args, args
        kc.create(kube_api, PODS, stand_in_slurmd(syncer_ns, run_id), syncer_ns)
        cluster.namespace = syncer_ns
        cluster.wait_pod_ready(realnode.SLURM_NODE, timeout=60)
        proc = Process("sunk-syncer-dra", "sunk.commands.syncer", [*args, f"--kubeconfig={kubeconfig}"],
                       f"http://127.0.0.1:{probes}/readyz", tmp_path, env={"SLURM_JWT": ""})
        proc.start()  # (it fails to start unless it may list and watch claims and slices)
        never(lambda: not sunk_dra_drained(cluster), 5, "the drain lifted while the other claim holds the devices")
        kc.delete(kube_api, PODS, f"theirs-{tag}", namespace)
        wait_for(lambda: not sunk_dra_drained(cluster), 90, "the drain lifted once the other claim is deallocated")
        assert not cluster.node(realnode.SLURM_NODE).drained
        assert_never_forbidden(proc.log)
    finally:
        if proc is not None:
            proc.stop()
        end_pods(kube_api, dev_cluster, namespace)
        purge_namespace(kube_api, syncer_ns)
        if sunk_dra_drained(cluster):
            dev_cluster.slurm("scontrol", "update", f"nodename={realnode.SLURM_NODE}", "state=resume", check=False)
        restore_slurm_node(cluster, realnode.SLURM_NODE)
        try:
            kc.delete(kube_api, LEASES, "sunk-dra-syncer", "slurm")
        except kc.ApiError as exc:
            if not exc.not_found:
                raise


ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles", "Role")
ROLEBINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")


def test_only_sunk_scheduler_allocates_the_mapped_drivers_devices_or_adds_a_consumer(kube_api, dev_cluster, namespace,
                                                                                     scheduler):
    """The chart's claim policy, on the real apiserver: an account that may write claims' status (as kube-scheduler
    may) cannot allocate the test driver's devices, nor add a consumer to a claim sunk filled; it may release them,
    and allocate another driver's."""
    from kubernetes import client, config

    writer = f"claim-writer-{uuid.uuid4().hex[:6]}"
    kc.create(kube_api, ROLES, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                                "metadata": {"name": writer}, "rules": [
                                    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims/status"],
                                     "verbs": ["update"]}]}, namespace)
    kc.create(kube_api, ROLEBINDINGS, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                                       "metadata": {"name": writer},
                                       "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                                   "name": writer},
                                       "subjects": [{"kind": "User", "name": writer}]}, namespace)
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(dev_cluster.kubeconfig), client_configuration=cfg)
    api = client.ApiClient(cfg)
    api.set_default_header("Impersonate-User", writer)
    tag = uuid.uuid4().hex[:6]
    consumer = {"metadata": {"name": f"somebody-{tag}", "uid": str(uuid.uuid4())}}
    try:
        def allocate(name: str, driver: str, count: int = 1) -> str:
            """Refused: the apiserver's message; admitted: ''."""
            obj = kc.get(kube_api, RESOURCECLAIMS, name, namespace)
            results = [{"request": "gpus", "driver": driver, "pool": realnode.NODE_NAME,
                        "device": realnode.DEVICE_NAME.format(index=i)} for i in range(count)]
            obj["status"] = dra.claim_status(results, realnode.NODE_NAME, consumer)
            try:
                kc.replace(api, RESOURCECLAIMS, obj, subresource="status")
            except kc.ApiError as exc:
                assert exc.status == 403, exc
                return exc.message
            return ""

        kc.create(kube_api, RESOURCECLAIMS, claim(f"taken-{tag}", 1), namespace)
        message = wait_for(lambda: allocate(f"taken-{tag}", realnode.DRA_DRIVER), 30, "the policy to take effect")
        assert f"devices of {realnode.DRA_DRIVER} are allocated by sunk's schedulers only" in message
        kc.create(kube_api, RESOURCECLAIMS, claim(f"other-{tag}", 1), namespace)
        assert allocate(f"other-{tag}", "other-driver.example.com") == ""  # another driver's: not guarded

        # A claim sunk filled (here an admin's write, as sunk's): one more consumer is refused, releasing is not.
        kc.create(kube_api, RESOURCECLAIMS, claim(f"filled-{tag}", 1), namespace)
        filled = kc.get(kube_api, RESOURCECLAIMS, f"filled-{tag}", namespace)
        results = [{"request": "gpus", "driver": realnode.DRA_DRIVER, "pool": realnode.NODE_NAME,
                    "device": realnode.DEVICE_NAME.format(index=0)}]
        filled["status"] = dra.claim_status(results, realnode.NODE_NAME, consumer)
        kc.replace(kube_api, RESOURCECLAIMS, filled, subresource="status")
        sharer = {"resource": "pods", "name": "sharer", "uid": str(uuid.uuid4())}

        def share() -> str:
            """One more consumer on the claim as it is now (kube-controller-manager drops the consumer that does not
            exist meanwhile, and an update of an older version is a 409 before any admission): the refusal."""
            fresh = kc.get(kube_api, RESOURCECLAIMS, f"filled-{tag}", namespace)
            status = fresh.get("status") or {}
            shared = {**fresh, "status": {**status, "allocation": filled["status"]["allocation"],
                                          "reservedFor": [*(status.get("reservedFor") or ()), sharer]}}
            try:
                kc.replace(api, RESOURCECLAIMS, shared, subresource="status")
            except kc.ApiError as exc:
                if exc.conflict:
                    return ""
                assert exc.status == 403, exc
                return exc.message
            raise AssertionError("one more consumer was admitted")

        assert "allocated by sunk's schedulers only" in wait_for(share, 15, "the sharing refused")

        def release() -> bool:  # (kube-controller-manager drops the consumer that does not exist meanwhile: re-read)
            fresh = kc.get(kube_api, RESOURCECLAIMS, f"filled-{tag}", namespace)
            try:
                return not (kc.replace(api, RESOURCECLAIMS, {**fresh, "status": {}}, subresource="status").get(
                    "status") or {}).get("allocation")
            except kc.ApiError as exc:
                if exc.conflict:
                    return False
                raise

        wait_for(release, 15, "the allocation released by the same account")
    finally:
        api.close()
        for resource in (ROLEBINDINGS, ROLES):
            kc.delete(kube_api, resource, writer, namespace)

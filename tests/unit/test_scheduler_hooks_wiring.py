"""The assembled scheduler's hook API: its ports are the scheduler's own job index, Pods, Slurm and queue."""

from __future__ import annotations

import pytest
from kubernetes.client import ApiClient
from policy_fakes import TEST_POLICY

from scheduler import kubeops
from scheduler.assembly import assemble
from scheduler.config import SchedulerConfig
from scheduler.hooks import POD_UID_HEADER
from scheduler.tokens import hook_token
from sunk.controller.daemon import DaemonConfig
from sunk.model.slurm import Job
from sunk.slurm.errors import NotFound, SlurmUnavailable
from sunk.slurm.settings import SlurmSettings
from sunk.translate.identity import PlaceholderIdentity
from sunk.translate.keys import PodKey

SECRET = b"x" * 32
POD = {"metadata": {"namespace": "ns", "name": "p", "uid": "uid-a"}, "spec": {}, "status": {"phase": "Running"}}
AUTH = {"Authorization": f"Bearer {hook_token(SECRET, 'uid-a')}", POD_UID_HEADER: "uid-a"}


class Slurm:
    """One placeholder job, 7, read by the hook API; every list fails (the cache never lists in these tests)."""

    job = Job(id=7, state="RUNNING", nodes="node1",
              admin_comment=PlaceholderIdentity(PodKey("uid-a"), "ns", name="p", scheduler="s").encode())

    def get_job(self, job_id: int) -> Job:
        if job_id != 7:
            raise NotFound(f"job {job_id}")
        return self.job

    def list_jobs(self, **_: object):
        raise SlurmUnavailable("list jobs: not in this test")

    def list_nodes(self, **_: object):
        raise SlurmUnavailable("list nodes: not in this test")

    def rpc_stats(self):
        return {}


@pytest.fixture
def assembly(monkeypatch):
    daemon = DaemonConfig(name="sunk-scheduler-test", slurm=SlurmSettings(token="t"))
    built = assemble(daemon, SchedulerConfig("s", SECRET, "http://h", identity_policy=TEST_POLICY), api=ApiClient(),
                     slurm=Slurm())  # type: ignore[arg-type]
    monkeypatch.setattr(built.scheduler.pods.informer, "has_synced", lambda: True)
    monkeypatch.setattr(built.scheduler.pods, "by_uid", {"uid-a": POD}.get)
    yield built
    built.scheduler.recorder.stop()


def test_a_started_job_is_indexed_and_its_pod_reconciled(assembly):
    client = assembly.hooks_app().test_client()
    assert assembly.scheduler.jobs.uid_of(7) is None  # (not listed yet: the caller names its Pod)
    response = client.post("/api/v1/jobs/7/started", headers=AUTH)
    assert response.status_code == 200, response.get_json()
    assert assembly.scheduler.jobs.uid_of(7) == "uid-a"
    assert assembly.controller.queue.get(timeout=0) == "uid-a"


def test_terminating_deletes_the_pod_and_says_why_in_an_event(assembly, monkeypatch):
    deleted, events = [], []
    monkeypatch.setattr(kubeops, "delete_pod", lambda api, pod: deleted.append(pod) or True)
    monkeypatch.setattr(assembly.scheduler.recorder, "event", lambda pod, kind, reason, why: events.append(
        (pod["metadata"]["name"], kind, reason, why)))
    response = assembly.hooks_app().test_client().post("/api/v1/jobs/7/terminating", headers=AUTH)
    assert response.status_code == 200 and response.get_json() == {"pod": "ns/p", "deleting": True}
    assert deleted == [POD] and events == [("p", "Normal", "JobEnding", "Slurm is ending job 7")]


def test_the_hook_api_answers_503_until_the_pod_cache_synced(assembly, monkeypatch):
    monkeypatch.setattr(assembly.scheduler.pods.informer, "has_synced", lambda: False)
    response = assembly.hooks_app().test_client().post("/api/v1/jobs/7/started", headers=AUTH)
    assert response.status_code == 503 and "retry" in response.get_json()["error"]

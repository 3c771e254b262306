"""The scheduler's hook API (called by placeholder jobs): tokens, Slurm reads, JSON errors."""

from __future__ import annotations

import time

import pytest
from policy_fakes import TEST_POLICY
from scheduler_hook_fakes import IndexedJobs, LookedUpPods

from scheduler.assembly import identity_parser
from scheduler.config import SchedulerConfig
from scheduler.hooks import POD_UID_HEADER, HookPorts, PlaceholderHooks, PodGone, create_hooks_app, drain_reason
from scheduler.jobindex import JobIndex
from scheduler.tokens import hook_token
from sunk.model.slurm import Job, Node
from sunk.slurm.errors import NotFound, SlurmUnavailable
from sunk.translate.drains import PlaceholderDrain, StuckPodDrain
from sunk.translate.drains import parse as parse_drain
from sunk.translate.identity import PlaceholderIdentity
from sunk.translate.keys import PodKey

SECRET = b"hook-secret"
POD = {"metadata": {"namespace": "ns", "name": "p", "uid": "uid-a"}}
# The scheduler's own parser: whose job from its AdminComment, started from Slurm's state, never the Extra.
parse = identity_parser(SchedulerConfig("s", SECRET, "http://h", identity_policy=TEST_POLICY))


def identity(uid: str = "uid-a", namespace: str = "ns", name: str = "p") -> str:
    """The AdminComment the scheduler submits a Pod's placeholder with (only Slurm's super users write it)."""
    return PlaceholderIdentity(PodKey(uid), namespace, name=name, scheduler="s").encode()


class Slurm:
    """get_job, get_node and update_node only: the hook API never lists. Every node is in service."""

    def __init__(self):
        self.jobs: dict[int, Job] = {}
        self.reads = 0
        self.down = False
        self.drained: list[tuple[str, str]] = []
        self.nodes: dict[str, Node] = {}

    def update_node(self, name: str, update) -> None:
        self.drained.append((name, update.reason))

    def get_node(self, name: str) -> Node:
        return self.nodes.get(name) or Node(name=name, state=("ALLOCATED",))

    read_node = get_node  # (the fresh single-node read: the same record here)

    def get_job(self, job_id: int) -> Job:
        self.reads += 1
        if self.down:
            raise SlurmUnavailable("connection refused")
        if job_id not in self.jobs:
            raise NotFound(f"job {job_id}")
        return self.jobs[job_id]


@pytest.fixture
def world():
    slurm = Slurm()
    index = JobIndex(parse)
    pods = {"uid-a": POD}
    observed: list[tuple[Job, float]] = []
    deleted: list[str] = []
    app = create_hooks_app(PlaceholderHooks(HookPorts(
        secret=SECRET, jobs=IndexedJobs(index, parse, observed=lambda job, at: observed.append((job, at))),
        pods=LookedUpPods(pods.get, deleted=lambda pod, why: deleted.append(why)), slurm=slurm,
        gone=PodGone(pods.get), ready=lambda: READY[0])).blueprint())
    READY[0] = True
    return app.test_client(), slurm, index, pods, observed, deleted


READY = [True]


def auth(uid="uid-a"):
    """What the placeholder sends: its Pod's token, and its Pod's UID."""
    return {"Authorization": f"Bearer {hook_token(SECRET, uid)}", POD_UID_HEADER: uid}


def test_started_reads_the_job_from_slurm_once_and_hands_it_over(world):
    client, slurm, index, _, observed, _ = world
    slurm.jobs[7] = Job(id=7, state="RUNNING", nodes="node1", admin_comment=identity())
    index.expect("uid-a", 7)  # submitted by this process, not listed yet
    before = time.monotonic()
    response = client.post("/api/v1/jobs/7/started", headers=auth())
    after = time.monotonic()
    assert response.status_code == 200
    assert response.get_json() == {"job": 7, "state": "RUNNING", "pod_uid": "uid-a"}
    assert slurm.reads == 1
    assert [job for job, _ in observed] == [slurm.jobs[7]]
    assert before <= observed[0][1] <= after  # when the read was requested: ordered against lists


def test_started_for_a_job_no_one_knows_yet_still_costs_one_read(world):
    """After a scheduler restart the index may not know the job: one get_job serves both needs."""
    client, slurm, _, _, observed, _ = world
    slurm.jobs[7] = Job(id=7, state="RUNNING", nodes="node1", admin_comment=identity())
    assert client.post("/api/v1/jobs/7/started", headers=auth()).status_code == 200
    assert slurm.reads == 1 and len(observed) == 1


def test_a_token_for_another_pod_is_refused_and_nothing_is_recorded(world):
    client, slurm, index, _, observed, _ = world
    slurm.jobs[7] = Job(id=7, state="RUNNING", admin_comment=identity())
    index.upsert(slurm.jobs[7])
    for headers in (auth("uid-b"), {}, {"Authorization": "Basic x"}):
        response = client.post("/api/v1/jobs/7/started", headers=headers)
        assert response.status_code == 401 and "token" in response.get_json()["error"]
    assert observed == [] and slurm.reads == 0


@pytest.mark.parametrize("route", ["started", "terminating", "drain", "pod"])
@pytest.mark.parametrize("named", ["gang:", "gang:no-slash", "gang:ns"])
def test_a_malformed_gang_key_in_the_header_is_a_400_in_json_and_costs_slurm_nothing(world, route, named):
    """The header is a hostile caller's to write: its key is parsed once, at the edge, and a gang's that does not
    parse is refused as such (even with the token HMAC'd over the same text), never an exception."""
    client, slurm, _, _, observed, deleted = world
    slurm.jobs[7] = Job(id=7, state="RUNNING", admin_comment=identity())
    call = client.get if route == "pod" else client.post
    response = call(f"/api/v1/jobs/7/{route}", headers=auth(named))
    assert response.status_code == 400 and POD_UID_HEADER in response.get_json()["error"]
    assert slurm.reads == 0 and observed == [] and deleted == [] and slurm.drained == []


@pytest.mark.parametrize("job, down, status, needle", [
    (None, False, 404, "no Slurm job 7"),
    (Job(id=7, extra="a user's own job"), False, 404, "not a placeholder"),
    (None, True, 503, "unavailable"),
])
def test_started_errors_are_json(world, job, down, status, needle):
    client, slurm, _, _, observed, _ = world
    if job is not None:
        slurm.jobs[7] = job
    slurm.down = down
    response = client.post("/api/v1/jobs/7/started", headers=auth())
    assert response.status_code == status and needle in response.get_json()["error"]
    assert observed == []


def test_started_refuses_a_job_whose_admin_comment_now_names_another_pod(world):
    """Should an operator rewrite the job's AdminComment since it was submitted, the call must not re-home
    the job to another Pod."""
    client, slurm, index, _, observed, _ = world
    index.expect("uid-a", 7)
    slurm.jobs[7] = Job(id=7, state="RUNNING", nodes="node1", admin_comment=identity("uid-b"))
    response = client.post("/api/v1/jobs/7/started", headers=auth())
    assert response.status_code == 409 and "no longer names" in response.get_json()["error"]
    assert observed == []


def test_started_ignores_an_extra_its_user_rewrote_to_name_another_pod(world):
    """The job's user can rewrite its Extra (not its AdminComment): that names no Pod, so nothing changes."""
    client, slurm, index, _, observed, _ = world
    index.expect("uid-a", 7)
    slurm.jobs[7] = Job(id=7, state="RUNNING", nodes="node1", admin_comment=identity(), extra=identity("uid-b"))
    response = client.post("/api/v1/jobs/7/started", headers=auth())
    assert response.status_code == 200 and response.get_json()["pod_uid"] == "uid-a"
    assert [job for job, _ in observed] == [slurm.jobs[7]]


@pytest.mark.parametrize("verb, state, flags", [
    ("started", "RUNNING", ()),
    ("terminating", "RUNNING", ()),
    ("drain", "CANCELLED", ("COMPLETING",)),
])
def test_a_job_whose_extra_alone_names_the_callers_pod_is_not_a_placeholder(world, verb, state, flags):
    """A Pod's token is in its placeholder's environment, so its user holds it; were the Extra read, they could
    submit a job of their own naming that Pod and have it bound to their job's nodes (never locked), or
    deleted, or the nodes drained. Only the AdminComment, which Slurm lets only its super users write, counts."""
    client, slurm, _, _, observed, deleted = world
    slurm.jobs[7] = Job(id=7, state=state, state_flags=flags, nodes="node1", extra=identity())
    response = client.post(f"/api/v1/jobs/7/{verb}", headers=auth())  # not known yet: named by X-Sunk-Pod-UID
    assert response.status_code == 404 and "not a placeholder" in response.get_json()["error"], response.get_json()
    assert (slurm.reads, observed, deleted, slurm.drained) == (1, [], [], [])
    # The same job with the identity where the scheduler submits it: the same call is taken.
    slurm.jobs[7] = Job(id=7, state=state, state_flags=flags, nodes="node1", admin_comment=identity())
    assert client.post(f"/api/v1/jobs/7/{verb}", headers=auth()).status_code == 200
    assert len(observed) + len(deleted) + len(slurm.drained) == 1


def test_terminating_deletes_the_pod_and_says_so(world):
    client, slurm, index, pods, _, deleted = world
    index.upsert(Job(id=7, state="RUNNING", admin_comment=identity()))
    response = client.post("/api/v1/jobs/7/terminating", headers=auth())
    assert response.status_code == 200 and response.get_json() == {"pod": "ns/p", "deleting": True}
    assert deleted == ["Slurm is ending job 7"] and slurm.reads == 0
    pods.clear()
    assert client.post("/api/v1/jobs/7/terminating", headers=auth()).status_code == 404


def test_pod_wait_answers_404_once_the_pod_is_gone_and_rejects_a_bad_wait(world):
    client, _, index, pods, _, _ = world
    index.upsert(Job(id=7, state="RUNNING", admin_comment=identity()))
    assert client.get("/api/v1/jobs/7/pod?wait=0", headers=auth()).status_code == 200
    bad = client.get("/api/v1/jobs/7/pod?wait=soon", headers=auth())
    assert bad.status_code == 400 and "wait" in bad.get_json()["error"]
    pods.clear()
    assert client.get("/api/v1/jobs/7/pod?wait=5", headers=auth()).status_code == 404


def test_unknown_routes_and_methods_answer_json(world):
    client = world[0]
    missing = client.get("/api/v1/nothing")
    assert missing.status_code == 404 and missing.get_json()["error"]
    response = client.get("/api/v1/jobs/7/started")
    assert response.status_code == 405 and response.get_json()["error"]


def test_a_body_over_the_limit_is_a_json_413(world):
    client, _, index, _, _, deleted = world
    index.upsert(Job(id=7, state="RUNNING", admin_comment=identity()))
    response = client.post("/api/v1/jobs/7/terminating", data=b"x" * (20 * 1024 * 1024), headers=auth())
    assert response.status_code == 413 and "larger than" in response.get_json()["error"]
    assert deleted == []


def test_a_caller_without_a_token_for_the_named_pod_costs_no_slurm_call(world):
    """For a job the index does not know, the token is checked before Slurm is asked."""
    client, slurm, _, _, observed, _ = world
    slurm.jobs[7] = Job(id=7, state="RUNNING", nodes="node1", admin_comment=identity())
    no_name = {"Authorization": auth()["Authorization"]}
    wrong_token = {**auth("uid-b"), POD_UID_HEADER: "uid-a"}
    for headers, needle in ((no_name, POD_UID_HEADER), (wrong_token, "token"), ({}, POD_UID_HEADER)):
        response = client.post("/api/v1/jobs/7/started", headers=headers)
        assert response.status_code == 401 and needle in response.get_json()["error"]
    assert slurm.reads == 0 and observed == []


def test_a_token_for_one_pod_does_not_open_another_pods_job(world):
    client, slurm, _, _, observed, _ = world
    slurm.jobs[7] = Job(id=7, state="RUNNING", nodes="node1", admin_comment=identity())
    response = client.post("/api/v1/jobs/7/started", headers=auth("uid-b"))  # a valid token, for uid-b
    assert response.status_code == 403 and "another Pod" in response.get_json()["error"]
    assert slurm.reads == 1 and observed == []


def test_every_call_answers_503_until_the_pod_cache_has_synced(world):
    """An empty cache would answer "Pod gone": the placeholder would exit while its Pod runs."""
    client, slurm, index, pods, observed, deleted = world
    index.upsert(Job(id=7, state="RUNNING", admin_comment=identity()))
    READY[0] = False
    for method, path in (("GET", "pod?wait=0"), ("POST", "terminating"), ("POST", "started"), ("POST", "drain")):
        response = client.open(f"/api/v1/jobs/7/{path}", method=method, headers=auth())
        assert response.status_code == 503 and "retry" in response.get_json()["error"], path
    assert (slurm.reads, observed, deleted, slurm.drained) == (0, [], [], [])
    READY[0] = True
    assert client.get("/api/v1/jobs/7/pod?wait=0", headers=auth()).status_code == 200


@pytest.mark.parametrize("state, flags, status", [
    ("RUNNING", (), 409),  # the job's user sent its placeholder a SIGTERM: not Slurm's end
    ("CANCELLED", ("COMPLETING",), 200),
    ("TIMEOUT", (), 200),
    ("PENDING", ("COMPLETING", "REQUEUED"), 200),  # preempted and requeued
])
def test_drain_only_for_a_job_slurm_is_ending(world, state, flags, status):
    client, slurm, index, _, _, _ = world
    slurm.jobs[7] = Job(id=7, state=state, state_flags=flags, nodes="node1", admin_comment=identity())
    index.upsert(slurm.jobs[7])
    response = client.post("/api/v1/jobs/7/drain", headers=auth())
    assert response.status_code == status, response.get_json()
    assert slurm.drained == ([("node1", response.get_json().get("reason"))] if status == 200 else [])


@pytest.mark.parametrize("state, reason, kept", [
    (("IDLE", "DRAIN"), "hardware: fan", True),  # an operator's
    (("DOWN", "NOT_RESPONDING"), "Not responding", True),  # Slurm's own
    (("MIXED", "DRAIN"), "NHC: gpu xid 79", True),  # NHC's, while jobs finish
    (("MIXED", "DRAIN"), "k8s: slurmd pod slurm/node1 is not ready", False),  # sunk's: its own to replace
    (("MIXED",), "", False),  # in service
    (("IDLE", "DRAIN"), "", False),  # drained with no reason: nobody's to keep
])
def test_the_drain_leaves_a_node_out_of_service_for_a_reason_sunk_did_not_write(world, state, reason, kept):
    """Slurm keeps one reason per node; a k8s: one written over an operator's would be lifted by the Syncer
    once the Pod is gone, and a faulty node would return to service. The answer is still 200: the node keeps
    Slurm's jobs off it, which is all the placeholder asks (it must not fall back to draining by itself)."""
    client, slurm, index, _, _, _ = world
    slurm.nodes["node1"] = Node(name="node1", state=state, reason=reason)
    slurm.jobs[7] = Job(id=7, state="CANCELLED", state_flags=("COMPLETING",), nodes="node1", admin_comment=identity())
    index.upsert(slurm.jobs[7])
    response = client.post("/api/v1/jobs/7/drain", headers=auth())
    assert response.status_code == 200, response.get_json()
    assert slurm.drained == ([] if kept else [("node1", response.get_json()["reason"])])
    assert response.get_json()["kept"] == (["node1"] if kept else [])


def test_the_drain_of_a_pod_stuck_on_a_lost_node_keeps_the_stuck_pod_reason():
    """The scheduler drained the node with sunk's stuck-Pod reason when it let the stuck Pod's job go;
    the placeholder's own drain after KillWait must not replace it with the placeholder's, which the
    Syncer lifts without waiting for the Node to be Ready again."""
    slurm, index = Slurm(), JobIndex(parse)
    stuck = StuckPodDrain("ns", "p", "uid-a", "worker-1", 7).reason()
    app = create_hooks_app(PlaceholderHooks(HookPorts(
        secret=SECRET, jobs=IndexedJobs(index, parse),
        pods=LookedUpPods({"uid-a": POD}.get, stuck=lambda pod, job_id: stuck if pod is POD and job_id == 7 else None),
        slurm=slurm, gone=PodGone(lambda _u: POD), ready=lambda: True)).blueprint())
    slurm.jobs[7] = Job(id=7, state="CANCELLED", state_flags=("COMPLETING",), nodes="node1", admin_comment=identity())
    index.upsert(slurm.jobs[7])
    response = app.test_client().post("/api/v1/jobs/7/drain", headers=auth())
    assert response.status_code == 200 and slurm.drained == [("node1", stuck)]


@pytest.mark.parametrize("header", ["Bearer \u00e9\u00e9", "Bearer \x00", "Bearer " + "x" * 5000, "Bearer"])
def test_a_garbage_bearer_header_is_a_json_401(world, header):
    client, slurm, index, _, _, _ = world
    index.upsert(Job(id=7, state="RUNNING", admin_comment=identity()))
    response = client.post("/api/v1/jobs/7/terminating",
                           headers={"Authorization": header, POD_UID_HEADER: "uid-\u00e9"})
    assert response.status_code == 401 and "token" in response.get_json()["error"]


def test_the_drain_names_the_pod_in_the_form_the_syncer_lifts_once_it_is_gone(world):
    client, slurm, index, _, _, _ = world
    slurm.jobs[7] = Job(id=7, state="CANCELLED", state_flags=("COMPLETING",), nodes="node1", admin_comment=identity())
    index.upsert(slurm.jobs[7])
    response = client.post("/api/v1/jobs/7/drain", headers=auth())
    assert response.status_code == 200
    assert parse_drain(response.get_json()["reason"]) == PlaceholderDrain("ns", "p", 7, "uid-a")  # (POD's UID)
    # The Pod is no longer in the cache: named from the job's AdminComment; with no name, a reason no one lifts.
    job = Job(id=8, admin_comment=identity("uid-b", "team-a", "train-0"))
    assert parse_drain(drain_reason(None, job, "uid-b")) == PlaceholderDrain("team-a", "train-0", 8, "uid-b")
    assert parse_drain(drain_reason(None, Job(id=9), "uid-c")) is None
    # An identity in the Extra, which the job's user writes, names no Pod: a reason no one lifts either.
    forged = Job(id=10, extra=identity("uid-c", "team-a", "train-0"))
    assert parse_drain(drain_reason(None, forged, "uid-c")) is None


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_a_finished_pod_is_not_deleted_and_lets_its_placeholder_end(world, phase):
    """The scheduler ended the job of a Pod that finished (its containers are done): the placeholder's SIGTERM
    path must neither delete the Pod (its Job counts it, its user reads its logs) nor wait for it to go."""
    client, slurm, index, pods, _, deleted = world
    pods["uid-a"] = {**POD, "status": {"phase": phase}}
    index.upsert(Job(id=7, state="CANCELLED", state_flags=("COMPLETING",), nodes="node1", admin_comment=identity()))
    terminating = client.post("/api/v1/jobs/7/terminating", headers=auth())
    assert terminating.status_code == 404 and deleted == []
    waited = client.get("/api/v1/jobs/7/pod?wait=5", headers=auth())
    assert waited.status_code == 404 and "finished" in waited.get_json()["error"]


def test_the_long_poll_ends_when_the_pod_finishes(world):
    client, slurm, index, pods, _, _ = world
    index.upsert(Job(id=7, state="CANCELLED", state_flags=("COMPLETING",), nodes="node1", admin_comment=identity()))
    gone = PodGone(pods.get)
    pods["uid-a"] = {**POD, "status": {"phase": "Running"}}
    assert not gone.wait("uid-a", 0.05)
    pods["uid-a"] = {**POD, "status": {"phase": "Succeeded"}}
    assert gone.wait("uid-a", 0.05)


@pytest.mark.parametrize("route", ["started", "terminating", "pod", "drain"])
def test_a_job_id_past_slurms_uint32_is_a_404_with_no_slurm_call(world, route):
    """A holder of a valid token sending job id 2**32: pyslurm would raise OverflowError deep down (a 500)."""
    client, slurm, *_ = world
    method = client.get if route == "pod" else client.post
    response = method(f"/api/v1/jobs/{2**32}/{route}", headers=auth())
    assert response.status_code == 404 and "error" in response.get_json()
    assert slurm.reads == 0 and slurm.drained == []

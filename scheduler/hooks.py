"""The scheduler's hook API, called by placeholder jobs as Slurm ends them.

POST /api/v1/jobs/<id>/started       the job's script runs (so its prolog ended): look now, not at the next list
POST /api/v1/jobs/<id>/terminating   delete the job's Pod (its grace period applies)
GET  /api/v1/jobs/<id>/pod?wait=S    200 while the Pod runs, 404 once it is gone or finished;
                                     long-polls up to S seconds (max 30) for the deletion
POST /api/v1/jobs/<id>/drain         the Pod outlived KillWait: drain the job's node (only
                                     while Slurm is ending the job), with the reason the
                                     Syncer lifts once the Pod is gone (and, for a Pod stuck
                                     on a NotReady or gone Node, once that Node is Ready); a
                                     node already out of service for a reason sunk did not
                                     write is left as it is ("kept")
GET  /healthz

Until the Pod informer has synced, and while the process stops, every /api call answers 503
(the placeholder retries): an empty cache would say "Pod gone", the placeholder would exit,
and Slurm would reuse the node while the Pod still runs.

Every /api call carries ``Authorization: Bearer HMAC(secret, pod UID)`` (see tokens.py),
so a job can only act on its own Pod, and ``X-Sunk-Pod-UID`` naming that Pod. The header
matters only for a job the scheduler does not know yet (its cache lags a just-started job
by one list): the token is checked against the named Pod before Slurm is asked anything,
so a caller without a token never costs a Slurm call.

A gang's job (sunk/translate/gang.py) is called for by its placeholder on the batch host, with the
gang's token (HMAC of the secret and the gang's owner, ``gang:<namespace>/<key>``, which the header
names): "terminating" deletes every member the job placed that has not finished, the long-poll waits
until every one of them is gone or finished, and "drain" drains only the nodes whose member outlived
KillWait.

"started" exists for speed only: without it the Pod is bound once the Slurm cache rereads the
running job and finds its prolog over, which at a few hundred starting jobs is seconds later. The
job is read back from Slurm rather than taken from the caller's word (a job's user holds the
token, and must not be able to say where its Pod runs, nor that it started: only Slurm's state
and reason say that, ``gang.has_started``).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import attrs
from flask import Blueprint, Flask, Response, jsonify, request

from sunk.hooks.app import json_errors
from sunk.hooks.metrics import instrument
from sunk.model import names
from sunk.model.slurm import Job, Node, NodeUpdate
from sunk.model.types import Obj
from sunk.slurm.errors import NotFound, SlurmError
from sunk.translate.drains import PlaceholderDrain, held_by_another, job_ending
from sunk.translate.identity import identity_of
from sunk.translate.keys import GangKey, PodKey, UnitKey, unit_key
from sunk.translate.objects import is_terminal

from .tokens import token_matches

log = logging.getLogger(__name__)
MAX_WAIT = 30.0
POD_UID_HEADER = "X-Sunk-Pod-UID"
MAX_JOB_ID = 4_294_967_294  # Slurm job ids are uint32 (NO_VAL is 0xfffffffe)

class PodGone:
    """Wakes long-polls when a Pod disappears (fed by the Pod informer's delete events)."""

    def __init__(self, lookup: Callable[[str], Obj | None]):
        self._lookup = lookup
        self._cond = threading.Condition()

    def notify(self, *_: object) -> None:
        with self._cond:
            self._cond.notify_all()

    def wait(self, uid: str, timeout: float) -> bool:
        """Until the Pod is gone or finished (its containers are done: nothing of it runs on the node)."""

        def done() -> bool:
            pod = self._lookup(uid)
            return pod is None or is_terminal(pod)

        return self.wait_for(done, timeout)

    def wait_for(self, done: Callable[[], bool], timeout: float) -> bool:
        """Until ``done()`` (re-checked at each notify: a Pod deleted, or one that finished), or the timeout."""
        with self._cond:
            return self._cond.wait_for(done, timeout)


class HookJobs(Protocol):
    """Which Pod (or gang) a Slurm job holds a place for, and what the hook API tells the scheduler of a job."""

    def known_owner(self, job_id: int) -> UnitKey | None:
        """The job's owner (a Pod's ``PodKey``, or a gang's ``GangKey``) as the job index has it; None while
        it does not know the job (it lags a just-started job by one list)."""

    def owner_of(self, job: Job) -> UnitKey | None:
        """The owner a job read from Slurm names in its AdminComment, None if it is not this scheduler's
        placeholder (only Slurm's super users write the AdminComment; never the Extra, the job's user's)."""

    def observe(self, job: Job, requested_at: float) -> None:
        """Record a job read from Slurm (the read requested at that monotonic time) and reconcile its Pod."""


class HookPods(Protocol):
    """The scheduler's Pods as the hook API reads and ends them."""

    def by_uid(self, uid: str) -> Obj | None:
        """The Pod in the informer's cache."""

    def gang_holders(self, gang: GangKey, job_id: int) -> list[Obj]:
        """A gang's members that job placed and that have not finished."""

    def stuck_reason(self, pod: Obj, job_id: int) -> str | None:
        """The drain reason for a Pod stuck terminating on a Node that is NotReady or gone (the one the
        scheduler drains with when it lets such a Pod's job go: ``sunk.translate.drains.StuckPodDrain``),
        else None: then the placeholder's reason."""

    def delete(self, pod: Obj, why: str) -> None:
        """Delete the Pod (its grace period applies), saying why."""


class HookSlurm(Protocol):
    """The hook API's Slurm calls: fresh reads of one job and one node, and a node's drain. It never lists."""

    def get_job(self, job_id: int) -> Job: ...

    def read_node(self, name: str) -> Node: ...

    def update_node(self, name: str, update: NodeUpdate) -> None: ...


class PodWaiter(Protocol):
    """The long-poll's wait (``PodGone``)."""

    def wait(self, uid: str, timeout: float) -> bool: ...

    def wait_for(self, done: Callable[[], bool], timeout: float) -> bool: ...


@attrs.frozen
class HookPorts:
    """What the hook API needs from the rest of the scheduler, by concept. ``secret`` keys every
    placeholder's token; ``ready()`` says the Pod cache may be trusted (synced, and the process not
    stopping)."""

    secret: bytes
    jobs: HookJobs
    pods: HookPods
    slurm: HookSlurm
    gone: PodWaiter
    ready: Callable[[], bool]


Answer = Response | tuple[Response, int]  # (a view's answer: JSON, with its status when not 200)


@attrs.frozen
class PlaceholderHooks:
    """The placeholder's hook API (see the module's docstring): one method per route, over ``ports``."""

    ports: HookPorts

    def blueprint(self) -> Blueprint:
        app = Blueprint("hooks", __name__)
        app.before_request(self.not_before_sync)
        # (job ids are Slurm's uint32: a larger one is a 404 here, never an OverflowError deeper down)
        job = f"/api/v1/jobs/<int(max={MAX_JOB_ID}):job_id>"
        app.add_url_rule(f"{job}/started", view_func=self.started, methods=["POST"])
        app.add_url_rule(f"{job}/terminating", view_func=self.terminating, methods=["POST"])
        app.add_url_rule(f"{job}/pod", view_func=self.pod_state, methods=["GET"])
        app.add_url_rule(f"{job}/drain", view_func=self.drain, methods=["POST"])
        return app

    def not_before_sync(self) -> Answer | None:
        if not self.ports.ready():
            return error(503, "sunk-scheduler is starting or stopping: its Pod cache cannot be trusted yet; retry")
        return None

    def started(self, job_id: int) -> Answer:
        unit, fetched, failure = self._authorised(job_id)
        if unit is None:
            return failure
        if fetched is None:
            read, requested_at, failure = self._read_job(job_id)
            if read is None:
                return failure
            fetched = (read, requested_at)
        job, requested_at = fetched
        if self.ports.jobs.owner_of(job) != unit:  # (an operator rewrote its AdminComment since the job was submitted)
            return error(409, f"Slurm job {job_id} no longer names this job's Pod")
        self.ports.jobs.observe(job, requested_at)
        return jsonify({"job": job_id, "state": job.state, "pod_uid": str(unit)})

    def terminating(self, job_id: int) -> Answer:
        unit, _, failure = self._authorised(job_id)
        if unit is None:
            return failure
        pods = self._holders(unit, job_id)
        if not pods:
            return error(404, "the gang's members are already gone or finished" if isinstance(unit, GangKey)
                         else "the Pod is already gone or finished")
        for pod in pods:
            self.ports.pods.delete(pod, f"Slurm is ending job {job_id}")
        if isinstance(unit, GangKey):
            return jsonify({"pods": [_name(pod) for pod in pods], "deleting": True})
        return jsonify({"pod": _name(pods[0]), "deleting": True})

    def pod_state(self, job_id: int) -> Answer:
        unit, _, failure = self._authorised(job_id)
        if unit is None:
            return failure
        try:
            wait = float(request.args.get("wait", "0"))
        except ValueError:
            wait = math.nan
        if not math.isfinite(wait):  # (a NaN passed min/max and made the long-poll spin for ever)
            return error(400, "wait must be a number of seconds")
        wait = min(max(wait, 0.0), MAX_WAIT)
        if isinstance(unit, PodKey):
            if self.ports.gone.wait(unit.uid, wait):
                return error(404, "the Pod is gone or finished")
            pod = self.ports.pods.by_uid(unit.uid)
            return jsonify({"pod": _name(pod) if pod else None, "exists": True})
        gang = unit
        if self.ports.gone.wait_for(lambda: not self._holders(gang, job_id), wait):
            return error(404, "the gang's members are gone or finished")
        return jsonify({"pods": [_name(pod) for pod in self._holders(gang, job_id)], "exists": True})

    def drain(self, job_id: int) -> Answer:
        unit, _, failure = self._authorised(job_id)
        if unit is None:
            return failure
        job, _, failure = self._read_job(job_id)
        if job is None:
            return failure
        if not job_ending(job):  # a job's user can signal its own placeholder; only Slurm's end may drain
            return error(409, f"Slurm job {job_id} is not ending ({job.state}); its node is not drained")
        if isinstance(unit, GangKey):
            drains = self._gang_drains(self._holders(unit, job_id), job)
        else:
            uid = unit.uid
            pod = self.ports.pods.by_uid(uid)
            # A Pod stuck on a lost Node keeps the stuck-Pod drain the scheduler gives it (k8s: sunk-stuck,
            # lifted once the Pod is gone and its Node Ready), not the placeholder's, lifted sooner.
            reason = (self.ports.pods.stuck_reason(pod, job_id) if pod else None) or drain_reason(pod, job, uid)
            drains = [(node, reason) for node in job.node_list]
        slurm = self.ports.slurm
        drained: list[str] = []
        kept: list[str] = []
        for node, reason in drains:
            try:
                current = slurm.read_node(node)  # (fresh: an operator's drain of a moment ago is theirs too)
                if held_by_another(current):
                    log.warning("left %s as it is (%r), not drained for job %d: %s", node, current.reason, job_id,
                                reason)
                    kept.append(node)
                    continue
                slurm.update_node(node, NodeUpdate(state="DRAIN", reason=reason))
            except NotFound:
                continue  # (a node gone from Slurm holds no job)
            except SlurmError as exc:
                return error(503, f"could not drain {node}: {exc}")
            log.warning("drained %s: %s", node, reason)
            drained.append(node)
        return jsonify({"drained": drained, "kept": kept, "reason": drains[0][1] if drains else ""})

    def _holders(self, unit: UnitKey, job_id: int) -> list[Obj]:
        """The Pods that may still run on the job's nodes: a gang's unfinished members, or the one Pod."""
        if isinstance(unit, GangKey):
            return self.ports.pods.gang_holders(unit, job_id)
        pod = self.ports.pods.by_uid(unit.uid)
        return [pod] if pod is not None and not is_terminal(pod) else []

    def _read_job(self, job_id: int) -> tuple[Job | None, float, Any]:
        requested_at = time.monotonic()
        try:
            return self.ports.slurm.get_job(job_id), requested_at, None
        except NotFound:
            return None, requested_at, error(404, f"no Slurm job {job_id}")
        except SlurmError as exc:
            return None, requested_at, error(503, f"Slurm is unavailable: {exc}")

    def _authorised(self, job_id: int) -> tuple[UnitKey | None, tuple[Job, float] | None, Any]:
        """The Pod or gang the caller's token must match (its key parsed here, once: a malformed one is a
        400), and the job if Slurm had to be asked."""
        unit = self.ports.jobs.known_owner(job_id)
        known = unit is not None
        if unit is None:  # the cache may lag a just-started job by one refresh
            named = request.headers.get(POD_UID_HEADER, "").strip()
            if not named:
                return None, None, error(401, f"Slurm job {job_id} is not known yet: name its Pod "
                                              f"in the {POD_UID_HEADER} header")
            try:
                unit = unit_key(named)
            except ValueError:
                return None, None, error(400, f"{POD_UID_HEADER} names neither a Pod's UID nor a gang")
        header = request.headers.get("Authorization", "")
        if not header.startswith("Bearer ") or not token_matches(self.ports.secret, str(unit), header[7:].strip()):
            return None, None, error(401, "missing or wrong bearer token for this job")
        if known:
            return unit, None, None
        job, requested_at, failure = self._read_job(job_id)
        if job is None:
            return None, None, failure
        owner = self.ports.jobs.owner_of(job)
        if owner is None:
            return None, None, error(404, f"Slurm job {job_id} is not a placeholder job")
        if owner != unit:
            return None, None, error(403, f"Slurm job {job_id} holds a place for another Pod")
        return unit, (job, requested_at), None

    def _gang_drains(self, pods: list[Obj], job: Job) -> list[tuple[str, str]]:
        """Only the nodes whose member outlived KillWait, each with its own member's reason; a member whose
        Slurm node is not recorded (its binding not seen yet) drains every node of the job."""
        drains: dict[str, str] = {}
        for pod in pods:
            reason = self.ports.pods.stuck_reason(pod, job.id) or drain_reason(pod, job, pod["metadata"]["uid"])
            node = ((pod["metadata"].get("annotations") or {}).get(names.ANN_SLURM_NODE) or "").strip()
            for each in ([node] if node in job.node_list else job.node_list):
                drains.setdefault(each, reason)
        return sorted(drains.items())


def drain_reason(pod: Obj | None, job: Job, uid: str) -> str:
    """The placeholder's drain reason, which the Syncer lifts once the Pod (that UID) is gone
    (``sunk.translate.drains``); the Pod is named from the cache, else from the job's identity.
    Without a name there is no Pod to watch go: a reason the Syncer leaves to an operator."""
    identity = identity_of(job)
    if pod is not None:
        meta = pod["metadata"]
        return PlaceholderDrain(meta["namespace"], meta["name"], job.id, str(meta.get("uid") or uid)).reason()
    if identity is not None and isinstance(identity.unit, PodKey):
        return PlaceholderDrain(identity.namespace, identity.name, job.id, identity.unit.uid).reason()
    return f"sunk-scheduler: pod uid {uid} outlived KillWait after job {job.id} ended"


MAX_BODY = 64 * 1024  # the placeholder's calls carry no body at all


def create_hooks_app(hooks: Blueprint) -> Flask:
    """The scheduler's own HTTP app: the hook routes, /healthz, and JSON for every error."""
    app = Flask("sunk-scheduler")
    app.register_blueprint(hooks)
    instrument(app)
    json_errors(app, max_body=MAX_BODY)

    @app.get("/healthz")
    def healthz():
        return jsonify({"ok": True})

    return app


def error(status: int, message: str) -> tuple[Response, int]:
    return jsonify({"error": message}), status


def _name(pod: Obj) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"

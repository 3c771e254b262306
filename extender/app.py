"""The extender's HTTP verbs: filter, prioritize, bind, preempt (flask, served by gunicorn).

Placement comes from the same reconciler as ``sunk-scheduler`` (scheduler/reconciler.py):
the filter only reads the decision from memory and enqueues the Pod, so a burst of
scheduling attempts never becomes a burst of Slurm calls, and the placeholder job is
submitted exactly once, by the reconciler's worker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from flask import Flask, jsonify, request

from scheduler import kubeops
from scheduler.decide import Bind, CancelJobs, DeletePod, Invalid, Submit, Waiting
from scheduler.reconciler import PodScheduler
from sunk import names
from sunk.types import Obj

from . import protocol

log = logging.getLogger(__name__)


def create_app(scheduler: PodScheduler, enqueue: Callable[[str], None]) -> Flask:
    app = Flask("sunk-extender")

    def body() -> Any:
        data = request.get_json(silent=True)
        if data is None:
            raise protocol.BadRequest("the body must be JSON (Content-Type: application/json)")
        return data

    @app.errorhandler(protocol.BadRequest)
    def bad_request(exc: protocol.BadRequest):
        return jsonify({"Error": f"bad request: {exc}"}), 400

    @app.errorhandler(404)
    def not_found(_exc):
        return jsonify({"Error": "no such verb"}), 404

    @app.errorhandler(405)
    def bad_method(_exc):
        return jsonify({"Error": "extender verbs take POST"}), 405

    @app.get("/healthz")
    def healthz():
        return jsonify({"ok": True})

    @app.post("/filter")
    def filter_():
        args = protocol.parse_filter_args(body())
        uid = args.pod["metadata"]["uid"]
        enqueue(uid)
        allowed, reason, final = _verdict(scheduler, args.pod, uid)
        return jsonify(protocol.filter_result(args, allowed, reason, unresolvable=final))

    @app.post("/prioritize")
    def prioritize():
        args = protocol.parse_filter_args(body())
        uid = args.pod["metadata"]["uid"]
        allowed, _reason, _final = _verdict(scheduler, args.pod, uid)
        return jsonify(protocol.priorities(args.node_names, allowed))

    @app.post("/bind")
    def bind():
        args = protocol.parse_binding_args(body())
        pod = scheduler.pods.by_uid(args.pod_uid)
        if pod is None:
            return jsonify({"Error": f"unknown pod {args.pod_namespace}/{args.pod_name} (uid {args.pod_uid})"})
        action = scheduler.placement(pod, args.pod_uid)
        if not isinstance(action, Bind):
            return jsonify({"Error": f"not bindable yet: {_describe(action)}"})
        if action.k8s_node != args.node:
            return jsonify({"Error": f"Slurm allocated Node {action.k8s_node} (Slurm node {action.slurm_node}) "
                                     f"for job {action.job_id}, not {args.node}"})
        try:
            kubeops.bind(scheduler.api, pod, args.node, {names.ANN_JOB_ID: str(action.job_id),
                                                         names.ANN_SLURM_NODE: action.slurm_node})
        except Exception as exc:
            log.warning("binding %s/%s failed: %s", args.pod_namespace, args.pod_name, exc)
            return jsonify({"Error": f"binding failed: {exc}"})
        return jsonify({"Error": ""})

    @app.post("/preempt")
    def preempt():
        """Slurm owns preemption (QOS, partitions); kube-scheduler is offered no victims."""
        data = body()
        if not isinstance(data, dict) or "Pod" not in data:
            raise protocol.BadRequest("ExtenderPreemptionArgs needs a Pod")
        return jsonify({"NodeNameToMetaVictims": {}})

    return app


def _verdict(scheduler: PodScheduler, pod: Obj, uid: str) -> tuple[str | None, str, bool]:
    """(the one Node that may pass or None, the reason the others fail, whether that is final)."""
    action = scheduler.placement(scheduler.pods.by_uid(uid) or pod, uid)
    if isinstance(action, Bind):
        return action.k8s_node, f"Slurm allocated Node {action.k8s_node} for job {action.job_id}", False
    if isinstance(action, Invalid):
        return None, "sunk: " + "; ".join(action.problems), True
    if isinstance(action, (DeletePod, CancelJobs)):
        return None, f"sunk: {_describe(action)}", True
    return None, _describe(action), False


def _describe(action: object) -> str:
    if isinstance(action, Waiting):
        return f"waiting for Slurm allocation of job {action.job_id} ({action.reason})"
    if isinstance(action, Submit):
        return "waiting for the placeholder Slurm job to be submitted"
    if isinstance(action, DeletePod):
        return action.message
    if isinstance(action, CancelJobs):
        return action.message
    if isinstance(action, Invalid):
        return "; ".join(action.problems)
    return str(getattr(action, "why", action))

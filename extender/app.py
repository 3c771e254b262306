"""The extender's HTTP verbs: filter, prioritize, bind, preempt (flask, served by gunicorn).

Placement comes from the same reconciler as ``sunk-scheduler`` (scheduler/reconciler.py):
the filter only reads the decision from memory and enqueues the Pod, so a burst of
scheduling attempts never becomes a burst of Slurm calls, and the placeholder job is
submitted exactly once, by the reconciler's worker. Binding goes through the reconciler's
Binder (scheduler/binder.py), as ``sunk-scheduler``'s own does: the same annotations, and the
Pod counts as bound until the Pod watch shows it.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from typing import Any

from flask import Flask, jsonify, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge
from werkzeug.wrappers import Response

from scheduler.binder import Binding
from scheduler.decide import Bind, CancelJobs, DeleteMembers, FindJob, Invalid, Submit, Waiting
from scheduler.reconciler import PodScheduler
from sunk.base.flags import loggable
from sunk.base.jsondepth import allow_deep_json
from sunk.model.types import Obj

from . import protocol

log = logging.getLogger(__name__)

# The largest body read. This extender runs nodeCacheCapable: true, so kube-scheduler sends
# the Pod and NodeNames only: 5000 Node names of the longest legal length (253 characters,
# quoted, comma-separated) are 1.3 MB, typical names a tenth of that, and a Pod is at most
# about 1.5 MB (etcd's object limit); 8 MiB is twice the sum. Full NodeLists (nodeCacheCapable:
# false, which this extender does not need) of thousands of Nodes would not fit and get a 413.
MAX_BODY_BYTES = 8 * 1024 * 1024
LOGGED_CHARS = 200  # of any caller-controlled text in a log line


def create_app(scheduler: PodScheduler, enqueue: Callable[[str], None]) -> Flask:
    app = Flask("sunk-extender")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    # OPTIONS gets the JSON 405 like any other method a verb does not take (set before the routes).
    app.config["PROVIDE_AUTOMATIC_OPTIONS"] = False
    # A path with "//" is a JSON 404, not werkzeug's HTML 308 redirect to the merged path.
    app.url_map.merge_slashes = False

    @app.errorhandler(protocol.BadRequest)
    def bad_request(exc: protocol.BadRequest):
        message = str(exc)
        log.warning("%s %s: 400 bad request: %s", _short(request.method), _short(request.path), _short(message))
        return jsonify({"Error": f"bad request: {message}"}), 400

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        """Routing errors (404, 405), 413 and any other werkzeug error: JSON, with its headers (Allow)."""
        code = exc.code or 500
        if code == 404:
            message = "no such verb"
        elif code == 405:
            allowed = sorted(getattr(exc, "valid_methods", None) or ())
            message = "extender verbs take POST" if "POST" in allowed else f"this path takes {', '.join(allowed)}"
        elif code == 413:
            message = f"the body is larger than {MAX_BODY_BYTES // (1024 * 1024)} MiB"
        else:
            message = f"{exc.name}: {exc.description}" if exc.description else exc.name
        log.warning("%s %s: %d %s", _short(request.method), _short(request.path), code, message)
        response = exc.get_response()
        response.set_data(json.dumps({"Error": message}))
        response.content_type = "application/json"
        return response

    @app.errorhandler(Exception)
    def internal_error(exc: Exception):
        """A bug: the traceback goes to the log, kube-scheduler gets a JSON error."""
        log.error("%s %s: 500 unexpected error", _short(request.method), _short(request.path), exc_info=exc)
        return jsonify({"Error": f"internal error in sunk-extender: {type(exc).__name__} (see its log)"}), 500

    @app.get("/healthz")
    def healthz():
        return jsonify({"ok": True})

    @app.post("/filter")
    def filter_():
        args = protocol.parse_filter_args(body())
        enqueue(args.uid)
        allowed, reason, final = _verdict(scheduler, args.pod, args.uid)
        return jsonify(protocol.filter_result(args, allowed, reason, unresolvable=final))

    @app.post("/prioritize")
    def prioritize():
        args = protocol.parse_filter_args(body())
        allowed, _reason, _final = _verdict(scheduler, args.pod, args.uid)
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
            outcome = scheduler.bind_placed(pod, action)  # as sunk-scheduler binds: the same Binder, claims first
        except Exception as exc:
            log.warning("binding %s/%s failed: %s", args.pod_namespace, args.pod_name, exc)
            return jsonify({"Error": f"binding failed: {exc}"})
        if outcome is Binding.ALREADY:
            return jsonify({"Error": f"binding failed: pod {args.pod_namespace}/{args.pod_name} is bound already"})
        if outcome is Binding.REFUSED:
            return jsonify({"Error": f"not bound: its ResourceClaims cannot be filled where Slurm placed job "
                                     f"{action.job_id}, which is cancelled (the Pod's Events say why)"})
        return jsonify({"Error": ""})

    @app.post("/preempt")
    def preempt():
        """Slurm owns preemption (QOS, partitions); kube-scheduler is offered no victims."""
        protocol.parse_preemption_args(body())
        return jsonify({"NodeNameToMetaVictims": {}})

    return app


def body() -> Any:
    """The request's JSON value: strict JSON (RFC 8259) in UTF-8, or a BadRequest.

    Strict because answers echo parts of it (Node objects) and kube-scheduler's Go decoder
    refuses NaN and Infinity, which Python's json would otherwise read and write back; and
    a deeply nested body must be a 400, not the parser's RecursionError. Reading the body
    raises werkzeug's 413 past MAX_CONTENT_LENGTH.
    """
    # First: an oversize body is a 413 whatever its type. werkzeug raises it for a Content-Length
    # over the limit, but cuts a body without one (chunked) at the limit: refuse that here.
    data = request.get_data(cache=False)
    if request.content_length is None and len(data) >= MAX_BODY_BYTES:
        raise RequestEntityTooLarge()
    if not request.is_json:
        raise protocol.BadRequest("the body must be JSON (Content-Type: application/json)")
    allow_deep_json()  # (one depth in every process: sunk.base.jsondepth)
    try:
        return json.loads(data.decode("utf-8"), parse_constant=_no_constant, parse_float=_finite)
    except (ValueError, RecursionError) as exc:  # (UnicodeDecodeError and JSONDecodeError are ValueErrors)
        raise protocol.BadRequest(f"the body is not valid JSON ({type(exc).__name__})") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("a number out of range")
    return value


def _short(text: str) -> str:
    """Caller-controlled text for a log line: quoted (no control characters) and cut."""
    return loggable(text, LOGGED_CHARS)


def _verdict(scheduler: PodScheduler, pod: Obj, uid: str) -> tuple[str | None, str, bool]:
    """(the one Node that may pass or None, the reason the others fail, whether that is final)."""
    action = scheduler.placement(scheduler.pods.by_uid(uid) or pod, uid)
    if isinstance(action, Bind):
        return action.k8s_node, f"Slurm allocated Node {action.k8s_node} for job {action.job_id}", False
    if isinstance(action, Invalid):
        return None, f"sunk: {_describe(action)}", True
    if isinstance(action, (DeleteMembers, CancelJobs)):
        return None, f"sunk: {_describe(action)}", True
    return None, _describe(action), False


def _describe(action: object) -> str:
    if isinstance(action, Waiting):
        return f"waiting for Slurm allocation of job {action.job_id} ({action.reason})"
    if isinstance(action, Submit):
        return "waiting for the placeholder Slurm job to be submitted"
    if isinstance(action, FindJob):
        return "looking for the placeholder Slurm job in Slurm (the answer to its submission was lost)"
    if isinstance(action, DeleteMembers):
        return action.message
    if isinstance(action, CancelJobs):
        return action.message
    if isinstance(action, Invalid):
        return "; ".join(message for _member, message in action.problems)
    return str(getattr(action, "why", action))

"""The Syncer's hook API as a flask Blueprint (mounted on the syncer's gunicorn-served app).

    POST /api/v1/nodes/<node>/pre-hook   {"job_id": 7, "strict": false, "timeout": 90}
         lock the node for the job; blocks until locked (200) or the timeout (504); 403 when
         Slurm does not show the job holding the node, 409 when the job has already ended; 429
         (``retry_after`` in the body and Retry-After) when too many pre-hooks wait already, on
         that node or in all: nothing was recorded, ask again
    POST /api/v1/nodes/<node>/post-hook  {"job_id": 7}
         the job ended on the node: unlock if nothing else runs there (202); a placeholder job's
         Pod still on the node's Kubernetes Node drains the node (its reason in "drained"); 503 when
         that cannot be checked or written (Slurm unreachable): the epilog then drains by itself
    POST /api/v1/nodes/<node>/reboot     {"message": "..."} (optional body)
         set the reboot condition on the node's Kubernetes Node (200)
    GET  /healthz                         200 once the service can answer, else 503 (no token needed)

Every /api call needs ``Authorization: Bearer <token>`` of the node in its path: a
ServiceAccount token bound to that node's slurmd Pod (checked with TokenReview, see
nodeauth.py), or the node's legacy HMAC token (derived from the secret in the token file,
see auth.py); without one, 401; a valid token of another node's Pod, 403; a TokenReview
that cannot be made, 503. Every error is
JSON: ``{"error": ..., ...}``, and leaves one log line (app.py ``log_refusal``). ``<node>`` is
the Slurm node name.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request
from werkzeug.exceptions import HTTPException

from sunk.base.flags import loggable
from sunk.base.jsondepth import allow_deep_json

from .auth import TokenFile, bearer
from .nodeauth import NodeAuthenticator
from .protocol import (
    Body,
    HookError,
    HookService,
    check_node,
    parse_post_hook,
    parse_pre_hook,
    parse_reboot,
)

log = logging.getLogger(__name__)
PREFIX = "/api/v1/nodes"


def hooks_blueprint(service: HookService, token: TokenFile | NodeAuthenticator, *,
                    name: str = "sunk_hooks") -> Blueprint:
    """``token``: a NodeAuthenticator, or a TokenFile alone (HMAC node tokens only)."""
    bp = Blueprint(name, __name__)
    authenticator = token if isinstance(token, NodeAuthenticator) else NodeAuthenticator(token)

    def handle(parse: Callable[[Any], Any], call: Callable[[str, Any], Body], node: str, ok: int) -> Response:
        try:
            check_node(node)
            authenticate(authenticator, node)
            req = parse(_json_body())
            result = call(node, req)
        except HookError as exc:
            return error_response(exc)
        except HTTPException:  # (a body over the limit: 413, answered by the app)
            raise
        except Exception:  # a bug: still JSON, so the prolog's drain reason says something useful
            log.exception("hook %s for node %s failed", loggable(request.path), loggable(node))
            return error_response(HookError(500, "internal error in sunk-syncer (see its log)",
                                            reason="internal error in the sunk-syncer hook API"))
        resp = jsonify(result)
        resp.status_code = ok
        return resp

    @bp.post(f"{PREFIX}/<node>/pre-hook")
    def pre_hook(node: str) -> Response:
        return handle(parse_pre_hook, service.pre_hook, node, 200)

    @bp.post(f"{PREFIX}/<node>/post-hook")
    def post_hook(node: str) -> Response:
        return handle(parse_post_hook, service.post_hook, node, 202)

    @bp.post(f"{PREFIX}/<node>/reboot")
    def reboot(node: str) -> Response:
        return handle(parse_reboot, service.reboot, node, 200)

    @bp.get("/healthz")
    def healthz() -> Response:
        if service.ready():
            return jsonify({"ok": True})
        resp = jsonify({"ok": False, "error": "not ready: the caches have not synced yet"})
        resp.status_code = 503
        return resp

    return bp


def authenticate(authenticator: NodeAuthenticator, node: str) -> None:
    presented = bearer(request.headers.get("Authorization"))
    if presented is None:
        raise HookError(401, "missing bearer token (Authorization: Bearer <token>)")
    authenticator.check(node, presented)


def _json_body() -> Any:
    """The body as JSON; bytes that are not UTF-8 are replaced, not refused (an older prolog
    sends the job's Extra, which its user writes, and a 400 would drain the node)."""
    data = request.get_data(cache=True)
    limit = current_app.config.get("MAX_CONTENT_LENGTH")
    if limit and request.content_length is None and len(data) >= limit:  # (chunked: werkzeug cut it at the limit)
        raise HookError(413, f"the body is larger than {limit} bytes")
    if not data:
        return None
    allow_deep_json()  # (one depth in every process: deeper than sunk.base.jsondepth's is refused here)
    try:
        return json.loads(data.decode("utf-8", errors="replace"))
    except (ValueError, RecursionError):  # (a body nested deeper than that: the parser's recursion)
        raise HookError(400, "the body is not valid JSON") from None


def error_response(exc: HookError) -> Response:
    resp = jsonify(exc.body())
    resp.status_code = exc.status
    if exc.status == 401:
        resp.headers["WWW-Authenticate"] = 'Bearer realm="sunk-syncer hooks"'
    retry_after = exc.details.get("retry_after")
    if isinstance(retry_after, int) and exc.status in (429, 503):
        resp.headers["Retry-After"] = str(retry_after)
    return resp

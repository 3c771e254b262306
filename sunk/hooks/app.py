"""A stand-alone flask app around the hook Blueprint, with JSON for routing errors too.

The syncer mounts the Blueprint on its own app; this one serves tests and the benchmark
(and any process that runs the hooks alone).
"""

from __future__ import annotations

import logging

from flask import Blueprint, Flask, Response, abort, request
from werkzeug.exceptions import HTTPException

from sunk.base.flags import loggable

from .api import error_response
from .metrics import instrument
from .protocol import HookError

log = logging.getLogger(__name__)

# A hook call's body is a few fields. 1 MiB still takes an older prolog's body, which carried
# the job's Extra (its user's to fill); a refusal would fail that prolog and drain the node.
MAX_BODY = 1024 * 1024


def create_app(*blueprints: Blueprint, name: str = "sunk-hooks") -> Flask:
    app = Flask(name)
    for bp in blueprints:
        app.register_blueprint(bp)
    json_errors(app, max_body=MAX_BODY)
    instrument(app)
    return app


def json_errors(app: Flask, *, max_body: int) -> None:
    """Every failure as ``{"error": ...}``, like every other hook API answer: routing (404,
    405), a body over ``max_body`` (413), and a bug (500, logged with its traceback); and one
    log line for every answer of 400 or more, whoever made it (``log_refusal``)."""
    app.config["MAX_CONTENT_LENGTH"] = max_body  # (a body read past it: 413)
    # No slash merging: werkzeug answers a path with "//" by a 308 redirect to the merged path, an HTML
    # page no error handler sees (routing redirects bypass them). A hook path is never written with
    # "//": it is a 404 like any other unknown path. (Read at match time: routes added before count.)
    app.url_map.merge_slashes = False

    @app.before_request
    def refuse_large_bodies() -> None:
        """Before any handler, whether or not it reads the body."""
        if (request.content_length or 0) > max_body:
            abort(413)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        status = exc.code or 500
        if status == 413:
            return error_response(HookError(413, f"the body is larger than {max_body} bytes"))
        return error_response(HookError(status, exc.description or exc.name))

    @app.errorhandler(Exception)
    def bug(exc: Exception) -> Response:
        log.exception("%s %s failed", loggable(request.method), loggable(request.path))
        return error_response(HookError(500, f"internal error in {app.name} (see its log)"))

    app.after_request(log_refusal)


def log_refusal(response: Response) -> Response:
    """One line for an answer of 400 or more: method, path, status and the answer's ``error``, the
    caller's text escaped and cut (sunk.base.flags.loggable); never a header (the bearer token) or the
    body the caller sent. Warning for what an operator should look at (5xx; 401, 403, 413: a caller
    without the right credential, or a broken one), info for the rest, among them the ordinary ends
    of a protocol (a placeholder's long-poll ends on "404 the Pod is gone", a prolog's on "409 job
    ended")."""
    status = response.status_code
    if status >= 400:
        body = response.get_json(silent=True) if response.is_json else None
        why = body.get("error") if isinstance(body, dict) else None
        level = logging.WARNING if status >= 500 or status in (401, 403, 413) else logging.INFO
        log.log(level, "%s %s: %d %s", loggable(request.method), loggable(request.path), status,
                loggable(why if why is not None else response.status))
    return response

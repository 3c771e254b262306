"""A stand-alone flask app around the hook Blueprint, with JSON for routing errors too.

The syncer mounts the Blueprint on its own app; this one serves tests and the benchmark
(and any process that runs the hooks alone).
"""

from __future__ import annotations

from flask import Blueprint, Flask, Response
from werkzeug.exceptions import HTTPException

from .api import error_response
from .metrics import instrument
from .protocol import HookError


def create_app(*blueprints: Blueprint, name: str = "sunk-hooks") -> Flask:
    app = Flask(name)
    for bp in blueprints:
        app.register_blueprint(bp)
    json_errors(app)
    instrument(app)
    return app


def json_errors(app: Flask) -> None:
    """404/405 from routing as ``{"error": ...}``, like every other hook API answer."""

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        return error_response(HookError(exc.code or 500, exc.description or exc.name))

"""Hook API latency: a prolog waits on these calls, so their time is a job's start-up time."""

from __future__ import annotations

import time

from flask import Flask, Response, g, request
from prometheus_client import Histogram

REQUEST_DURATION = Histogram(
    "sunk_hooks_request_duration_seconds",
    "Hook API request latency, by app, route and HTTP status (pre-hooks include their wait for the lock).",
    ["app", "route", "code"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
)


def instrument(app: Flask) -> None:
    """Time every request; the label is the route pattern, never the raw path (bounded series)."""

    @app.before_request
    def started() -> None:
        g.sunk_started = time.perf_counter()

    @app.after_request
    def finished(response: Response) -> Response:
        started_at = g.pop("sunk_started", None)
        if started_at is not None:
            route = request.url_rule.rule if request.url_rule is not None else "unmatched"
            REQUEST_DURATION.labels(app.name, route, str(response.status_code)).observe(
                time.perf_counter() - started_at)
        return response

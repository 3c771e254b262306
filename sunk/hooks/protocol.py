"""What the hook API's callers send, what its service must do, and how failures are told.

The HTTP layer (api.py) only authenticates, validates and encodes; the work is a
``HookService`` (the node-locking plugin implements it). Bodies are validated here into
frozen values, so every malformed body gets one clear 400 before anything is touched.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, Protocol

import attrs

Body = dict[str, Any]

# Slurm node names as slurm.conf allows them in practice (hostname-like).
NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
MAX_MESSAGE = 1024
MAX_JOB_ID_DIGITS = 20  # Slurm's job ids are 32-bit


class HookError(Exception):
    """A failure with an HTTP status and a JSON body; ``reason`` is one line for a drain reason."""

    def __init__(self, status: int, error: str, *, reason: str | None = None, **details: Any):
        super().__init__(error)
        self.status = status
        self.error = error
        self.reason = reason
        self.details = details

    def body(self) -> Body:
        body: Body = {"error": self.error, **self.details}
        if self.reason:
            body["reason"] = self.reason
        return body


def bad_request(message: str) -> HookError:
    return HookError(400, message)


@attrs.frozen
class PreHook:
    """A prolog asks for the node to be locked before ``job_id`` starts on it.

    Nothing of the job comes from the caller: the Syncer reads the job from Slurm (is it on
    this node? a placeholder, so strict?). A job's Extra is its user's to write, and a
    field the hook API refused would fail the prolog and drain the node.
    """

    job_id: int
    strict: bool = False
    timeout: float | None = None  # seconds; None: the server's default


@attrs.frozen
class PostHook:
    """An epilog reports that ``job_id`` ended on the node."""

    job_id: int


@attrs.frozen
class Reboot:
    """Someone asks for the node's machine to be rebooted by the Node tooling."""

    message: str = ""


class HookService(Protocol):
    def pre_hook(self, node: str, request: PreHook) -> Body: ...
    def post_hook(self, node: str, request: PostHook) -> Body: ...
    def reboot(self, node: str, request: Reboot) -> Body: ...
    def ready(self) -> bool: ...


# ---- body validation ---------------------------------------------------------------------------


def check_node(node: str) -> str:
    if not NODE_NAME.match(node):
        raise bad_request(f"not a Slurm node name: {node[:64]!r}")
    return node


def _object(body: Any, *, optional: bool = False) -> Mapping[str, Any]:
    if body is None and optional:
        return {}
    if not isinstance(body, dict):
        raise bad_request("the body must be a JSON object")
    return body


def _job_id(body: Mapping[str, Any]) -> int:
    value = body.get("job_id")
    # Shell callers may quote it. ASCII digits only, and few: int() takes "²" as a digit and
    # refuses more than 4300 of them (each was a 500).
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= MAX_JOB_ID_DIGITS:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise bad_request("job_id must be a positive integer")
    return value


def _bool(body: Mapping[str, Any], key: str) -> bool:
    value = body.get(key, False)
    if not isinstance(value, bool):
        raise bad_request(f"{key} must be true or false")
    return value


def _string(body: Mapping[str, Any], key: str, limit: int) -> str:
    value = body.get(key, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise bad_request(f"{key} must be a string")
    if len(value) > limit:
        raise bad_request(f"{key} is longer than {limit} characters")
    return value


def parse_pre_hook(body: Any) -> PreHook:
    obj = _object(body)
    timeout = obj.get("timeout")
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not math.isfinite(timeout):
            raise bad_request("timeout must be a number of seconds")
        if timeout <= 0:
            raise bad_request("timeout must be more than 0 seconds")
    # (``job_extra``, which older prologs send, is ignored whatever it holds)
    return PreHook(
        job_id=_job_id(obj),
        strict=_bool(obj, "strict"),
        timeout=None if timeout is None else float(timeout),
    )


def parse_post_hook(body: Any) -> PostHook:
    return PostHook(job_id=_job_id(_object(body)))


def parse_reboot(body: Any) -> Reboot:
    return Reboot(message=_string(_object(body, optional=True), "message", MAX_MESSAGE))

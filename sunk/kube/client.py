"""Loading an ApiClient, and raw JSON requests through it.

The official client supplies configuration, auth (certs, tokens, exec plugins,
in-cluster token refresh) and the urllib3 pool. Requests go out as plain JSON and
come back as wire-form dicts, so no generated model class is ever built.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlencode

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from sunk.base import fence
from sunk.base.jsondepth import allow_deep_json
from sunk.kube import protowire
from sunk.kube.resources import Resource
from sunk.model.types import Outage, TerminalError

log = logging.getLogger(__name__)

# (connect, read) seconds. Reads are small; a stuck apiserver must not hang a worker.
DEFAULT_TIMEOUT: tuple[float, float] = (5.0, 30.0)
# Watches, informers, workers and the elector share one pool; client default is cpu*5.
DEFAULT_POOL_MAXSIZE = 32

PatchType = Literal["merge", "strategic", "json", "apply"]
_PATCH_CONTENT_TYPES: dict[str, str] = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
    "apply": "application/apply-patch+yaml",
}

Timeout = float | tuple[float, float] | None
Query = Mapping[str, str | int | bool | None] | Sequence[tuple[str, str]]


class KubeError(Exception):
    """Anything that went wrong talking to the apiserver."""


class ConnectionFailed(KubeError, Outage):
    """The apiserver could not be reached or the connection broke mid-request: an outage."""

    dependency = "kubernetes"


class ApiError(KubeError):
    """The apiserver answered with a non-2xx status; ``body`` is its Status object when JSON."""

    def __init__(self, status: int, reason: str, body: dict[str, Any] | None = None, method: str = "", path: str = ""):
        self.status = status
        self.reason = reason
        self.body = body or {}
        self.method = method
        self.path = path
        message = self.body.get("message") or reason
        super().__init__(f"{method} {path}: {status} {message}")

    @property
    def message(self) -> str:
        return str(self.body.get("message") or self.reason)

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def gone(self) -> bool:
        return self.status == 410

    @property
    def too_many_requests(self) -> bool:
        return self.status == 429


class ApiUnavailable(ApiError, Outage):
    """The apiserver is there but cannot serve us now (401, 429, 5xx): an outage, retried.

    401: our token was refused (expired, rotated), which the client's token refresh mends.
    429 carries the apiserver's Retry-After in ``retry_after``. Still an ``ApiError``, so a
    caller that handles a status itself (429 from an eviction: a PodDisruptionBudget) still can.
    """

    dependency = "kubernetes"

    def __init__(self, status: int, reason: str, body: dict[str, Any] | None = None, method: str = "",
                 path: str = "", retry_after: float | None = None):
        super().__init__(status, reason, body, method, path)
        self.retry_after = retry_after


class ApiRefused(ApiError, TerminalError):
    """A refusal that asking again cannot change (403; 422; 404 on a create, update or patch).

    A caller that expects the status (404: the object is gone; 422: it was replaced) catches
    ``ApiError`` as before; one that reaches the controller runtime is terminal for its key.
    """

    def __init__(self, status: int, reason: str, body: dict[str, Any] | None = None, method: str = "",
                 path: str = ""):
        super().__init__(status, reason, body, method, path)
        self.fix = _FIXES.get(status, "")


# Why each terminal status happens, and what a person changes so that the write succeeds.
_FIXES: dict[int, str] = {
    403: "grant this verb on this resource to the daemon's ServiceAccount (the chart's Role/ClusterRole), "
         "or the namespace is being deleted",
    404: "the object written to, its namespace or its resource type (a CRD not installed) does not exist",
    422: "the apiserver or an admission policy found the object invalid: read the message",
}
_WRITES = frozenset({"POST", "PUT", "PATCH"})  # (a 404 on DELETE means done: never terminal)


def api_error(status: int, reason: str, body: dict[str, Any] | None = None, method: str = "", path: str = "",
              retry_after: float | None = None) -> ApiError:
    """The ``ApiError`` for a non-2xx answer, of the class that says what to do about it.

    401, 429 and 5xx are outages (``ApiUnavailable``); 403, 422, and 404 on a create, update or
    patch are terminal (``ApiRefused``); the rest (404 on a read or delete, 409, 410, other 4xx)
    are plain ``ApiError``s that callers decide about, retried with backoff when they do not.
    """
    if status in (401, 429) or status >= 500:
        return ApiUnavailable(status, reason, body, method, path, retry_after=retry_after)
    if status in (403, 422) or (status == 404 and method.upper() in _WRITES):
        return ApiRefused(status, reason, body, method, path)
    return ApiError(status, reason, body, method, path)


def retry_after_seconds(value: str | None) -> float | None:
    """An HTTP Retry-After given in seconds (what the apiserver sends); None when absent or a date."""
    try:
        seconds = float(value) if value else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0 <= seconds < float("inf") else None


def load_api_client(
    kubeconfig: str | None = None,
    *,
    context: str | None = None,
    pool_maxsize: int = DEFAULT_POOL_MAXSIZE,
) -> k8s.ApiClient:
    """An ApiClient from, in order: ``kubeconfig``, ``$KUBECONFIG``, in-cluster, ``~/.kube/config``.

    This is controller-runtime's order, so ``--kubeconfig`` behaves as operators expect.
    """
    cfg = k8s.Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or None
    if path:
        k8s_config.load_kube_config(config_file=path, context=context, client_configuration=cfg)
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        k8s_config.load_incluster_config(client_configuration=cfg)
    else:
        default = Path.home() / ".kube" / "config"
        if not default.exists():
            raise KubeError("no kubeconfig given, not in a cluster, and ~/.kube/config does not exist")
        k8s_config.load_kube_config(config_file=str(default), context=context, client_configuration=cfg)
    cfg.connection_pool_maxsize = pool_maxsize
    return k8s.ApiClient(cfg)


def _url(path: str, query: Query | None) -> str:
    if not query:
        return path
    pairs = query.items() if isinstance(query, Mapping) else query
    encoded = [(k, _qvalue(v)) for k, v in pairs if v is not None]
    return f"{path}?{urlencode(encoded)}" if encoded else path


def _qvalue(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def open_request(
    api: k8s.ApiClient,
    method: str,
    path: str,
    *,
    query: Query | None = None,
    body: Any = None,
    content_type: str | None = None,
    timeout: Timeout = DEFAULT_TIMEOUT,
    accept: str = "application/json",
) -> urllib3.BaseHTTPResponse:
    """Send a request and return the unread urllib3 response (status already checked).

    The caller must read or close it. Used directly for watch streams. A write (any method
    but GET) first asks this thread's Lease fence (``sunk.base.fence``), so a leader-only
    controller that may have lost its Lease sends nothing.
    """
    if method.upper() != "GET":
        fence.check(f"{method} {path}")
    headers = {"Accept": accept}
    if body is not None:
        headers["Content-Type"] = content_type or "application/json"
    method, url, headers, _, _ = api.param_serialize(
        method, _url(path, query), header_params=headers, auth_settings=["BearerToken"]
    )
    try:
        # The client's REST layer JSON-encodes the body itself for every */*+json content type.
        resp = api.call_api(method, url, header_params=headers, body=body, _request_timeout=timeout).response
    except ApiException as exc:  # the client only raises this itself for TLS failures
        raise ConnectionFailed(f"{method} {path}: {exc.reason}") from exc
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise ConnectionFailed(f"{method} {path}: {exc}") from exc
    if not 200 <= resp.status < 300:
        try:
            raw = resp.read()
        except (urllib3.exceptions.HTTPError, OSError):
            raw = b""
        finally:
            resp.release_conn()
        raise api_error(resp.status, resp.reason or "", _json_or_none(raw), method, path,
                        retry_after=retry_after_seconds(resp.headers.get("Retry-After")))
    return resp


def _apiserver_int(digits: str) -> int:
    """An integer as the apiserver stores it, however long. Python's str-to-int limit (4,300 digits, which
    ``json.loads`` enforces with a ValueError) is not the apiserver's: a tenant's free-form fields (a claim's opaque
    parameters, up to 10 KiB) could hold a longer one (kube-apiserver 1.34 happens to fail the create of any number
    past a float64's range), and an answer that cannot be decoded stalls whoever reads it. Through Decimal no such
    limit applies, and a number of that many digits converts in microseconds."""
    return int(digits) if len(digits) <= 4_000 else int(Decimal(digits))


def decode_json(raw: bytes | str) -> Any:
    """JSON from the apiserver: any object it stores decodes, its numbers whatever their digits, its nesting up to
    Go's 10,000 levels (``sunk.base.jsondepth``)."""
    allow_deep_json()
    return json.loads(raw, parse_int=_apiserver_int)


def request(
    api: k8s.ApiClient,
    method: str,
    path: str,
    *,
    query: Query | None = None,
    body: Any = None,
    content_type: str | None = None,
    timeout: Timeout = DEFAULT_TIMEOUT,
) -> dict[str, Any]:
    """One JSON request; returns the decoded body ({} when empty). A 2xx answer that is not JSON (whatever its
    Content-Type: a proxy's HTML page) is a ConnectionFailed, never a dict in its place: a relist would take one
    without items for every object gone. Plain-text endpoints go through ``get_text``."""
    resp = open_request(api, method, path, query=query, body=body, content_type=content_type, timeout=timeout)
    raw = _read_all(resp, method, path)
    if not raw:
        return {}
    try:
        value = decode_json(raw)
    except (ValueError, RecursionError) as exc:
        raise ConnectionFailed(f"{method} {path}: an answer that does not decode: {type(exc).__name__}: "
                               f"{str(exc)[:200]}") from exc
    return value if isinstance(value, dict) else {"value": value}


def get_text(api: k8s.ApiClient, path: str, *, timeout: Timeout = DEFAULT_TIMEOUT) -> str:
    """A GET of a plain-text endpoint (``/readyz``'s "ok"): its answer, cut to 500 characters."""
    resp = open_request(api, "GET", path, timeout=timeout, accept="text/plain, */*")
    return _read_all(resp, "GET", path)[:500].decode("utf-8", "replace")


def _read_all(resp: urllib3.BaseHTTPResponse, method: str, path: str) -> bytes:
    try:
        return resp.read()
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise ConnectionFailed(f"{method} {path}: reading response: {exc}") from exc
    finally:
        resp.release_conn()


def _json_or_none(raw: bytes) -> dict[str, Any] | None:
    if not raw:
        return None
    try:
        value = decode_json(raw)
    except (ValueError, RecursionError):
        return {"message": raw[:500].decode("utf-8", "replace")}
    return value if isinstance(value, dict) else {"value": value}


# ---- thin CRUD over Resource ------------------------------------------------------------


def get(
    api: k8s.ApiClient, resource: Resource, name: str, namespace: str | None = None, *, subresource: str | None = None
) -> dict[str, Any]:
    return request(api, "GET", resource.path(namespace, name, subresource))


def list_objects(
    api: k8s.ApiClient,
    resource: Resource,
    namespace: str | None = None,
    *,
    label_selector: str | None = None,
    field_selector: str | None = None,
) -> list[dict[str, Any]]:
    """Every object (all pages), each with ``kind``/``apiVersion`` filled in."""
    items: list[dict[str, Any]] = []
    cont: str | None = None
    while True:
        page = request(
            api,
            "GET",
            resource.path(namespace),
            query={"labelSelector": label_selector, "fieldSelector": field_selector, "limit": 500, "continue": cont},
        )
        items.extend(fill_type(page, resource))
        cont = (page.get("metadata") or {}).get("continue")
        if not cont:
            return items


def fill_type(page: dict[str, Any], resource: Resource) -> list[dict[str, Any]]:
    """List items come without kind/apiVersion; add them so they equal watched objects."""
    kind = resource.kind or str(page.get("kind", "")).removesuffix("List")
    api_version = page.get("apiVersion") or resource.api_version
    items = page.get("items") or []
    for item in items:
        item.setdefault("kind", kind)
        item.setdefault("apiVersion", api_version)
    return items


def create(api: k8s.ApiClient, resource: Resource, obj: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
    ns = namespace or (obj.get("metadata") or {}).get("namespace")
    return request(api, "POST", resource.path(ns), body=obj)


def replace(
    api: k8s.ApiClient, resource: Resource, obj: dict[str, Any], *, subresource: str | None = None
) -> dict[str, Any]:
    """PUT; carries ``metadata.resourceVersion``, so a stale object fails with 409."""
    meta = obj["metadata"]
    return request(api, "PUT", resource.path(meta.get("namespace"), meta["name"], subresource), body=obj)


def patch(
    api: k8s.ApiClient,
    resource: Resource,
    name: str,
    body: Any,
    namespace: str | None = None,
    *,
    patch_type: PatchType = "merge",
    subresource: str | None = None,
    field_manager: str | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """PATCH. ``force`` (server-side apply only) takes over fields another manager holds."""
    query: dict[str, Any] = {"fieldManager": field_manager} if field_manager else {}
    if force:
        query["force"] = "true"
    return request(
        api,
        "PATCH",
        resource.path(namespace, name, subresource),
        query=query or None,
        body=body,
        content_type=_PATCH_CONTENT_TYPES[patch_type],
    )


def delete(
    api: k8s.ApiClient,
    resource: Resource,
    name: str,
    namespace: str | None = None,
    *,
    grace_period_seconds: int | None = None,
    uid: str | None = None,
) -> dict[str, Any]:
    """DELETE; ``uid`` makes it a precondition, so a same-named successor is never deleted."""
    opts: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
    if grace_period_seconds is not None:
        opts["gracePeriodSeconds"] = grace_period_seconds
    if uid:
        opts["preconditions"] = {"uid": uid}
    return request(api, "DELETE", resource.path(namespace, name), body=opts)


PROTOBUF = "application/vnd.kubernetes.protobuf"


def add_finalizer(api: k8s.ApiClient, resource: Resource, obj: dict[str, Any], finalizer: str) -> dict[str, Any]:
    """``obj`` (as read, its ``resourceVersion`` the precondition: a changed object is a 409) with ``finalizer``
    added; the object as written.

    A merge patch, unless the apiserver refuses it as a change of an immutable field it did not change: a
    ``RawExtension`` in the spec kept with its creator's spacing (``sunk.kube.protowire``). Then the object is read
    in protobuf, which keeps those bytes, and written back with the one entry appended."""
    meta = obj["metadata"]
    namespace, name = meta.get("namespace"), meta["name"]
    try:
        return patch(api, resource, name, {"metadata": {
            "resourceVersion": meta["resourceVersion"], "finalizers": [*(meta.get("finalizers") or ()), finalizer]}},
            namespace)
    except ApiError as exc:
        if not (exc.status == 422 and "field is immutable" in exc.message):
            raise
        log.info("%s %s/%s: the apiserver will not merge-patch it (its spec keeps its creator's raw bytes); "
                 "adding finalizer %s in protobuf", resource.kind, namespace, name, finalizer)
    path = resource.path(namespace, name)
    stored = _read_all(open_request(api, "GET", path, accept=PROTOBUF), "GET", path)
    if protowire.resource_version(stored) != meta["resourceVersion"]:
        raise ApiError(409, "Conflict", {"message": f"{resource.kind} {name} changed since it was read"}, "PUT", path)
    if finalizer in protowire.finalizers(stored):
        return get(api, resource, name, namespace)
    return request(api, "PUT", path, body=protowire.with_finalizer(stored, finalizer), content_type=PROTOBUF)

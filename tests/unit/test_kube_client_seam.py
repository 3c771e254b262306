"""The seam between sunk.kube.client and the official kubernetes client, without a server.

sunk sends raw JSON through two of the client's internals: ``ApiClient.param_serialize``
(auth headers, host) and ``ApiClient.call_api`` (the urllib3 request through
``RESTClientObject``). Neither is public API, and both changed shape across the client's
majors: up to 36.x ``call_api(resource_path, method, ..., response_type(s_map)...)`` with
no ``param_serialize`` at all (37.0 moved to openapi-generator 7), and 36.0.0 dropped the
bearer token of every kubeconfig (kubernetes-client/python#2582). setup.cfg pins the range
these tests pass on; a bump of the pin must pass them first.

Only the socket is replaced: the ApiClient is loaded from a kubeconfig file by sunk's own
``load_api_client``, and the fake stands in for the client's urllib3 PoolManager.
"""

from __future__ import annotations

import inspect
import io
import json
import time
from typing import Any

import pytest
import urllib3
from kubernetes import client as k8s

from sunk.base import fence
from sunk.base.fence import Fenced, LeaseFence
from sunk.kube import client as kc
from sunk.kube.resources import Resource
from sunk.model.types import Outage, TerminalError

SERVER = "http://apiserver.invalid:6443"
TOKEN = "s3cr3t-token"
PODS = Resource("", "v1", "pods", kind="Pod")


class FakePool:
    """Records what the client would send, answers with canned urllib3 responses."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.answers: list[urllib3.HTTPResponse | Exception] = []

    def answer(self, status: int = 200, body: Any = None, reason: str = "OK",
               headers: dict[str, str] | None = None) -> urllib3.HTTPResponse:
        raw = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        resp = urllib3.HTTPResponse(body=io.BytesIO(raw), status=status, reason=reason,
                                    headers={"Content-Type": "application/json", **(headers or {})},
                                    preload_content=False)
        self.answers.append(resp)
        return resp

    def request(self, method: str, url: str, **kwargs: Any) -> urllib3.HTTPResponse:
        self.sent.append({"method": method, "url": url, **kwargs})
        answer = self.answers.pop(0) if self.answers else self.answer()
        if isinstance(answer, Exception):
            raise answer
        return answer

    def clear(self) -> None:
        pass


@pytest.fixture
def api(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": SERVER}}],
        "users": [{"name": "u", "user": {"token": TOKEN}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }))
    api = kc.load_api_client(str(kubeconfig))
    api.rest_client.pool_manager = FakePool()
    yield api
    api.close()


def _headers(sent: dict[str, Any]) -> dict[str, str]:
    return {k.lower(): v for k, v in sent["headers"].items()}


# -- the two internals, as sunk calls them ---------------------------------------------------


def test_param_serialize_and_call_api_take_what_sunk_passes():
    serialize = inspect.signature(k8s.ApiClient.param_serialize).parameters
    assert list(serialize)[1:3] == ["method", "resource_path"]  # positional, after self
    assert {"header_params", "auth_settings"} <= set(serialize)
    call = inspect.signature(k8s.ApiClient.call_api).parameters
    assert list(call)[1:3] == ["method", "url"]
    assert {"header_params", "body", "_request_timeout"} <= set(call)


def test_param_serialize_returns_method_url_and_headers_with_the_bearer_token(api):
    method, url, headers, body, post = api.param_serialize(
        "GET", "/api/v1/pods?limit=1", header_params={"Accept": "application/json"}, auth_settings=["BearerToken"])
    assert (method, url, body) == ("GET", f"{SERVER}/api/v1/pods?limit=1", None)
    assert {k.lower(): v for k, v in headers.items()}["authorization"] == f"Bearer {TOKEN}"
    assert not post


def test_load_api_client_sizes_the_shared_pool(api):
    assert api.configuration.connection_pool_maxsize == kc.DEFAULT_POOL_MAXSIZE


# -- requests as sunk sends them ---------------------------------------------------------------


def test_a_post_goes_out_as_json_with_auth_query_and_timeouts(api):
    pool = api.rest_client.pool_manager
    pool.answer(201, {"kind": "Binding", "apiVersion": "v1"})
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p", "uid": "u-1"},
               "target": {"kind": "Node", "name": "worker-1"}}
    got = kc.request(api, "POST", PODS.path("ns", "p", "binding"), body=binding,
                     query={"fieldManager": "sunk", "dryRun": None, "watch": True})
    assert got == {"kind": "Binding", "apiVersion": "v1"}
    [sent] = pool.sent
    assert sent["method"] == "POST"
    assert sent["url"] == f"{SERVER}/api/v1/namespaces/ns/pods/p/binding?fieldManager=sunk&watch=true"
    headers = _headers(sent)
    assert headers["authorization"] == f"Bearer {TOKEN}"
    assert headers["accept"] == "application/json"
    assert headers["content-type"] == "application/json"
    assert json.loads(sent["body"]) == binding
    assert sent["preload_content"] is False
    timeout = sent["timeout"]
    assert isinstance(timeout, urllib3.Timeout)
    assert (timeout.connect_timeout, timeout.read_timeout) == kc.DEFAULT_TIMEOUT


def test_a_get_carries_no_body_and_no_content_type(api):
    pool = api.rest_client.pool_manager
    pool.answer(200, {"kind": "PodList", "items": [{"metadata": {"name": "a"}}], "metadata": {}})
    items = kc.list_objects(api, PODS, "ns", label_selector="app=x")
    assert items == [{"metadata": {"name": "a"}, "kind": "Pod", "apiVersion": "v1"}]
    [sent] = pool.sent
    assert sent["method"] == "GET"
    assert sent["url"] == f"{SERVER}/api/v1/namespaces/ns/pods?labelSelector=app%3Dx&limit=500"
    assert "body" not in sent
    assert "content-type" not in _headers(sent)
    assert _headers(sent)["authorization"] == f"Bearer {TOKEN}"


@pytest.mark.parametrize(("patch_type", "body", "content_type"), [
    ("merge", {"metadata": {"annotations": {"a": "1"}}}, "application/merge-patch+json"),
    ("strategic", {"metadata": {"labels": {"b": "2"}}}, "application/strategic-merge-patch+json"),
    ("json", [{"op": "add", "path": "/metadata/labels/c", "value": "3"}], "application/json-patch+json"),
    ("apply", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}, "application/apply-patch+yaml"),
])
def test_every_patch_type_keeps_its_content_type_and_a_json_body(api, patch_type, body, content_type):
    pool = api.rest_client.pool_manager
    kc.patch(api, PODS, "p", body, "ns", patch_type=patch_type, field_manager="sunk")
    [sent] = pool.sent
    assert sent["method"] == "PATCH"
    assert sent["url"] == f"{SERVER}/api/v1/namespaces/ns/pods/p?fieldManager=sunk"
    assert _headers(sent)["content-type"] == content_type
    assert json.loads(sent["body"]) == body


def test_open_request_hands_back_the_unread_urllib3_response(api):
    """The reflector streams watch events from it: it must be the raw response, not read yet."""
    pool = api.rest_client.pool_manager
    stream = b'{"type":"ADDED","object":{}}\n'
    resp = pool.answer(200, stream)
    got = kc.open_request(api, "GET", PODS.path("ns"), query={"watch": True}, timeout=(5.0, 330.0))
    assert got is resp
    assert got.read() == stream
    timeout = pool.sent[0]["timeout"]
    assert (timeout.connect_timeout, timeout.read_timeout) == (5.0, 330.0)


# -- failures --------------------------------------------------------------------------------------


def test_an_error_status_becomes_api_error_with_the_status_message(api):
    pool = api.rest_client.pool_manager
    pool.answer(409, {"kind": "Status", "message": "the object has been modified", "reason": "Conflict"},
                reason="Conflict")
    with pytest.raises(kc.ApiError) as caught:
        kc.request(api, "PUT", PODS.path("ns", "p"), body={"metadata": {"name": "p"}})
    assert caught.value.conflict
    assert caught.value.message == "the object has been modified"
    assert caught.value.method == "PUT"


def test_a_connection_failure_becomes_connection_failed(api):
    pool = api.rest_client.pool_manager
    pool.answers.append(urllib3.exceptions.MaxRetryError(None, "/api/v1/pods", reason=ConnectionRefusedError()))
    with pytest.raises(kc.ConnectionFailed):
        kc.request(api, "GET", PODS.path())


def test_a_tls_failure_becomes_connection_failed(api):
    """The client turns urllib3's SSLError into its own ApiException(status=0); sunk maps that too."""
    pool = api.rest_client.pool_manager
    pool.answers.append(urllib3.exceptions.SSLError("certificate verify failed"))
    with pytest.raises(kc.ConnectionFailed, match="certificate verify failed"):
        kc.request(api, "GET", PODS.path())


# -- what each failure means to the controller runtime (issue 32 item 4) ----------------------------


@pytest.mark.parametrize(("status", "method"), [
    (401, "GET"), (429, "PATCH"), (500, "POST"), (503, "GET"), (504, "DELETE"),
])
def test_an_apiserver_that_cannot_serve_now_is_an_outage_of_kubernetes(status, method):
    error = kc.api_error(status, "x", None, method, "/p")
    assert isinstance(error, kc.ApiUnavailable) and isinstance(error, Outage) and not isinstance(error, TerminalError)
    assert error.dependency == "kubernetes" and error.status == status


@pytest.mark.parametrize(("status", "method", "fix"), [
    (403, "PATCH", "Role/ClusterRole"), (403, "GET", "Role/ClusterRole"), (422, "PUT", "invalid"),
    (404, "POST", "does not exist"), (404, "PUT", "does not exist"), (404, "PATCH", "does not exist"),
])
def test_a_refusal_asking_again_cannot_change_is_terminal_and_says_what_to_fix(status, method, fix):
    error = kc.api_error(status, "x", {"message": "m"}, method, "/p")
    assert isinstance(error, kc.ApiRefused) and isinstance(error, TerminalError) and not isinstance(error, Outage)
    assert fix in error.fix and error.message == "m"


@pytest.mark.parametrize(("status", "method"), [
    (404, "GET"), (404, "DELETE"), (409, "PUT"), (410, "GET"), (400, "POST"),
])
def test_answers_callers_decide_about_stay_plain_api_errors(status, method):
    """404 on a read or a delete (gone: done), 409 (reread and retry), 410 (relist): never terminal, never outage."""
    error = kc.api_error(status, "x", None, method, "/p")
    assert type(error) is kc.ApiError


def test_a_connection_failure_is_an_outage_of_kubernetes():
    assert issubclass(kc.ConnectionFailed, Outage) and kc.ConnectionFailed.dependency == "kubernetes"


@pytest.mark.parametrize(("header", "seconds"), [
    ("3", 3.0), ("0.5", 0.5), ("", None), (None, None), ("Wed, 21 Oct 2015 07:28:00 GMT", None), ("-1", None),
    ("inf", None), ("nan", None),
])
def test_retry_after_is_read_in_seconds_only(header, seconds):
    assert kc.retry_after_seconds(header) == seconds


def test_a_429_keeps_the_apiservers_retry_after(api):
    pool = api.rest_client.pool_manager
    pool.answer(429, {"kind": "Status", "message": "too many requests"}, reason="Too Many Requests",
                headers={"Retry-After": "2"})
    with pytest.raises(kc.ApiUnavailable) as caught:
        kc.request(api, "PATCH", PODS.path("ns", "p"), body={})
    assert caught.value.retry_after == 2.0 and caught.value.too_many_requests


def test_a_403_on_a_write_is_refused_for_good(api):
    pool = api.rest_client.pool_manager
    pool.answer(403, {"kind": "Status", "message": 'pods "p" is forbidden', "reason": "Forbidden"}, reason="Forbidden")
    with pytest.raises(kc.ApiRefused, match=r"PATCH /api/v1/namespaces/ns/pods/p: 403 pods \"p\" is forbidden"):
        kc.request(api, "PATCH", PODS.path("ns", "p"), body={})


# -- the Lease fence (issue 32 item 6) -------------------------------------------------------------


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
def test_a_fenced_thread_whose_lease_is_gone_sends_no_write(api, method):
    pool = api.rest_client.pool_manager
    with fence.fenced(LeaseFence(10.0)), pytest.raises(Fenced):  # never renewed: not held
        kc.request(api, method, PODS.path("ns", "p"), body={})
    assert pool.sent == []


def test_a_fenced_thread_still_reads_and_writes_while_the_lease_is_held(api):
    pool = api.rest_client.pool_manager
    held = LeaseFence(10.0)
    held.renewed(time.monotonic())
    lost = LeaseFence(10.0)
    with fence.fenced(lost):
        kc.request(api, "GET", PODS.path("ns", "p"))
    with fence.fenced(held):
        kc.request(api, "PATCH", PODS.path("ns", "p"), body={})
    assert [s["method"] for s in pool.sent] == ["GET", "PATCH"]


def test_a_protobuf_body_goes_out_as_its_bytes_and_a_protobuf_read_asks_for_protobuf(api):
    """``add_finalizer``'s path for a claim the apiserver will not merge-patch: the client's REST layer passes a
    bytes body of a non-JSON content type through as it is, and the read names protobuf in its Accept."""
    pool = api.rest_client.pool_manager
    pool.answer(200, b"k8s\x00\x0a\x00")
    resp = kc.open_request(api, "GET", PODS.path("ns", "p"), accept=kc.PROTOBUF)
    assert resp.read() == b"k8s\x00\x0a\x00"
    resp.release_conn()
    assert _headers(pool.sent[-1])["accept"] == kc.PROTOBUF
    pool.answer(200, {"kind": "Pod"})
    assert kc.request(api, "PUT", PODS.path("ns", "p"), body=b"k8s\x00\x0a\x00", content_type=kc.PROTOBUF) == {
        "kind": "Pod"}
    sent = pool.sent[-1]
    assert sent["method"] == "PUT" and sent["body"] == b"k8s\x00\x0a\x00"
    assert _headers(sent)["content-type"] == kc.PROTOBUF and _headers(sent)["accept"] == "application/json"


# -- what a tenant can make the apiserver store ------------------------------------------------------------------


def test_a_list_holding_an_integer_of_thousands_of_digits_decodes_exactly(api):
    """A claim's opaque parameters are free-form: the apiserver stores an integer of 9,000 digits, which
    ``json.loads`` refuses (Python's 4,300-digit limit) with a ValueError."""
    big = "7" * 9_000
    raw = ('{"kind":"ResourceClaimList","metadata":{"resourceVersion":"9"},"items":[{"metadata":{"name":"c"},'
           '"spec":{"devices":{"config":[{"opaque":{"driver":"d","parameters":{"n":' + big + '}}}]}}}]}').encode()
    api.rest_client.pool_manager.answer(200, raw)
    page = kc.request(api, "GET", "/apis/resource.k8s.io/v1/resourceclaims")
    params = page["items"][0]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
    assert params["n"] == 7 * (10 ** 9_000 - 1) // 9
    assert kc.decode_json("[1, -2, 30]") == [1, -2, 30]


def test_an_answer_that_does_not_decode_is_an_outage_never_an_empty_list(api):
    """A 200 whose body is not JSON once became ``{"message": ...}``: a list with no items, which a relist takes
    for every object gone (claims holding GPUs forgotten). It is a broken answer, retried."""
    api.rest_client.pool_manager.answer(200, b'{"kind":"PodList","items":[{"metadata":')
    with pytest.raises(kc.ConnectionFailed, match="does not decode"):
        kc.request(api, "GET", PODS.path("ns"))
    api.rest_client.pool_manager.answer(200, b"")
    assert kc.request(api, "GET", PODS.path("ns")) == {}
    # A proxy's page in the apiserver's place: no list of nothing either.
    api.rest_client.pool_manager.answer(200, b"<html>sign in</html>", headers={"Content-Type": "text/html"})
    with pytest.raises(kc.ConnectionFailed, match="does not decode"):
        kc.list_objects(api, PODS, "ns")
    # JSON is JSON whatever the answer calls it.
    api.rest_client.pool_manager.answer(200, b'{"kind":"PodList","items":[{"metadata":{"name":"a"}}]}',
                                        headers={"Content-Type": "text/plain"})
    assert [p["metadata"]["name"] for p in kc.list_objects(api, PODS, "ns")] == ["a"]


def test_a_plain_text_endpoint_is_read_as_text(api):
    """``/readyz`` answers "ok" in plain text: the recovery probe (``manager.apiserver_ready``) reads it so."""
    pool = api.rest_client.pool_manager
    pool.answer(200, b"ok", headers={"Content-Type": "text/plain; charset=utf-8"})
    assert kc.get_text(api, "/readyz", timeout=(1.0, 2.0)) == "ok"
    assert _headers(pool.sent[-1])["accept"].startswith("text/plain")
    pool.answer(500, b"[-]etcd failed", headers={"Content-Type": "text/plain"})
    with pytest.raises(kc.ApiError):
        kc.get_text(api, "/readyz")

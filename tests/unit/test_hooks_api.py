"""The hook API's HTTP contract: authentication, body validation, JSON errors, statuses."""

from __future__ import annotations

import pytest

from sunk.hooks.api import hooks_blueprint
from sunk.hooks.app import create_app
from sunk.hooks.auth import TokenFile, node_token
from sunk.hooks.protocol import HookError, PostHook, PreHook, Reboot

SECRET = "0f1e2d3c4b5a69788796a5b4c3d2e1f0-root-secret"


class FakeService:
    def __init__(self):
        self.calls: list[tuple[str, str, object]] = []
        self.is_ready = True
        self.fail: HookError | None = None

    def _call(self, name, node, request):
        self.calls.append((name, node, request))
        if self.fail:
            raise self.fail
        return {"node": node, "called": name}

    def pre_hook(self, node: str, request: PreHook):
        return self._call("pre", node, request)

    def post_hook(self, node: str, request: PostHook):
        return self._call("post", node, request)

    def reboot(self, node: str, request: Reboot):
        return self._call("reboot", node, request)

    def ready(self) -> bool:
        return self.is_ready


@pytest.fixture
def token_file(tmp_path):
    path = tmp_path / "token"
    path.write_text(SECRET + "\n")
    return path


@pytest.fixture
def service():
    return FakeService()


@pytest.fixture
def client(service, token_file):
    app = create_app(hooks_blueprint(service, TokenFile(token_file)))
    return app.test_client()


def auth(node: str = "node1", secret: str = SECRET) -> dict[str, str]:
    """What node ``node``'s prolog sends: that node's token, derived from the secret."""
    return {"Authorization": f"Bearer {node_token(secret.encode(), node)}"}


@pytest.mark.parametrize("path", ["pre-hook", "post-hook", "reboot"])
@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {SECRET}"},
                                     {"Authorization": "Bearer "}, {"Authorization": f"Bearer {SECRET}"},
                                     auth("node2"), {"Authorization": "Bearer \u00e9\u00e8"}],
                         ids=["none", "wrong", "basic", "empty", "the-secret-itself", "another-nodes-token",
                              "non-ascii"])
def test_every_api_endpoint_needs_the_token(client, service, path, headers):
    resp = client.post(f"/api/v1/nodes/node1/{path}", json={"job_id": 1}, headers=headers)
    assert resp.status_code == 401
    assert resp.is_json and "token" in resp.get_json()["error"]
    assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    assert service.calls == []


def test_pre_hook_passes_the_validated_request(client, service):
    body = {"job_id": 42, "strict": True, "job_extra": "x", "timeout": 12.5, "unknown": "ignored"}
    resp = client.post("/api/v1/nodes/node3/pre-hook", json=body, headers=auth("node3"))
    assert resp.status_code == 200, resp.get_json()
    assert resp.get_json() == {"node": "node3", "called": "pre"}
    assert service.calls == [("pre", "node3", PreHook(job_id=42, strict=True, timeout=12.5))]


@pytest.mark.parametrize("extra", [5, None, {"a": 1}, "x" * 200_000])
def test_whatever_an_older_prolog_sends_as_job_extra_is_ignored(client, service, extra):
    """A job's Extra is its user's: a refusal would fail the prolog and drain the node."""
    resp = client.post("/api/v1/nodes/node3/pre-hook", json={"job_id": 42, "job_extra": extra}, headers=auth("node3"))
    assert resp.status_code == 200, resp.get_json()
    assert service.calls == [("pre", "node3", PreHook(job_id=42))]


def test_a_body_that_is_not_utf8_is_read_not_refused(client, service):
    body = b'{"job_id": 42, "job_extra": "\xff\xfe\xc3 user bytes"}'
    resp = client.post("/api/v1/nodes/node3/pre-hook", data=body, headers=auth("node3"),
                       content_type="application/json")
    assert resp.status_code == 200, resp.get_json()
    assert service.calls == [("pre", "node3", PreHook(job_id=42))]


def test_pre_hook_defaults_and_quoted_job_id(client, service):
    resp = client.post("/api/v1/nodes/node3/pre-hook", json={"job_id": "7"}, headers=auth("node3"))
    assert resp.status_code == 200
    assert service.calls[-1][2] == PreHook(job_id=7, strict=False, timeout=None)


@pytest.mark.parametrize("body, fragment", [
    ({}, "job_id"),
    ({"job_id": 0}, "job_id"),
    ({"job_id": -3}, "job_id"),
    ({"job_id": True}, "job_id"),
    ({"job_id": "abc"}, "job_id"),
    ({"job_id": 1.5}, "job_id"),
    ({"job_id": 1, "strict": "yes"}, "strict"),
    ({"job_id": 1, "timeout": "10"}, "timeout"),
    ({"job_id": 1, "timeout": 0}, "timeout"),
    ({"job_id": 1, "timeout": -1}, "timeout"),
    ({"job_id": 1, "timeout": True}, "timeout"),
    ([1, 2], "JSON object"),
    ("job 1", "JSON object"),
])
def test_bad_pre_hook_bodies_get_400_json(client, service, body, fragment):
    resp = client.post("/api/v1/nodes/node1/pre-hook", json=body, headers=auth())
    assert resp.status_code == 400
    assert fragment in resp.get_json()["error"]
    assert service.calls == []


def test_not_json_and_empty_bodies(client, service):
    resp = client.post("/api/v1/nodes/node1/pre-hook", data="{job_id: 1", headers=auth())
    assert resp.status_code == 400 and "not valid JSON" in resp.get_json()["error"]
    resp = client.post("/api/v1/nodes/node1/pre-hook", headers=auth())
    assert resp.status_code == 400 and "JSON object" in resp.get_json()["error"]
    # reboot's body is optional
    resp = client.post("/api/v1/nodes/node1/reboot", headers=auth())
    assert resp.status_code == 200
    assert service.calls == [("reboot", "node1", Reboot(message=""))]


def test_bad_node_name_is_400(client, service):
    resp = client.post("/api/v1/nodes/..evil/pre-hook", json={"job_id": 1}, headers=auth())
    assert resp.status_code == 400 and "node name" in resp.get_json()["error"]
    assert service.calls == []


def test_service_errors_become_their_status_with_json_and_reason(client, service):
    service.fail = HookError(504, "not locked", reason="lock timeout after 5s: 1 Pod(s)", state="pending",
                             blocking_pods=[{"pod": "ns/p"}])
    resp = client.post("/api/v1/nodes/node1/pre-hook", json={"job_id": 1}, headers=auth())
    assert resp.status_code == 504
    assert resp.get_json() == {"error": "not locked", "reason": "lock timeout after 5s: 1 Pod(s)", "state": "pending",
                               "blocking_pods": [{"pod": "ns/p"}]}


def test_post_hook_is_202_and_reboot_message_is_bounded(client, service):
    resp = client.post("/api/v1/nodes/node2/post-hook", json={"job_id": 9}, headers=auth("node2"))
    assert resp.status_code == 202
    assert service.calls[-1] == ("post", "node2", PostHook(job_id=9))
    resp = client.post("/api/v1/nodes/node2/reboot", json={"message": "x" * 2000}, headers=auth("node2"))
    assert resp.status_code == 400 and "message" in resp.get_json()["error"]


def test_healthz_needs_no_token_and_follows_readiness(client, service):
    assert client.get("/healthz").status_code == 200
    service.is_ready = False
    resp = client.get("/healthz")
    assert resp.status_code == 503 and resp.get_json()["ok"] is False and "not ready" in resp.get_json()["error"]


def test_routing_errors_are_json(client):
    resp = client.get("/api/v1/nodes/node1/pre-hook", headers=auth())
    assert resp.status_code == 405 and resp.is_json
    resp = client.post("/api/v1/nodes/node1/nothing", headers=auth())
    assert resp.status_code == 404 and resp.is_json


def test_token_rotation_is_picked_up_and_missing_weak_or_empty_files_fail_closed(client, service, token_file):
    rotated = "a-rotated-root-secret-9876543210fedcba"
    token_file.write_text(rotated + "\n")
    assert client.post("/api/v1/nodes/n/post-hook", json={"job_id": 1}, headers=auth("n")).status_code == 401
    assert client.post("/api/v1/nodes/n/post-hook", json={"job_id": 1},
                       headers=auth("n", rotated)).status_code == 202
    token_file.unlink()
    resp = client.post("/api/v1/nodes/n/post-hook", json={"job_id": 1}, headers=auth("n", rotated))
    assert resp.status_code == 503 and resp.is_json
    for weak in ("", "REPLACE-ME", "short-secret", "a" * 64):
        token_file.write_text(weak)
        resp = client.post("/api/v1/nodes/n/post-hook", json={"job_id": 1}, headers=auth("n", weak or "x"))
        assert resp.status_code == 503, weak  # a weak secret authenticates nobody
    assert len(service.calls) == 1


def test_a_20_mib_body_is_a_json_413_and_reaches_no_service(client, service):
    """Measured before: a 20 MiB pre-hook body answered 200."""
    resp = client.post("/api/v1/nodes/node1/pre-hook", data=b'{"job_id": 1, "x": "' + b"x" * (20 << 20) + b'"}',
                       headers=auth(), content_type="application/json")
    assert resp.status_code == 413 and "larger than" in resp.get_json()["error"]
    assert service.calls == []


def test_a_bug_in_the_service_is_a_json_500(client, service):
    service.fail = RuntimeError("boom")  # not a HookError: a bug
    resp = client.post("/api/v1/nodes/node1/post-hook", json={"job_id": 1}, headers=auth())
    assert resp.status_code == 500 and resp.is_json and "internal error" in resp.get_json()["error"]


def test_a_busy_pre_hook_is_a_json_429_with_retry_after(client, service):
    service.fail = HookError(429, "too many pre-hooks waiting", reason="hook API busy", retry_after=1)
    resp = client.post("/api/v1/nodes/node1/pre-hook", json={"job_id": 1}, headers=auth())
    assert resp.status_code == 429 and resp.headers["Retry-After"] == "1"
    assert resp.get_json() == {"error": "too many pre-hooks waiting", "reason": "hook API busy", "retry_after": 1}

"""Nodes proving who they are with their slurmd Pod's ServiceAccount token (TokenReview), through the hook API."""

from __future__ import annotations

import base64
import json
import threading

import pytest
from test_hooks_api import SECRET, FakeService

from sunk.hooks.api import hooks_blueprint
from sunk.hooks.app import create_app
from sunk.hooks.auth import TokenFile, node_token
from sunk.hooks.nodeauth import NodeAuthenticator, PodTokenAuthenticator, ReviewCache, ReviewUnavailable
from sunk.hooks.protocol import HookError
from sunk.translate.podtoken import (
    EXTRA_NODE_NAME,
    EXTRA_POD_NAME,
    EXTRA_POD_UID,
    PodBinding,
    Refusal,
    binding_from_review,
    looks_like_jwt,
    pod_refusal,
    token_expiry,
)

AUDIENCE = "sunk-syncer"
NOW = 1_700_000_000.0


def jwt(pod_name: str = "node1", pod_uid: str = "uid-1", *, exp: float | None = NOW + 3600, namespace: str = "slurm",
        audience: str = AUDIENCE, node: str | None = "k8s-a", nonce: str = "") -> str:
    """A token with a projected one's claims (the signature is the apiserver's business, faked here);
    ``nonce`` tells apart tokens that claim the same."""
    def seg(obj: object) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")
    kubernetes = {"namespace": namespace, "pod": {"name": pod_name, "uid": pod_uid},
                  "serviceaccount": {"name": "slurmd", "uid": "sa-uid"},
                  **({"node": {"name": node, "uid": "node-uid"}} if node else {})}
    claims = {"aud": [audience], "sub": f"system:serviceaccount:{namespace}:slurmd", "kubernetes.io": kubernetes,
              "jti": nonce, **({} if exp is None else {"exp": exp})}
    return f"{seg({'alg': 'RS256'})}.{seg(claims)}.c2lnbmF0dXJl"


def pod(name: str, uid: str, *, hostname: str | None = None, node: str = "k8s-a", namespace: str = "slurm") -> dict:
    spec: dict = {"nodeName": node}
    if hostname:
        spec["hostname"] = hostname
    return {"metadata": {"name": name, "namespace": namespace, "uid": uid}, "spec": spec}


def authenticated(pod_name: str, pod_uid: str, *, namespace: str = "slurm", audiences=(AUDIENCE,),
                  node_name: str | None = "k8s-a") -> dict:
    extra = {EXTRA_POD_NAME: [pod_name], EXTRA_POD_UID: [pod_uid]}
    if node_name:
        extra[EXTRA_NODE_NAME] = [node_name]
    return {"authenticated": True, "audiences": list(audiences),
            "user": {"username": f"system:serviceaccount:{namespace}:slurmd", "uid": "sa-uid", "extra": extra}}


class FakeReviewer:
    """The apiserver's TokenReview: a verdict per token, or an outage; counts the calls."""

    def __init__(self):
        self.verdicts: dict[str, dict] = {}
        self.down = False
        self.calls: list[tuple[str, str]] = []

    def review(self, token: str, audience: str) -> dict:
        self.calls.append((token, audience))
        if self.down:
            raise ReviewUnavailable("POST /apis/authentication.k8s.io/v1/tokenreviews: connection refused")
        return self.verdicts.get(token, {"authenticated": False, "error": "invalid bearer token"})


class Clock:
    def __init__(self):
        self.now = NOW

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def world(tmp_path):
    """The hook API with both kinds of credential, a slurmd informer of two Pods and a fake apiserver."""
    token_file = tmp_path / "secret"
    token_file.write_text(SECRET)
    pods = {"slurm/node1": pod("node1", "uid-1"), "slurm/node2": pod("node2", "uid-2", node="k8s-b")}
    reviewer, clock, service = FakeReviewer(), Clock(), FakeService()
    pod_tokens = PodTokenAuthenticator(reviewer, audience=AUDIENCE, slurmd_namespace="slurm", slurmd_pod=pods.get,
                                       cache=ReviewCache(clock=clock), refusals=ReviewCache(clock=clock), clock=clock)
    app = create_app(hooks_blueprint(service, NodeAuthenticator(TokenFile(token_file), pod_tokens)))

    class World:
        pass

    w = World()
    w.pods, w.reviewer, w.clock, w.service, w.client = pods, reviewer, clock, service, app.test_client()
    w.token1 = jwt("node1", "uid-1")
    reviewer.verdicts[w.token1] = authenticated("node1", "uid-1")
    w.token2 = jwt("node2", "uid-2", node="k8s-b")
    reviewer.verdicts[w.token2] = authenticated("node2", "uid-2", node_name="k8s-b")

    def call(node: str, token: str, path: str = "post-hook"):
        return w.client.post(f"/api/v1/nodes/{node}/{path}", json={"job_id": 7},
                             headers={"Authorization": f"Bearer {token}"})
    w.call = call
    return w


def test_a_token_bound_to_the_nodes_slurmd_pod_opens_its_hooks(world):
    resp = world.call("node1", world.token1, "pre-hook")
    assert resp.status_code == 200, resp.get_json()
    assert world.service.calls[0][:2] == ("pre", "node1")
    assert world.reviewer.calls == [(world.token1, AUDIENCE)]


def test_a_token_of_another_nodes_pod_is_forbidden(world):
    resp = world.call("node1", world.token2)
    assert resp.status_code == 403 and resp.is_json
    assert "slurmd Pod of Slurm node node2, not of node1" in resp.get_json()["error"]
    assert world.service.calls == [] and world.reviewer.calls == []  # (its own claims said so: no review)


def test_made_up_tokens_never_reach_the_apiserver(world):
    """Any caller may send tokens by the thousand: only one whose own claims name this node's live slurmd Pod,
    for the sunk audience and unexpired, is worth a TokenReview."""
    made_up = [jwt("node1", "uid-guess", nonce=str(n)) for n in range(50)]  # the right Pod name, a wrong UID
    made_up += [jwt("node1", "uid-1", audience="other", nonce=str(n)) for n in range(50)]
    made_up += [jwt("node1", "uid-1", exp=NOW - 1, nonce=str(n)) for n in range(50)]
    made_up += [jwt("web-0", "uid-w", nonce=str(n)) for n in range(50)]
    made_up += ["a.b." + "c" * n for n in range(1, 51)]  # JWT-shaped, no claims at all
    for token in made_up:
        assert world.call("node1", token).status_code == 401
    assert world.reviewer.calls == []
    assert world.call("node1", world.token1).status_code == 202  # the node's own still opens it


def test_reviews_in_flight_are_bounded(world, monkeypatch):
    monkeypatch.setattr("sunk.hooks.nodeauth.REVIEW_SLOT_WAIT", 0.2)
    gate, entered = threading.Event(), []
    real = world.reviewer.review

    def slow(token, audience):
        entered.append(token)
        gate.wait(5)
        return real(token, audience)
    world.reviewer.review = slow
    tokens = [jwt("node1", "uid-1", nonce=str(n)) for n in range(9)]
    for token in tokens:
        world.reviewer.verdicts[token] = authenticated("node1", "uid-1")
    results: list[int] = []
    app = world.client.application

    def one(token):
        results.append(app.test_client().post("/api/v1/nodes/node1/post-hook", json={"job_id": 7},
                                              headers={"Authorization": f"Bearer {token}"}).status_code)
    threads = [threading.Thread(target=one, args=(token,)) for token in tokens]
    for t in threads[:8]:
        t.start()
    while len(entered) < 8:
        threading.Event().wait(0.01)
    threads[8].start()
    threads[8].join(5)
    assert results == [503]  # the ninth: every slot taken
    gate.set()
    for t in threads[:8]:
        t.join(10)
    assert sorted(results) == [202] * 8 + [503]


def test_a_token_for_another_audience_is_refused(world):
    token = jwt("node1", "uid-1", audience="https://kubernetes.default.svc")
    world.reviewer.verdicts[token] = authenticated("node1", "uid-1", audiences=("https://kubernetes.default.svc",))
    resp = world.call("node1", token)
    assert resp.status_code == 401 and "audience" in resp.get_json()["error"]
    assert resp.headers["WWW-Authenticate"].startswith("Bearer")


def test_a_token_the_apiserver_refuses_is_401(world):
    resp = world.call("node1", jwt("node1", "uid-1", nonce="forged"))
    assert resp.status_code == 401 and "refused by the apiserver" in resp.get_json()["error"]
    assert world.service.calls == []


def test_a_pod_the_informer_does_not_know_is_401_so_the_prolog_retries(world):
    token = jwt("web-0", "uid-w")
    world.reviewer.verdicts[token] = authenticated("web-0", "uid-w")
    resp = world.call("node1", token)
    assert resp.status_code == 401 and "not a slurmd Pod the Syncer knows" in resp.get_json()["error"]


def test_a_token_of_an_earlier_pod_of_the_same_name_is_refused(world):
    world.pods["slurm/node1"] = pod("node1", "uid-1-replacement")
    resp = world.call("node1", world.token1)
    assert resp.status_code == 401 and "earlier Pod slurm/node1" in resp.get_json()["error"]


def test_a_deleted_pod_loses_its_node_at_once_despite_the_cached_review(world):
    assert world.call("node1", world.token1).status_code == 202
    del world.pods["slurm/node1"]
    assert world.call("node1", world.token1).status_code == 401
    assert len(world.reviewer.calls) == 1  # the informer said no; the apiserver was not asked again


def test_a_pod_outside_the_slurmd_namespace_is_forbidden(world):
    token = jwt("node1", "uid-1", namespace="tenant")
    world.reviewer.verdicts[token] = authenticated("node1", "uid-1", namespace="tenant")
    world.pods["tenant/node1"] = pod("node1", "uid-1", namespace="tenant")
    resp = world.call("node1", token)
    assert resp.status_code == 403 and "slurmd namespace" in resp.get_json()["error"]


def test_the_slurm_node_is_the_pods_hostname_not_its_name(world):
    world.pods["slurm/ns-abc12"] = pod("ns-abc12", "uid-h", hostname="gpu-7")
    token = jwt("ns-abc12", "uid-h")
    world.reviewer.verdicts[token] = authenticated("ns-abc12", "uid-h")
    assert world.call("gpu-7", token).status_code == 202
    assert world.call("ns-abc12", token).status_code == 403


def test_a_token_issued_on_another_kubernetes_node_is_forbidden(world):
    token = jwt("node1", "uid-1", node="k8s-z")
    world.reviewer.verdicts[token] = authenticated("node1", "uid-1", node_name="k8s-z")
    assert world.call("node1", token).status_code == 403


def test_a_prolog_storm_makes_one_review_per_token(world):
    for _ in range(20):
        assert world.call("node1", world.token1).status_code == 202
    assert len(world.reviewer.calls) == 1


def test_concurrent_first_calls_share_one_review(world):
    gate = threading.Event()
    real = world.reviewer.review

    def slow(token, audience):
        gate.wait(5)
        return real(token, audience)
    world.reviewer.review = slow
    results: list[int] = []
    app_client = world.client.application

    def one():
        results.append(app_client.test_client().post(
            "/api/v1/nodes/node1/post-hook", json={"job_id": 7},
            headers={"Authorization": f"Bearer {world.token1}"}).status_code)
    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join(10)
    assert results == [202] * 8
    assert len(world.reviewer.calls) == 1


def test_a_cached_review_expires_after_five_minutes(world):
    assert world.call("node1", world.token1).status_code == 202
    world.clock.now += 299
    assert world.call("node1", world.token1).status_code == 202
    assert len(world.reviewer.calls) == 1
    world.clock.now += 2
    assert world.call("node1", world.token1).status_code == 202
    assert len(world.reviewer.calls) == 2


def test_a_cached_review_ends_with_the_token(world):
    token = jwt("node1", "uid-1", exp=NOW + 60, nonce="short")
    world.reviewer.verdicts[token] = authenticated("node1", "uid-1")
    assert world.call("node1", token).status_code == 202
    world.clock.now += 61
    resp = world.call("node1", token)
    assert resp.status_code == 401 and "expired" in resp.get_json()["error"]
    assert len(world.reviewer.calls) == 1  # (its own exp says so: no review)


def test_refusals_are_cached_briefly(world):
    bad = jwt("node1", "uid-1", nonce="bad")
    for _ in range(5):
        assert world.call("node1", bad).status_code == 401
    assert len(world.reviewer.calls) == 1
    world.clock.now += 11
    assert world.call("node1", bad).status_code == 401
    assert len(world.reviewer.calls) == 2


def test_a_review_outage_is_503_and_not_cached(world):
    world.reviewer.down = True
    resp = world.call("node1", world.token1, "pre-hook")
    assert resp.status_code == 503 and resp.is_json and "TokenReview" in resp.get_json()["error"]
    assert world.service.calls == []
    world.reviewer.down = False
    assert world.call("node1", world.token1, "pre-hook").status_code == 200


def test_the_legacy_hmac_token_still_opens_its_node_only(world):
    assert world.call("node1", node_token(SECRET.encode(), "node1")).status_code == 202
    assert world.call("node2", node_token(SECRET.encode(), "node1")).status_code == 401
    assert world.reviewer.calls == []


def test_without_pod_tokens_a_jwt_is_just_a_wrong_token(tmp_path):
    token_file = tmp_path / "secret"
    token_file.write_text(SECRET)
    app = create_app(hooks_blueprint(FakeService(), NodeAuthenticator(TokenFile(token_file))))
    resp = app.test_client().post("/api/v1/nodes/node1/post-hook", json={"job_id": 7},
                                  headers={"Authorization": f"Bearer {jwt(nonce='x')}"})
    assert resp.status_code == 401


def test_the_cache_is_bounded_least_recently_used_out():
    clock = Clock()
    cache = ReviewCache(max_entries=2, clock=clock)
    binding = PodBinding("slurm", "slurmd", "node1", "uid-1")
    cache.put("a", binding, None)
    cache.put("b", binding, None)
    assert cache.get("a") == binding  # a is now the most recent
    cache.put("c", binding, None)
    assert len(cache) == 2 and cache.get("b") is None and cache.get("a") == binding


def test_an_expired_token_is_not_cached():
    cache = ReviewCache(clock=Clock())
    cache.put("a", PodBinding("slurm", "slurmd", "node1", "uid-1"), NOW - 1)
    assert cache.get("a") is None and len(cache) == 0


# ---- the pure part: sunk.translate.podtoken -----------------------------------------------------


@pytest.mark.parametrize("status, why", [
    (None, "refused"),
    ({"authenticated": "true"}, "refused"),
    ({"authenticated": True}, "audience"),
    ({"authenticated": True, "audiences": [AUDIENCE], "user": {"username": "alice"}}, "ServiceAccount"),
    ({"authenticated": True, "audiences": [AUDIENCE], "user": {"username": "system:serviceaccount:slurm"}},
     "ServiceAccount"),
    ({"authenticated": True, "audiences": [AUDIENCE], "user": {"username": "system:serviceaccount:slurm:sd"}},
     "not bound to a Pod"),
    ({"authenticated": True, "audiences": [AUDIENCE], "user": {"username": "system:serviceaccount:slurm:sd",
                                                              "extra": {EXTRA_POD_NAME: ["a", "b"],
                                                                        EXTRA_POD_UID: ["u"]}}},
     "not bound to a Pod"),
    ({"authenticated": True, "audiences": [AUDIENCE], "user": {"username": "system:serviceaccount:slurm:sd",
                                                              "extra": "junk"}}, "not bound to a Pod"),
])
def test_reviews_that_vouch_for_no_pod_are_refusals(status, why):
    outcome = binding_from_review(status, AUDIENCE)
    assert isinstance(outcome, Refusal) and outcome.status == 401 and why in outcome.why


def test_a_review_that_vouches_names_the_pod():
    assert binding_from_review(authenticated("node1", "uid-1"), AUDIENCE) == PodBinding(
        namespace="slurm", service_account="slurmd", pod_name="node1", pod_uid="uid-1", node_name="k8s-a")


def test_a_pod_of_its_own_node_is_no_refusal():
    binding = PodBinding("slurm", "slurmd", "node1", "uid-1")
    assert pod_refusal(binding, pod("node1", "uid-1"), "node1", "slurm") is None


@pytest.mark.parametrize("token, expected", [
    (jwt(nonce="x"), True), (node_token(SECRET.encode(), "n"), False), ("a.b", False), ("a..c", False),
    ("a.b.c d", False), ("é.b.c", False), ("a.b.c" + "x" * 20000, False),
])
def test_what_counts_as_a_service_account_token(token, expected):
    assert looks_like_jwt(token) is expected


@pytest.mark.parametrize("token, expected", [
    (jwt(exp=NOW + 5), NOW + 5), (jwt(exp=None), None), ("a.!!!.c", None), ("nodots", None),
    ("a." + base64.urlsafe_b64encode(b'{"exp": true}').decode() + ".c", None),
    ("a." + base64.urlsafe_b64encode(b'[1]').decode() + ".c", None),
])
def test_token_expiry(token, expected):
    assert token_expiry(token) == expected


def test_without_a_secret_no_hmac_token_opens_a_node(world):
    pod_only = NodeAuthenticator(None, PodTokenAuthenticator(world.reviewer, audience=AUDIENCE,
                                                             slurmd_namespace="slurm", slurmd_pod=world.pods.get,
                                                             clock=world.clock))
    with pytest.raises(HookError) as refused:
        pod_only.check("node1", node_token(SECRET.encode(), "node1"))
    assert refused.value.status == 401
    pod_only.check("node1", world.token1)  # the node's own Pod token still opens it

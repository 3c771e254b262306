"""sunk/kube/protowire.py and ``client.add_finalizer``: a finalizer added to a ResourceClaim whose opaque parameters
keep their creator's spacing, which the apiserver refuses to merge-patch ("spec: field is immutable")."""

from __future__ import annotations

from typing import Any

import pytest

from sunk.kube import client, protowire
from sunk.kube.resources import RESOURCECLAIMS

# A ResourceClaim as kube-apiserver 1.34 sent it (GET, Accept: application/vnd.kubernetes.protobuf), created from
# Python's json.dumps: its config's parameters are stored as sent, '{"mode": "x"}', space and all.
SPACED = bytes.fromhex(
    "6b3873000a230a127265736f757263652e6b38732e696f2f7631120d5265736f75726365436c61696d12a7020ac9010a0673"
    "706163656412001a077261777465737422002a2432633266323737362d613132662d346334652d623932302d323262323237"
    "36323739313432063231353936363800420808b3b3bdd80610008a01770a076b75626563746c12065570646174651a127265"
    "736f757263652e6b38732e696f2f7631220808b3b3bdd806100032084669656c647356313a3a0a387b22663a73706563223a"
    "7b22663a64657669636573223a7b22663a636f6e666967223a7b7d2c22663a7265717565737473223a7b7d7d7d7d42001257"
    "0a550a240a0467707573121c0a0c6770752e73756e6b2e6465761a0a4578616374436f756e7420011a2d122b0a290a167465"
    "73742d6472697665722e6364692e6b38732e696f120f0a0d7b226d6f6465223a202278227d1a001a002200")


def test_the_captured_claim_reads_as_the_apiserver_wrote_it():
    assert protowire.finalizers(SPACED) == [] and protowire.resource_version(SPACED) == "215966"
    assert b'{"mode": "x"}' in SPACED


def test_a_finalizer_is_appended_and_every_other_byte_kept():
    once = protowire.with_finalizer(SPACED, "resource.kubernetes.io/delete-protection")
    twice = protowire.with_finalizer(once, "example.com/second")
    assert protowire.finalizers(twice) == ["resource.kubernetes.io/delete-protection", "example.com/second"]
    assert protowire.resource_version(twice) == "215966"
    assert b'{"mode": "x"}' in twice and b"ExactCount" in twice and b"kubectl" in twice
    # The only change is the entry: the claim's own bytes, cut around the metadata, are the same.
    tail = SPACED[SPACED.index(b"gpus") - 8:]
    assert twice.endswith(tail)


@pytest.mark.parametrize("broken", [b"", b"{}", SPACED[4:], SPACED[:60], b"k8s\x00\x0a\xff"])
def test_bytes_that_are_not_the_envelope_are_refused_not_rewritten(broken):
    with pytest.raises(protowire.WireError):
        protowire.with_finalizer(broken, "example.com/x")


CLAIM = {"metadata": {"name": "c", "namespace": "ns", "resourceVersion": "215966", "finalizers": ["a/b"]}}


def test_a_merge_patch_adds_the_finalizer_when_the_apiserver_takes_it(monkeypatch):
    sent: list[Any] = []
    monkeypatch.setattr(client, "patch", lambda api, resource, name, body, namespace=None: sent.append(body) or {
        "metadata": {**CLAIM["metadata"], **body["metadata"]}})
    written = client.add_finalizer(None, RESOURCECLAIMS, CLAIM, "x/y")
    assert sent == [{"metadata": {"resourceVersion": "215966", "finalizers": ["a/b", "x/y"]}}]
    assert written["metadata"]["finalizers"] == ["a/b", "x/y"]


class _Response:
    def __init__(self, body: bytes):
        self.body = body

    def read(self) -> bytes:
        return self.body

    def release_conn(self) -> None:
        pass


def refuse_as_immutable(*_args: Any, **_kw: Any) -> Any:
    raise client.ApiError(422, "Unprocessable Entity", {"message": "ResourceClaim \"c\" is invalid: spec: Invalid "
                                                                   "value: {...}: field is immutable"})


def test_a_claim_the_apiserver_will_not_patch_gets_its_finalizer_in_protobuf(monkeypatch):
    monkeypatch.setattr(client, "patch", refuse_as_immutable)
    monkeypatch.setattr(client, "open_request", lambda api, method, path, accept: _Response(SPACED))
    puts: list[tuple[str, bytes, str]] = []
    monkeypatch.setattr(client, "request", lambda api, method, path, body, content_type: puts.append(
        (path, body, content_type)) or {"metadata": {"finalizers": protowire.finalizers(body)}})
    written = client.add_finalizer(None, RESOURCECLAIMS, CLAIM, "x/y")
    ((path, body, content_type),) = puts
    assert path == "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c" and content_type == client.PROTOBUF
    assert body == protowire.with_finalizer(SPACED, "x/y") and written["metadata"]["finalizers"] == ["x/y"]


def test_a_claim_changed_since_it_was_read_is_a_conflict_not_a_write(monkeypatch):
    monkeypatch.setattr(client, "patch", refuse_as_immutable)
    monkeypatch.setattr(client, "open_request", lambda api, method, path, accept: _Response(SPACED))
    monkeypatch.setattr(client, "request", lambda *a, **k: pytest.fail("written"))
    stale = {"metadata": {**CLAIM["metadata"], "resourceVersion": "1"}}
    with pytest.raises(client.ApiError) as raised:
        client.add_finalizer(None, RESOURCECLAIMS, stale, "x/y")
    assert raised.value.conflict


def test_any_other_refusal_is_raised_as_it_came(monkeypatch):
    def forbidden(*_a: Any, **_k: Any) -> Any:
        raise client.ApiError(403, "Forbidden", {"message": "no"})

    monkeypatch.setattr(client, "patch", forbidden)
    monkeypatch.setattr(client, "open_request", lambda *a, **k: pytest.fail("read"))
    with pytest.raises(client.ApiError) as raised:
        client.add_finalizer(None, RESOURCECLAIMS, CLAIM, "x/y")
    assert raised.value.status == 403

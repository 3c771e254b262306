"""Which Slurm node a slurmd Pod's ServiceAccount token speaks for: pure checks, no I/O.

Why Pod-bound tokens: the kubelet projects a token bound to the slurmd Pod into the Pod
(``serviceAccountToken`` volume, a sunk audience) and rotates it in place; the apiserver
checks it (TokenReview) and tells who it is bound to. No per-node Secret to make, nothing
shared between nodes, and a rotation needs nothing: the old token stays valid to its expiry.

The apiserver says *which Pod* (``status.user.extra``); this module says whether that Pod,
as the Syncer's own informer shows it now, is the slurmd Pod of the Slurm node in the
request's path. Every field here comes from a token somebody presented: checked, never
trusted for more than the apiserver vouched for.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

import attrs

from .slurmd import k8s_node_name, slurm_node_name

Obj = Mapping[str, Any]

DEFAULT_AUDIENCE = "sunk-syncer"
EXTRA_POD_NAME = "authentication.kubernetes.io/pod-name"
EXTRA_POD_UID = "authentication.kubernetes.io/pod-uid"
EXTRA_NODE_NAME = "authentication.kubernetes.io/node-name"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
MAX_TOKEN_BYTES = 16 * 1024  # a projected token is about 1 KiB; more is not one


@attrs.frozen
class PodBinding:
    """What the apiserver vouched for: a ServiceAccount token bound to one Pod."""

    namespace: str
    service_account: str
    pod_name: str
    pod_uid: str
    node_name: str | None = None  # the Kubernetes Node, when the apiserver says it (1.30+)


@attrs.frozen
class Refusal:
    """Why a token does not open a node's hooks: 401 (not a usable credential, or not yet:
    the prolog retries it) or 403 (a valid credential of something else: it never will)."""

    status: int
    why: str


def looks_like_jwt(token: str) -> bool:
    """Three base64url segments: a ServiceAccount token, not a legacy HMAC node token (hex)."""
    parts = token.split(".")
    return (len(parts) == 3 and all(parts) and len(token) <= MAX_TOKEN_BYTES
            and all(c.isascii() and (c.isalnum() or c in "-_=") for c in token.replace(".", "")))


def unverified_claims(token: str) -> Obj:
    """A JWT's claims, read without checking its signature ({} when they cannot be read): never a
    credential, only a filter (``claimed_binding``) or, once the apiserver vouched, a cache bound."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError, TypeError, RecursionError):
        return {}
    return claims if isinstance(claims, dict) else {}


def token_expiry(token: str) -> float | None:
    """The ``exp`` claim of a JWT, read without checking its signature: only once the apiserver
    accepted the token (so its claims are the apiserver's own), and only to bound a cache."""
    exp = unverified_claims(token).get("exp")
    return float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None


def claimed_binding(token: str, audience: str, now: float) -> PodBinding | Refusal:
    """What a token *claims* (unverified): the Pod a projected ServiceAccount token names in its
    ``kubernetes.io`` claims, for the audience, not expired. Only a token whose claims already name
    a live slurmd Pod of the node (``pod_refusal``) is worth a TokenReview: without this filter any
    caller could make the Syncer review one made-up token after another (each an apiserver call,
    each a hook-API thread for seconds) and starve every node's prolog."""
    claims = unverified_claims(token)
    aud = claims.get("aud")
    audiences = aud if isinstance(aud, list) else [aud]
    if audience not in audiences:
        return Refusal(401, f"the token is not meant for audience {audience}")
    exp = claims.get("exp")
    if not isinstance(exp, int | float) or isinstance(exp, bool) or exp <= now:
        return Refusal(401, "the token has expired (or says no expiry)")
    kubernetes = _mapping(claims.get("kubernetes.io"))
    pod = _mapping(kubernetes.get("pod"))
    namespace, name, uid = kubernetes.get("namespace"), pod.get("name"), pod.get("uid")
    account = _mapping(kubernetes.get("serviceaccount")).get("name")
    if not all(isinstance(v, str) and v for v in (namespace, name, uid)):
        return Refusal(401, "the token is not bound to a Pod (mount a projected serviceAccountToken)")
    node = _mapping(kubernetes.get("node")).get("name")
    return PodBinding(namespace=str(namespace), service_account=str(account or ""), pod_name=str(name),
                      pod_uid=str(uid), node_name=str(node) if isinstance(node, str) and node else None)


def _mapping(value: object) -> Obj:
    return value if isinstance(value, Mapping) else {}


def _one(extra: Obj, key: str) -> str | None:
    value = extra.get(key)
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str) and value[0]:
        return value[0]
    return None


def binding_from_review(status: object, audience: str) -> PodBinding | Refusal:
    """A TokenReview's ``status`` (asked with ``spec.audiences: [audience]``) as the Pod the token
    is bound to, or why it is no node's credential."""
    if not isinstance(status, Mapping) or status.get("authenticated") is not True:
        error = status.get("error") if isinstance(status, Mapping) else None
        return Refusal(401, "the token was refused by the apiserver" + (f": {str(error)[:160]}" if error else ""))
    audiences = status.get("audiences")
    if not isinstance(audiences, list) or audience not in audiences:
        return Refusal(401, f"the token is not meant for audience {audience}")
    user = _mapping(status.get("user"))
    username = str(user.get("username") or "")
    namespace, _, account = username.removeprefix(SERVICE_ACCOUNT_PREFIX).partition(":")
    if not username.startswith(SERVICE_ACCOUNT_PREFIX) or not namespace or not account:
        return Refusal(401, "the token is not a ServiceAccount's")
    extra = _mapping(user.get("extra"))
    pod_name, pod_uid = _one(extra, EXTRA_POD_NAME), _one(extra, EXTRA_POD_UID)
    if pod_name is None or pod_uid is None:
        return Refusal(401, "the token is not bound to a Pod (mount a projected serviceAccountToken)")
    return PodBinding(namespace=namespace, service_account=account, pod_name=pod_name, pod_uid=pod_uid,
                      node_name=_one(extra, EXTRA_NODE_NAME))


def pod_refusal(binding: PodBinding, pod: Obj | None, slurm_node: str, slurmd_namespace: str) -> Refusal | None:
    """Why the Pod ``binding`` names may not act for ``slurm_node`` (None: it may). ``pod`` is the
    slurmd Pod of that namespace and name as the Syncer's slurmd informer has it (None: none)."""
    who = f"Pod {binding.namespace}/{binding.pod_name}"
    if binding.namespace != slurmd_namespace:
        return Refusal(403, f"{who} is not in the slurmd namespace {slurmd_namespace}")
    if pod is None:  # deleted, not a slurmd Pod, or not seen yet (a new Pod): the prolog retries a 401
        return Refusal(401, f"{who} is not a slurmd Pod the Syncer knows")
    meta = pod.get("metadata") or {}
    if meta.get("uid") != binding.pod_uid:
        return Refusal(401, f"the token is bound to an earlier {who}, not the one running now")
    if binding.node_name is not None and k8s_node_name(pod) not in (None, binding.node_name):
        return Refusal(403, f"the token was issued on Node {binding.node_name}, but {who} runs elsewhere")
    owner = slurm_node_name(pod)
    if owner != slurm_node:
        return Refusal(403, f"{who} is the slurmd Pod of Slurm node {owner}, not of {slurm_node}")
    return None

"""Who may call node N's hooks: N's slurmd Pod (a Pod-bound ServiceAccount token), or N's legacy HMAC token.

A projected ServiceAccount token is checked by the apiserver (TokenReview, with the sunk
audience), then against the Syncer's own slurmd informer (``sunk.translate.podtoken``): the
Pod it is bound to exists with that UID and is Slurm node N's slurmd Pod. The informer check
runs on every call; only the apiserver's answer is cached, by the token's SHA-256 (never the
token), for min(its expiry, 5 minutes) when it vouched and 10 seconds when it refused, in an
LRU of bounded size. So a prolog storm costs one TokenReview per node per period, and a storm
of bad tokens none at all: a token is reviewed only when its own (unverified) claims already
name, for the sunk audience and unexpired, the live slurmd Pod of the node in the path
(``claimed_binding``), which made-up tokens do not. Reviews in flight are bounded
(``MAX_REVIEWS``; more wait briefly, then 503), refusals are cached apart from the vouched
tokens (so refusals never push a node's binding out), and concurrent first calls with one
token share one review.

A TokenReview that cannot be made (apiserver down, the Syncer not allowed to) is a 503: the
prolog retries it and, at worst, drains with a reason the Syncer lifts; never a 401, which
would read as "this node's credential is wrong".

A legacy HMAC node token (hex, ``auth.py``) still opens its node: installs that made per-node
Secrets keep working.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import attrs
from kubernetes.client import ApiClient

from sunk.kube import client as kc
from sunk.kube.resources import TOKENREVIEWS
from sunk.translate.podtoken import (
    PodBinding,
    Refusal,
    binding_from_review,
    claimed_binding,
    looks_like_jwt,
    pod_refusal,
    token_expiry,
)

from .auth import TokenFile, TokenUnavailable
from .protocol import HookError

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]
REVIEW_TIMEOUT = (3.0, 10.0)  # connect, read: the prolog retries a 503 within its own deadline
MAX_REVIEWS = 8  # TokenReviews in flight at once; one per node per 5 minutes is the steady state
REVIEW_SLOT_WAIT = 2.0  # seconds a call waits for a review slot before its 503
LOG_EVERY = 30.0


class ReviewUnavailable(Exception):
    """No answer from the apiserver's TokenReview (down, timing out, or refusing the Syncer)."""


class TokenReviewer(Protocol):
    def review(self, token: str, audience: str) -> Obj:
        """The TokenReview's ``status``; raises ReviewUnavailable when there is none."""
        ...


@attrs.frozen
class KubeTokenReviewer:
    """TokenReview (authentication.k8s.io/v1) through the Syncer's own client."""

    api: ApiClient

    def review(self, token: str, audience: str) -> Obj:
        body = {"apiVersion": TOKENREVIEWS.api_version, "kind": "TokenReview",
                "spec": {"token": token, "audiences": [audience]}}
        try:
            answer = kc.request(self.api, "POST", TOKENREVIEWS.path(), body=body, timeout=REVIEW_TIMEOUT)
        except kc.KubeError as exc:  # (its text names the method and path, never the body)
            raise ReviewUnavailable(str(exc)) from None
        status = answer.get("status")
        return status if isinstance(status, Mapping) else {}


@attrs.frozen
class _Cached:
    until: float
    outcome: PodBinding | Refusal


class ReviewCache:
    """The apiserver's verdicts by token digest: bounded in time and in size (least recently used out)."""

    def __init__(self, *, max_entries: int = 4096, ok_ttl: float = 300.0, refused_ttl: float = 10.0,
                 clock: Callable[[], float] = time.time):
        self.max_entries, self.ok_ttl, self.refused_ttl, self.clock = max_entries, ok_ttl, refused_ttl, clock
        self._entries: OrderedDict[str, _Cached] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, digest: str) -> PodBinding | Refusal | None:
        with self._lock:
            entry = self._entries.get(digest)
            if entry is None:
                return None
            if entry.until <= self.clock():
                del self._entries[digest]
                return None
            self._entries.move_to_end(digest)
            return entry.outcome

    def put(self, digest: str, outcome: PodBinding | Refusal, expiry: float | None) -> None:
        now = self.clock()
        ttl = self.refused_ttl if isinstance(outcome, Refusal) else self.ok_ttl
        until = now + ttl if expiry is None else min(now + ttl, expiry)
        if until <= now:
            return
        with self._lock:
            self._entries[digest] = _Cached(until, outcome)
            self._entries.move_to_end(digest)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


class PodTokenAuthenticator:
    """Node N's hooks open to a token bound to N's slurmd Pod (module docstring)."""

    def __init__(self, reviewer: TokenReviewer, *, audience: str, slurmd_namespace: str,
                 slurmd_pod: Callable[[str], Obj | None], cache: ReviewCache | None = None,
                 refusals: ReviewCache | None = None, clock: Callable[[], float] = time.time):
        self.reviewer, self.audience, self.slurmd_namespace = reviewer, audience, slurmd_namespace
        self.slurmd_pod = slurmd_pod  # "namespace/name" -> the slurmd informer's Pod, or None
        self.cache = cache if cache is not None else ReviewCache()
        self.refusals = refusals if refusals is not None else ReviewCache(max_entries=1024)
        self.clock = clock
        self._inflight: dict[str, threading.Lock] = {}
        self._inflight_lock = threading.Lock()
        self._review_slots = threading.BoundedSemaphore(MAX_REVIEWS)
        self._logged_at = -LOG_EVERY

    def binding(self, token: str) -> PodBinding | Refusal:
        """The apiserver's verdict on ``token``, from the cache or one review shared by concurrent callers."""
        digest = hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()
        cached = self.cache.get(digest) or self.refusals.get(digest)
        if cached is not None:
            return cached
        with self._inflight_lock:
            lock = self._inflight.setdefault(digest, threading.Lock())
        try:
            with lock:
                cached = self.cache.get(digest) or self.refusals.get(digest)  # (a concurrent caller reviewed it)
                if cached is not None:
                    return cached
                if not self._review_slots.acquire(timeout=REVIEW_SLOT_WAIT):
                    raise ReviewUnavailable(f"{MAX_REVIEWS} TokenReviews already in flight")
                try:
                    outcome = binding_from_review(self.reviewer.review(token, self.audience), self.audience)
                finally:
                    self._review_slots.release()
                if isinstance(outcome, PodBinding):
                    self.cache.put(digest, outcome, token_expiry(token))
                else:
                    self.refusals.put(digest, outcome, None)
                return outcome
        finally:
            with self._inflight_lock:
                if self._inflight.get(digest) is lock and not lock.locked():
                    del self._inflight[digest]

    def check(self, node: str, token: str) -> None:
        """Return when ``token`` may act for Slurm node ``node``; HookError (401, 403, 503) when not."""
        claimed = claimed_binding(token, self.audience, self.clock())
        if isinstance(claimed, PodBinding):
            claimed = pod_refusal(claimed, self.slurmd_pod(f"{claimed.namespace}/{claimed.pod_name}"), node,
                                  self.slurmd_namespace) or claimed
        if isinstance(claimed, Refusal):  # (no review: the token does not even claim to be this node's)
            raise HookError(claimed.status, f"bearer token refused for Slurm node {node}: {claimed.why}")
        try:
            outcome = self.binding(token)
        except ReviewUnavailable as exc:
            now = time.monotonic()
            if now - self._logged_at >= LOG_EVERY:
                self._logged_at = now
                log.error("TokenReview failed, hook calls with ServiceAccount tokens wait for it: %s", exc)
            raise HookError(503, "cannot check the token now: the Kubernetes TokenReview failed",
                            reason="hook API cannot reach the Kubernetes apiserver (TokenReview)") from None
        if isinstance(outcome, PodBinding):
            key = f"{outcome.namespace}/{outcome.pod_name}"
            refusal = pod_refusal(outcome, self.slurmd_pod(key), node, self.slurmd_namespace)
            if refusal is None:
                return
            outcome = refusal
        raise HookError(outcome.status, f"bearer token refused for Slurm node {node}: {outcome.why}")


class NodeAuthenticator:
    """The hook API's one question: may this bearer token act for Slurm node N?"""

    def __init__(self, hmac_tokens: TokenFile | None, pod_tokens: PodTokenAuthenticator | None = None):
        if hmac_tokens is None and pod_tokens is None:
            raise ValueError("the hook API needs at least one way to authenticate nodes")
        self.hmac_tokens, self.pod_tokens = hmac_tokens, pod_tokens

    def check(self, node: str, presented: str) -> None:
        if self.pod_tokens is not None and looks_like_jwt(presented):
            self.pod_tokens.check(node, presented)
            return
        if self.hmac_tokens is None:
            raise HookError(401, f"wrong bearer token for Slurm node {node} (expected a ServiceAccount token)")
        try:
            ok = self.hmac_tokens.matches(node, presented)
        except TokenUnavailable as exc:
            log.error("hook API token unavailable: %s", exc)
            raise HookError(503, "the hook API's token is not configured on the server") from None
        if not ok:
            raise HookError(401, f"wrong bearer token for Slurm node {node}")

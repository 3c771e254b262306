"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's algorithm and defaults.

Why: two replicas must never both write to Slurm or Kubernetes. Safety comes from
timing: the leader gives up after ``renew_deadline`` without a successful renewal, while
a candidate takes over only after it has watched the same record go unrenewed for
``lease_duration`` on its *own* clock (remote timestamps are never trusted, so clock
skew between machines does not matter). ``renew_deadline < lease_duration`` leaves a
gap in which nobody leads rather than two.

Writes use the Lease's resourceVersion, so of two candidates racing for an expired
lease exactly one wins; the other sees 409 Conflict and keeps waiting.

Losing the lease ends leadership for good: ``run()`` returns and ``on_stopped_leading``
fires. The process is expected to exit; all state lives in Kubernetes and Slurm, so the
next process resumes by relisting.
"""

from __future__ import annotations

import logging
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

import attrs
from kubernetes.client import ApiClient

from sunk.base.fence import LeaseFence
from sunk.kube import client as kc
from sunk.kube.resources import LEASES
from sunk.model.types import Obj

log = logging.getLogger(__name__)


def micro_time(ts: float | None = None) -> str:
    """A Kubernetes MicroTime: RFC 3339 with microseconds."""
    return datetime.fromtimestamp(time.time() if ts is None else ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def default_identity() -> str:
    """Hostname plus a random suffix, as controller-runtime does: unique across restarts."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


@attrs.frozen
class LeaderElectionConfig:
    lease_name: str
    namespace: str
    identity: str = attrs.field(factory=default_identity)
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    release_on_cancel: bool = True

    def __attrs_post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError("need 0 < retry_period < renew_deadline < lease_duration")


class LeaderElector:
    """Campaign for a Lease, then keep renewing it until lost or stopped.

    Callbacks: ``on_started_leading()`` runs in its own thread (so slow start-up cannot
    delay renewals); ``on_stopped_leading()`` runs on the elector thread once leadership
    has ended, whether lost or released; ``on_new_leader(identity)`` when the observed
    holder changes.
    """

    def __init__(
        self,
        api_client: ApiClient,
        config: LeaderElectionConfig,
        *,
        on_started_leading: Callable[[], None] | None = None,
        on_stopped_leading: Callable[[], None] | None = None,
        on_new_leader: Callable[[str], None] | None = None,
        fence: LeaseFence | None = None,
    ):
        self.api = api_client
        self.config = config
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self.on_new_leader = on_new_leader
        self.fence = fence  # renewed with each acquire or renewal, revoked when leadership ends
        self._stop = threading.Event()
        self._leading = threading.Event()
        self._done = threading.Event()
        self._lease: Obj | None = None  # last lease we wrote or read
        self._observed_spec: Obj | None = None
        self._observed_at = 0.0  # monotonic time we first saw _observed_spec
        self._last_renew = 0.0  # monotonic time of our last successful write as leader
        self._thread: threading.Thread | None = None
        self.lost = False  # True once leadership ended without stop() being asked
        self._release_on_stop = config.release_on_cancel

    # ---- public -----------------------------------------------------------------------

    @property
    def identity(self) -> str:
        return self.config.identity

    def is_leader(self) -> bool:
        return self._leading.is_set()

    def wait_for_leading(self, timeout: float | None = None) -> bool:
        return self._leading.wait(timeout)

    def wait_done(self, timeout: float | None = None) -> bool:
        """Wait until the elector has finished (leadership lost or stop() completed)."""
        return self._done.wait(timeout)

    @property
    def leader(self) -> str:
        """The holder identity last observed ("" when none)."""
        return str((self._observed_spec or {}).get("holderIdentity") or "")

    def healthy(self, grace: float = 20.0) -> bool:
        """For /healthz: False if we believe we lead but have not renewed for far too long."""
        if not self.is_leader():
            return True
        return time.monotonic() - self._last_renew <= self.config.lease_duration + grace

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("elector already started")
        self._thread = threading.Thread(target=self.run, name=f"leader-{self.config.lease_name}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = 10.0, *, release: bool | None = None) -> None:
        """Stop campaigning/renewing. Releases the lease if leading (unless ``release=False``)."""
        if release is not None:
            self._release_on_stop = release
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def run(self) -> None:
        """Blocking: campaign, lead until lost or stopped, then return."""
        try:
            if self._acquire():
                self._renew_loop()
        finally:
            if self.fence is not None:
                self.fence.revoke()
            was_leading = self._leading.is_set()
            self._leading.clear()
            if was_leading:
                if self._stop.is_set() and self._release_on_stop:
                    self._release()
                if not self._stop.is_set():
                    self.lost = True
                    log.error("leader election: lost lease %s/%s", self.config.namespace, self.config.lease_name)
                if self.on_stopped_leading:
                    try:
                        self.on_stopped_leading()
                    except Exception:
                        log.exception("on_stopped_leading failed")
            self._done.set()

    # ---- loops --------------------------------------------------------------------------

    def _acquire(self) -> bool:
        cfg = self.config
        log.info("leader election: %s campaigning for %s/%s", cfg.identity, cfg.namespace, cfg.lease_name)
        while not self._stop.is_set():
            attempt = time.monotonic()
            if self._try_acquire_or_renew(timeout=cfg.renew_deadline / 2):
                self._renewed(attempt)
                self._leading.set()
                log.info("leader election: %s acquired %s/%s", cfg.identity, cfg.namespace, cfg.lease_name)
                if self.on_started_leading:
                    threading.Thread(target=self._started, name="on-started-leading", daemon=True).start()
                return True
            self._stop.wait(cfg.retry_period * random.uniform(1.0, 1.2))
        return False

    def _started(self) -> None:
        try:
            assert self.on_started_leading is not None
            self.on_started_leading()
        except Exception:
            log.exception("on_started_leading failed")

    def _renew_loop(self) -> None:
        cfg = self.config
        while not self._stop.wait(cfg.retry_period):
            attempt = time.monotonic()
            left = cfg.renew_deadline - (attempt - self._last_renew)
            if left > 0 and self._try_acquire_or_renew(timeout=max(0.2, min(left, cfg.renew_deadline / 2))):
                self._renewed(attempt)
                continue
            if time.monotonic() - self._last_renew >= cfg.renew_deadline:
                log.error("leader election: %s failed to renew within %.1fs", cfg.identity, cfg.renew_deadline)
                return

    def _renewed(self, attempt: float) -> None:
        """A write of ours holding the Lease succeeded; ``attempt``: when it began (monotonic)."""
        self._last_renew = time.monotonic()
        if self.fence is not None:
            self.fence.renewed(attempt)

    # ---- one attempt --------------------------------------------------------------------

    def _try_acquire_or_renew(self, timeout: float) -> bool:
        try:
            if self._leading.is_set() and self._lease is not None and self._renew_cached(timeout):
                return True
            return self._try_full(timeout)
        except kc.KubeError as exc:
            log.warning("leader election: %s: %s", self.config.identity, exc)
            return False

    def _renew_cached(self, timeout: float) -> bool:
        """Leader fast path: one PUT with the resourceVersion we last wrote; 409 -> full path."""
        assert self._lease is not None
        lease = _with_spec(self._lease, self._spec(self._lease.get("spec") or {}, now=time.time()))
        try:
            self._store(self._put(lease, timeout))
            return True
        except kc.ApiError as exc:
            if exc.conflict:
                return False
            raise

    def _try_full(self, timeout: float) -> bool:
        cfg = self.config
        now = time.time()
        try:
            lease = kc.request(self.api, "GET", LEASES.path(cfg.namespace, cfg.lease_name), timeout=timeout)
        except kc.ApiError as exc:
            if not exc.not_found:
                raise
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": cfg.lease_name, "namespace": cfg.namespace},
                "spec": self._spec({}, now=now),
            }
            try:
                created = kc.request(self.api, "POST", LEASES.path(cfg.namespace), body=body, timeout=timeout)
            except kc.ApiError as exc2:
                if exc2.conflict:  # someone else created it first
                    return False
                raise
            self._store(created)
            return True

        spec = lease.get("spec") or {}
        self._observe(spec)
        holder = spec.get("holderIdentity") or ""
        duration = float(spec.get("leaseDurationSeconds") or cfg.lease_duration)
        if holder and holder != cfg.identity and self._observed_at + duration > time.monotonic():
            return False  # held by someone else, and not yet expired on our clock
        try:
            self._store(self._put(_with_spec(lease, self._spec(spec, now=now)), timeout))
        except kc.ApiError as exc:
            if exc.conflict:  # lost the race for it
                return False
            raise
        return True

    def _spec(self, old: Obj, *, now: float) -> Obj:
        cfg = self.config
        ours = old.get("holderIdentity") == cfg.identity
        return {
            "holderIdentity": cfg.identity,
            "leaseDurationSeconds": max(1, round(cfg.lease_duration)),
            "acquireTime": old.get("acquireTime") if ours and old.get("acquireTime") else micro_time(now),
            "renewTime": micro_time(now),
            "leaseTransitions": int(old.get("leaseTransitions") or 0) + (0 if ours or not old else 1),
        }

    def _put(self, lease: Obj, timeout: float) -> Obj:
        meta = lease["metadata"]
        return kc.request(self.api, "PUT", LEASES.path(meta["namespace"], meta["name"]), body=lease, timeout=timeout)

    def _store(self, lease: Obj) -> None:
        self._lease = lease
        self._observe(lease.get("spec") or {})

    def _observe(self, spec: Obj) -> None:
        if spec != self._observed_spec:
            old_holder = self.leader
            self._observed_spec = spec
            self._observed_at = time.monotonic()
            holder = str(spec.get("holderIdentity") or "")
            if holder != old_holder and holder and self.on_new_leader:
                try:
                    self.on_new_leader(holder)
                except Exception:
                    log.exception("on_new_leader failed")

    def _release(self) -> None:
        """Hand the lease back so a standby takes over at once instead of after lease_duration."""
        if self._lease is None:
            return
        spec = self._lease.get("spec") or {}
        if spec.get("holderIdentity") != self.config.identity:
            return
        now = micro_time()
        released = {
            "holderIdentity": "",
            "leaseDurationSeconds": 1,
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": int(spec.get("leaseTransitions") or 0),
        }
        try:
            self._store(self._put(_with_spec(self._lease, released), timeout=self.config.renew_deadline / 2))
            log.info("leader election: %s released %s", self.config.identity, self.config.lease_name)
        except kc.KubeError as exc:
            log.warning("leader election: release failed (others take over after expiry): %s", exc)


def _with_spec(lease: Obj, spec: Obj) -> Obj:
    out = dict(lease)
    out["spec"] = spec
    return out

"""Manager: owns informers, controllers, leader election, probes and signals for one process.

The order of start-up, and why:
1. Probes and metrics are served first, so a slow sync is visible rather than a dead pod.
2. Informers (and runnables that do not need leadership, such as Slurm-side caches) start
   on every replica. Standbys keep warm caches, so a failover does not begin with a full
   relist.
3. Once every informer has synced, the replica campaigns for the Lease. A replica that
   cannot see the cluster must not hold the lease. An informer added with ``wait_for_sync=False``
   starts too but gates nothing: what only this process's own controllers bring up (sunk-operator's
   SlurmCluster, whose Slurm the operator makes) cannot be waited for before they start.
4. When it leads (or at once, without leader election), the controllers' workers start.
   Informers had already queued every key. So the first pass reconciles everything, and
   no event from before leadership is lost.
An informer that reports the end of an outage (``on_recovered``: the Slurm cache) wakes every
controller's keys that failed for it (``Controller.outage_over``), on every replica. For the
apiserver, whose informers report no such event, a ``RecoveryProbe`` asks ``/readyz`` each
second while keys wait for Kubernetes and wakes them once it answers again.
With leader election, every controller and leader-only ``Periodic`` writes behind one
``LeaseFence`` (``sunk.base.fence``) that the elector renews: no write leaves after the renew
deadline, even from a reconcile that began while leading. Losing the lease stops the
controllers and ends ``run()`` with exit code 1. The process
must exit: all state lives in Kubernetes and Slurm, and the next process relists.
SIGTERM/SIGINT stop cleanly. In-flight reconciles finish and the lease is released.
A second signal exits at once.
"""

from __future__ import annotations

import functools
import gc
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Any, Protocol, runtime_checkable

from kubernetes.client import ApiClient

from sunk.base.fence import LeaseFence
from sunk.controller.health import Check, HttpEndpoints, run_checks
from sunk.controller.metrics import LEADER
from sunk.controller.periodic import Periodic
from sunk.controller.recovery import RecoveryProbe
from sunk.controller.runtime import Controller
from sunk.kube import client as kc
from sunk.kube.leader import LeaderElectionConfig, LeaderElector

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_LOST_LEASE = 1
EXIT_SYNC_FAILED = 2


class Syncable(Protocol):
    def start(self) -> None: ...
    def stop(self, timeout: float | None = ...) -> None: ...
    def has_synced(self) -> bool: ...
    def wait_for_sync(self, timeout: float | None = ...) -> bool: ...


WAIT_SLICE = 0.2  # seconds; see Manager.wait


@runtime_checkable
class ReportsRecovery(Protocol):
    """An informer that says when its source answers again after an outage (``SlurmCache``)."""

    def on_recovered(self, callback: Callable[[], None]) -> Callable[[], None]: ...


KUBERNETES = "kubernetes"  # the Outage.dependency of the apiserver's outages (sunk.kube.client)


def apiserver_ready(api: ApiClient) -> bool:
    """The apiserver answers ``/readyz`` (readable by every authenticated client; fails while etcd does)."""
    try:
        kc.get_text(api, "/readyz", timeout=(1.0, 2.0))
    except kc.KubeError:
        return False
    return True


class Runnable(Protocol):
    def start(self) -> None: ...
    def stop(self) -> Any: ...


def freeze_heap() -> None:
    """Collect, then move every object alive now into the collector's permanent generation (``gc.freeze``).

    Why: after the first list, the informers' stores are most of the heap (10k trimmed Pods: about
    half a million dicts and strings), and each full collection walks all of it: 171 ms at 10k Pods
    (docs/benchmarks.md, issue 37 goal 5), seconds at 100k, while every thread, the hook API's too,
    waits. Frozen objects are skipped by later collections. What it costs: an object frozen here that
    later becomes part of a reference cycle is never collected. The stores' objects are decoded JSON
    (no cycles) and are freed by reference counting when an event replaces them, so nothing they hold
    leaks; a relist's new objects are young again and collected as usual.
    """
    gc.collect()
    gc.freeze()


class Manager:
    def __init__(
        self,
        name: str,
        *,
        api_client: ApiClient | None = None,
        leader_election: LeaderElectionConfig | None = None,
        health_bind_address: str | None = None,
        metrics_bind_address: str | None = None,
        sync_timeout: float | None = None,
        shutdown_timeout: float = 30.0,
        after_first_sync: Callable[[], None] | None = None,
    ):
        """``after_first_sync``: called once every informer has synced, before any controller starts (the
        daemons pass ``freeze_heap``)."""
        if leader_election is not None and api_client is None:
            raise ValueError("leader election needs an api_client")
        self.name = name
        self.api = api_client
        self.leader_election = leader_election
        self.sync_timeout = sync_timeout
        self.shutdown_timeout = shutdown_timeout
        self.after_first_sync = after_first_sync
        self.informers: list[Syncable] = []
        self._waited_for: list[Syncable] = []  # the informers whose first sync gates the start
        self.controllers: list[Controller] = []
        self._runnables: list[tuple[Runnable, bool]] = []
        self._healthz: dict[str, Check] = {}
        self._readyz: dict[str, Check] = {"informers": self.synced}
        self.elector: LeaderElector | None = None
        # Every leader-only writer asks it before each write (None without leader election).
        self.fence = LeaseFence(leader_election.renew_deadline) if leader_election is not None else None
        self._kube_recovery = (
            RecoveryProbe(f"{name}-apiserver", waiting=self._waiting_for_kubernetes,
                          probe=lambda: apiserver_ready(api_client), wake=lambda: self._outage_over(KUBERNETES))
            if api_client is not None else None
        )
        self._stop = threading.Event()
        self._done = threading.Event()
        self._synced = threading.Event()
        self._leading_started = threading.Event()
        self._lock = threading.Lock()
        self._started = False
        self.exit_code = EXIT_OK
        self._health = (
            HttpEndpoints(health_bind_address, healthz=self._healthz, readyz=self._readyz)
            if (health_bind_address)
            else None
        )
        self._metrics = HttpEndpoints(metrics_bind_address, metrics=True) if metrics_bind_address else None
        self._healthz["ping"] = lambda: True
        LEADER.labels(name).set_function(lambda: 1.0 if self.is_leader() else 0.0)  # read at scrape time
        if leader_election is not None:
            self._readyz["leader-election"] = self._elector_ok
            self._healthz["leader-election"] = lambda: self.elector is None or self.elector.healthy()

    # ---- assembly ---------------------------------------------------------------------

    def add_informer(self, informer: Syncable, *, wait_for_sync: bool = True) -> Syncable:
        """``wait_for_sync`` False: started with the others, but neither the Lease nor the controllers wait for
        its first sync (module notes); its readers must take an unsynced store as stale facts."""
        self._before_start()
        self.informers.append(informer)
        if wait_for_sync:
            self._waited_for.append(informer)
        return informer

    def add_controller(self, controller: Controller) -> Controller:
        self._before_start()
        controller.fence = self.fence
        self.controllers.append(controller)
        return controller

    def add_runnable(self, runnable: Runnable, *, needs_leader: bool = False) -> Runnable:
        """Anything with start()/stop(): with ``needs_leader`` it runs only while leading."""
        self._before_start()
        if needs_leader and isinstance(runnable, Periodic):
            runnable.fence = self.fence
        self._runnables.append((runnable, needs_leader))
        return runnable

    def add_health_check(self, name: str, check: Check) -> None:
        self._healthz[name] = check

    def add_ready_check(self, name: str, check: Check) -> None:
        self._readyz[name] = check

    def set_readiness(self, checks: Mapping[str, Check]) -> None:
        """Replace the default readiness (every informer synced; leading or standing by) with ``checks``.

        For a daemon whose Service carries what needs less than its controllers do: the
        scheduler's hook API needs its Pod cache, not Slurm's jobs nor the Lease, and must keep
        serving while Slurm is unreachable, when the placeholder jobs need it most.
        """
        self._readyz.clear()
        self._readyz.update(checks)

    def _before_start(self) -> None:
        if self._started:
            raise RuntimeError("add components before the manager starts")

    # ---- state --------------------------------------------------------------------------

    def synced(self) -> bool:
        return self._synced.is_set()

    def ready(self) -> bool:
        return run_checks(self._readyz)[0]

    def stopping(self) -> bool:
        """stop() was called (a signal, a lost lease): caches may no longer be current."""
        return self._stop.is_set()

    def is_leader(self) -> bool:
        """Controllers may write: elected, or running without leader election."""
        if self.elector is not None:
            return self.elector.is_leader()
        return self.leader_election is None and self._leading_started.is_set()

    def wait_leading(self, timeout: float | None = None) -> bool:
        """Wait until controllers have been started (elected, or no election)."""
        return self._leading_started.wait(timeout)

    @property
    def health_port(self) -> int | None:
        return self._health.port if self._health else None

    @property
    def metrics_port(self) -> int | None:
        return self._metrics.port if self._metrics else None

    def _elector_ok(self) -> bool:
        """Ready while leading or standing by; not before campaigning, nor after losing."""
        e = self.elector
        return e is not None and not e.lost and not self._stop.is_set()

    # ---- lifecycle ------------------------------------------------------------------------

    def run(self) -> int:
        """Start, block until stopped (signal, lost lease or stop()), return the exit code."""
        restore = self._install_signal_handlers()
        try:
            self.start()
            return self.wait()
        finally:
            restore()

    def start(self) -> None:
        with self._lock:
            if self._started:
                raise RuntimeError("manager already started")
            self._started = True
        for server in (self._health, self._metrics):
            if server:
                server.start()
        for informer in self.informers:
            if isinstance(informer, ReportsRecovery):
                dependency: str | None = getattr(informer, "outage_dependency", None)
                informer.on_recovered(functools.partial(self._outage_over, dependency))
            informer.start()
        if self._kube_recovery is not None:
            self._kube_recovery.start()
        for runnable, needs_leader in self._runnables:
            if not needs_leader:
                runnable.start()
        threading.Thread(target=self._after_sync, name=f"{self.name}-manager", daemon=True).start()

    def wait(self, timeout: float | None = None) -> int:
        """Block until stopped (or ``timeout``), in short slices.

        Why slices: CPython runs a signal handler only in the main thread, and a SIGTERM the
        kernel delivers to another thread does not wake a main thread blocked on a lock
        without a timeout, so a plain ``Event.wait()`` can sleep through a kubelet's SIGTERM.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._done.is_set():
            step = WAIT_SLICE if deadline is None else min(WAIT_SLICE, deadline - time.monotonic())
            if step <= 0:
                break
            self._done.wait(step)
        return self.exit_code

    def stop(self, exit_code: int | None = None) -> None:
        """Ask everything to stop; safe from any thread and callbacks, idempotent."""
        if exit_code is not None and self.exit_code == EXIT_OK:
            self.exit_code = exit_code
        if self._stop.is_set():
            return
        self._stop.set()
        threading.Thread(target=self._shutdown, name=f"{self.name}-shutdown", daemon=True).start()

    def _after_sync(self) -> None:
        started = time.monotonic()
        for informer in self._waited_for:
            # Short waits only so that stop() and the sync timeout are noticed promptly.
            while not informer.wait_for_sync(0.1):
                if self._stop.is_set():
                    return
                if self.sync_timeout is not None and time.monotonic() - started > self.sync_timeout:
                    log.error("manager %s: informers did not sync within %.0fs", self.name, self.sync_timeout)
                    self.stop(EXIT_SYNC_FAILED)
                    return
        if self._stop.is_set():
            return
        synced_in = time.monotonic() - started
        if self.after_first_sync is not None:
            try:
                self.after_first_sync()
            except Exception:  # (an optimisation: never a reason not to run)
                log.exception("manager %s: after_first_sync failed", self.name)
        self._synced.set()
        log.info("manager %s: informers synced in %.2fs", self.name, synced_in)
        if self.leader_election is None:
            self._start_leading()
            return
        assert self.api is not None
        self.elector = LeaderElector(
            self.api,
            self.leader_election,
            on_started_leading=self._start_leading,
            on_stopped_leading=self._stopped_leading,
            fence=self.fence,
        )
        self.elector.start()

    def _outage_over(self, dependency: str | None = None) -> None:
        """What failed for ``dependency``'s outage (None: any) is reconciled now, not after the backoff it built up."""
        for controller in self.controllers:
            controller.outage_over(dependency)

    def _waiting_for_kubernetes(self) -> bool:
        return any(controller.waiting_for(KUBERNETES) for controller in self.controllers)

    def _start_leading(self) -> None:
        with self._lock:
            if self._stop.is_set() or self._leading_started.is_set():
                return
            for controller in self.controllers:
                controller.start()
            for runnable, needs_leader in self._runnables:
                if needs_leader:
                    runnable.start()
            self._leading_started.set()
        log.info("manager %s: controllers started", self.name)

    def _stopped_leading(self) -> None:
        if self.elector is not None and self.elector.lost:
            log.error("manager %s: lost leadership; stopping so the process exits", self.name)
            self.stop(EXIT_LOST_LEASE)

    def _shutdown(self) -> None:
        deadline = time.monotonic() + self.shutdown_timeout

        def left() -> float:
            return max(0.1, deadline - time.monotonic())

        try:
            with self._lock:  # wait out a _start_leading in progress; later ones see _stop and do nothing
                pass
            for controller in self.controllers:
                if not controller.stop(left()):
                    log.warning("controller %s: reconciles still running at shutdown", controller.name)
            for runnable, _ in self._runnables:
                _quietly(runnable.stop)
            if self._kube_recovery is not None:
                _quietly(self._kube_recovery.stop)
            if self.elector is not None:
                self.elector.stop(left())  # releases the lease if we held it
            for informer in self.informers:
                try:
                    informer.stop(left())
                except Exception:
                    log.exception("error stopping an informer")
            for server in (self._health, self._metrics):
                if server:
                    _quietly(server.stop)
        finally:
            log.info("manager %s: stopped (exit code %d)", self.name, self.exit_code)
            self._done.set()

    def _install_signal_handlers(self) -> Callable[[], None]:
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        signals = (signal.SIGTERM, signal.SIGINT)
        previous = {s: signal.getsignal(s) for s in signals}

        def handle(signum: int, frame: FrameType | None) -> None:
            if self._stop.is_set():
                log.warning("second signal: exiting now")
                os._exit(1)
            log.info("manager %s: signal %d, shutting down", self.name, signum)
            self.stop()

        for s in signals:
            signal.signal(s, handle)

        def restore() -> None:
            for s, h in previous.items():
                signal.signal(s, h)

        return restore


def _quietly(fn: Callable[[], object]) -> None:
    try:
        fn()
    except Exception:
        log.exception("error while stopping")

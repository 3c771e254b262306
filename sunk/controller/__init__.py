"""Controller runtime shared by the Syncer, the Pod Scheduler and the extender.

A work queue of keys (dedup, per-key backoff), controllers whose workers reconcile
keys level-based, and a Manager that owns informers, controllers, leader election,
health probes and signal handling, in the controller-runtime mould.
"""

from sunk.controller.handlers import EnqueueHandler, own_key
from sunk.controller.manager import Manager
from sunk.controller.runtime import Controller, Reconciler, Result
from sunk.controller.workqueue import ItemExponentialRateLimiter, WorkQueue, default_rate_limiter

__all__ = [
    "Controller",
    "EnqueueHandler",
    "ItemExponentialRateLimiter",
    "Manager",
    "Reconciler",
    "Result",
    "WorkQueue",
    "default_rate_limiter",
    "own_key",
]

"""Controller runtime shared by the Syncer, the Pod Scheduler and the extender.

A work queue of keys (dedup, per-key backoff), controllers whose workers reconcile
keys level-based, and a Manager that owns informers, controllers, leader election,
health probes and signal handling, in the controller-runtime mould.
"""

"""EventRecorder failure handling without a cluster: it must never raise into the caller."""

from __future__ import annotations

from kubernetes import client as k8s

from sunk.base.fence import LeaseFence, fenced
from sunk.kube.events import EventRecorder


def test_recorder_never_raises_when_apiserver_unreachable_or_object_malformed(caplog):
    cfg = k8s.Configuration()
    cfg.host = "http://127.0.0.1:1"  # nothing listens there
    api = k8s.ApiClient(cfg)
    rec = EventRecorder(api, "sunk-test")
    try:
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "x", "uid": "u"}}
        rec.warning(pod, "R", "m")
        rec.warning({"metadata": {}}, "R", "no kind, no name")  # malformed: logged, not raised
        assert rec.flush(30)
        assert rec.errors == 2
        assert any("not recorded" in r.getMessage() for r in caplog.records)
    finally:
        rec.stop()
        api.close()


def test_an_event_a_fenced_reconcile_records_is_not_sent_once_the_lease_is_lost(caplog):
    """The recorder sends on its own thread, later: the recording thread's fence goes with the Event. Nothing
    listens at the apiserver's address, so an Event that is sent fails to connect; one fenced off never tries."""
    now = [100.0]
    fence = LeaseFence(renew_deadline=10.0, clock=lambda: now[0])
    fence.renewed(95.0)  # held until 105
    cfg = k8s.Configuration()
    cfg.host = "http://127.0.0.1:1"
    rec = EventRecorder(k8s.ApiClient(cfg), "sunk-test")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "x", "uid": "u"}}
    try:
        with fenced(fence):
            rec.normal(pod, "WhileHeld", "m")
        assert rec.flush(30)
        now[0] = 106.0  # past the renew deadline
        with fenced(fence):
            rec.normal(pod, "AfterTheDeadline", "m")
        rec.normal(pod, "Unfenced", "m")  # (a hook API's thread: never fenced)
        assert rec.flush(30)
        why = {r.args[1]: str(r.args[2]) for r in caplog.records if "not recorded" in r.getMessage()}
        assert "no longer holds its Lease" in why["AfterTheDeadline"]
        assert "Lease" not in why["WhileHeld"] and "Lease" not in why["Unfenced"]  # (sent: no apiserver there)
    finally:
        rec.stop()

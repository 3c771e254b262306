"""EventRecorder failure handling without a cluster: it must never raise into the caller."""

from __future__ import annotations

from kubernetes import client as k8s

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

"""The real LeaderWorkerSet and JobSet controllers, and the PodGroup CRD, for the tests and the
benchmark of the gangs they make (issue 21).

Built from their Go modules (``kubebuild.GoCommand``) and run as host processes with the dev
cluster's admin kubeconfig. The dev cluster has no Pod network, so their admission webhooks
are registered by URL (``https://127.0.0.1:<port>``) with a CA of this run's own, and their
own certificate management and leader election are off: they have no flags for either, only a
``Configuration`` file. They make StatefulSets (LWS) and Jobs (JobSet); kube-controller-manager
makes the Pods, and the LWS and JobSet Pod webhooks label them, as in a real cluster.

Both webhooks fail closed (``failurePolicy: Fail``, as upstream): while a controller is down,
nothing it serves (its objects, Pods carrying its labels) can be written. So the webhook
configurations exist only while the controllers run: registered once they serve, removed
before they stop.
"""

from __future__ import annotations

import base64
import contextlib
import socket
import ssl
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import yaml

from sunk.kube import client as kc
from sunk_dev import kubebuild, tls
from sunk_dev.pool import CRD_PATH, crd_established, create_or_replace
from sunk_dev.procs import Daemon, wait_until

MUTATING = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
VALIDATING = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"


@attrs.frozen
class Webhook:
    """One upstream webhook (from the module's config/webhook manifests), served at ``path``."""

    name: str
    path: str
    group: str
    version: str
    resource: str
    operations: tuple[str, ...]
    pods_labelled: str | None = None  # an objectSelector: only Pods with this label key

    def entry(self, port: int, ca_bundle: str) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "name": self.name, "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail",
            "clientConfig": {"url": f"https://127.0.0.1:{port}{self.path}", "caBundle": ca_bundle},
            "rules": [{"apiGroups": [self.group], "apiVersions": [self.version],
                       "operations": list(self.operations), "resources": [self.resource]}],
        }
        if self.pods_labelled:
            entry["objectSelector"] = {"matchExpressions": [{"key": self.pods_labelled, "operator": "Exists"}]}
        return entry


@attrs.frozen
class WorkloadController:
    command: kubebuild.GoCommand
    config_api_version: str
    crd: str  # the CRD's file, inside the module
    webhook_port: int
    health_port: int
    mutating: tuple[Webhook, ...]
    validating: tuple[Webhook, ...]

    @property
    def name(self) -> str:
        return self.command.name

    def configuration(self, cert_dir: Path) -> dict[str, Any]:
        return {"apiVersion": self.config_api_version, "kind": "Configuration",
                "leaderElection": {"leaderElect": False},  # (JobSet's needs an in-cluster namespace)
                "internalCertManagement": {"enable": False},
                "webhook": {"host": "127.0.0.1", "port": self.webhook_port, "certDir": str(cert_dir)},
                "metrics": {"bindAddress": "0"},
                "health": {"healthProbeBindAddress": f"127.0.0.1:{self.health_port}"}}

    def webhook_configurations(self, ca_bundle: str) -> list[tuple[str, dict[str, Any]]]:
        """(collection, object) for its mutating and validating configurations, URL-based."""
        out = []
        for collection, kind, hooks in ((MUTATING, "MutatingWebhookConfiguration", self.mutating),
                                        (VALIDATING, "ValidatingWebhookConfiguration", self.validating)):
            suffix = "mutating" if hooks is self.mutating else "validating"
            out.append((collection, {
                "apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
                "metadata": {"name": f"{self.name}-{suffix}-webhook-configuration"},
                "webhooks": [hook.entry(self.webhook_port, ca_bundle) for hook in hooks]}))
        return out


LWS_LABEL = "leaderworkerset.sigs.k8s.io/name"
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"

LWS = WorkloadController(
    command=kubebuild.GoCommand("lws", "sigs.k8s.io/lws", "0.7.0", "sigs.k8s.io/lws/cmd"),
    config_api_version="config.lws.x-k8s.io/v1alpha1",
    crd="config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml",
    webhook_port=19443, health_port=19081,
    mutating=(
        Webhook("mleaderworkerset.kb.io", "/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
                "leaderworkerset.x-k8s.io", "v1", "leaderworkersets", ("CREATE", "UPDATE")),
        Webhook("mpod.kb.io", "/mutate--v1-pod", "", "v1", "pods", ("CREATE", "UPDATE"), LWS_LABEL),
    ),
    validating=(
        Webhook("vleaderworkerset.kb.io", "/validate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
                "leaderworkerset.x-k8s.io", "v1", "leaderworkersets", ("CREATE", "UPDATE")),
        Webhook("vpod.kb.io", "/validate--v1-pod", "", "v1", "pods", ("CREATE", "UPDATE"), LWS_LABEL),
    ),
)
JOBSET = WorkloadController(
    command=kubebuild.GoCommand("jobset", "sigs.k8s.io/jobset", "0.10.1", "sigs.k8s.io/jobset"),
    config_api_version="config.jobset.x-k8s.io/v1alpha1",
    crd="config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml",
    webhook_port=19444, health_port=19082,
    mutating=(
        Webhook("mjobset.kb.io", "/mutate-jobset-x-k8s-io-v1alpha2-jobset", "jobset.x-k8s.io", "v1alpha2",
                "jobsets", ("CREATE",)),
        Webhook("mpod.kb.io", "/mutate--v1-pod", "", "v1", "pods", ("CREATE",), JOBSET_LABEL),
    ),
    validating=(
        Webhook("vjobset.kb.io", "/validate-jobset-x-k8s-io-v1alpha2-jobset", "jobset.x-k8s.io", "v1alpha2",
                "jobsets", ("CREATE", "UPDATE")),
        Webhook("vpod.kb.io", "/validate--v1-pod", "", "v1", "pods", ("CREATE",), JOBSET_LABEL),
    ),
)
CONTROLLERS = (LWS, JOBSET)


PODGROUP_CRD_NAME = "podgroups.scheduling.x-k8s.io"
# scheduler-plugins' PodGroup (scheduling.x-k8s.io/v1alpha1), the fields anyone reads here: PodGroups
# need no controller for sunk, which reads only spec.minMember.
PODGROUP_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": PODGROUP_CRD_NAME},
    "spec": {
        "group": "scheduling.x-k8s.io", "scope": "Namespaced",
        "names": {"plural": "podgroups", "singular": "podgroup", "kind": "PodGroup", "listKind": "PodGroupList",
                  "shortNames": ["pg", "pgs"]},
        "versions": [{
            "name": "v1alpha1", "served": True, "storage": True, "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "properties": {
                    "minMember": {"type": "integer", "format": "int32"},
                    "minResources": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                    "scheduleTimeoutSeconds": {"type": "integer", "format": "int32"}}},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}},
        }],
    },
}


@contextlib.contextmanager
def podgroup_crd(api: Any) -> Iterator[None]:
    """The PodGroup CRD for a while: made unless the cluster has one, then deleted (with its PodGroups)."""
    made = ensure_podgroup_crd(api)
    try:
        yield
    finally:
        if made:
            kc.request(api, "DELETE", f"{CRD_PATH}/{PODGROUP_CRD_NAME}")
            wait_until(lambda: _crd(api, PODGROUP_CRD_NAME) is None, 60,
                       what=f"the CRD {PODGROUP_CRD_NAME} to be deleted")


def ensure_podgroup_crd(api: Any) -> bool:
    """The PodGroup CRD, made unless the cluster has one (then left as it is); whether it was made.

    One being deleted (a run that just ended) is waited out and made again: it would vanish mid-run."""
    found = _crd(api, PODGROUP_CRD_NAME)
    if found is not None and not found["metadata"].get("deletionTimestamp"):
        return False
    if found is not None:
        wait_until(lambda: _crd(api, PODGROUP_CRD_NAME) is None, 60,
                   what=f"the CRD {PODGROUP_CRD_NAME}, being deleted, to be gone")
    kc.request(api, "POST", CRD_PATH, body=PODGROUP_CRD)
    wait_until(lambda: crd_established(api, PODGROUP_CRD_NAME), 60,
               what=f"the CRD {PODGROUP_CRD_NAME} to be Established")
    return True


@contextlib.contextmanager
def running(api: Any, cache: Path, run_dir: Path, kubeconfig: Path,
            controllers: Sequence[WorkloadController] = CONTROLLERS, log=sys.stderr) -> Iterator[None]:
    """The controllers built (once per version), their CRDs applied, each serving its webhooks; on
    exit the webhooks are removed, then the controllers stopped. The CRDs stay (deleting one
    would delete every object of its kind, which is the test's to clean up, not this)."""
    binaries = {c.name: kubebuild.build_go_command(cache, c.command, log=log) for c in controllers}
    for controller in controllers:
        apply_crd(api, kubebuild.module_source(cache, controller.command) / controller.crd)
    ca = tls.make_ca(run_dir / "ca", "sunk-dev-workloads-ca")
    ca_bundle = base64.b64encode(ca.cert.read_bytes()).decode()
    daemons: list[Daemon] = []
    try:
        for controller in controllers:
            cert_dir = run_dir / controller.name
            cert_dir.mkdir(parents=True, exist_ok=True)
            tls.issue(ca, cert_dir, "tls")  # tls.crt and tls.key: the names controller-runtime reads
            config = cert_dir / "config.yaml"
            config.write_text(yaml.safe_dump(controller.configuration(cert_dir)))
            daemon = controller_daemon(controller, run_dir,
                                       (str(binaries[controller.name]), f"--kubeconfig={kubeconfig}",
                                        f"--config={config}", "--zap-devel=false"))
            daemon.stop()  # one of an interrupted earlier run, recorded in this run dir
            daemon.start()
            daemons.append(daemon)
        for controller, daemon in zip(controllers, daemons, strict=True):
            _wait_serving(controller, daemon, ca.cert)
            for collection, obj in controller.webhook_configurations(ca_bundle):
                create_or_replace(api, collection, obj)
        yield
    finally:
        try:
            remove_webhooks(api, controllers)
        finally:
            for daemon in daemons:
                daemon.stop()


def controller_daemon(controller: WorkloadController, run_dir: Path, argv: tuple[str, ...] = ()) -> Daemon:
    """Its process, by PID file in ``run_dir`` (the argv matters only to start it)."""
    return Daemon(f"{controller.name}-controller", argv, run_dir)


def clean_up(api: Any, run_dir: Path, controllers: Sequence[WorkloadController] = CONTROLLERS) -> None:
    """What a run killed before its own clean-up left: the webhook configurations (they would refuse the
    Pods a test labels as these controllers do), then the controllers' processes."""
    try:
        remove_webhooks(api, controllers)
    finally:
        for controller in controllers:
            controller_daemon(controller, run_dir).stop()


def remove_webhooks(api: Any, controllers: Sequence[WorkloadController] = CONTROLLERS) -> None:
    """Their webhook configurations gone (404 is fine; any other failure raises, as one left behind
    fails closed)."""
    for controller in controllers:
        for collection, obj in controller.webhook_configurations(""):
            try:
                kc.request(api, "DELETE", f"{collection}/{obj['metadata']['name']}")
            except kc.ApiError as exc:
                if not exc.not_found:
                    raise


def _wait_serving(controller: WorkloadController, daemon: Daemon, ca: Path, timeout: float = 60) -> None:
    """Until its webhook server presents our certificate; a controller that exits fails at once, with its log."""
    deadline = time.monotonic() + timeout
    while not _serves_tls(controller.webhook_port, ca):
        if daemon.pid() is None:
            raise RuntimeError(f"the {controller.name} controller exited; the end of {daemon.log_file}:\n"
                               f"{daemon.tail()}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"the {controller.name} controller's webhook server not serving after {timeout:.0f} s "
                               f"({daemon.log_file})")
        time.sleep(0.2)


def apply_crd(api: Any, path: Path, timeout: float = 60) -> None:
    """A CRD from a file, created or replaced (POST/PUT: the LWS one is too large for a client-side
    apply's annotation), and waited for until Established."""
    crd = yaml.safe_load(path.read_text())
    create_or_replace(api, CRD_PATH, crd)
    name = crd["metadata"]["name"]
    wait_until(lambda: crd_established(api, name), timeout, what=f"the CRD {name} to be Established")


def _crd(api: Any, name: str) -> dict[str, Any] | None:
    try:
        return kc.request(api, "GET", f"{CRD_PATH}/{name}")
    except kc.ApiError as exc:
        if exc.not_found:
            return None
        raise


def _serves_tls(port: int, ca: Path) -> bool:
    """Whether a TLS server on 127.0.0.1:port presents a certificate ``ca`` signed (what the apiserver checks)."""
    context = ssl.create_default_context(cafile=str(ca))
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as raw:
            with context.wrap_socket(raw, server_hostname="127.0.0.1"):
                return True
    except OSError:
        return False

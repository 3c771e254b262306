"""`helm test` (manifests/chart/sunk/templates/tests): what the chart renders for it, and what its script does.

The chart is rendered by the dev cluster's helm (sunk_dev.chart); the script is run as the test Pod
runs it (``python3 -c <script> <checks>``, taken from the rendered Pod) against local HTTP servers.
That the installed release passes it, and fails it when a component is down, is
tests/cluster/test_chart_pods.py's.
"""

from __future__ import annotations

import http.server
import itertools
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from test_manifest_hardening import admitted

from sunk_dev import chart

HELM = chart.helm_binary()
NS = chart.NAMESPACE
COMPONENTS = ("syncer", "scheduler", "extender", "operator")
TEST_POD_LABELS = {"app.kubernetes.io/name": "sunk-helm-test", "app.kubernetes.io/instance": chart.RELEASE}
EVERYTHING = {"extender": {"enabled": True}, "operator": {"enabled": True}}


def render(values: dict[str, Any] | None = None, **kwargs: Any) -> list[dict[str, Any]]:
    return chart.render(values, helm=HELM, **kwargs)


def rendered_test_pods(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == "Pod"]


def the_test_pod(values: dict[str, Any] | None = None) -> dict[str, Any]:
    pods = rendered_test_pods(render(values))
    assert len(pods) == 1, pods
    return pods[0]


def checks(pod: dict[str, Any]) -> dict[str, str]:
    """{component: "<service>:<port>"} from the test container's arguments."""
    return dict(arg.split("=", 1) for arg in pod["spec"]["containers"][0]["args"])


# ---- rendered only as a test hook -------------------------------------------------------------


def test_the_test_pod_is_a_helm_test_hook_and_nothing_else_is():
    docs = render(EVERYTHING)
    pod = the_test_pod(EVERYTHING)
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    # (the last run's Pod stays for `helm test --logs`; a new run replaces it)
    # a failed run's Pod stays for its log; a passed one goes, so `helm uninstall` leaves no Pod
    assert pod["metadata"]["annotations"]["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    hooks = [d for d in docs if "test" in ((d["metadata"].get("annotations") or {}).get("helm.sh/hook") or "")]
    assert hooks == [pod]
    assert not rendered_test_pods(render(EVERYTHING, extra_args=["--skip-tests"])), "the test Pod outside the test hook"


def test_the_test_pod_runs_the_charts_image_as_the_deployments_do():
    values = {"image": {"repository": "registry.example/sunk", "tag": "9.9.9", "pullPolicy": "Always"},
              "imagePullSecrets": [{"name": "pull"}]}
    docs = render(values)
    pod = the_test_pod(values)
    syncer = chart.find(docs, "Deployment", "sunk-syncer")["spec"]["template"]["spec"]
    container = pod["spec"]["containers"][0]
    assert container["image"] == syncer["containers"][0]["image"] == "registry.example/sunk:9.9.9"
    assert container["imagePullPolicy"] == syncer["containers"][0]["imagePullPolicy"] == "Always"
    assert pod["spec"]["imagePullSecrets"] == [{"name": "pull"}]
    assert container["command"][:2] == ["python3", "-c"]  # the image's python (no curl there)


# ---- Pod Security restricted ------------------------------------------------------------------


def test_the_test_pod_is_pod_security_restricted_and_holds_no_token():
    pod = the_test_pod(EVERYTHING)
    spec = pod["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["restartPolicy"] == "Never" and spec["activeDeadlineSeconds"] > 0
    for forbidden in ("hostNetwork", "hostPID", "hostIPC", "volumes"):
        assert not spec.get(forbidden), forbidden
    pod_context = spec["securityContext"]
    assert len(spec["containers"]) == 1 and not spec.get("initContainers")
    context = spec["containers"][0]["securityContext"]

    def effective(field: str) -> Any:
        return context[field] if field in context else pod_context.get(field)

    assert effective("runAsNonRoot") is True
    assert effective("runAsUser") not in (None, 0)
    assert effective("seccompProfile") == {"type": "RuntimeDefault"}
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["readOnlyRootFilesystem"] is True
    assert not context.get("privileged")
    resources = spec["containers"][0]["resources"]
    assert resources["requests"] and resources["limits"]["memory"]


# ---- one check per enabled component -----------------------------------------------------------


SUBSETS = [on for n in range(1, len(COMPONENTS) + 1) for on in itertools.combinations(COMPONENTS, n)
           if {"syncer", "scheduler"} & set(on)]  # (one of the two at least: the chart has nothing else to run)


@pytest.mark.parametrize("enabled", SUBSETS, ids=["+".join(s) for s in SUBSETS])
def test_one_check_per_enabled_component_through_its_services_probe_port(enabled):
    values = {c: {"enabled": c in enabled} for c in COMPONENTS}
    docs = render(values)
    found = checks(the_test_pod(values))
    assert set(found) == set(enabled)
    for component, address in found.items():
        service_name, _, port = address.rpartition(":")
        assert service_name == f"sunk-{component}"
        service = chart.find(docs, "Service", service_name, NS)
        [service_port] = [p for p in service["spec"]["ports"] if p["port"] == int(port)]
        # ... the port that serves the Deployment's own probes (/healthz), and the Service selects its Pods.
        deployment = chart.find(docs, "Deployment", service_name, NS)
        template = deployment["spec"]["template"]
        container = template["spec"]["containers"][0]
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": service_port["targetPort"]}
        assert {p["name"]: p["containerPort"] for p in container["ports"]}[service_port["targetPort"]] == int(port)
        assert service["spec"]["selector"].items() <= template["metadata"]["labels"].items()


def test_no_test_pod_when_no_component_runs():
    assert not rendered_test_pods(render({c: {"enabled": False} for c in COMPONENTS}))


# ---- NetworkPolicy: the probes port, for this release's test Pod only ----------------------------


@pytest.mark.parametrize("component", COMPONENTS)
def test_the_network_policy_admits_the_test_pod_to_the_probes_port_only(component):
    docs = render(EVERYTHING)
    [policy] = [d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == f"sunk-{component}"]
    pod = the_test_pod(EVERYTHING)
    assert pod["metadata"]["labels"].items() >= TEST_POD_LABELS.items()
    assert admitted([policy], 8081, TEST_POD_LABELS, NS)
    for port in (8000, 8080, 8888):
        assert not admitted([policy], port, TEST_POD_LABELS, NS), f"the test Pod admitted to {port}"
    assert not admitted([policy], 8081, TEST_POD_LABELS, "tenant-a"), "a test-labelled Pod of another namespace"
    other_release = {**TEST_POD_LABELS, "app.kubernetes.io/instance": "other"}
    assert not admitted([policy], 8081, other_release, NS), "another release's test Pod"
    assert not admitted([policy], 8081, {"app": "other"}, NS), "any Pod of the namespace"


# ---- the script, as the Pod runs it -------------------------------------------------------------


class _Health(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:  # (http.server's name)
        self.send_response(self.status if self.path == "/healthz" else 404)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


def _serving(status: int) -> Iterator[int]:
    handler = type("Health", (_Health,), {"status": status})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def healthy() -> Iterator[int]:
    yield from _serving(200)


@pytest.fixture
def unhealthy() -> Iterator[int]:
    yield from _serving(503)


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # (closed again: nothing listens there)


def run_test_pod(args: list[str], services: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The rendered Pod's command with ``args``, the Services' addresses as the kubelet gives them."""
    command = the_test_pod(EVERYTHING)["spec"]["containers"][0]["command"]
    env = {k: v for k, v in os.environ.items() if not k.endswith("_SERVICE_HOST")}
    env.update({f"{name.upper().replace('-', '_')}_SERVICE_HOST": host for name, host in services.items()})
    return subprocess.run([sys.executable, *command[1:], *args], env=env, capture_output=True, text=True,
                          timeout=60, check=False)


def test_the_script_passes_when_every_component_answers(healthy):
    done = run_test_pod([f"syncer=sunk-syncer:{healthy}", f"scheduler=sunk-scheduler:{healthy}"],
                        {"sunk-syncer": "127.0.0.1", "sunk-scheduler": "127.0.0.1"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok     syncer" in done.stdout and "ok     scheduler" in done.stdout


def test_the_script_fails_naming_each_component_that_did_not_answer(healthy, unhealthy, closed_port):
    done = run_test_pod([f"syncer=sunk-syncer:{closed_port}", f"scheduler=sunk-scheduler:{healthy}",
                         f"operator=sunk-operator:{unhealthy}"],
                        {"sunk-syncer": "127.0.0.1", "sunk-scheduler": "127.0.0.1", "sunk-operator": "127.0.0.1"})
    assert done.returncode == 1, done.stdout + done.stderr
    verdict = done.stdout.strip().splitlines()[-1]
    assert verdict.startswith("helm test failed: ")
    assert "syncer (" in verdict and "operator (" in verdict and "scheduler" not in verdict
    assert "FAILED syncer" in done.stdout and "503" in done.stdout and "ok     scheduler" in done.stdout


def test_the_script_uses_the_service_name_without_the_kubelets_address(healthy):
    """No <SERVICE>_SERVICE_HOST (a Service made after the Pod, enableServiceLinks off): its name, by DNS."""
    done = run_test_pod([f"syncer=localhost:{healthy}"], {})
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"http://localhost:{healthy}/healthz" in done.stdout

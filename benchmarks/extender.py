"""Extender filter latency with 5000 candidate Nodes, over HTTP, as kube-scheduler calls it.

    python -m benchmarks.extender --nodes 5000 --calls 300

The app is the real one (extender/app.py) served by gunicorn (sunk/commands/web.py) in a child
process; placement is a stub answering from memory, as the real reconciler does, so the
figure is the verb itself: parse ExtenderArgs, decide, build FailedNodes for every name.
Two cases: still waiting for Slurm (every Node fails with a reason: the biggest answer),
and allocated (one Node passes). ``--tls`` serves the verbs as the chart does
(mutual TLS, certificates made for the run) and the client presents kube-scheduler's
certificate over one kept-alive connection, as kube-scheduler does.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import requests

from extender.app import create_app
from scheduler.decide import Bind, Waiting
from sunk.commands.web import TLS, Listener, serve
from sunk_dev.tls import CertFiles, issue, make_ca

PORT = 18998
POD = {"metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
       "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}


class _Pods:
    def by_uid(self, uid):
        return POD if uid == "u-1" else None


class _Placement:
    def __init__(self, action):
        self.action, self.pods, self.api = action, _Pods(), None

    def placement(self, pod, uid):
        return self.action


def _serve(action, tls: TLS | None) -> None:
    serve(lambda: {"extender": create_app(cast(Any, _Placement(action)), lambda uid: None)},
          [Listener(f"127.0.0.1:{PORT}", "extender", tls)], threads=4)


def measure(action, nodes: int, calls: int, certs: dict[str, CertFiles] | None) -> dict:
    tls = TLS(str(certs["server"].cert), str(certs["server"].key), str(certs["server"].ca)) if certs else None
    proc = multiprocessing.Process(target=_serve, args=(action, tls), daemon=True)
    proc.start()
    session = requests.Session()
    scheme = "https" if certs else "http"
    if certs:
        session.trust_env = False  # (else $REQUESTS_CA_BUNDLE overrides session.verify)
        session.verify = str(certs["server"].ca)
        session.cert = (str(certs["client"].cert), str(certs["client"].key))
    body = json.dumps({"Pod": POD, "NodeNames": [f"worker-{i}" for i in range(nodes)]})
    deadline = time.monotonic() + 20
    while True:
        try:
            session.get(f"{scheme}://127.0.0.1:{PORT}/healthz", timeout=1)
            break
        except requests.RequestException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    latencies, size = [], 0
    try:
        for _ in range(calls):
            began = time.perf_counter()
            resp = session.post(f"{scheme}://127.0.0.1:{PORT}/filter", data=body,
                                headers={"Content-Type": "application/json"}, timeout=10)
            latencies.append(time.perf_counter() - began)
            resp.raise_for_status()
            size = len(resp.content)
    finally:
        proc.terminate()
        proc.join(10)
    latencies.sort()
    return {"p50_ms": 1000 * statistics.median(latencies),
            "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
            "request_kb": len(body) / 1024, "response_kb": size / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--tls", action="store_true", help="mutual TLS, as the chart serves the verbs")
    args = parser.parse_args()
    certs = None
    if args.tls:
        tmp = Path(tempfile.mkdtemp(prefix="sunk-bench-extender-"))
        ca = make_ca(tmp)
        certs = {"server": issue(ca, tmp, "sunk-extender"), "client": issue(ca, tmp, "kube-scheduler", client=True)}
    results = {
        "waiting (all Nodes fail)": measure(Waiting(42, "Priority"), args.nodes, args.calls, certs),
        "allocated (one Node passes)": measure(Bind(42, "node17", "worker-17"), args.nodes, args.calls, certs),
    }
    print(json.dumps({"nodes": args.nodes, "calls": args.calls, "tls": args.tls, **results}, indent=2))


if __name__ == "__main__":
    main()

"""Request latency with and without 1000 hostile connections per listener, in one run (issue 31 item 3).

    python -m benchmarks.hostile [--hostile 1000] [--rounds 10] [--calls 50] [--kind idle|one-byte|flood]
                                 [--sources 20]

Serves two listeners the way sunk-extender does (sunk/commands/web.py, one gunicorn worker): a plain
"hooks" port and a mutual-TLS "verbs" port, each a trivial flask app; and, in a process of its
own, a probe port the way every daemon serves it (sunk/controller/health.py, /healthz). Each round times
``calls`` requests per listener (a new connection each, as the placeholder's curl makes)
with no hostile connection open, then again with ``hostile`` connections held open on each
listener (``idle``: connected, nothing sent; ``one-byte``: one byte of a request or of a
TLS handshake, then nothing), spread over ``sources`` addresses of 127/8 so that each holds
fewer than the per-peer cap (``Limits.max_connections_per_peer``, 64 on the probe port) and
the server keeps them all; ``flood``: one host (127.0.0.3) opening connections without end,
holding its last ``hostile``, far past its per-peer cap (the server closes its own older
ones, never the timed caller's: another peer). Rounds alternate so that machine noise falls
on both sides.
It prints, per listener, the median latency of each side and the ratio of medians with its
spread over rounds (p10 to p90 of the per-round ratios). Needs no cluster. The real Pod's
figure (scheduled and locked through the prolog) is tests/cluster/test_hostile_http.py.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import signal
import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path

import requests
from flask import Flask

from sunk.commands.web import TLS, Listener, serve
from sunk.controller.health import HttpEndpoints
from sunk_dev.tls import issue, make_ca
from tests.cluster.hostile_clients import Flood

HOOKS, VERBS, PROBES = 18992, 18993, 18994
FLOOD_SOURCE = "127.0.0.3"  # (the timed calls come from 127.0.0.1: another peer)


def _app(name: str) -> Flask:
    app = Flask(name)

    @app.get("/who")
    def who():
        return {"app": name}

    return app


def _serve(listeners: list[Listener]) -> None:
    serve(lambda: {"hooks": _app("hooks"), "verbs": _app("verbs")}, listeners)


def _serve_probes() -> None:
    endpoints = HttpEndpoints(f"127.0.0.1:{PROBES}", healthz={"ping": lambda: True})
    endpoints.start()
    threading.Event().wait()


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def timed_calls(url: str, calls: int, **kwargs: object) -> list[float]:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        answer = requests.get(url, timeout=60, **kwargs)  # type: ignore[arg-type]
        answer.raise_for_status()
        times.append(time.perf_counter() - start)
    return times


def hold(port: int, count: int, first: bytes, sources: list[str]) -> list[socket.socket]:
    held = []
    for n in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=60, source_address=(sources[n % len(sources)], 0))
        if first:
            sock.sendall(first)
        held.append(sock)
    return held


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hostile", type=int, default=1000, help="connections held open per listener")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=50, help="timed requests per listener per side per round")
    parser.add_argument("--kind", choices=("idle", "one-byte", "flood"), default="idle")
    parser.add_argument("--sources", type=int, default=20, help="addresses of 127/8 the held connections come from")
    args = parser.parse_args()
    sources = [f"127.0.1.{n}" for n in range(1, args.sources + 1)]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    tmp = Path(tempfile.mkdtemp(prefix="sunk-bench-hostile-"))
    ca = make_ca(tmp)
    server, client = issue(ca, tmp, "server"), issue(ca, tmp, "client", client=True)
    listeners = [Listener(f"127.0.0.1:{HOOKS}", "hooks"),
                 Listener(f"127.0.0.1:{VERBS}", "verbs", TLS(str(server.cert), str(server.key), str(ca.cert)))]
    proc = multiprocessing.get_context("fork").Process(target=_serve, args=(listeners,), daemon=True)
    proc.start()
    probes = multiprocessing.get_context("fork").Process(target=_serve_probes, daemon=True)
    probes.start()
    targets = {
        "hooks (plain)": (HOOKS, f"http://127.0.0.1:{HOOKS}/who", {}, b"G"),
        "verbs (mTLS)": (VERBS, f"https://127.0.0.1:{VERBS}/who",
                         {"verify": str(ca.cert), "cert": (str(client.cert), str(client.key))}, b"\x16"),
        "probes (plain)": (PROBES, f"http://127.0.0.1:{PROBES}/healthz", {}, b"G"),
    }
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                requests.get(f"http://127.0.0.1:{HOOKS}/who", timeout=1)
                requests.get(f"http://127.0.0.1:{PROBES}/healthz", timeout=1)
                break
            except requests.RequestException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        quiet: dict[str, list[float]] = {name: [] for name in targets}
        loud: dict[str, list[float]] = {name: [] for name in targets}
        ratios: dict[str, list[float]] = {name: [] for name in targets}
        for round_ in range(args.rounds):
            for name, (_, url, kwargs, _first) in targets.items():
                without = timed_calls(url, args.calls, **kwargs)
                quiet[name] += without
            held = []
            try:
                if args.kind != "flood":
                    for _name, (port, _url, _kwargs, first) in targets.items():
                        held += hold(port, args.hostile, first if args.kind == "one-byte" else b"", sources)
                for name, (port, url, kwargs, first) in targets.items():
                    if args.kind == "flood":  # (one listener's at a time: one flooding thread)
                        with Flood(port, held=args.hostile, source=FLOOD_SOURCE, first=first) as flood:
                            while flood.opened < args.hostile:  # (past the cap before the first timed call)
                                time.sleep(0.05)
                            with_ = timed_calls(url, args.calls, **kwargs)
                    else:
                        with_ = timed_calls(url, args.calls, **kwargs)
                    loud[name] += with_
                    ratios[name].append(statistics.median(with_) / statistics.median(quiet[name][-args.calls:]))
            finally:
                for sock in held:
                    sock.close()
            print(f"round {round_ + 1}/{args.rounds} done", flush=True)
        print(f"\n{args.hostile} {args.kind} connections per listener, {args.rounds} rounds x {args.calls} calls")
        print("| listener | median without | median with | ratio of medians (p10 to p90 over rounds) |")
        print("| --- | --- | --- | --- |")
        for name in targets:
            print(f"| {name} | {statistics.median(quiet[name]) * 1000:.2f} ms | "
                  f"{statistics.median(loud[name]) * 1000:.2f} ms | {statistics.median(ratios[name]):.3f} "
                  f"({percentile(ratios[name], 10):.3f} to {percentile(ratios[name], 90):.3f}) |")
    finally:
        if proc.pid is not None:
            os.kill(proc.pid, signal.SIGTERM)
        proc.join(30)
        probes.terminate()
        probes.join(30)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""benchmarks/scale.py's and benchmarks/slurmrelay.py's pure parts: options, node choice, the relay's
accounting, job cache refreshes read from it, the per-cycle arithmetic, the table.

The benchmark itself needs the dev cluster (the lead runs it); nothing here does. The relay is
tried against a small HTTP server on the loopback address.
"""

from __future__ import annotations

import json
import os
import threading
import time
import types
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from benchmarks import scale as b
from benchmarks.slurmrelay import CountingRelay, Exchange, RequestHeads, by_kind, request_kind
from benchmarks.syncer import BENCH_REASON, cost, counters, summary
from sunk.model.slurm import Node
from sunk.slurm import SlurmCache, connect
from sunk.syncer.facts import KubeFacts
from sunk.translate.extra import parse_object
from sunk.translate.podcordon import pod_cordon
from sunk.translate.syncplan import merged_extra
from sunk_dev.fakeslurm import FakeSlurmrestd

BASE = "/slurm/v0.0.42/"


# -- options ---------------------------------------------------------------------------------------------
def test_defaults_are_the_issues_figure():
    args = b.parse_args([])
    assert (args.nodes, args.jobs, args.samples, args.cycles) == (5000, 10_000, 20, 60)
    assert (args.poll_interval, args.node_poll_interval, args.scheduler_poll_interval) == (1.0, 0.25, 0.5)
    assert not args.cold_start and args.change == ""


@pytest.mark.parametrize(("argv", "says"), [
    (["--nodes", "0"], "--nodes, --samples, --cycles and --workers must be at least 1"),
    (["--samples", "0"], "at least 1"),
    (["--jobs", "1"], "--jobs must be at least 2"),
    (["--node-poll-interval", "0"], "poll intervals must be positive"),
])
def test_bad_options_are_refused_before_touching_the_cluster(argv, says, capsys):
    with pytest.raises(SystemExit) as exc:
        b.main(argv)
    assert exc.value.code == 2 and says in capsys.readouterr().err


# -- progress and threads ----------------------------------------------------------------------------------
def test_progress_line():
    assert b.progress_line("submitting held jobs", 2000, 10_000, 10.0) == \
        "submitting held jobs: 2000/10000 after 10.0 s, 200/s"
    assert b.progress_line("x", 0, 5, 0.0) == "x: 0/5 after 0.0 s"


def test_parallel_keeps_the_order_and_says_when_done():
    said: list[str] = []
    assert b.parallel(lambda n: n * n, list(range(50)), 4, "squares", said.append) == [n * n for n in range(50)]
    assert said[-1].startswith("squares: 50/50 after")


def test_parallel_stops_at_the_first_error_and_drops_what_did_not_begin():
    began: list[int] = []

    def work(n: int) -> int:
        began.append(n)
        if n == 0:
            raise RuntimeError("slurmrestd said no")
        time.sleep(0.05)
        return n

    with pytest.raises(RuntimeError, match="said no"):
        b.parallel(work, list(range(200)), 2, "work", lambda _line: None)
    assert len(began) < 50


# -- the nodes ---------------------------------------------------------------------------------------------
def slurm_nodes(real: int, phantoms: int, down: tuple[str, ...] = ()) -> dict[str, bool]:
    names = [f"node{i}" for i in range(1, real + 1)] + [f"phantom{i}" for i in range(1, phantoms + 1)]
    return {n: n.startswith("phantom") or n in down for n in names}


def test_real_nodes_first_then_phantoms_in_number_order():
    picked = b.pick_nodes(slurm_nodes(4, 12), 8, [])
    assert picked.used == ["node1", "node2", "node3", "node4", "phantom1", "phantom2", "phantom3", "phantom4"]
    assert picked.phantoms == ["phantom1", "phantom2", "phantom3", "phantom4"]
    assert picked.change == ["node1", "node2", "node3", "node4"]
    assert sorted(["phantom10", "phantom9", "node2", "node10"], key=b.natural) == \
        ["node2", "node10", "phantom9", "phantom10"]


def test_too_few_slurm_nodes_says_which_sunk_dev_up_to_run():
    with pytest.raises(SystemExit) as exc:
        b.pick_nodes(slurm_nodes(5, 200), 5000, [])
    said = str(exc.value)
    assert "slurmctld has 205 nodes (5 real, 200 phantoms); --nodes 5000 needs 5000" in said
    assert "`sunk-dev down && sunk-dev up --phantom-nodes 4995`" in said and "--nodes 205" in said


def test_the_kubernetes_to_slurm_nodes_are_real_and_up():
    picked = b.pick_nodes(slurm_nodes(4, 10, down=("node2",)), 10, [])
    assert picked.change == ["node1", "node3", "node4"]
    assert b.pick_nodes(slurm_nodes(4, 10), 10, ["node3", "node4"]).change == ["node3", "node4"]
    for change in (["phantom1"], ["node2"], ["node9"]):
        with pytest.raises(SystemExit, match="not a real node that is up"):
            b.pick_nodes(slurm_nodes(4, 10, down=("node2",)), 10, change)


def test_a_run_needs_one_real_node_up():
    with pytest.raises(SystemExit, match="never drains a DOWN node"):
        b.pick_nodes({"node1": True, "phantom1": True}, 2, [])


# -- Extra written before the Syncer starts ------------------------------------------------------------------
def pod(name: str, namespace: str = "kube-test-1") -> dict:
    return {"metadata": {"name": name, "namespace": namespace, "uid": "u-1"},
            "spec": {"nodeName": f"bench-r-{name}"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}


def test_the_extra_written_is_what_the_syncer_keeps():
    node = Node("phantom7", state=("DOWN", "NOT_RESPONDING"), extra='{"site": "kept"}')
    text = b.syncer_extra(pod("phantom7"), "kube-test-1", node)
    assert text is not None
    written = parse_object(text)
    assert written is not None
    assert written["pod"] == "phantom7" and written["namespace"] == "kube-test-1" and written["ready"] is True
    assert written["node"] == "bench-r-phantom7" and written["site"] == "kept"
    # The Syncer's own rule, with its facts for that Pod, finds nothing more to write.
    after = Node("phantom7", state=("DOWN", "NOT_RESPONDING"), extra=text)
    facts = KubeFacts(slurm_node="phantom7", namespace="kube-test-1", pod=pod("phantom7"), k8s_node=None,
                      cordon=pod_cordon(pod("phantom7")), ctx=types.SimpleNamespace())  # type: ignore[arg-type]
    assert not merged_extra(facts, after).changed
    assert b.syncer_extra(pod("phantom7"), "kube-test-1", after) is None


def test_the_clean_up_takes_back_only_what_the_run_left():
    def node(reason: str = "", extra: str = "") -> Node:
        return Node("node3", state=("IDLE", "DRAIN") if reason else ("IDLE",), reason=reason, extra=extra)

    ours = '{"namespace": "kube-test-1", "pod": "node3"}'
    assert b.run_owns(node(BENCH_REASON), "kube-test-1", "r1") == (True, False)
    assert b.run_owns(node("k8s: slurmd pod kube-test-1/node3 is not ready"), "kube-test-1", "r1") == (True, False)
    assert b.run_owns(node("k8s: node bench-r1-node3 is cordoned"), "kube-test-1", "r1") == (True, False)
    assert b.run_owns(node("k8s: slurmd pod slurm/node3 is not ready"), "kube-test-1", "r1") == (False, False)
    assert b.run_owns(node("a person's drain", ours), "kube-test-1", "r1") == (False, True)
    assert b.run_owns(node(extra='{"namespace": "slurm"}'), "kube-test-1", "r1") == (False, False)


class FakeClient:
    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.next_id = 100

    def submit_job(self, request) -> int:
        self.next_id += 1
        self.calls.append(("submit", request.name, request.priority))
        return self.next_id

    def cancel_job(self, job_id: int) -> None:
        self.calls.append(("cancel", job_id))

    def update_node(self, name: str, update) -> None:
        self.calls.append(("update", name, update.extra))


def test_held_jobs_are_held_and_all_cancelled_by_id_then_by_name():
    client = FakeClient()
    jobs = b.HeldJobs(types.SimpleNamespace(client=client), "scale-bench-r1")  # type: ignore[arg-type]
    b.parallel(jobs.submit, range(5), 2, "submitting", lambda _line: None)
    assert sorted(jobs.ids) == [101, 102, 103, 104, 105]
    assert {c for c in client.calls} == {("submit", "scale-bench-r1", 0)}  # priority 0: held
    ran: list[tuple] = []
    cluster = types.SimpleNamespace(slurm=lambda *argv, check: ran.append((argv, check)))
    jobs.cancel_all(cluster, 2, lambda _line: None)  # type: ignore[arg-type]
    assert sorted(c[1] for c in client.calls if c[0] == "cancel") == [101, 102, 103, 104, 105]
    assert ran == [(("scancel", "--name=scale-bench-r1"), False)]


def test_reset_lifts_the_runs_drains_and_puts_extra_back():
    client = FakeClient()
    before = {"node3": Node("node3", state=("IDLE",), extra='{"namespace": "slurm", "pod": "node3"}'),
              "phantom1": Node("phantom1", state=("DOWN",))}
    listed = {"node3": Node("node3", state=("IDLE", "DRAIN"), reason="k8s: node bench-r1-node3 is cordoned",
                            extra='{"namespace": "ns"}'),
              "phantom1": Node("phantom1", state=("DOWN",), extra='{"namespace": "ns"}'),
              "node1": Node("node1", state=("IDLE",), extra='{"namespace": "slurm"}')}
    undrained: list[str] = []
    slurm = types.SimpleNamespace(client=client, nodes=lambda: listed, undrain=undrained.append)
    b.reset_nodes(slurm, before, ["node1", "node3", "phantom1", "phantom2"], "ns", "r1", 2,  # type: ignore[arg-type]
                  lambda _line: None)
    assert undrained == ["node3"]
    assert sorted(client.calls) == [("update", "node3", '{"namespace": "slurm", "pod": "node3"}'),
                                    ("update", "phantom1", "")]


# -- the relay ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("method", "target", "received", "kind"), [
    ("GET", BASE + "nodes/?update_time=1700000000", 180, "node poll: no change"),
    ("GET", BASE + "nodes/?update_time=1700000000", 11_500_000, "node poll: every node"),
    ("GET", BASE + "nodes/", 11_500_000, "node list"),
    ("GET", BASE + "node/phantom7", 2400, "node read"),
    ("POST", BASE + "node/phantom7", 300, "node update"),
    ("GET", BASE + "jobs/state/", 800_000, "job states"),
    ("GET", BASE + "jobs/?update_time=1700000000", 1400, "job check: no change"),
    ("GET", BASE + "jobs/?update_time=1700000000", 76_000_000, "job check: every job"),
    ("GET", BASE + "jobs/", 76_000_000, "job list"),
    ("GET", BASE + "job/12345", 7600, "job read"),
    ("POST", BASE + "job/submit", 500, "job submit"),
    ("POST", BASE + "job/12345", 500, "job update"),
    ("DELETE", BASE + "job/12345", 500, "job cancel"),
    ("GET", BASE + "diag/", 9000, "diag"),
    ("GET", BASE + "reconfigure/", 100, "GET reconfigure/"),
])
def test_request_kinds(method, target, received, kind):
    assert request_kind(method, target, received) == kind


def test_request_heads_across_chunks_and_past_bodies():
    heads = RequestHeads()
    post = b"POST /slurm/v0.0.42/node/n1 HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\n{\"a\": \"\r\n\"}"
    get = b"GET /slurm/v0.0.42/nodes/ HTTP/1.1\r\nHost: x\r\n\r\n"
    stream = post + get + post
    found = []
    for at in range(0, len(stream), 7):  # every split, the head's end included
        found += heads.feed(stream[at:at + 7])
    assert found == [("POST", "/slurm/v0.0.42/node/n1"), ("GET", "/slurm/v0.0.42/nodes/"),
                     ("POST", "/slurm/v0.0.42/node/n1")]
    assert RequestHeads().feed(get + get) == [("GET", "/slurm/v0.0.42/nodes/")] * 2


def test_request_heads_it_cannot_follow_are_refused():
    with pytest.raises(ValueError, match="chunked"):
        RequestHeads().feed(b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")
    with pytest.raises(ValueError, match="not an HTTP request line"):
        RequestHeads().feed(b"hello\r\n\r\n")


class Upstream(BaseHTTPRequestHandler):
    """Answers a node list with 20,000 bytes, anything else with 100 (keep-alive, as slurmrestd)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *_args: object) -> None:
        pass

    def answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        body = b"n" * (20_000 if self.path.endswith("/nodes/") else 100)
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_DELETE = answer


@pytest.fixture
def upstream():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_relay_counts_each_answer_on_a_kept_connection(upstream):
    with CountingRelay(upstream, "syncer") as relay, requests.Session() as session:
        base = relay.url + BASE
        assert len(session.get(base + "nodes/").content) == 20_000
        session.post(base + "node/phantom1", json={"extra": "x" * 5000})
        session.get(base + "jobs/state/")
        session.delete(base + "job/7")
        time.sleep(0.05)  # (the last answer's bytes are counted as they pass, just after the client has them)
        exchanges = relay.exchanges()
    assert [(e.method, e.kind) for e in exchanges] == [
        ("GET", "node list"), ("POST", "node update"), ("GET", "job states"), ("DELETE", "job cancel")]
    assert 20_000 < exchanges[0].received < 20_400  # the body and its headers
    assert all(100 < e.received < 400 for e in exchanges[1:])
    assert all(e.ended is not None and e.seconds >= 0 for e in exchanges)
    assert relay.exchanges(3) == exchanges[3:] and relay.count() == 4
    totals = by_kind(exchanges)
    assert totals["node list"]["requests"] == 1 and totals["node list"]["bytes"] == exchanges[0].received


def test_the_relay_closes_a_client_when_slurmrestd_is_down():
    with CountingRelay("http://127.0.0.1:9", "syncer") as relay:  # (port 9, discard: nothing listens)
        with pytest.raises(requests.ConnectionError):
            requests.get(relay.url + BASE + "nodes/", timeout=5)
        assert relay.exchanges() == []


# -- job cache refreshes -----------------------------------------------------------------------------------
def ex(kind_target: str, started: float, received: int, seconds: float = 0.01, method: str = "GET") -> Exchange:
    return Exchange(method, BASE + kind_target, started, received, started + seconds)


CHECK, FULL, STATES = "jobs/?update_time=1700000000", "jobs/", "jobs/state/"


def test_job_cycles_open_with_a_list_and_take_the_reads_after_it():
    exchanges = [ex(STATES, 1.0, 800_000), ex("job/5", 1.3, 7600), ex("nodes/?update_time=1", 1.4, 180),
                 ex("job/6", 1.5, 7600), ex("diag/", 1.6, 9000), ex(CHECK, 2.0, 1400), ex(FULL, 3.0, 76_000_000)]
    cycles = b.job_cycles(exchanges)
    assert [[e.kind for e in c] for c in cycles] == [
        ["job states", "job read", "job read"], ["job check: no change"], ["job list"]]
    assert b.idle_mode(exchanges) == "full lists"
    assert b.idle_mode(exchanges[:-1]) == "update_time checks"
    assert b.idle_mode([]) is None
    assert b.refresh_modes(exchanges) == {"state lists": 1, "update_time checks": 1, "full lists": 1}
    assert list(b.refresh_modes([ex(CHECK, 1.0, 1400), ex(STATES, 2.0, 800_000), ex(CHECK, 3.0, 1400)])) == \
        ["update_time checks", "state lists"]


def test_the_refresh_that_met_a_change_and_when_it_is_over():
    cycles = b.job_cycles([ex(CHECK, 9.0, 1400), ex(CHECK, 10.2, 1400),  # the second began before the change
                           ex(CHECK, 11.0, 1400),  # began after it, answered "no change": not met yet
                           ex(CHECK, 12.0, 76_000_000, seconds=8.0)])
    assert b.change_cycle(cycles, 10.5) == (3, False)  # met, but no later refresh has begun
    cycles += b.job_cycles([ex(STATES, 28.0, 800_000)])
    assert b.change_cycle(cycles, 10.5) == (3, True)
    figures = b.cycle_figures(cycles, 3, 10.5)
    assert figures == {"mode_before": "update_time checks", "requests": {"job check: every job": 1},
                       "bytes": 76_000_000, "refresh_s": 8.0, "seen_after_s": 9.5}
    assert b.change_cycle(b.job_cycles([ex(STATES, 11.0, 800_000)]), 10.5) == (None, False)
    # Begun just before the change, answered after it with every job: slurmctld took the change first.
    cycles = b.job_cycles([ex(CHECK, 10.4, 76_000_000, seconds=8.0), ex(CHECK, 19.0, 1400)])
    assert b.change_cycle(cycles, 10.5) == (0, True)
    # Answered entirely before the change: whatever it read, not this change.
    assert b.change_cycle(b.job_cycles([ex(STATES, 9.0, 800_000), ex("job/3", 9.3, 7600), ex(CHECK, 11.0, 1400)]),
                          10.5) == (None, False)


def test_a_state_list_and_a_read_make_one_refresh():
    cycles = b.job_cycles([ex(STATES, 1.0, 800_000), ex(STATES, 2.0, 800_000, seconds=0.2),
                           ex("job/5", 2.3, 7600, seconds=0.05), ex(STATES, 3.0, 800_000)])
    assert b.change_cycle(cycles, 1.5) == (1, True)
    figures = b.cycle_figures(cycles, 1, 1.5)
    assert figures["requests"] == {"job read": 1, "job states": 1} and figures["bytes"] == 807_600
    assert figures["refresh_s"] == pytest.approx(0.35) and figures["mode_before"] == "state lists"


def test_the_first_full_job_list():
    exchanges = [ex("nodes/", 0.5, 11_000_000), ex(FULL, 1.0, 76_000_000, seconds=8.2), ex(FULL, 300.0, 1)]
    assert b.first_full_list(exchanges, 1.0) == {"bytes": 76_000_000, "seconds": 8.2, "every_s": 300.0,
                                                 "bytes_per_cycle": 253_333, "seconds_per_cycle": 0.0273}
    assert b.first_full_list([Exchange("GET", BASE + FULL, 1.0)], 1.0) is None  # no answer yet


def test_one_job_change_waits_for_both_caches_to_finish_the_refresh_that_met_it(monkeypatch):
    monkeypatch.setattr(b, "CHANGE_TIMEOUT", 5.0)  # (a regression fails in seconds, not the run's minutes)

    class Relay:
        def __init__(self) -> None:
            self.items = [ex(CHECK, time.monotonic() - 1, 1400)]

        def exchanges(self, since: int = 0) -> list[Exchange]:
            return self.items[since:]

    relays = {"syncer": Relay(), "scheduler": Relay()}

    class Client:
        def cancel_job(self, job_id: int) -> None:  # the caches' next refreshes, as the relays would see them
            now = time.monotonic()
            relays["syncer"].items += [ex(CHECK, now + 0.01, 76_000_000, seconds=0.5), ex(STATES, now + 0.6, 800_000)]
            relays["scheduler"].items += [ex(CHECK, now + 0.01, 1400), ex(CHECK, now + 0.1, 76_000_000, seconds=0.4),
                                          ex(CHECK, now + 0.9, 1400)]

    clocks = iter(range(100))
    meter = types.SimpleNamespace(
        relays=relays, clocks=lambda: b.Clocks(time.monotonic(), {"slurmctld": float(next(clocks))},
                                               {p: len(r.items) for p, r in relays.items()}))
    jobs = types.SimpleNamespace(slurm=types.SimpleNamespace(client=Client()))
    out = b.one_job_change(meter, jobs, 42, lambda _line: None)  # type: ignore[arg-type]
    assert out["syncer"]["requests"] == {"job check: every job": 1} and out["syncer"]["bytes"] == 76_000_000
    assert out["syncer"]["mode_before"] == "update_time checks"
    assert out["scheduler"]["refresh_s"] == pytest.approx(0.4) and out["cpu_s"] == {"slurmctld": 1.0}


def test_sunks_own_job_cache_through_the_relay_refreshes_as_the_benchmark_reads_it():
    """The real SlurmCache (jobs only, as the scheduler's) against the in-process slurmrestd stand-in:
    the requests it makes are sorted into the refreshes and modes the benchmark reports."""
    fake = FakeSlurmrestd(token="t").start()
    try:
        for job_id in range(1, 101):
            fake.put_job(job_id, name="held", state_reason="JobHeldUser")
        time.sleep(1.1)  # (update_time has one-second resolution: the fills are "a second ago")
        with CountingRelay(fake.url, "scheduler") as relay:
            cache = SlurmCache(connect("rest", url=relay.url, token="t"), kinds=("job",), interval=0.05,
                               job_check_after=1)
            cache.start()
            try:
                deadline = time.monotonic() + 20
                while b.idle_mode(relay.exchanges()) != "update_time checks":
                    assert time.monotonic() < deadline, b.refresh_modes(relay.exchanges())
                    time.sleep(0.05)
                direct = connect("rest", url=fake.url, token="t")
                met = []
                for job_id in (7, 8):  # while idle, then right after a change
                    since, start = time.monotonic(), max(0, relay.count() - 10)
                    direct.cancel_job(job_id)
                    while True:
                        cycles = b.job_cycles(relay.exchanges(start))
                        index, over = b.change_cycle(cycles, since)
                        if index is not None and over:
                            break
                        assert time.monotonic() < since + 20
                        time.sleep(0.05)
                    met.append(b.cycle_figures(cycles, index, since))
            finally:
                cache.stop()
    finally:
        fake.stop()
    assert met[0]["mode_before"] == "update_time checks" and list(met[0]["requests"]) == ["job check: every job"]
    assert met[1]["mode_before"] == "state lists" and met[1]["requests"] == {"job read": 1, "job states": 1}
    assert met[0]["bytes"] > 10 * met[1]["bytes"]  # every job's record, against their states and one record
    assert b.first_full_list(relay.exchanges(), 1.0) is not None


# -- the per-cycle arithmetic --------------------------------------------------------------------------------
def clocks(at: float, syncer: float, scheduler: float, slurmctld: float, exchanges: int = 0) -> b.Clocks:
    return b.Clocks(at, {"syncer": syncer, "scheduler": scheduler, "slurmctld": slurmctld, "slurmrestd": 0.5,
                         "machine": at}, {"syncer": exchanges, "scheduler": 0})


def counts(node_calls: float, job_calls: float, scheduler_calls: float) -> b.Counts:
    syncer = {"sunk_syncer_slurm_requests_total|message_type=REQUEST_NODE_INFO": node_calls,
              "sunk_syncer_slurm_requests_total|message_type=REQUEST_JOB_INFO": job_calls,
              "sunk_reconcile_total|controller=syncer-slurm": 3.0}
    return b.Counts(syncer, {"syncer": b.syncer_calls(syncer), "scheduler": {"REQUEST_JOB_INFO": scheduler_calls}})


def test_idle_figures_per_cycle():
    # 60 cycles of 1 s: the Syncer polled nodes 4 times a cycle ("no change"), jobs once; the scheduler jobs twice.
    syncer = [ex("nodes/?update_time=1", i * 0.25, 180) for i in range(240)] + \
             [ex(CHECK, float(i), 1400) for i in range(60)]
    scheduler = [ex(CHECK, i * 0.5, 1400) for i in range(120)]
    out = b.figures(clocks(100.0, 10.0, 5.0, 40.0), clocks(160.0, 10.6, 5.3, 40.9), counts(1000, 500, 200),
                    counts(1240, 560, 320), {"syncer": syncer, "scheduler": scheduler}, 60.0)
    assert out["seconds"] == 60.0 and out["per"] == 60.0
    assert out["syncer"]["slurm_calls"] == 5.0
    assert out["syncer"]["slurm_calls_by_type"] == {"REQUEST_JOB_INFO": 1.0, "REQUEST_NODE_INFO": 4.0}
    assert out["syncer"]["bytes"] == 4 * 180 + 1400
    assert out["syncer"]["requests"]["node poll: no change"] == {"count": 4.0, "bytes_each": 180, "seconds_each": 0.01}
    assert out["scheduler"]["slurm_calls"] == 2.0 and out["scheduler"]["bytes"] == 2800
    assert out["syncer"]["cpu_s"] == 0.01 and out["syncer"]["cpu_percent"] == 1.0
    assert out["slurmctld"] == {"cpu_s": 0.015, "cpu_percent": 1.5}
    assert out["slurmrestd"]["cpu_s"] == 0.0 and out["machine"]["cpu_percent"] == 100.0


def test_figures_per_change():
    out = b.figures(clocks(0.0, 1.0, 1.0, 1.0), clocks(20.0, 3.0, 1.2, 5.0), counts(0, 0, 0), counts(40, 0, 10),
                    {"syncer": [ex("nodes/", 1.0, 12_000_000)] * 10, "scheduler": []}, 40)
    assert out["syncer"]["slurm_calls"] == 1.0 and out["syncer"]["bytes"] == 3_000_000
    assert out["syncer"]["cpu_s"] == 0.05 and out["slurmctld"]["cpu_s"] == 0.1
    assert out["scheduler"]["requests"] == {} and out["scheduler"]["slurm_calls"] == 0.25


def test_the_syncers_counters_and_calls_come_from_its_own_lines():
    text = "\n".join([
        "# HELP sunk_syncer_slurm_requests_total Calls to Slurm by this process, by message type.",
        "# TYPE sunk_syncer_slurm_requests_total counter",
        'sunk_syncer_slurm_requests_total{message_type="REQUEST_NODE_INFO"} 12.0',
        "# HELP sunk_reconcile_total Reconciles.", "# TYPE sunk_reconcile_total counter",
        'sunk_reconcile_total{controller="syncer-kube",result="success"} 7.0',
        'sunk_reconcile_created{controller="syncer-kube",result="success"} 1.7e9',
        "# HELP slurm_node_state Node state.", "# TYPE slurm_node_state gauge",
        'slurm_node_state{node="phantom1",partition="phantom",state="down"} 1',
        'slurm_controller_rpc_count{message_type="REQUEST_NODE_INFO"} 12',
        "# HELP sunk_syncer_kube_writes_total Writes.", "# TYPE sunk_syncer_kube_writes_total counter",
        'sunk_syncer_kube_writes_total{kind="pod_conditions"} 5000.0', ""])
    parsed = counters(text)
    assert parsed == {"sunk_syncer_slurm_requests_total|message_type=REQUEST_NODE_INFO": 12.0,
                      "sunk_reconcile_total|controller=syncer-kube|result=success": 7.0,
                      "sunk_syncer_kube_writes_total|kind=pod_conditions": 5000.0}
    assert b.syncer_calls(parsed) == {"REQUEST_NODE_INFO": 12.0}
    assert b.activity(parsed) == 5007.0
    assert b.delta({"a": 1.0, "b": 2.0}, {"a": 1.0, "b": 5.0, "c": 1.0}) == {"b": 3.0, "c": 1.0}


# -- memory ------------------------------------------------------------------------------------------------
def test_memory_of_a_process_tree():
    assert b.kb_field("Name:\tpython\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\n", "VmRSS") == 102400
    assert b.kb_field("Rss: 1 kB\n", "Pss") == 0
    assert b.process_tree(os.getpid())[0] == os.getpid()
    figures = b.memory(os.getpid())
    assert 0 < figures["pss_mb"] and 0 < figures["rss_mb"] <= figures["peak_rss_mb"]
    assert b.memory(2 ** 22 + 1) == {"pss_mb": 0.0, "rss_mb": 0.0, "peak_rss_mb": 0.0}  # (no such process)


# -- the table ---------------------------------------------------------------------------------------------
def test_human_bytes():
    assert [b.human_bytes(n) for n in (180, 1400, 807_600, 76_400_000, 2.3e9)] == \
        ["180 B", "1.4 KB", "807.6 KB", "76.4 MB", "2.3 GB"]


def results() -> dict:
    """A whole run's JSON, as ``run`` fills it (figures made up, shapes made by the same functions)."""
    idle = b.figures(clocks(100.0, 10.0, 5.0, 40.0), clocks(160.0, 10.6, 5.3, 40.9), counts(1000, 500, 200),
                     counts(1240, 560, 320), {"syncer": [ex("nodes/?update_time=1", 0.0, 180)] * 240,
                                              "scheduler": [ex(CHECK, 0.0, 1400)] * 120}, 60.0)
    idle["job_cache_refreshes"] = {"syncer": {"update_time checks": 59, "state lists": 1},
                                   "scheduler": {"update_time checks": 120}}
    per_change = b.figures(clocks(0.0, 1.0, 1.0, 1.0), clocks(20.0, 3.0, 1.2, 5.0), counts(0, 0, 0),
                           counts(40, 0, 10), {"syncer": [ex("nodes/", 1.0, 12_000_000)] * 10, "scheduler": []}, 40)
    before, after = counts(0, 0, 0).syncer, {**counts(40, 0, 10).syncer, "sunk_syncer_kube_writes_total|kind=x": 120.0}
    per_change["syncer_writes"] = cost(before, after, 40)
    refresh = {"mode_before": "update_time checks", "requests": {"job check: every job": 1}, "bytes": 76_400_000,
               "refresh_s": 8.1, "seen_after_s": 8.6}
    again = {"mode_before": "state lists", "requests": {"job read": 1, "job states": 1}, "bytes": 807_600,
             "refresh_s": 0.21, "seen_after_s": 0.9}
    return {
        "settings": {"cycle_s": 1.0, "node_poll_s": 0.25, "scheduler_poll_s": 0.5, "cycles": 60, "samples": 20,
                     "seed": 1, "start": "restart (every Extra written before)", "cpus": 2, "logs": "/tmp/x"},
        "setup_s": {"submit_jobs": 41.0, "create_objects": 80.2, "write_extra": 30.5},
        "sizes": {"slurm_nodes": 5005, "pods": 5000, "phantoms": 4995, "real": 5, "change_nodes": ["node3"],
                  "jobs": 10_000},
        "startup": {"processes_up_s": 20.1, "pod_conditions_s": 60.0, "quiet_s": 75.2, "job_caches_idle_s": 130.0,
                    "syncer": {"first_full_job_list": b.first_full_list([ex(FULL, 1.0, 76_400_000, 8.1)], 1.0)},
                    "scheduler": {"first_full_job_list": None}},
        "idle": idle,
        "scrape": {"first_s": 0.9, "first_bytes": 6_000_000, "p50_s": 0.08, "bytes": 6_000_000,
                   "syncer_cpu_s_per_scrape": 0.07},
        "slurm_to_kubernetes": {"drain": summary([0.5, 1.5]), "undrain": summary([0.6]), "cost": per_change},
        "kubernetes_to_slurm": {"drain_on_not_ready": summary([1.2]), "undrain_on_ready": summary([1.3]),
                                "drain_on_cordon": summary([]), "cost": per_change},
        "job_change": {"while_idle": {"syncer": refresh, "scheduler": refresh},
                       "right_after_a_change": {"syncer": again, "scheduler": again}},
        "memory": {"syncer": {"pss_mb": 310.0, "rss_mb": 350.0, "peak_rss_mb": 420.5},
                   "scheduler": {"pss_mb": 120.0, "rss_mb": 130.0, "peak_rss_mb": 300.0}},
        "alive": {"syncer": True, "scheduler": True},
    }


def test_the_table():
    table = b.render(results())
    assert table.startswith("5005 Slurm nodes, 5000 with a stand-in slurmd Pod (5 real, 4995 phantoms); 10000 held "
                            "jobs; start: restart (every Extra written before); a cycle is 1 s")
    assert "idle window 60 cycles" in table
    rows = {line.split(" | ")[0].lstrip("| "): line for line in table.splitlines() if line.startswith("|")}
    assert rows["Slurm calls"] == ("| Slurm calls | 5 (JOB_INFO 1, NODE_INFO 4) | 2 (JOB_INFO 2) |")
    assert rows["bytes read from slurmrestd"] == "| bytes read from slurmrestd | 720 B | 2.8 KB |"
    assert rows["&nbsp;&nbsp;node poll: no change"].endswith("| 4 × 180 B, 10 ms each |  |")
    assert rows["CPU"] == "| CPU | 10.0 ms (1.0 % of a core) | 5.0 ms (0.5 % of a core) |"
    assert rows["memory: PSS, peak RSS (end of run)"].endswith("| 310 MB, 420.5 MB | 120 MB, 300 MB |")
    assert rows["job cache refreshes while idle, by mode"] == \
        "| job cache refreshes while idle, by mode | update_time checks 59, state lists 1 | update_time checks 120 |"
    assert rows["a full job list (the first; one comes every 5 min): its bytes and time, and per cycle"].endswith(
        "| 76.4 MB, 8.1 s; 254.7 KB, 27 ms a cycle | — |")
    assert "8.1 s, 76.4 MB (1 job check: every job); was on update_time checks" in \
        rows["one job cancelled, caches idle: the refresh that met it"]
    assert "0.21 s, 807.6 KB (1 job read, 1 job states); was on state lists" in \
        rows["one job cancelled right after another"]
    assert rows["slurmctld CPU per idle cycle"].endswith("| 15.0 ms (1.5 % of a core) |")
    assert rows["Slurm drain → Pod `SlurmDrain=True`, p50 / p99"].endswith("| 500 / 1500 ms |")
    assert rows["Node cordon → Slurm `k8s:` drain"].endswith("| — |")
    assert rows["per Slurm → Kubernetes change"].endswith(
        "| 1 Slurm calls, 3.0 MB read, 3 apiserver writes; Syncer CPU 50 ms, slurmctld CPU 100 ms |")
    assert rows["set-up: submit_jobs, create_objects, write_extra"].endswith("| 41.0 s, 80.2 s, 30.5 s |")
    assert not [r for r in rows if r.startswith("the same, each change")]  # (no --apart: no such row)
    json.dumps(results())  # (the JSON document: plain data)


def test_the_table_with_changes_apart():
    """``--apart``: the Slurm -> Kubernetes latencies again, each change alone in slurmctld's second."""
    apart = {"apart_s": 1.5, "drain": summary([0.2, 0.3]), "undrain": summary([0.25])}
    rows = {line.split(" | ")[0].lstrip("| "): line for line in
            b.render({**results(), "slurm_to_kubernetes_apart": apart}).splitlines() if line.startswith("|")}
    assert rows["the same, each change 1.5 s after the last: drain; undrain"].endswith(
        "| 200 / 300 ms; 250 / 250 ms |")


def test_a_cache_that_never_checks_is_idle_after_steady_state_lists():
    """At 10,000 jobs a full list is slower than the cache's interval, so it never checks: ten state
    lists in a row that read nothing are its idle; one that read a job, or a full list, is not."""
    idle = [[ex(STATES, float(i), 800_000)] for i in range(b.STEADY_LISTS)]
    assert b.steady_state_lists(idle)
    assert b.steady_state_lists([[ex(FULL, 0.0, 76_000_000)]] + idle)
    assert not b.steady_state_lists(idle[1:])
    assert not b.steady_state_lists(idle[:-1] + [[ex(STATES, 20.0, 800_000), ex("job/5", 20.3, 7600)]])
    assert not b.steady_state_lists(idle[:-1] + [[ex(FULL, 20.0, 76_000_000)]])
    assert b.steady_state_lists(idle[:-1] + [[ex(CHECK, 20.0, 1400)]])


def test_a_job_change_waits_for_a_periodic_full_list_that_is_due():
    """The one-job-change figure is what a changed job costs: it is not made just as a cache's
    five-minute full list comes (the first 1000-node run measured that list)."""
    exchanges = [ex(STATES, 1.0, 800_000), ex(FULL, 10.0, 15_000_000, seconds=1.7), ex(STATES, 20.0, 800_000)]
    assert not b.full_list_due(exchanges, now=100.0, every=300.0, margin=30.0)
    assert b.full_list_due(exchanges, now=285.0, every=300.0, margin=30.0)  # due at 310
    assert b.full_list_due(exchanges + [Exchange("GET", BASE + FULL, 310.0, 100)], now=311.0, every=300.0,
                           margin=30.0)  # under way
    assert not b.full_list_due(exchanges + [ex(FULL, 310.0, 15_000_000, seconds=1.7)], now=313.0, every=300.0,
                               margin=30.0)
    assert not b.full_list_due([ex(STATES, 1.0, 800_000)], now=1000.0, every=300.0, margin=30.0)

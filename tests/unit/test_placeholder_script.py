"""The placeholder job script, run by bash against a stand-in hook API and a stand-in scontrol.

The real thing runs under slurmd in the cluster tests; here each call it makes is seen.
"""

from __future__ import annotations

import http.server
import os
import signal
import subprocess
import threading
import time
from importlib import resources
from pathlib import Path

import pytest

from sunk.translate.drains import GangPlaceholderDrain, PlaceholderDrain, parse

SCRIPT = resources.files("sunk").joinpath("scripts/placeholder.sh")


class HookAPI:
    """Records each call; answers 404 to the Pod long-poll (the Pod is gone), after ``unsynced``
    answers of 503 (a scheduler whose Pod cache has not synced yet). With ``pod_stays`` the Pod
    never goes, and the drain call gets ``drain_status``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, str]]] = []
        self.unsynced = 0
        self.pod_stays = False
        self.drain_status = 200
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                api.calls.append((self.command, self.path, dict(self.headers)))
                if api.unsynced and "/started" not in self.path:
                    api.unsynced -= 1
                    self.send_response(503)
                elif api.pod_stays and "/pod?" in self.path:
                    time.sleep(0.2)  # (a long-poll that ends with the Pod still there)
                    self.send_response(200)
                elif self.path.endswith("/drain"):
                    self.send_response(api.drain_status)
                else:
                    self.send_response(404 if "/pod?" in self.path else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = _answer

            def log_message(self, *_: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def paths(self) -> list[str]:
        return [f"{method} {path}" for method, path, _ in self.calls]


@pytest.fixture
def hook_api():
    api = HookAPI()
    yield api
    api.server.shutdown()
    api.server.server_close()


def wait_until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def run_placeholder(hook_api: HookAPI, tmp_path: Path, kill_wait: int = 30,
                    extra_env: dict[str, str] | None = None) -> tuple[subprocess.Popen, Path]:
    scontrol_log = tmp_path / "scontrol.args"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {scontrol_log}\n')
    (bin_dir / "scontrol").chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "42", "SLURMD_NODENAME": "node1",
           "SUNK_HOOKS_URL": hook_api.url, "SUNK_HOOK_TOKEN": "tok", "SUNK_POD_UID": "uid-a",
           "SUNK_EXTRA": "sunk-pod=uid-a ns=ns name=p", "SUNK_KILL_WAIT": str(kill_wait), "SUNK_POD": "ns/p",
           **(extra_env or {})}
    proc = subprocess.Popen(["bash", str(SCRIPT)], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return proc, scontrol_log


def stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the script's own sleep, if it is still there
    except ProcessLookupError:
        pass
    proc.wait(5)


def test_marks_started_calls_in_then_on_sigterm_waits_for_the_pod_to_go(hook_api, tmp_path: Path):
    proc, scontrol_log = run_placeholder(hook_api, tmp_path)
    try:
        wait_until(lambda: hook_api.paths() == ["POST /api/v1/jobs/42/started"])
        assert scontrol_log.read_text().split("\n")[0] == "update jobid=42 extra=sunk-pod=uid-a ns=ns name=p: started"
        _, _, headers = hook_api.calls[0]
        assert headers["Authorization"] == "Bearer tok" and headers["X-Sunk-Pod-UID"] == "uid-a"

        proc.send_signal(signal.SIGTERM)  # Slurm ends the job
        assert proc.wait(10) == 0  # the Pod is gone (404): no drain
        paths = hook_api.paths()
        assert paths[1] == "POST /api/v1/jobs/42/terminating"
        assert paths[2].startswith("GET /api/v1/jobs/42/pod?wait=")
        assert all(h["X-Sunk-Pod-UID"] == "uid-a" for _, _, h in hook_api.calls)
        assert "drain" not in " ".join(paths) and len(scontrol_log.read_text().splitlines()) == 1
    finally:
        stop(proc)


def test_a_scheduler_not_synced_yet_is_asked_again_until_it_takes_the_deletion(hook_api, tmp_path: Path):
    """503 (a restarting scheduler) is neither "deleting" nor "gone": ask again, never drain."""
    proc, scontrol_log = run_placeholder(hook_api, tmp_path)
    try:
        wait_until(lambda: hook_api.paths() == ["POST /api/v1/jobs/42/started"])
        hook_api.unsynced = 2  # the first terminating call and the first long-poll
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
        paths = hook_api.paths()[1:]
        terminating = [p for p in paths if p.endswith("/terminating")]
        assert len(terminating) == 2, paths  # 503, then taken
        assert "drain" not in " ".join(paths) and len(scontrol_log.read_text().splitlines()) == 1
    finally:
        stop(proc)


def test_a_pod_that_outlives_killwait_has_the_node_drained_by_the_scheduler_with_sunks_reason(hook_api, tmp_path):
    hook_api.pod_stays = True
    proc, scontrol_log = run_placeholder(hook_api, tmp_path, kill_wait=5)  # drains 3 s before KillWait: at 2 s
    try:
        wait_until(lambda: hook_api.paths() == ["POST /api/v1/jobs/42/started"])
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 1
        assert hook_api.paths()[-1] == "POST /api/v1/jobs/42/drain"
        assert len(scontrol_log.read_text().splitlines()) == 1  # the scheduler drained: no scontrol of its own
    finally:
        stop(proc)


@pytest.mark.parametrize("status", [503, 404, 409])
def test_without_the_scheduler_the_script_drains_with_the_reason_the_syncer_lifts(hook_api, tmp_path, status):
    """The measured case: the scheduler is down (or refuses), the Pod stays; the drain must say whose it is."""
    hook_api.pod_stays, hook_api.drain_status = True, status
    proc, scontrol_log = run_placeholder(hook_api, tmp_path, kill_wait=5)
    try:
        wait_until(lambda: hook_api.paths() == ["POST /api/v1/jobs/42/started"])
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 1
        drain = scontrol_log.read_text().splitlines()[-1]
        assert drain.startswith("update nodename=node1 state=drain reason=")
        reason = drain.split("reason=", 1)[1]
        assert parse(reason) == PlaceholderDrain("ns", "p", 42), reason
    finally:
        stop(proc)


GANG_ENV = {"SUNK_GANG": "3", "SUNK_POD_UID": "gang:ns/job/u", "SUNK_POD": "Job ns/train",
            "SUNK_EXTRA": "sunk-gang=job/u ns=ns size=3 members=aa,bb,cc", "SLURM_JOB_NODELIST": "node[1-3]"}


def test_a_gangs_placeholder_calls_in_for_the_gang_and_waits_for_every_member(hook_api, tmp_path):
    """The batch host's script speaks for the gang: its owner in the header; the hook API answers for every member."""
    proc, scontrol_log = run_placeholder(hook_api, tmp_path, extra_env=GANG_ENV)
    try:
        wait_until(lambda: hook_api.paths() == ["POST /api/v1/jobs/42/started"])
        assert scontrol_log.read_text().split("\n")[0] == \
            "update jobid=42 extra=sunk-gang=job/u ns=ns size=3 members=aa,bb,cc: started"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        assert all(h["X-Sunk-Pod-UID"] == "gang:ns/job/u" for _, _, h in hook_api.calls)
        assert hook_api.paths()[1] == "POST /api/v1/jobs/42/terminating"
    finally:
        stop(proc)


def test_without_the_scheduler_a_gangs_script_drains_every_node_with_the_reason_the_syncer_lifts(hook_api, tmp_path):
    """Which member outlived KillWait is the scheduler's to say; without it, the whole allocation, each node
    with sunk's gang drain, which the Syncer lifts node by node once no member of the gang is left there."""
    hook_api.pod_stays, hook_api.drain_status = True, 503
    proc, scontrol_log = run_placeholder(hook_api, tmp_path, kill_wait=5, extra_env=GANG_ENV)
    try:
        wait_until(lambda: hook_api.paths() == ["POST /api/v1/jobs/42/started"])
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 1
        drain = scontrol_log.read_text().splitlines()[-1]
        assert drain.startswith("update nodename=node[1-3] state=drain reason=")
        reason = drain.split("reason=", 1)[1]
        assert reason == "k8s: sunk-placeholder: gang ns/job/u outlived KillWait after job 42"
        assert parse(reason) == GangPlaceholderDrain("ns", "job/u", 42), reason
    finally:
        stop(proc)

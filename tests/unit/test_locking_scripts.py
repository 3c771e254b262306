"""prolog.sh and epilog.sh, run by bash against a stand-in hook API: what they send, when they fail.

(Slurm itself running them, and draining, is in tests/cluster/test_locking_flows.py.)
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sunk.translate.drains import HookUnreachableDrain, LockTimeoutDrain, parse

SCRIPTS = Path(__file__).resolve().parents[2] / "sunk" / "scripts"
TOKEN = "tok-123456"


class HookServer:
    """Answers each call with the next queued (status, body); records what it was sent."""

    def __init__(self):
        self.replies: list[tuple[int, dict]] = []
        self.calls: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                server.calls.append({"path": self.path, "auth": self.headers.get("Authorization"),
                                     "body": json.loads(self.rfile.read(length) or b"null")})
                status, body = server.replies.pop(0) if server.replies else (200, {"state": "locked"})
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = HookServer()
    yield s
    s.close()


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def run(script: str, tmp_path: Path, url: str | None, *, timeout: int = 5, extra: bytes = b"",
        env_file: bool = True, lock_timeout: str | None = None,
        slurm_bin: Path | None = None) -> subprocess.CompletedProcess[str]:
    (tmp_path / "token-node7").write_text(TOKEN + "\n")  # this node's token; %n names the node
    hooks_env = tmp_path / "hooks.env"
    if env_file:
        hooks_env.write_text(f'SUNK_SYNCER_URL="{url}"\nSUNK_HOOKS_TOKEN_FILE={tmp_path}/token-%n\n'
                             f"SUNK_LOCK_TIMEOUT={lock_timeout or timeout}\n")
    env = {b"SUNK_HOOKS_ENV": os.fsencode(hooks_env), b"SLURMD_NODENAME": b"node7", b"SLURM_JOB_ID": b"42",
           b"SLURM_JOB_EXTRA": extra, b"PATH": os.fsencode(os.environ["PATH"])}
    if slurm_bin is not None:
        env[b"PATH"] = os.fsencode(f"{slurm_bin}:{os.environ['PATH']}")
    return subprocess.run(["bash", str(SCRIPTS / script)], env=env, capture_output=True, text=True, timeout=60)


def test_without_hooks_env_both_scripts_do_nothing(tmp_path, server):
    for script in ("prolog.sh", "epilog.sh"):
        done = run(script, tmp_path, server.url, env_file=False)
        assert done.returncode == 0 and done.stderr == ""
    assert server.calls == []


@pytest.mark.parametrize("extra", [b"", b'sunk-pod=u1 ns=a "quoted" back\\slash\ttab\nline',
                                   b"\xff\xfe not UTF-8 \xc3", b"x" * 100_000])
def test_prolog_sends_the_job_id_and_nothing_its_user_controls(tmp_path, server, extra):
    """The Syncer reads the job from Slurm; a user's Extra in the body could only get refused and drain."""
    done = run("prolog.sh", tmp_path, server.url, timeout=30, extra=extra)
    assert done.returncode == 0, done.stderr
    (call,) = server.calls
    assert call["path"] == "/api/v1/nodes/node7/pre-hook"
    assert call["auth"] == f"Bearer {TOKEN}"  # the token of node7, from the %n path
    assert set(call["body"]) == {"job_id", "timeout"} and call["body"]["job_id"] == 42
    assert 28 <= call["body"]["timeout"] <= 30


def test_prolog_succeeds_without_a_lock_for_a_job_that_already_ended(tmp_path, server):
    server.replies.append((409, {"error": "Slurm job 42 has ended (CANCELLED): nothing to lock", "ended": True}))
    done = run("prolog.sh", tmp_path, server.url)
    assert done.returncode == 0 and "ended before it started" in done.stderr
    assert "drain" not in done.stderr


def test_prolog_fails_with_the_servers_reason_on_a_lock_timeout(tmp_path, server):
    server.replies.append((504, {"error": "not locked", "reason": "lock timeout after 5s: 1 Pod(s) still on Node w"}))
    done = run("prolog.sh", tmp_path, server.url)
    assert done.returncode == 1
    assert "sunk-lock: job 42: lock timeout after 5s: 1 Pod(s) still on Node w" in done.stderr


def test_prolog_fails_at_once_on_a_client_error_and_says_the_status(tmp_path, server):
    server.replies.append((401, {"error": "missing bearer token"}))
    started = time.monotonic()
    done = run("prolog.sh", tmp_path, server.url, timeout=30)
    assert done.returncode == 1 and time.monotonic() - started < 10
    assert "pre-hook failed with HTTP 401" in done.stderr and "missing bearer token" in done.stderr
    assert len(server.calls) == 1


def test_prolog_retries_a_restarting_syncer_within_its_budget(tmp_path, server):
    server.replies.append((503, {"error": "starting"}))
    done = run("prolog.sh", tmp_path, server.url, timeout=30)
    assert done.returncode == 0, done.stderr
    assert len(server.calls) == 2
    assert server.calls[1]["body"]["timeout"] <= server.calls[0]["body"]["timeout"] - 2  # one budget, not two


def drained_with(done: subprocess.CompletedProcess[str]) -> str:
    """The reason the prolog drained its node with, as it logs it (scontrol is not found here)."""
    (line,) = [line for line in done.stderr.splitlines() if ": drain: " in line]
    return line.split(": drain: ", 1)[1]


def test_prolog_gives_up_when_the_syncer_never_answers(tmp_path):
    started = time.monotonic()
    done = run("prolog.sh", tmp_path, closed_port_url(), timeout=4)
    assert done.returncode == 1
    assert 2 <= time.monotonic() - started < 15
    # A hook API outage: a drain the Syncer lifts once the lock is consistent again.
    drain = parse(drained_with(done))
    assert isinstance(drain, HookUnreachableDrain) and drain.job_id == 42, done.stderr
    assert drain.detail.startswith("HTTP 000, ")


def test_prolog_drains_as_an_outage_when_the_syncer_answers_only_503_or_502(tmp_path, server):
    server.replies.extend([(503, {"error": "starting"}), (502, {"error": "Kubernetes API unreachable"})] * 5)
    done = run("prolog.sh", tmp_path, server.url, timeout=3)
    assert done.returncode == 1
    drain = parse(drained_with(done))
    assert isinstance(drain, HookUnreachableDrain) and drain.job_id == 42
    assert drain.detail in (f"HTTP {status}, {len(server.calls)} attempts" for status in (502, 503))


def test_a_lock_timeout_drains_with_the_services_drain_reason_for_this_job(tmp_path, server):
    reason = "k8s: sunk-lock: job 42: lock timeout after 5s: Pods on Node worker-7: apps/guarded"
    server.replies.append((504, {"error": "not locked", "reason": "lock timeout after 5s: 1 Pod(s) still on Node "
                                 "worker-7: apps/guarded (eviction refused)", "drain_reason": reason}))
    done = run("prolog.sh", tmp_path, server.url)
    assert done.returncode == 1
    assert drained_with(done) == reason
    assert parse(reason) == LockTimeoutDrain(42, 5, "worker-7", ("apps/guarded",))


@pytest.mark.parametrize(("status", "body"), [
    (504, {"error": "not locked", "reason": "lock timeout after 5s: 30 Pod(s) still on Node w"}),  # too many to name
    (504, {"error": "x", "reason": "lock timeout", "drain_reason": "k8s: sunk-lock: job 7: lock timeout after 5s: "
                                                                    "lock still pending"}),  # another job's
    (500, {"error": "bug", "drain_reason": "k8s: sunk-lock: job 42: lock timeout after 5s: lock still pending"}),
    (401, {"error": "missing bearer token"}),
    (403, {"error": "no such job", "reason": "Slurm shows no job 42"}),
    (404, {"error": "unknown node", "reason": "unknown Slurm node node7 (no slurmd Pod)"}),
])
def test_every_other_prolog_failure_drains_with_a_reason_the_syncer_never_lifts(tmp_path, server, status, body):
    server.replies.append((status, body))
    done = run("prolog.sh", tmp_path, server.url)
    assert done.returncode == 1
    reason = drained_with(done)
    assert reason.startswith("sunk-lock: job 42: ") and parse(reason) is None


@pytest.mark.parametrize("hooks_env", ["SUNK_LOCK_TIMEOUT=abc\n", "SUNK_SYNCER_URL=\n",
                                       "SUNK_SYNCER_URL=http://x\nSUNK_HOOKS_TOKEN_FILE=/nonexistent\n"])
def test_a_misconfigured_prolog_drains_with_a_reason_the_syncer_never_lifts(tmp_path, hooks_env):
    path = tmp_path / "hooks.env"
    path.write_text(hooks_env)
    env = {"SUNK_HOOKS_ENV": str(path), "SLURMD_NODENAME": "node7", "SLURM_JOB_ID": "42", "PATH": os.environ["PATH"]}
    done = subprocess.run(["bash", str(SCRIPTS / "prolog.sh")], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    reason = drained_with(done)
    assert reason.startswith("sunk-lock: job 42: ") and parse(reason) is None


@pytest.mark.parametrize("value", ["abc", "0", "-5", ""])
def test_prolog_rejects_a_bad_timeout(tmp_path, server, value):
    done = run("prolog.sh", tmp_path, server.url, lock_timeout=value or '""')
    assert done.returncode == 1 and "SUNK_LOCK_TIMEOUT" in done.stderr
    assert server.calls == []


def test_epilog_reports_the_job_and_never_fails(tmp_path, server):
    server.replies.append((202, {"state": "locked"}))
    done = run("epilog.sh", tmp_path, server.url)
    assert done.returncode == 0
    assert server.calls == [{"path": "/api/v1/nodes/node7/post-hook", "auth": f"Bearer {TOKEN}",
                             "body": {"job_id": 42}}]
    server.replies.append((500, {"error": "bug"}))
    assert run("epilog.sh", tmp_path, server.url).returncode == 0
    done = run("epilog.sh", tmp_path, closed_port_url())
    assert done.returncode == 0 and "unlocks on its own" in done.stderr


# ---- how the prolog stops a job it refused --------------------------------------------------------------------


def fake_slurm(tmp_path: Path, active: bool | str = True, **exit_codes: int) -> tuple[Path, Path]:
    """scontrol, squeue and scancel that record their arguments and exit with ``exit_codes`` (keyed
    ``drain``, ``requeuehold``, ``squeue``, ``scancel``; 0 when not given). squeue lists the job as
    configuring or running while ``active``."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    scontrol = (f'#!/bin/bash\necho "scontrol $*" >> {calls}\n'
                f'case "$1" in update) exit {exit_codes.get("drain", 0)} ;; '
                f'requeuehold) echo "Requested operation is presently disabled for job $2" >&2; '
                f'exit {exit_codes.get("requeuehold", 0)} ;; esac\n')
    scancel = f'#!/bin/bash\necho "scancel $*" >> {calls}\nexit {exit_codes.get("scancel", 0)}\n'
    # active: True, False, or "first" (starting at the first look, stopped at the next)
    answer = {True: "echo 42", False: "",
              "first": f'grep -q squeue {calls}.seen 2>/dev/null || {{ echo squeue > {calls}.seen; echo 42; }}'}[active]
    squeue = (f'#!/bin/bash\necho "squeue $*" >> {calls}\n{answer}\n'
              f'exit {exit_codes.get("squeue", 0)}\n')
    for name, text in (("scontrol", scontrol), ("scancel", scancel), ("squeue", squeue)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return bin_dir, calls


def slurm_calls(calls: Path) -> list[str]:
    return calls.read_text().splitlines() if calls.exists() else []


SQUEUE = "squeue -h -j 42 -t CONFIGURING,RUNNING -o %i"


def test_a_refused_job_is_requeued_held_and_the_prolog_succeeds(tmp_path):
    """Exit 0 after drain and hold: a failed prolog would make slurmd report it until slurmctld forgets
    the job, and the first report after the Syncer lifted sunk's drain would drain 'Prolog error'."""
    bin_dir, calls = fake_slurm(tmp_path)
    done = run("prolog.sh", tmp_path, closed_port_url(), timeout=3, slurm_bin=bin_dir)
    assert done.returncode == 0, done.stderr
    drain, listed, hold = slurm_calls(calls)
    assert listed == SQUEUE
    assert drain.startswith("scontrol update nodename=node7 state=drain reason=k8s: sunk-lock: job 42: hook API ")
    assert hold == "scontrol requeuehold 42"
    assert "job 42 requeued and held" in done.stderr


def test_a_refused_job_that_cannot_be_requeued_is_cancelled(tmp_path, server):
    server.replies.append((403, {"error": "no such job", "reason": "Slurm shows no job 42"}))
    bin_dir, calls = fake_slurm(tmp_path, requeuehold=1)
    done = run("prolog.sh", tmp_path, server.url, slurm_bin=bin_dir)
    assert done.returncode == 0, done.stderr
    assert slurm_calls(calls)[1:] == [SQUEUE, "scontrol requeuehold 42", SQUEUE, "scancel 42"]
    assert "cannot be requeued (Requested operation is presently disabled for job 42): cancelled" in done.stderr
    assert drained_with(done) == "sunk-lock: job 42: Slurm shows no job 42"


@pytest.mark.parametrize(("codes", "expected_calls"), [
    ({"drain": 1}, ["drain"]),  # a node it could not drain: Slurm drains it for the failed prolog
    ({"requeuehold": 1, "squeue": 1, "scancel": 1},
     ["drain", SQUEUE, "scontrol requeuehold 42", SQUEUE, "scancel 42"]),  # slurmctld unreachable
])
def test_the_prolog_fails_when_it_cannot_drain_or_stop_the_job(tmp_path, codes, expected_calls):
    bin_dir, calls = fake_slurm(tmp_path, **codes)
    done = run("prolog.sh", tmp_path, closed_port_url(), timeout=3, slurm_bin=bin_dir)
    assert done.returncode == 1
    made = ["drain" if c.startswith("scontrol update") else c for c in slurm_calls(calls)]
    assert made == expected_calls


def test_a_job_another_nodes_prolog_stopped_is_left_alone(tmp_path):
    """Two nodes of one job refuse it at once, or its user cancels it meanwhile: a job no longer starting is
    neither requeued (requeuehold brings a cancelled job back, held: seen on 24.11) nor cancelled again."""
    bin_dir, calls = fake_slurm(tmp_path, active=False)
    done = run("prolog.sh", tmp_path, closed_port_url(), timeout=3, slurm_bin=bin_dir)
    assert done.returncode == 0, done.stderr
    assert slurm_calls(calls)[1:] == [SQUEUE]
    assert "no longer starting" in done.stderr


def test_a_job_held_by_another_nodes_prolog_at_the_same_moment_is_not_cancelled(tmp_path):
    """Both nodes see the job starting; the other requeues it held first, so this requeuehold is refused
    (the job is pending): cancelling it now would lose the hold."""
    bin_dir, calls = fake_slurm(tmp_path, active="first", requeuehold=1)
    done = run("prolog.sh", tmp_path, closed_port_url(), timeout=3, slurm_bin=bin_dir)
    assert done.returncode == 0, done.stderr
    assert slurm_calls(calls)[1:] == [SQUEUE, "scontrol requeuehold 42", SQUEUE]
    assert "stopped meanwhile" in done.stderr


def test_the_last_line_of_hooks_env_counts_without_its_newline(tmp_path, server):
    """An operator's file ending in SUNK_SYNCER_URL=... without a newline: read, not a misconfiguration."""
    (tmp_path / "token-node7").write_text(TOKEN)
    hooks_env = tmp_path / "hooks.env"
    hooks_env.write_text(f"SUNK_HOOKS_TOKEN_FILE={tmp_path}/token-%n\nSUNK_SYNCER_URL={server.url}")
    env = {"SUNK_HOOKS_ENV": str(hooks_env), "SLURMD_NODENAME": "node7", "SLURM_JOB_ID": "42",
           "PATH": os.environ["PATH"]}
    for script in ("prolog.sh", "epilog.sh"):
        done = subprocess.run(["bash", str(SCRIPTS / script)], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
    assert [call["path"] for call in server.calls] == ["/api/v1/nodes/node7/pre-hook", "/api/v1/nodes/node7/post-hook"]

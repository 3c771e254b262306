"""prolog.sh and epilog.sh, run by bash against a stand-in hook API: what they send, when they fail.

(Slurm itself running them, and draining, is in tests/cluster/test_locking_flows.py.)
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sunk.scripts import shipped_script
from sunk.translate.drains import (
    GangPlaceholderDrain,
    HookUnreachableDrain,
    LockTimeoutDrain,
    PlaceholderDrain,
    parse,
)

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
        slurm_bin: Path | None = None, env_lines: str = "",
        script_dir: Path = SCRIPTS) -> subprocess.CompletedProcess[str]:
    (tmp_path / "token-node7").write_text(TOKEN + "\n")  # this node's token; %n names the node
    hooks_env = tmp_path / "hooks.env"
    if env_file:
        hooks_env.write_text(f'SUNK_SYNCER_URL="{url}"\nSUNK_HOOKS_TOKEN_FILE={tmp_path}/token-%n\n'
                             f"SUNK_LOCK_TIMEOUT={lock_timeout or timeout}\n{env_lines}")
    env = {b"SUNK_HOOKS_ENV": os.fsencode(hooks_env), b"SLURMD_NODENAME": b"node7", b"SLURM_JOB_ID": b"42",
           b"SLURM_JOB_EXTRA": extra, b"PATH": os.fsencode(os.environ["PATH"])}
    if slurm_bin is not None:
        env[b"PATH"] = os.fsencode(f"{slurm_bin}:{os.environ['PATH']}")
    return subprocess.run(["bash", str(script_dir / script)], env=env, capture_output=True, text=True, timeout=60)


def test_without_hooks_env_both_scripts_do_nothing(tmp_path, server):
    for script in ("prolog.sh", "epilog.sh"):
        done = run(script, tmp_path, server.url, env_file=False)
        assert done.returncode == 0 and done.stderr == ""
    assert server.calls == []


def test_a_hooks_env_that_is_a_directory_is_no_hooks_env(tmp_path, server):
    """A hostPath mount of a file the host lacks makes a directory in its place: readable, yet no file.
    Read under ``set -u`` it would end the prolog with an error, and slurmd drain the node 'Prolog error'."""
    (tmp_path / "hooks.env").mkdir()
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
    """A request the Syncer will never accept: retrying it only delays the drain."""
    server.replies.append((400, {"error": "the body is not valid JSON"}))
    started = time.monotonic()
    done = run("prolog.sh", tmp_path, server.url, timeout=30)
    assert done.returncode == 1 and time.monotonic() - started < 10
    assert "pre-hook failed with HTTP 400" in done.stderr and "the body is not valid JSON" in done.stderr
    assert len(server.calls) == 1


def test_prolog_retries_a_restarting_syncer_within_its_budget(tmp_path, server):
    server.replies.append((503, {"error": "starting"}))
    done = run("prolog.sh", tmp_path, server.url, timeout=30)
    assert done.returncode == 0, done.stderr
    assert len(server.calls) == 2
    assert server.calls[1]["body"]["timeout"] <= server.calls[0]["body"]["timeout"] - 2  # one budget, not two


BUSY = (429, {"error": "too many pre-hooks waiting", "reason": "hook API busy", "retry_after": 1})


def test_prolog_asks_a_busy_syncer_again_after_its_retry_after(tmp_path, server):
    """A 429 recorded nothing: the prolog asks again within its one budget, after the Syncer's Retry-After."""
    server.replies.append(BUSY)
    done = run("prolog.sh", tmp_path, server.url, timeout=30)
    assert done.returncode == 0, done.stderr
    assert len(server.calls) == 2 and "drain" not in done.stderr
    assert server.calls[1]["body"]["timeout"] <= server.calls[0]["body"]["timeout"] - 1  # one budget, not two


def test_a_syncer_busy_all_the_timeout_long_drains_with_a_reason_it_lifts(tmp_path, server):
    server.replies.extend([BUSY] * 20)
    done = run("prolog.sh", tmp_path, server.url, timeout=4)
    assert done.returncode == 1
    drain = parse(drained_with(done))
    assert isinstance(drain, HookUnreachableDrain) and drain.job_id == 42, done.stderr
    assert drain.detail == f"HTTP 429, {len(server.calls)} attempts" and len(server.calls) >= 2


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


TRANSIENT = [
    (401, {"error": "wrong bearer token for Slurm node node7"}),  # a token rotation not yet seen by both sides
    (404, {"error": "unknown node", "reason": "unknown Slurm node node7 (no slurmd Pod)"}),  # a node just made
    # A bug or a failing Syncer: its drain_reason is no lock timeout (only a 504 states one).
    (500, {"error": "bug", "drain_reason": "k8s: sunk-lock: job 42: lock timeout after 5s: lock still pending"}),
]


def test_a_failing_syncer_drains_with_a_reason_it_lifts_once_back(tmp_path, server):
    """A 500 all the lock timeout long: a failing Syncer, whose recovery the Syncer itself sees; the drain it
    ends in is one the Syncer lifts, not one that waits for an operator."""
    server.replies.extend([TRANSIENT[2]] * 10)
    # 5 s, not 3: the script reads whole seconds, and a 3 s budget begun late in a second left no room for a
    # retry (CI: one call, then the drain).
    done = run("prolog.sh", tmp_path, server.url, timeout=5)
    assert done.returncode == 1
    assert len(server.calls) >= 2  # retried, not failed at once
    drain = parse(drained_with(done))
    assert isinstance(drain, HookUnreachableDrain) and drain.job_id == 42, done.stderr
    assert drain.detail == f"HTTP 500, {len(server.calls)} attempts"


@pytest.mark.parametrize(("status", "body"), TRANSIENT[:2])
def test_a_token_or_node_refused_all_the_timeout_long_drains_for_an_operator(tmp_path, server, status, body):
    """Retried all the lock timeout long (a rotation the kubelet has not carried to this node yet, a node just
    made); refused still, it is a configuration only an operator mends. A drain the Syncer lifts would send every
    next job on the node into the same failure, each requeued and held."""
    server.replies.extend([(status, body)] * 10)
    # 5 s, not 3: the script reads whole seconds, and a 3 s budget begun late in a second leaves no room for a retry.
    done = run("prolog.sh", tmp_path, server.url, timeout=5)
    assert done.returncode == 1
    assert len(server.calls) >= 2  # retried, not failed at once
    reason = drained_with(done)
    assert reason.startswith("sunk-lock: job 42: the hook API refused this node for 5s"), reason
    assert f"HTTP {status}, {len(server.calls)} attempts" in reason and parse(reason) is None


@pytest.mark.parametrize(("status", "body"), TRANSIENT)
def test_prolog_locks_once_a_401_404_or_500_passes(tmp_path, server, status, body):
    """Retried within the one budget: the answer after the transient one decides."""
    server.replies.append((status, body))
    done = run("prolog.sh", tmp_path, server.url, timeout=30)
    assert done.returncode == 0, done.stderr
    assert len(server.calls) == 2 and "drain" not in done.stderr
    assert server.calls[1]["body"]["timeout"] <= server.calls[0]["body"]["timeout"] - 2


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
    (400, {"error": "the body is not valid JSON"}),
    (403, {"error": "no such job", "reason": "Slurm shows no job 42"}),
    (413, {"error": "the body is larger than 4096 bytes"}),
    (422, {"error": "unprocessable"}),
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


# ---- the epilog drains for a placeholder when the Syncer cannot be asked -----------------------------------------

POD_IDENTITY = "sunk-pod=0f1e-uid ns=team-a name=train-0 sched=sunk-scheduler"
GANG_IDENTITY = "sunk-gang=job/0f1e2d3c-0000-4000-8000-00000000000a ns=team-a size=2 members=0a1b2c3d,4e5f6a7b"


def epilog_slurm(tmp_path: Path, admin_comment: str = "", comment: str = "", name: str = "job",
                 node_state: str = "mixed|none", drain_exit: int = 0) -> tuple[Path, Path]:
    """squeue, scontrol and sinfo as Slurm would answer the epilog about job 42, recording their calls. squeue
    prints only the fields it is asked for (-O), padded as squeue pads them; scontrol show job prints the whole
    record, where the user's Comment and name come before the AdminComment and may hold its text."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    fields = {"admin_comment": admin_comment or "(null)", "comment": comment or "(null)", "name": name}
    squeue = (f'#!/bin/bash\necho "squeue $*" >> {calls}\nfor a in "$@"; do case "$a" in\n'
              + "".join(f"  {key}:*) printf '%-1100s\\n' {shlex.quote(value)} ;;\n" for key, value in fields.items())
              + "esac; done\n")
    record = (f"JobId=42 JobName={name} UserId=kube(1001) JobState=COMPLETING Comment={comment or '(null)'} "
              f"AdminComment={admin_comment or '(null)'} NodeList=node7")
    scontrol = (f'#!/bin/bash\necho "scontrol $*" >> {calls}\n'
                f'case "$1" in show) printf "%s\\n" {shlex.quote(record)} ;; update) exit {drain_exit} ;; esac\n')
    sinfo = f"#!/bin/bash\necho \"sinfo $*\" >> {calls}\nprintf '%s\\n' {shlex.quote(node_state)}\n"
    for tool, text in (("squeue", squeue), ("scontrol", scontrol), ("sinfo", sinfo)):
        (bin_dir / tool).write_text(text)
        (bin_dir / tool).chmod(0o755)
    return bin_dir, calls


EPILOG_SQUEUE = "squeue -h -t all -j 42 -O admin_comment:1100"


def epilog_drains(calls: Path) -> list[str]:
    return [c.removeprefix("scontrol update nodename=node7 state=drain reason=") for c in slurm_calls(calls)
            if c.startswith("scontrol update")]


@pytest.mark.parametrize(("admin_comment", "drain"), [
    (POD_IDENTITY, PlaceholderDrain("team-a", "train-0", 42, "0f1e-uid")),  # its UID: only that Pod holds it
    (GANG_IDENTITY, GangPlaceholderDrain("team-a", "job/0f1e2d3c-0000-4000-8000-00000000000a", 42)),
])
def test_the_epilog_drains_for_a_placeholder_with_a_reason_the_syncer_lifts_when_it_cannot_be_asked(
        tmp_path, server, admin_comment, drain):
    server.replies.append((500, {"error": "bug"}))
    bin_dir, calls = epilog_slurm(tmp_path, admin_comment=admin_comment)
    done = run("epilog.sh", tmp_path, server.url, slurm_bin=bin_dir)
    assert done.returncode == 0, done.stderr
    assert slurm_calls(calls) == [EPILOG_SQUEUE, SINFO, f"scontrol update nodename=node7 state=drain "
                                                        f"reason={drain.reason()}"]
    (reason,) = epilog_drains(calls)
    assert parse(reason) == drain  # the Syncer's grammar: lifted once no Pod of the job is left on the node


def test_the_epilog_drains_for_a_placeholder_when_the_syncer_never_answers(tmp_path):
    bin_dir, calls = epilog_slurm(tmp_path, admin_comment=POD_IDENTITY)
    done = run("epilog.sh", tmp_path, closed_port_url(), slurm_bin=bin_dir)
    assert done.returncode == 0, done.stderr
    assert epilog_drains(calls) == [PlaceholderDrain("team-a", "train-0", 42, "0f1e-uid").reason()]


@pytest.mark.parametrize("reply", [(202, {"state": "locked"}), (401, {"error": "wrong token"}),
                                   (404, {"error": "unknown Slurm node node7"})])
def test_the_epilog_leaves_the_drain_to_the_syncer_once_it_answered(tmp_path, server, reply):
    """202: the Syncer drained if the Pod was there; a 4xx is a misconfiguration no retry mends (the prolog
    refuses every job of such a node anyway)."""
    server.replies.append(reply)
    bin_dir, calls = epilog_slurm(tmp_path, admin_comment=POD_IDENTITY)
    assert run("epilog.sh", tmp_path, server.url, slurm_bin=bin_dir).returncode == 0
    assert slurm_calls(calls) == []


@pytest.mark.parametrize(("admin_comment", "comment", "name"), [
    ("", "", "job"),  # no placeholder
    ("", f"AdminComment={POD_IDENTITY}", "job"),  # its user's Comment forges the identity
    ("", "x", f"AdminComment={GANG_IDENTITY}"),  # its name
    ("site accounting tag", "", "job"),  # an AdminComment that is no identity
    (f"site: {POD_IDENTITY}", "", "job"),  # only a whole identity is one (as the Syncer reads it)
    ("sunk-pod=u ns=Team_A name=x", "", "job"),  # nor one naming no Kubernetes namespace
    ("sunk-pod=U_1 ns=team-a name=x", "", "job"),  # nor a UID the Syncer's grammar would not read back
    (f"sunk-pod={'a' * 65} ns=team-a name=x", "", "job"),
])
def test_the_epilog_drains_for_nothing_but_an_identity_in_the_admin_comment(tmp_path, server, admin_comment,
                                                                           comment, name):
    server.replies.append((500, {"error": "bug"}))
    bin_dir, calls = epilog_slurm(tmp_path, admin_comment=admin_comment, comment=comment, name=name)
    done = run("epilog.sh", tmp_path, server.url, slurm_bin=bin_dir)
    assert done.returncode == 0, done.stderr
    assert slurm_calls(calls) == [EPILOG_SQUEUE]  # no scontrol: no drain


@pytest.mark.parametrize("node_state", ["draining|hardware: fan", "drained|NHC: gpu xid 79", "down*|Not responding"])
def test_the_epilogs_drain_leaves_an_operators_alone(tmp_path, server, node_state):
    server.replies.append((500, {"error": "bug"}))
    bin_dir, calls = epilog_slurm(tmp_path, admin_comment=POD_IDENTITY, node_state=node_state)
    done = run("epilog.sh", tmp_path, server.url, slurm_bin=bin_dir)
    assert done.returncode == 0 and epilog_drains(calls) == []
    assert "left as it is" in done.stderr


def script_dir(tmp_path: Path, form: str) -> Path:
    """The repository's scripts (the library they source beside them), or each as it ships (shipped_script):
    alone, as the chart mounts it in prolog.d/epilog.d, its library inlined."""
    if form == "repository":
        return SCRIPTS
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    for script in ("prolog.sh", "epilog.sh"):
        (shipped / script).write_text(shipped_script(script))
    return shipped


@pytest.mark.parametrize("form", ["repository", "shipped"])
@pytest.mark.parametrize(("node_state", "kept"), [("drained|hardware: fan", True), ("mixed|none", False)])
def test_both_scripts_keep_an_operators_drain_with_their_library_sourced_or_inlined(tmp_path, server, form,
                                                                                    node_state, kept):
    """foreign_drain is one file: beside the repository's scripts it is sourced, in what ships it is inlined."""
    scripts = script_dir(tmp_path, form)
    server.replies += [(403, {"error": "no such job", "reason": "Slurm shows no job 42"}), (500, {"error": "bug"})]
    (tmp_path / "prolog").mkdir()
    (tmp_path / "epilog").mkdir()
    prolog_bin, prolog_calls = fake_slurm(tmp_path / "prolog", node_state=node_state)
    prolog = run("prolog.sh", tmp_path, server.url, slurm_bin=prolog_bin, script_dir=scripts)
    epilog_bin, epilog_calls = epilog_slurm(tmp_path / "epilog", admin_comment=POD_IDENTITY, node_state=node_state)
    epilog = run("epilog.sh", tmp_path, server.url, slurm_bin=epilog_bin, script_dir=scripts)
    for done in (prolog, epilog):
        assert done.returncode == 0, done.stderr
        assert "command not found" not in done.stderr and "No such file" not in done.stderr, done.stderr
        assert ("node7 is out of service for a reason sunk did not write" in done.stderr) is kept
    assert sinfo_calls(prolog_calls) == [SINFO] and SINFO in slurm_calls(epilog_calls)
    prolog_drains = [c for c in slurm_calls(prolog_calls) if c.startswith("scontrol update")]
    assert (prolog_drains, epilog_drains(epilog_calls)) == (([], []) if kept else (
        ["scontrol update nodename=node7 state=drain reason=sunk-lock: job 42: Slurm shows no job 42"],
        [PlaceholderDrain("team-a", "train-0", 42, "0f1e-uid").reason()]))


def test_the_epilog_never_fails_even_when_it_cannot_drain(tmp_path, server):
    server.replies.append((500, {"error": "bug"}))
    bin_dir, calls = epilog_slurm(tmp_path, admin_comment=POD_IDENTITY, drain_exit=1)
    done = run("epilog.sh", tmp_path, server.url, slurm_bin=bin_dir)
    assert done.returncode == 0 and "could not drain node7" in done.stderr
# ---- TLS, and the token kept off the command line ------------------------------------------------------------


def stub_curl(tmp_path: Path, status: str = "200") -> tuple[Path, Path]:
    """A curl that records its argv (what ps shows) and its stdin apart, answers ``status`` with ``{}``."""
    bin_dir, record = tmp_path / "curlbin", tmp_path / "curl-argv"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "curl").write_text(
        '#!/bin/bash\nprintf "%s\\n" "$@" >> ' + str(record) + '\ncat > ' + str(record) + '.stdin\n'
        'while [ $# -gt 0 ]; do [ "$1" = -o ] && { echo "{}" > "$2"; shift; }; shift; done\n'
        f'printf {status}\n')
    (bin_dir / "curl").chmod(0o755)
    return bin_dir, record


@pytest.mark.parametrize("script", ["prolog.sh", "epilog.sh"])
def test_a_ca_bundle_in_hooks_env_is_passed_to_curl_and_the_token_never_on_its_command_line(tmp_path, script):
    ca = tmp_path / "ca.crt"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    bin_dir, record = stub_curl(tmp_path, "202" if script == "epilog.sh" else "200")
    done = run(script, tmp_path, "https://syncer.example:8000", slurm_bin=bin_dir, env_lines=f"SUNK_HOOKS_CA={ca}\n")
    assert done.returncode == 0, done.stderr
    argv = record.read_text().splitlines()
    assert argv[argv.index("--cacert") + 1] == str(ca)
    assert "https://syncer.example:8000/api/v1/nodes/node7/" in " ".join(argv)
    assert TOKEN not in record.read_text()  # what ps shows
    assert f"Bearer {TOKEN}" in (tmp_path / "curl-argv.stdin").read_text()


@pytest.mark.parametrize("script", ["prolog.sh", "epilog.sh"])
def test_without_a_ca_bundle_curl_uses_the_systems(tmp_path, script):
    bin_dir, record = stub_curl(tmp_path, "202" if script == "epilog.sh" else "200")
    assert run(script, tmp_path, "http://syncer:8000", slurm_bin=bin_dir).returncode == 0
    assert "--cacert" not in record.read_text().splitlines()


def test_an_unreadable_ca_bundle_drains_for_an_operator(tmp_path):
    slurm_bin, calls = fake_slurm(tmp_path)
    done = run("prolog.sh", tmp_path, "https://syncer:8000", slurm_bin=slurm_bin,
               env_lines=f"SUNK_HOOKS_CA={tmp_path}/missing.crt\n")
    assert done.returncode == 0, done.stderr
    drain = next(c for c in slurm_calls(calls) if c.startswith("scontrol update"))
    assert "reason=sunk-lock: job 42: cannot read the hook API's CA bundle" in drain


# ---- how the prolog stops a job it refused --------------------------------------------------------------------


def fake_slurm(tmp_path: Path, active: bool | str = True, node_state: str | None = "idle|none",
               **exit_codes: int) -> tuple[Path, Path]:
    """scontrol, squeue, scancel and sinfo that record their arguments and exit with ``exit_codes`` (keyed
    ``drain``, ``requeuehold``, ``squeue``, ``scancel``, ``sinfo``; 0 when not given). squeue lists the job as
    configuring or running while ``active``. sinfo prints ``node_state`` ("STATE|REASON", as ``-o '%T|%E'``;
    nothing when None) and records its calls apart, in ``sinfo_calls``."""
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
    state = "" if node_state is None else f"printf '%s\\n' {shlex.quote(node_state)}\n"
    failed = 'echo "sinfo: error: Unable to contact slurm controller" >&2\n' if exit_codes.get("sinfo") else ""
    sinfo = f'#!/bin/bash\necho "sinfo $*" >> {calls}.sinfo\n{state}{failed}exit {exit_codes.get("sinfo", 0)}\n'
    for name, text in (("scontrol", scontrol), ("scancel", scancel), ("squeue", squeue), ("sinfo", sinfo)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return bin_dir, calls


def slurm_calls(calls: Path) -> list[str]:
    return calls.read_text().splitlines() if calls.exists() else []


def sinfo_calls(calls: Path) -> list[str]:
    return slurm_calls(calls.with_name(calls.name + ".sinfo"))


SQUEUE = "squeue -h -j 42 -t CONFIGURING,RUNNING -o %i"
SINFO = "sinfo -h -N -n node7 -o %T|%E"


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


# ---- a node already out of service for a reason sunk did not write ------------------------------------------

FAILURES = {  # a prolog failure: the hook API's answer, and the reason the prolog would drain with
    "lock timeout": ((504, {"error": "not locked", "reason": "lock timeout after 5s",
                            "drain_reason": "k8s: sunk-lock: job 42: lock timeout after 5s: lock still pending"}),
                     "k8s: sunk-lock: job 42: lock timeout after 5s: lock still pending"),
    "refusal": ((403, {"error": "no such job", "reason": "Slurm shows no job 42"}),
                "sunk-lock: job 42: Slurm shows no job 42"),
}


@pytest.mark.parametrize("failure", FAILURES)
@pytest.mark.parametrize("node_state", ["drained|hardware: fan", "down*|Not responding", "draining|NHC: gpu xid 79",
                                        "fail|failing DIMM", "failing|failing DIMM", "inval|Low RealMemory",
                                        "drained|reason | with a bar"])
def test_an_operators_drain_survives_a_prolog_failure(tmp_path, server, failure, node_state):
    """Slurm keeps one reason per node: a drain written over an operator's (or NHC's, or Slurm's own) would
    lose it, and a k8s: one would let the Syncer resume a broken node. The job is still stopped."""
    reply, would_drain = FAILURES[failure]
    server.replies.append(reply)
    bin_dir, calls = fake_slurm(tmp_path, node_state=node_state)
    done = run("prolog.sh", tmp_path, server.url, slurm_bin=bin_dir)
    assert done.returncode == 0, done.stderr
    assert slurm_calls(calls) == [SQUEUE, "scontrol requeuehold 42"]  # no scontrol update: no drain
    assert sinfo_calls(calls) == [SINFO]
    assert f"left as it is (would have drained: {would_drain})" in done.stderr
    assert ": drain: " not in done.stderr and "job 42 requeued and held" in done.stderr


@pytest.mark.parametrize("node_state", [
    "idle|none",
    "allocated|none",
    "mixed|hardware: fan",  # a reason left on a node still in service: not out of service
    "completing|hardware: fan",
    "idle*|Not responding",  # (in service, for now: Slurm marks it down after SlurmdTimeout)
    "drained|none",
    "drained|k8s: sunk-lock: job 41: hook API unreachable (HTTP 000, 3 attempts)",  # sunk's own: the Syncer's
    "down*|k8s: sunk-stuck: pod a/b uid=u1 stuck terminating on Node w (NotReady or gone) after job 40",
])
def test_a_node_in_service_or_drained_by_sunk_is_drained_with_the_prologs_reason(tmp_path, server, node_state):
    """Only a reason sunk did not write is kept; sunk's own is replaced by this job's, which says why now."""
    assert_drained_as_before(tmp_path, server, "lock timeout", node_state=node_state)


@pytest.mark.parametrize("sinfo_exit", [1, 0])
def test_a_node_whose_state_sinfo_does_not_tell_is_drained_as_before(tmp_path, server, sinfo_exit):
    """slurmctld unreachable, or a node sinfo does not list: nothing shows another reason to keep, and an
    undrained node would start the next job beside Kubernetes workloads."""
    assert_drained_as_before(tmp_path, server, "refusal", node_state=None, sinfo=sinfo_exit)


def assert_drained_as_before(tmp_path, server, failure: str, **slurm) -> None:
    """The prolog meets ``failure`` on a node whose sinfo answer ``slurm`` sets: it asks sinfo once, drains with
    the failure's reason, and stops the job (requeued, held)."""
    reply, reason = FAILURES[failure]
    server.replies.append(reply)
    bin_dir, calls = fake_slurm(tmp_path, **slurm)
    done = run("prolog.sh", tmp_path, server.url, slurm_bin=bin_dir)
    assert done.returncode == 0, done.stderr
    assert slurm_calls(calls) == [f"scontrol update nodename=node7 state=drain reason={reason}", SQUEUE,
                                  "scontrol requeuehold 42"]
    assert sinfo_calls(calls) == [SINFO]
    assert drained_with(done) == reason

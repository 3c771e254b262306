"""The placeholder job script, run by bash against a stand-in hook API and stand-in commands.

The real thing runs under slurmd in the cluster tests; here each call it makes is seen. Its PATH
starts with stand-ins that record their argv (what every user of the node can read in ps): scontrol
and sinfo (a cluster whose nodes are all in service), and curl, date and sleep, which then run the
real thing.
"""

from __future__ import annotations

import http.server
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from importlib import resources
from pathlib import Path

import pytest

from scheduler.reconciler import PLACEHOLDER_SCRIPT
from sunk.model.hostlist import expand
from sunk.scripts import LIBRARY, SOURCE_LINE, script_text
from sunk.translate.drains import GangPlaceholderDrain, PlaceholderDrain, parse

SCRIPT = resources.files("sunk").joinpath("scripts/placeholder.sh")
REPO = Path(__file__).resolve().parents[2]
REAL = {name: shutil.which(name) for name in ("curl", "date", "sleep", "tee")}
US = "\x1f"  # between the arguments of one recorded argv
# What `scontrol show hostnames LIST` prints: one node a line.
HOSTNAMES = "import sys; from sunk.model.hostlist import expand; print(*expand(sys.argv[1]), sep=chr(10))"


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


def stand_in(bin_dir: Path, name: str, then: str) -> None:
    """A command on the script's PATH that appends its argv to argv.log (one line, arguments split by US),
    then does ``then``."""
    record = (f'line={name}; for arg in "$@"; do line="$line$(printf \'\\037\')$arg"; done\n'
              f'printf \'%s\\n\' "$line" >> {bin_dir.parent / "argv.log"}\n')
    (bin_dir / name).write_text(f"#!/bin/sh\n{record}{then}\n")
    (bin_dir / name).chmod(0o755)


def recorded_argv(tmp_path: Path) -> list[list[str]]:
    """Every argv the stand-ins recorded, in order: the command's name, then its arguments."""
    log = tmp_path / "argv.log"
    return [line.split(US) for line in log.read_text().splitlines()] if log.exists() else []


def spooled(tmp_path: Path) -> Path:
    """What the scheduler submits, where slurmd runs it from: its spool, with no other file of sunk beside it."""
    spool = tmp_path / "spool" / "job42"
    spool.mkdir(parents=True)
    (spool / "slurm_script").write_text(PLACEHOLDER_SCRIPT)
    return spool / "slurm_script"


def run_placeholder(hook_api: HookAPI, tmp_path: Path, kill_wait: int = 30,
                    extra_env: dict[str, str] | None = None, script: Path | None = None,
                    node_state: str = "") -> tuple[subprocess.Popen, Path]:
    """The script (the repository's, the library it sources beside it, unless given) as Slurm runs it; sinfo
    prints ``node_state`` ("STATE|REASON"; nothing: no node is out of service)."""
    scontrol_log = tmp_path / "scontrol.args"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_in(bin_dir, "scontrol", f'echo "$@" >> {scontrol_log}\n'
                                  f'[ "$1 $2" = "show hostnames" ] || exit 0\n'
                                  f'PYTHONPATH={REPO} exec {sys.executable} -c "{HOSTNAMES}" "$3"')
    stand_in(bin_dir, "sinfo", f"printf '%s' {shlex.quote(node_state)}")
    # curl's stdin (its -K config) is kept in curl.stdin on its way through.
    stand_in(bin_dir, "curl", f'{REAL["tee"]} -a {tmp_path / "curl.stdin"} | {REAL["curl"]} "$@"')
    for name in ("date", "sleep"):
        stand_in(bin_dir, name, f'exec {REAL[name]} "$@"')
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "42", "SLURMD_NODENAME": "node1",
           "SUNK_HOOKS_URL": hook_api.url, "SUNK_HOOK_TOKEN": "tok", "SUNK_POD_UID": "uid-a",
           "SUNK_KILL_WAIT": str(kill_wait), "SUNK_POD": "ns/p", **(extra_env or {})}
    proc = subprocess.Popen(["bash", str(script or SCRIPT)], env=env, start_new_session=True, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return proc, scontrol_log


def drains(scontrol_log: Path) -> list[tuple[str, str]]:
    """(node, reason) of each drain the script wrote with scontrol, its node list expanded; its only other
    scontrol calls may be reads (``show``), never another write."""
    found: list[tuple[str, str]] = []
    for line in scontrol_log.read_text().splitlines() if scontrol_log.exists() else []:
        drain = re.fullmatch(r"update nodename=(\S+) state=drain reason=(.+)", line)
        assert drain or line.startswith("show "), line
        found += [(node, drain[2]) for node in expand(drain[1])] if drain else []
    return found


class SessionArgv:
    """The argv of every process in the script's session, as ps shows it to every user of the node: /proc,
    sampled every 2 ms while the script runs (a process that lives less may be missed)."""

    def __init__(self, sid: int) -> None:
        self.sid = sid
        self.seen: set[tuple[str, ...]] = set()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._done.is_set():
            for entry in os.scandir("/proc"):
                try:
                    stat = Path(entry.path, "stat").read_text() if entry.name.isdigit() else ""
                    if not stat or int(stat.rsplit(")", 1)[1].split()[3]) != self.sid:
                        continue
                    argv = Path(entry.path, "cmdline").read_bytes().split(b"\0")
                except (OSError, ValueError, IndexError):
                    continue  # (gone since the listing)
                self.seen.add(tuple(arg.decode(errors="replace") for arg in argv if arg))
            time.sleep(0.002)

    def stop(self) -> set[tuple[str, ...]]:
        self._done.set()
        self._thread.join(5)
        return self.seen


def stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the script's own sleep, if it is still there
    except ProcessLookupError:
        pass
    proc.wait(5)


def test_calls_in_started_once_then_on_sigterm_waits_for_the_pod_to_go(hook_api, tmp_path: Path):
    """Slurm's state says the job started, not the script: it writes nothing to Slurm (no scontrol), and only
    asks the scheduler to look now, once, with a short timeout (a lost call costs the cache's next reread)."""
    proc, scontrol_log = run_placeholder(hook_api, tmp_path)
    try:
        wait_until(lambda: hook_api.paths() == ["POST /api/v1/jobs/42/started"])
        _, _, headers = hook_api.calls[0]
        assert headers["Authorization"] == "Bearer tok" and headers["X-Sunk-Pod-UID"] == "uid-a"
        started = [argv for argv in recorded_argv(tmp_path) if argv[0] == "curl"]
        assert len(started) == 1 and started[0][-1] == f"{hook_api.url}/api/v1/jobs/42/started"
        assert started[0][started[0].index("-m") + 1] == "3"

        proc.send_signal(signal.SIGTERM)  # Slurm ends the job
        assert proc.wait(10) == 0  # the Pod is gone (404): no drain
        paths = hook_api.paths()
        assert paths[1] == "POST /api/v1/jobs/42/terminating"
        assert paths[2].startswith("GET /api/v1/jobs/42/pod?wait=")
        assert all(h["X-Sunk-Pod-UID"] == "uid-a" for _, _, h in hook_api.calls)
        assert "drain" not in " ".join(paths) and not scontrol_log.exists()  # no scontrol call at all
        assert "scontrol" not in {argv[0] for argv in recorded_argv(tmp_path)}
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
        assert "drain" not in " ".join(paths) and not scontrol_log.exists()
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
        assert not scontrol_log.exists()  # the scheduler drained: no scontrol of its own
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
        [(node, reason)] = drains(scontrol_log)  # its only write to Slurm
        assert node == "node1" and parse(reason) == PlaceholderDrain("ns", "p", 42, "uid-a"), reason  # its Pod's UID
    finally:
        stop(proc)


@pytest.mark.parametrize("form", ["repository", "submitted"])
@pytest.mark.parametrize(("node_state", "drained"), [("drained|hardware: fan", False), ("down*|Not responding", False),
                                                   ("idle|none", True), ("drained|k8s: sunk-lock: job 41: x", True)])
def test_without_the_scheduler_a_node_out_of_service_for_another_reason_is_left_as_it_is(
        hook_api, tmp_path, form, node_state, drained):
    """foreign_drain, sourced from beside the repository's script and inlined in what the scheduler submits (Slurm
    runs it from its spool, alone): an operator's reason is kept, sunk's own or none is drained over."""
    hook_api.pod_stays, hook_api.drain_status = True, 503
    script = spooled(tmp_path) if form == "submitted" else SCRIPT
    proc, scontrol_log = run_placeholder(hook_api, tmp_path, kill_wait=5, script=script, node_state=node_state)
    try:
        wait_until(lambda: hook_api.paths() == ["POST /api/v1/jobs/42/started"])
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 1
        stop(proc)  # (its sleep holds stderr open)
        stderr = proc.stderr.read().decode()
        assert "command not found" not in stderr and "No such file" not in stderr, stderr
        assert [argv[1:] for argv in recorded_argv(tmp_path) if argv[0] == "sinfo"] == [
            ["-h", "-N", "-n", "node1", "-o", "%T|%E"]]
        assert [node for node, _ in drains(scontrol_log)] == (["node1"] if drained else [])
        assert ("node1 is out of service for a reason sunk did not write" in stderr) is not drained
    finally:
        stop(proc)


def test_the_submitted_script_is_the_repositorys_with_its_library_inlined_once():
    submitted = PLACEHOLDER_SCRIPT
    assert SOURCE_LINE not in submitted and submitted.count("\nforeign_drain() {") == 1
    assert submitted.replace(script_text(LIBRARY).removesuffix("\n"), SOURCE_LINE) == SCRIPT.read_text()


@pytest.mark.parametrize("name", ["SUNK_HOOKS_URL", "SUNK_HOOK_TOKEN", "SUNK_KILL_WAIT", "SUNK_POD"])
def test_without_its_environment_the_script_fails_before_calling_anyone(hook_api, tmp_path, name):
    """What the scheduler submits it with (no SUNK_EXTRA any more: every run here goes without it)."""
    proc, scontrol_log = run_placeholder(hook_api, tmp_path, extra_env={name: ""})
    try:
        assert proc.wait(10) != 0
        assert name in proc.stderr.read().decode()
        assert hook_api.calls == [] and not scontrol_log.exists()
    finally:
        stop(proc)


GANG_ENV = {"SUNK_GANG": "3", "SUNK_POD_UID": "gang:ns/job/u", "SUNK_POD": "Job ns/train",
            "SLURM_JOB_NODELIST": "node[1-3]"}


def test_a_gangs_placeholder_calls_in_for_the_gang_and_waits_for_every_member(hook_api, tmp_path):
    """The batch host's script speaks for the gang: its owner in the header; the hook API answers for every member."""
    proc, scontrol_log = run_placeholder(hook_api, tmp_path, extra_env=GANG_ENV)
    try:
        wait_until(lambda: hook_api.paths() == ["POST /api/v1/jobs/42/started"])
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        assert not scontrol_log.exists()  # every member gone: nothing written to Slurm
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
        reason = "k8s: sunk-placeholder: gang ns/job/u outlived KillWait after job 42"
        assert sorted(drains(scontrol_log)) == [("node1", reason), ("node2", reason), ("node3", reason)]
        assert parse(reason) == GangPlaceholderDrain("ns", "job/u", 42), reason
    finally:
        stop(proc)


def test_the_bearer_token_is_on_no_command_line_only_in_curls_stdin(hook_api, tmp_path):
    """Every user of the node can read every process's argv (ps, /proc): the token reaches curl through its
    stdin as a -K config, written by printf, a bash builtin. Seen through every call (started, terminating,
    the long-poll, the drain, then scontrol's own drain) both in the argv each stand-in records and in what
    /proc shows of every process of the script's session meanwhile."""
    token = "tok-5e1f0c9a73d24b68"
    hook_api.pod_stays, hook_api.drain_status = True, 503  # the scheduler refuses the drain: scontrol drains
    proc, scontrol_log = run_placeholder(hook_api, tmp_path, kill_wait=5, extra_env={"SUNK_HOOK_TOKEN": token})
    watch = SessionArgv(proc.pid)  # (its own session: start_new_session)
    try:
        wait_until(lambda: hook_api.paths() == ["POST /api/v1/jobs/42/started"])
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 1
        seen = watch.stop()
        argvs = recorded_argv(tmp_path)
        assert {"curl", "scontrol", "date"} <= {argv[0] for argv in argvs}, argvs
        assert [argv for argv in [proc.args, *argvs, *seen] if any(token in arg for arg in argv)] == []
        # The sampling saw curl itself at work (each long-poll holds it 0.2 s): it looked where the token would be.
        assert any(argv[0] == REAL["curl"] and "-K" in argv for argv in seen), seen
        curls = [argv for argv in argvs if argv[0] == "curl"]
        verbs = [path.rsplit("/", 1)[1].split("?")[0] for path in hook_api.paths()]
        assert {"started", "terminating", "pod", "drain"} <= set(verbs) and len(curls) == len(verbs)
        assert all(argv[argv.index("-K") + 1] == "-" for argv in curls)  # its config from stdin
        assert (tmp_path / "curl.stdin").read_text() == f'header = "Authorization: Bearer {token}"\n' * len(curls)
        assert [h["Authorization"] for _, _, h in hook_api.calls] == [f"Bearer {token}"] * len(verbs)
        assert drains(scontrol_log) == [("node1", "k8s: sunk-placeholder: pod ns/p uid=uid-a outlived KillWait after "
                                                  "job 42")]
    finally:
        watch.stop()
        stop(proc)

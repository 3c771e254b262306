"""How a daemon reaches Slurm: the flags every daemon takes, one way to connect, the start-up check.

``--slurm-backend=rest`` (the default) talks to slurmrestd at ``--slurm-api-base`` with a
JWT: one given (``--slurm-auth-token``, ``$SLURM_JWT``), one read from a file that is read
again when it changes (``--slurm-auth-token-file``), or short-lived ones the daemon signs
itself with slurmctld's key (``--slurm-jwt-key-file``, renewed at half-life, so no token of
a running daemon ever expires). ``--slurm-backend=pyslurm`` uses Slurm's C API through pyslurm 25.11, which reads
slurm.conf from ``SLURM_CONF`` and authenticates with munge like the Slurm commands; the
REST flags are then ignored.

``check`` runs once at start, before the serving worker is forked. A pyslurm that cannot be
imported or initialised ends the start there, with one line saying what to do, rather than
a worker that fails to boot. One call then learns the Slurm release for the daemon's first
log line. Slurm being down is no reason not to start (the caches say they are stale until
it answers), so the release is then "unknown", with the reason.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
from typing import Any, Optional

import attrs

from sunk.flags import non_negative_duration, positive_duration

from . import BACKENDS, connect
from .client import SlurmClient

PYSLURM_HINT = ("install pyslurm 25.11 built against Slurm 25.11 (pip install 'sunk[pyslurm]'), "
                "or use --slurm-backend=rest")


class SlurmStartError(Exception):
    """The backend cannot work at all: the daemon must not start."""


@attrs.frozen
class SlurmSettings:
    backend: str = "rest"
    url: str = "http://127.0.0.1:6820"
    user: str = "root"
    token: Optional[str] = attrs.field(default=None, repr=False)
    token_file: Optional[str] = None
    jwt_key_file: Optional[str] = None  # sign tokens ourselves (first choice, then token_file, then token)
    poll_interval: float = 1.0  # seconds between the cache's list calls
    # Seconds between full job lists when the job cache refreshes from Slurm's job state list
    # (SlurmCache's job-state mode); 0 lists jobs in full on every refresh.
    job_full_list_interval: float = 300.0
    # Jobs with their per-node allocations (slurmrestd's DETAIL): only the Syncer's metrics read them.
    # Without, a job read is about a third of the bytes (8.5 KB against 28 KB on 24.11), and so is the
    # JSON a daemon decodes for each.
    job_allocations: bool = True

    def connect(self, **rest_options: Any) -> SlurmClient:
        """A client for this backend; ``rest_options`` (timeouts, retries) go to the REST client only."""
        if self.backend == "pyslurm":
            return connect("pyslurm")
        auth: dict[str, Any]
        if self.jwt_key_file:
            auth = {"jwt_key_file": self.jwt_key_file}
        elif self.token_file:
            auth = {"token_file": self.token_file}
        else:
            auth = {"token": self.token}
        return connect("rest", url=self.url, user=self.user, **auth,
                       **{"with_allocations": self.job_allocations, **rest_options})

    def describe(self) -> str:
        if self.backend == "pyslurm":
            return f"pyslurm (slurm.conf {os.environ.get('SLURM_CONF') or 'at libslurm default path'}, munge)"
        if self.jwt_key_file:
            auth = f"tokens it signs with key file {self.jwt_key_file}"
        elif self.token_file:
            auth = f"token file {self.token_file}"
        else:
            auth = "a fixed token"
        return f"rest (slurmrestd at {self.url} as {self.user}, {auth})"


def add_arguments(parser: argparse.ArgumentParser, *, poll_interval: float, poll_help: str) -> None:
    parser.add_argument("--slurm-backend", choices=BACKENDS, default="rest",
                        help="rest: slurmrestd; pyslurm: Slurm's C API (pyslurm 25.11, $SLURM_CONF, munge)")
    parser.add_argument("--slurm-api-base", default=os.environ.get("SLURM_REST_URL", "http://127.0.0.1:6820"),
                        help="slurmrestd base URL (rest)")
    parser.add_argument("--slurm-auth-token", default=os.environ.get("SLURM_JWT"), help="slurmrestd JWT (rest)")
    parser.add_argument("--slurm-auth-token-file", default=None, help="JWT file, re-read when it changes (rest)")
    parser.add_argument("--slurm-jwt-key-file", default=None,
                        help="slurmctld's jwt_key (AuthAltParameters=jwt_key=...): sign short-lived tokens for "
                             "--slurm-user here, renewed at half-life; read again when it changes (rest)")
    parser.add_argument("--slurm-user", default="root", help="user the JWT speaks for (rest)")
    parser.add_argument("--slurm-poll-interval", type=positive_duration, default=poll_interval, help=poll_help)
    parser.add_argument("--slurm-job-full-list-interval", type=non_negative_duration, default=300.0,
                        help="(rest) each poll reads Slurm's job state list (ids and states) and only the jobs "
                             "that changed; a full job list, for fields that change without a state change "
                             "(a pending job's reason, an Extra written by hand), comes this often. 0: a full "
                             "job list on every poll that finds a change (default 5m)")


def settings_from(args: argparse.Namespace, parser: argparse.ArgumentParser) -> SlurmSettings:
    if args.slurm_backend == "rest" and not (args.slurm_auth_token or args.slurm_auth_token_file
                                             or args.slurm_jwt_key_file):
        parser.error("give --slurm-auth-token (or $SLURM_JWT), --slurm-auth-token-file or --slurm-jwt-key-file")
    if args.slurm_auth_token_file and args.slurm_jwt_key_file:
        parser.error("give --slurm-auth-token-file or --slurm-jwt-key-file, not both")
    return SlurmSettings(backend=args.slurm_backend, url=args.slurm_api_base, user=args.slurm_user,
                         token=args.slurm_auth_token, token_file=args.slurm_auth_token_file,
                         jwt_key_file=args.slurm_jwt_key_file, poll_interval=args.slurm_poll_interval,
                         job_full_list_interval=args.slurm_job_full_list_interval)


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def probe_pyslurm() -> None:
    """Import pyslurm in a child process first: libslurm ends a process whose slurm.conf or auth
    plugin it cannot load (``fatal()``), which no ``except`` in this one could catch."""
    if "pyslurm" in sys.modules:  # imported already (or made unimportable: connect says so)
        return
    if importlib.util.find_spec("pyslurm") is None:
        raise SlurmStartError(f"--slurm-backend=pyslurm: pyslurm is not installed: {PYSLURM_HINT}")
    try:
        child = subprocess.run([sys.executable, "-c", "import pyslurm"], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        raise SlurmStartError("--slurm-backend=pyslurm: importing pyslurm took over 60 s (libslurm fetching its "
                              "configuration?): check SLURM_CONF, or use --slurm-backend=rest") from None
    if child.returncode != 0:
        why = (child.stderr.strip().splitlines() or [f"exit code {child.returncode}"])[-1]
        raise SlurmStartError(f"--slurm-backend=pyslurm: pyslurm could not be imported or initialised ({why}): "
                              f"check that SLURM_CONF names a readable slurm.conf and munge is set up, "
                              f"or use --slurm-backend=rest")


def check(settings: SlurmSettings) -> str:
    """Build a client once and ask it its Slurm release; SlurmStartError when the backend cannot work."""
    if settings.backend == "pyslurm":
        probe_pyslurm()
    try:
        client = settings.connect(retries=0, read_timeout=5.0)  # a start waits seconds at most for a down Slurm
    except Exception as exc:
        hint = PYSLURM_HINT if settings.backend == "pyslurm" else "check the --slurm-* flags"
        raise SlurmStartError(f"--slurm-backend={settings.backend}: cannot build the Slurm client "
                              f"({one_line(exc)}): {hint}") from None
    try:
        return client.release()
    except Exception as exc:  # Slurm down, munge down, a bad token: the daemon still starts
        return f"unknown ({one_line(exc)})"
    finally:
        client.close()

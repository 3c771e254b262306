"""How a daemon reaches Slurm: the flags every daemon takes, one way to connect, the start-up check.

``--slurm-backend=rest`` (the default) talks to slurmrestd at ``--slurm-api-base`` (a URL, or
``host:port`` as SUNK's docs write it, which means ``http://host:port``: slurmrestd's own
listener is plain HTTP) with a JWT: one given (``--slurm-auth-token``, ``$SLURM_JWT``), one
read from a file that is read again when it changes (``--slurm-auth-token-file``), or short-lived ones the daemon signs
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
import logging
import os
import subprocess
import sys
from collections.abc import Mapping
from typing import Any, Optional
from urllib.parse import urlsplit

import attrs

from sunk.base.flags import expand_references, non_negative_duration, positive_duration, unexpanded_reference

from . import BACKENDS, connect
from .client import SlurmClient

log = logging.getLogger(__name__)

# Slurm's daemons' default ports (slurm.conf's SlurmctldPort, SlurmdPort, slurmdbd's DbdPort): they speak
# Slurm's own RPC protocol, never HTTP, so a slurmrestd URL naming one is most likely a mix-up.
SLURM_RPC_PORTS = {6817: "slurmctld", 6818: "slurmd", 6819: "slurmdbd"}
SLURMRESTD_PORT = 6820  # slurmrestd's usual port (SUNK's chart's, this project's)

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
    jwt_key_wait: bool = False  # that file may appear after the start (--slurm-jwt-key-wait)
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
            auth = {"jwt_key_file": self.jwt_key_file, "jwt_key_wait": self.jwt_key_wait}
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


def base_url(text: str, *, default_scheme: str = "http") -> str:
    """A service's base URL as SUNK's flags take it: ``host:port`` without a scheme (the seed's
    ``--slurm-api-base=slurm-controller:6817``) gets ``default_scheme``; a URL keeps its own.
    Only http and https; no query or fragment (paths are appended to it). No port is added or
    changed: a URL without one means the scheme's (80, 443)."""
    text = text.strip()
    url = text if "://" in text else f"{default_scheme}://{text}"
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https"):
        raise ValueError(f"{text!r}: want http://HOST:PORT, https://HOST:PORT or HOST:PORT (http)")
    try:
        parts.port  # noqa: B018 (read for its check: a port that is no number or out of range raises)
    except ValueError:
        raise ValueError(f"{text!r}: the port is not a number from 0 to 65535") from None
    if not parts.hostname or parts.query or parts.fragment or any(c.isspace() for c in url):
        raise ValueError(f"{text!r}: want http://HOST:PORT, https://HOST:PORT or HOST:PORT (http)")
    return url.rstrip("/")


def base_url_flag(text: str) -> str:
    """``base_url`` as an argparse type."""
    try:
        return base_url(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_arguments(parser: argparse.ArgumentParser, *, poll_interval: float, poll_help: str) -> None:
    parser.add_argument("--slurm-backend", choices=BACKENDS, default="rest",
                        help="rest: slurmrestd; pyslurm: Slurm's C API (pyslurm 25.11, $SLURM_CONF, munge)")
    parser.add_argument("--slurm-api-base", type=base_url_flag,
                        default=os.environ.get("SLURM_REST_URL") or f"http://127.0.0.1:{SLURMRESTD_PORT}",
                        help="slurmrestd base URL; HOST:PORT without a scheme means http://HOST:PORT (rest)")
    parser.add_argument("--slurm-auth-token", default=None,
                        help="slurmrestd JWT (rest; default $SLURM_JWT). $(VAR) is read from the environment as "
                             "the kubelet expands it; a token written here shows in ps: prefer "
                             "--slurm-auth-token-file or $SLURM_JWT")
    parser.add_argument("--slurm-auth-token-file", default=None, help="JWT file, re-read when it changes (rest)")
    parser.add_argument("--slurm-jwt-key-file", default=None,
                        help="slurmctld's jwt_key (AuthAltParameters=jwt_key=...): sign short-lived tokens for "
                             "--slurm-user here, renewed at half-life; read again when it changes (rest)")
    parser.add_argument("--slurm-jwt-key-wait", action="store_true",
                        help="the --slurm-jwt-key-file may appear after the start (sunk-operator with its own "
                             "SlurmCluster, whose key Secret it makes itself): Slurm calls fail as an outage until "
                             "it does, instead of the start")
    parser.add_argument("--slurm-user", default="root", help="user the JWT speaks for (rest)")
    parser.add_argument("--slurm-poll-interval", type=positive_duration, default=poll_interval, help=poll_help)
    parser.add_argument("--slurm-job-full-list-interval", type=non_negative_duration, default=300.0,
                        help="(rest) each poll reads Slurm's job state list (ids and states) and only the jobs "
                             "that changed; a full job list, for fields that change without a state change "
                             "(a pending job's reason, an Extra written by hand), comes this often. 0: a full "
                             "job list on every poll that finds a change (default 5m)")


def api_base_warning(url: str) -> Optional[str]:
    """Why a slurmrestd URL cannot work though it parses (a Slurm RPC port, e.g. the seed's
    ``slurm-controller:6817``), naming the likely fix; None when nothing is known to be wrong.
    A warning, not a refusal: a Service may map that port to slurmrestd's."""
    parts = urlsplit(url)
    daemon = SLURM_RPC_PORTS.get(parts.port or 0)
    if daemon is None:
        return None
    return (f"--slurm-api-base={url}: port {parts.port} is {daemon}'s default port, which speaks Slurm's RPC "
            f"protocol, not slurmrestd's HTTP: every Slurm call will fail unless a Service maps it to slurmrestd. "
            f"slurmrestd usually listens on {SLURMRESTD_PORT}: did you mean "
            f"--slurm-api-base={parts.scheme}://{parts.hostname}:{SLURMRESTD_PORT} (or the slurmrestd Service's URL)?")


def given_token(args: argparse.Namespace, parser: argparse.ArgumentParser,
                environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The JWT of ``--slurm-auth-token`` or ``$SLURM_JWT``.

    SUNK's docs show ``--slurm-auth-token=$(SLURM_TOKEN)``: the kubelet replaces that with the
    container's variable, so the token itself is on the command line, which every user of the node
    reads in ``ps``: it works, with one warning. A reference that reaches us unexpanded (started
    outside Kubernetes, or the variable was not in the container's env when the kubelet expanded
    it) is expanded here from the environment as the kubelet would have; a variable that is not
    there either stops the start, naming it."""
    environ = os.environ if environ is None else environ
    if args.slurm_auth_token is None:
        return environ.get("SLURM_JWT") or None
    token = expand_references(args.slurm_auth_token, environ)
    missing = unexpanded_reference(token)
    if missing is not None:
        parser.error(f"--slurm-auth-token: {missing} is not set in the environment (in Kubernetes: add it to the "
                     f"container's env, e.g. from a Secret, or give --slurm-auth-token-file instead)")
    if token == args.slurm_auth_token and token.strip():
        log.warning("the Slurm token was given on the command line (--slurm-auth-token): any user of this node "
                    "can read it in ps or /proc; give it as a file (--slurm-auth-token-file, a mounted Secret, as "
                    "the chart does) or in $SLURM_JWT instead")
    return token


def settings_from(args: argparse.Namespace, parser: argparse.ArgumentParser) -> SlurmSettings:
    token = given_token(args, parser)
    if args.slurm_backend == "rest" and not (token or args.slurm_auth_token_file or args.slurm_jwt_key_file):
        parser.error("give --slurm-auth-token (or $SLURM_JWT), --slurm-auth-token-file or --slurm-jwt-key-file")
    if args.slurm_auth_token_file and args.slurm_jwt_key_file:
        parser.error("give --slurm-auth-token-file or --slurm-jwt-key-file, not both")
    if args.slurm_jwt_key_wait and not args.slurm_jwt_key_file:
        parser.error("--slurm-jwt-key-wait is for --slurm-jwt-key-file")
    if args.slurm_backend == "rest" and (warning := api_base_warning(args.slurm_api_base)):
        log.warning("%s", warning)
    return SlurmSettings(backend=args.slurm_backend, url=args.slurm_api_base, user=args.slurm_user,
                         token=token, token_file=args.slurm_auth_token_file,
                         jwt_key_file=args.slurm_jwt_key_file, jwt_key_wait=args.slurm_jwt_key_wait,
                         poll_interval=args.slurm_poll_interval,
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

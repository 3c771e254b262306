"""SlurmClient over slurmrestd (OpenAPI v0.0.42): transport, retries and error mapping.

Errors. slurmrestd reports many failures with HTTP 200 and an ``errors`` array, and some
successes with HTTP 404/500 next to a usable body, so the HTTP status alone proves
nothing. Any answer with a non-empty ``errors`` array raises SlurmError carrying Slurm's
``error_number`` and text, whatever the status. On top of that:
- a missing job (ESLURM_INVALID_JOB_ID, 2017) or node (ESLURM_INVALID_NODE_NAME, 2018)
  raises NotFound;
- ``DELETE /job/ID`` answers HTTP 200 with an empty ``errors`` array and puts the outcome
  in ``status[]``; that is checked too. A cancel of a job that is done (2021) or gone
  (2017) succeeds, as libslurm's cancel does;
- slurmrestd unreachable, or slurmrestd unable to reach slurmctld, raises SlurmUnavailable;
- our token refused (slurmrestd's HTTP 401; slurmctld's 1007 "Protocol authentication
  error" for an expired or wrongly signed JWT; ESLURM_AUTH_*) raises AuthenticationFailed,
  a SlurmUnavailable naming the token's source: an outage of ours, never an answer about
  the request. It is counted and logged once per outage (``auth_status``), and the source
  is looked at again before the next request (a rotated file, a new key).

Retries and idempotency. Only connection errors are retried (with capped, jittered
exponential backoff), never read timeouts or answers. A request is retried after it may
have reached slurmrestd only if repeating it is harmless: reads, ``cancel_job`` (a repeat
finds the job already done), ``update_job`` (sets absolute values), and ``update_node``
with no state change or an absolute one (DRAIN, DOWN, FAIL). ``submit_job``,
``delete_node`` and state transitions such as RESUME are retried only when the
connection was never established (refused, connect timeout); if the request was sent and
the answer was lost (a read timeout, the connection closed after sending, slurmrestd's own
timeout talking to slurmctld, a proxy's 502/504), OutcomeUnknown (a SlurmUnavailable) says
the outcome is unknown. Callers that submit must then reconcile by their own identity (sunk
puts the Pod UID in the job's ``extra``) instead of resubmitting blindly.

``update_time``. ``list_nodes``/``list_jobs`` with ``updated_since`` pass Slurm's
``update_time``; slurmctld answers "no change" when nothing changed since one second
before it (so a change in the same second is never lost), else the full list. 24.11's
answers differ per endpoint: nodes give HTTP 304 with no body; jobs give 200 with an
empty list and ``last_update`` 0. And 24.11's ``/nodes`` also loads partitions with the
same ``update_time``, so when nodes changed but partitions did not, it fails with HTTP
500 "Unable to query partitions"; the client then relists without ``update_time``
(two calls, both counted).

``list_job_states`` is ``GET /jobs/state``: every job's id and state, nothing else, about 80
bytes a job where ``/jobs`` gives 8 to 18 KB (v0042.py has its shape). It has no
``update_time`` (24.11's handler parses ``job_id`` only, and its answer's ``last_update`` is
never set): it costs the same whether or not anything changed. ``read_jobs`` is one
``GET /job/{id}`` per id (v0.0.42 reads no list of ids), asked with the job list's flags so
that a record read alone equals the same job's record in a list. (``GET /job/{id}`` lists
``update_time`` among its parameters, but the handler ignores it: slurm_load_job takes none.)
``server_time`` is slurmctld's clock (``/diag``'s ``req_time``): SlurmCache's idle refreshes
check ``list_jobs(updated_since=...)`` from it, since ``/jobs`` is the only call whose
``update_time`` slurmctld honours, and it answers with every job once one changed.

``get_node`` reads the full node list. slurmctld 24.11 answers a single-node query
(``GET /node/NAME``, i.e. slurm_load_node_single) with the allocated CPUs and memory, and
so IDLE/MIXED/ALLOCATED, as of the last time anyone listed all nodes: measured stale by
whole jobs on the dev cluster. Hot paths read nodes from SlurmCache anyway. ``read_node`` is
that single-node query, for callers that decide on what it has current (the state word's
flags, the reason, Extra; ``SlurmClient.read_node``). slurmrestd reports an unknown name as
HTTP 200 with an error numbered 0, "Failure to query node NAME" (its ``_dump_nodes`` found no
record); that is NotFound. A failed query carries the errno of the failure instead.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import quote

import requests
import urllib3
from requests.adapters import HTTPAdapter

from sunk.base import fence
from sunk.base.backoff import delay as retry_delay
from sunk.model.slurm import (
    Job,
    JobRequest,
    JobState,
    Node,
    NodeUpdate,
    Partition,
    RpcStat,
    SchedulerStats,
    signal_name,
)

from . import v0042
from .accounting import WRITES, Rpc, RpcAccounting
from .auth import AuthStatus, TokenSource, WatchedToken
from .client import Snapshot
from .errors import (
    AUTH_CODES,
    ESLURM_ALREADY_DONE,
    ESLURM_INVALID_JOB_ID,
    NOT_FOUND_CODES,
    UNAVAILABLE_CODES,
    UNCERTAIN_CODES,
    AuthenticationFailed,
    NotFound,
    OutcomeUnknown,
    SlurmError,
    SlurmUnavailable,
)

log = logging.getLogger(__name__)

# Node state changes that set an absolute state, so sending them twice is harmless.
IDEMPOTENT_NODE_STATES = frozenset({"DRAIN", "DOWN", "FAIL"})

Body = dict[str, Any]


def _errors(body: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    return list((body or {}).get("errors") or ())


# slurmrestd's answer to GET /node/NAME when slurmctld has no such node: numbered 0 ("No error").
# (A full list that fails says "Failure to query nodes", with the failure's errno.)
_NO_SUCH_NODE = re.compile(r"Failure to query node \S")


def _error_from(what: str, errors: list[Mapping[str, Any]], status: int) -> SlurmError:
    codes = [int(e.get("error_number") or 0) for e in errors]
    text = "; ".join(
        f"{e.get('description') or e.get('error') or 'error'}"
        + (f" ({e['error']})" if e.get("error") and e.get("description") and e["error"] != "No error" else "")
        for e in errors
    )
    code = next((c for c in reversed(codes) if c), None)
    message = f"{what}: {text}"
    if any(c in NOT_FOUND_CODES for c in codes):
        return NotFound(message, code=code, http_status=status)
    if code is None and any(_NO_SUCH_NODE.match(str(e.get("description") or "")) for e in errors):
        return NotFound(message, http_status=status)
    if any(c in AUTH_CODES for c in codes):
        return AuthenticationFailed(message, code=next(c for c in codes if c in AUTH_CODES), http_status=status)
    if any(c in UNAVAILABLE_CODES for c in codes):
        return SlurmUnavailable(message, code=code, http_status=status)
    return SlurmError(message, code=code, http_status=status)


def _maybe_done(exc: SlurmUnavailable) -> bool:
    """An unavailable answer that may come after slurmctld acted: slurmrestd's own timeout talking to
    it, or a proxy's 502/504 after it forwarded the request."""
    return exc.code in UNCERTAIN_CODES or exc.http_status in (502, 504)


def _never_sent(exc: requests.ConnectionError) -> bool:
    """True when the connection itself failed, so slurmrestd cannot have seen the request."""
    if isinstance(exc, requests.ConnectTimeout):
        return True
    reason = exc.args[0] if exc.args else None
    reason = getattr(reason, "reason", reason)  # urllib3's MaxRetryError wraps the cause
    return isinstance(reason, (urllib3.exceptions.NewConnectionError, urllib3.exceptions.ConnectTimeoutError))


class RestClient:
    """Thread-safe; one keep-alive ``requests.Session`` shared by all callers."""

    cheap_job_states = True  # GET /jobs/state: about 80 bytes a job, against 8 to 18 KB in /jobs
    read_concurrency = 8  # GET /job/{id}s at once: slurmrestd serves each on a thread of its own

    def __init__(
        self,
        url: str,
        tokens: TokenSource,
        *,
        user: str = "root",
        connect_timeout: float = 3.0,
        read_timeout: float = 30.0,
        retries: int = 3,
        backoff: float = 0.1,
        max_backoff: float = 2.0,
        with_allocations: bool = True,
        session: requests.Session | None = None,
        accounting: RpcAccounting | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.base = url.rstrip("/") + f"/slurm/{v0042.VERSION}/"
        self.tokens = tokens if isinstance(tokens, WatchedToken) else WatchedToken(tokens)
        self._auth_lock = threading.Lock()
        self._auth_failures = 0
        self._auth_failing = False
        self.user = user
        self.timeout = (connect_timeout, read_timeout)
        self.retries, self.backoff, self.max_backoff = retries, backoff, max_backoff
        # Per-node allocations need slurmrestd's DETAIL flag (its default); without it the
        # job list of running jobs is about half the size, but Job.allocations stays empty.
        self._job_list_params = {} if with_allocations else {"flags": "ALL"}
        self.accounting = accounting or RpcAccounting()
        self._sleep = sleep
        if session is None:
            session = requests.Session()
            # Kept connections: workers' submissions, hook threads' reads and the cache's lists
            # share them (past the pool each request opened and dropped a connection of its own).
            adapter = HTTPAdapter(pool_connections=1, pool_maxsize=64, max_retries=0)
            session.mount("http://", adapter)
            session.mount("https://", adapter)
            # The environment's proxy and CA settings, read once: with trust_env, requests
            # rescans os.environ (and ~/.netrc) on every call, about a tenth of the scheduler's CPU.
            session.proxies.update(requests.utils.get_environ_proxies(self.base))
            session.verify = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or True
            session.trust_env = False
        self.session = session

    # -- SlurmClient ---------------------------------------------------------------------------
    def ping(self) -> bool:
        """Whether slurmctld answers through slurmrestd; False also when slurmrestd is unreachable."""
        try:
            _, body = self._call("GET", "ping/", Rpc.PING, "ping")
        except SlurmUnavailable as exc:
            log.debug("ping: %s", exc)
            return False
        return any(p.get("responding") for p in body.get("pings") or ())

    def release(self) -> str:
        """slurmrestd's Slurm release, from ``meta.slurm.release`` of a ping answer (every answer carries it)."""
        _, body = self._call("GET", "ping/", Rpc.PING, "ping")
        release = ((body.get("meta") or {}).get("slurm") or {}).get("release")
        if not release:
            raise SlurmError("ping: slurmrestd's answer names no Slurm release (meta.slurm.release)")
        return str(release)

    def list_nodes(self, *, updated_since: int | None = None) -> Snapshot[Node]:
        params = {"update_time": str(updated_since)} if updated_since else None
        try:
            status, body = self._call("GET", "nodes/", Rpc.NODE_INFO, "list nodes", params=params)
        except SlurmError as exc:
            if not params or "Unable to query partitions" not in exc.message:
                raise
            log.debug("list nodes: 24.11 update_time bug (%s); relisting in full", exc)
            status, body = self._call("GET", "nodes/", Rpc.NODE_INFO, "list nodes")
        if status == 304:
            return Snapshot(items=None, last_update=updated_since or 0)
        nodes = tuple(v0042.parse_node(n) for n in body.get("nodes") or ())
        return Snapshot(items=nodes, last_update=v0042.integer(body.get("last_update")))

    def get_node(self, name: str) -> Node:
        """One node, read from the full node list (one call): see the module notes on 24.11."""
        for node in self.list_nodes().items or ():
            if node.name == name:
                return node
        raise NotFound(f"no Slurm node {name!r}")

    def read_node(self, name: str) -> Node:
        """``GET /node/NAME`` (slurm_load_node_single): see ``SlurmClient.read_node`` for what is current."""
        _, body = self._call("GET", f"node/{quote(name, safe='')}", Rpc.NODE_INFO_SINGLE, f"read node {name}")
        for node in body.get("nodes") or ():
            if node.get("name") == name:
                return v0042.parse_node(node)
        raise NotFound(f"no Slurm node {name!r}")

    def update_node(self, name: str, update: NodeUpdate) -> None:
        body = v0042.node_update_body(update)
        if "DRAIN" in body.get("state", ()) and not update.reason:
            # scontrol refuses this; slurmrestd accepts it and leaves a drain nobody can attribute.
            raise ValueError(f"draining {name} needs a reason")
        if not body:
            return
        idempotent = set(body.get("state", ())) <= IDEMPOTENT_NODE_STATES
        self._call("POST", f"node/{quote(name, safe='')}", Rpc.UPDATE_NODE, f"update node {name}", body=body,
                   idempotent=idempotent)

    def delete_node(self, name: str) -> None:
        self._call("DELETE", f"node/{quote(name, safe='')}", Rpc.DELETE_NODE, f"delete node {name}",
                   idempotent=False)

    def reconfigure(self) -> None:
        """``scontrol reconfigure``: slurmctld rereads slurm.conf, topology.conf/.yaml and the rest."""
        self._call("GET", "reconfigure/", Rpc.RECONFIGURE, "reconfigure slurmctld", idempotent=True)

    def list_jobs(self, *, updated_since: int | None = None) -> Snapshot[Job]:
        params = dict(self._job_list_params)
        if updated_since:
            params["update_time"] = str(updated_since)
        _, body = self._call("GET", "jobs/", Rpc.JOB_INFO, "list jobs", params=params or None)
        jobs, last_update = body.get("jobs") or (), v0042.integer(body.get("last_update"))
        if updated_since and not jobs and not last_update:
            return Snapshot(items=None, last_update=updated_since)  # "No job changes since update_time"
        return Snapshot(items=tuple(v0042.parse_job(j) for j in jobs), last_update=last_update)

    def get_job(self, job_id: int) -> Job:
        return self._get_job(job_id, self._job_list_params, f"get job {job_id}")

    def get_job_allocations(self, job_id: int) -> Job:
        return self._get_job(job_id, {}, f"get job {job_id} with allocations")  # (DETAIL: no flags)

    def _get_job(self, job_id: int, params: dict[str, str], what: str) -> Job:
        _, body = self._call("GET", f"job/{int(job_id)}", Rpc.JOB_INFO_SINGLE, what, params=params or None)
        for j in body.get("jobs") or ():
            if int(j.get("job_id", -1)) == int(job_id):
                return v0042.parse_job(j)
        raise NotFound(f"no Slurm job {job_id}")

    def list_job_states(self, job_ids: Iterable[int] | None = None) -> tuple[JobState, ...]:
        """``GET /jobs/state``: every job's id and state (``job_id=1,2,3`` filters to those)."""
        params = None
        if job_ids is not None:
            wanted = ",".join(str(int(i)) for i in dict.fromkeys(job_ids))
            if not wanted:
                return ()
            params = {"job_id": wanted}
        _, body = self._call("GET", "jobs/state/", Rpc.JOB_STATE, "list job states", params=params)
        return tuple(v0042.parse_job_state(j) for j in body.get("jobs") or ())

    def read_jobs(self, job_ids: Iterable[int]) -> tuple[Job, ...]:
        """``GET /job/{id}`` per id (v0.0.42 has no call for several), with the job list's flags, so a
        record read here equals the same job's record in ``list_jobs``."""
        found: list[Job] = []
        for job_id in dict.fromkeys(int(i) for i in job_ids):
            try:
                _, body = self._call("GET", f"job/{job_id}", Rpc.JOB_INFO_SINGLE, f"get job {job_id}",
                                     params=self._job_list_params or None)
            except NotFound:
                continue
            found.extend(v0042.parse_job(j) for j in body.get("jobs") or ())
        return tuple(found)

    def submit_job(self, request: JobRequest) -> int:
        _, body = self._call("POST", "job/submit", Rpc.SUBMIT_BATCH_JOB, f"submit job {request.name}",
                             body={"job": v0042.job_desc(request)}, idempotent=False)
        job_id = v0042.number(body.get("job_id"))
        if not job_id:
            raise SlurmError(f"submit job {request.name}: slurmrestd returned no job id")
        return int(job_id)

    def update_job(self, job_id: int, *, extra: str | None = None, comment: str | None = None) -> None:
        payload = v0042.job_update_body(extra, comment)
        if not payload:
            return
        what = f"update job {job_id}"
        _, body = self._call("POST", f"job/{int(job_id)}", Rpc.UPDATE_JOB, what, body=payload)
        failed = [r for r in body.get("results") or () if r.get("error_code")]
        if failed:
            raise _error_from(what, [{"error_number": r["error_code"], "description": r.get("why") or r.get("error"),
                                      "error": r.get("error")} for r in failed], 200)

    def cancel_job(self, job_id: int, *, signal: str | None = None, array_task_id: int | None = None) -> None:
        """Cancel (SIGKILL) by default, else deliver ``signal`` to the whole job, batch script included.

        Cancelling is idempotent: a job that already ended, or is gone from slurmctld, is
        a success (as libslurm's own cancel treats it). Another signal to an unknown job
        raises NotFound.
        """
        sig = signal_name(signal) if signal is not None else "SIGKILL"
        ident = f"{int(job_id)}" if array_task_id is None else f"{int(job_id)}_{int(array_task_id)}"
        what = f"cancel job {ident}" if sig == "SIGKILL" else f"signal job {ident} with {sig}"
        params = {"signal": sig} if signal is not None else None
        try:
            _, body = self._call("DELETE", f"job/{ident}", Rpc.KILL_JOB, what, params=params)
        except NotFound:
            if sig == "SIGKILL":
                return  # an id slurmctld rejects outright (beyond MaxJobId): nothing to cancel either
            raise
        fine = {None, 0, ESLURM_ALREADY_DONE} | ({ESLURM_INVALID_JOB_ID} if sig == "SIGKILL" else set())
        failed = [s["error"] for s in body.get("status") or () if (s.get("error") or {}).get("code") not in fine]
        if failed:
            raise _error_from(what, [{"error_number": e.get("code"), "description": e.get("message"),
                                      "error": e.get("string")} for e in failed], 200)

    def list_partitions(self) -> tuple[Partition, ...]:
        _, body = self._call("GET", "partitions/", Rpc.PARTITION_INFO, "list partitions")
        return tuple(v0042.parse_partition(p) for p in body.get("partitions") or ())

    def diag(self) -> SchedulerStats:
        _, body = self._call("GET", "diag/", Rpc.STATS_INFO, "diag")
        return v0042.parse_stats(body.get("statistics") or {})

    def server_time(self) -> int:
        """slurmctld's clock as it answers: ``statistics.req_time`` of ``GET /diag`` (sdiag's "output at",
        slurmctld's ``time(NULL)`` when it packs the answer). One call of a few KB. SlurmCache takes it
        just before a job state list, as the ``update_time`` of its later checks: the state list's
        answer carries no time, and the cache's own clock is not slurmctld's (module notes)."""
        _, body = self._call("GET", "diag/", Rpc.STATS_INFO, "diag")
        stamp = v0042.integer((body.get("statistics") or {}).get("req_time"))
        if stamp <= 0:
            raise SlurmError("diag: slurmrestd's answer has no statistics.req_time")
        return stamp

    def rpc_stats(self) -> Mapping[str, RpcStat]:
        return self.accounting.snapshot()

    def auth_status(self) -> AuthStatus:
        """The token's source and expiry, and how often slurmrestd or slurmctld refused it."""
        with self._auth_lock:
            return AuthStatus(self.tokens.describe(), self.tokens.expires_at(), self._auth_failures,
                              self._auth_failing)

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> RestClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transport --------------------------------------------------------------------------------
    def _headers(self) -> dict[str, str]:
        return {"X-SLURM-USER-NAME": self.user, "X-SLURM-USER-TOKEN": self.tokens.token(),
                "Accept": "application/json"}

    def _call(self, method: str, path: str, message_type: str, what: str, *,
              params: Mapping[str, str] | None = None, body: Body | None = None,
              idempotent: bool = True) -> tuple[int, Body]:
        if message_type in WRITES:  # a leader-only controller that may have lost its Lease sends nothing
            fence.check(what)
        with self.accounting.measure(message_type):
            resp = self._send(method, path, what, params=params, body=body, idempotent=idempotent)
            try:
                answer = resp.status_code, self._check(resp, what)
            except AuthenticationFailed as exc:
                raise self._refused(exc) from exc
            except SlurmUnavailable as exc:
                if idempotent or isinstance(exc, OutcomeUnknown) or not _maybe_done(exc):
                    raise
                raise OutcomeUnknown(f"{exc.message} (it may or may not have taken effect)", code=exc.code,
                                     http_status=exc.http_status) from exc
            if self._auth_failing:
                with self._auth_lock:
                    failing, self._auth_failing = self._auth_failing, False
                if failing:
                    log.info("Slurm accepts the token from %s again", self.tokens.describe())
            return answer

    def _refused(self, exc: AuthenticationFailed) -> AuthenticationFailed:
        """Slurm refused our token: an outage (retried by the caller), counted, logged once per outage
        with where the token comes from, whose origin is looked at again before the next request."""
        source = self.tokens.describe()
        with self._auth_lock:
            self._auth_failures += 1
            first, self._auth_failing = not self._auth_failing, True
        self.tokens.invalidate()
        if first:
            log.warning("Slurm refused the token from %s (%s): requests wait and are retried until a token it "
                        "accepts is there (the source is read again)", source, exc.message)
        return AuthenticationFailed(f"{exc.message} (token from {source})", code=exc.code,
                                    http_status=exc.http_status, token_source=source)

    def _send(self, method: str, path: str, what: str, *, params: Mapping[str, str] | None,
              body: Body | None, idempotent: bool) -> requests.Response:
        url = self.base + path
        attempt = 0
        while True:
            try:
                return self.session.request(method, url, params=params, json=body, headers=self._headers(),
                                            timeout=self.timeout)
            except requests.ConnectionError as exc:
                unsent = _never_sent(exc)
                if attempt < self.retries and (idempotent or unsent):
                    delay = retry_delay(attempt, self.backoff, self.max_backoff, random.random())
                    log.debug("%s: %s; retry %d in %.2fs", what, exc, attempt + 1, delay)
                    self._sleep(delay)
                    attempt += 1
                    continue
                if unsent or idempotent:
                    raise SlurmUnavailable(f"{what}: cannot reach slurmrestd at {self.base}: {exc}") from exc
                raise OutcomeUnknown(f"{what}: the connection to slurmrestd at {self.base} broke after the "
                                     f"request was sent (it may or may not have taken effect): {exc}") from exc
            except requests.Timeout as exc:
                if idempotent:
                    raise SlurmUnavailable(f"{what}: slurmrestd did not answer within {self.timeout[1]}s") from exc
                raise OutcomeUnknown(f"{what}: slurmrestd did not answer within {self.timeout[1]}s (it may or may "
                                     f"not have taken effect)") from exc
            except requests.RequestException as exc:
                raise SlurmError(f"{what}: {exc}") from exc

    @staticmethod
    def _check(resp: requests.Response, what: str) -> Body:
        status = resp.status_code
        if status == 304:
            return {}
        if status == 401:  # slurmrestd's answer to a request whose token it cannot use at all
            text = resp.text[:200].strip() or "Authentication failure"
            raise AuthenticationFailed(f"{what}: HTTP 401 {text}", http_status=status)
        try:
            # Bytes that are not UTF-8 replaced, not refused: slurmrestd passes a job's Extra,
            # comment or name through as its user wrote them, and one such job made every list fail.
            body = json.loads(resp.content.decode("utf-8", errors="replace")) if resp.content else {}
        except ValueError:
            body = None
        if not isinstance(body, dict):
            text = resp.text[:200].strip()
            if status in (502, 503, 504):
                raise SlurmUnavailable(f"{what}: HTTP {status} {text}", http_status=status)
            raise SlurmError(f"{what}: HTTP {status} {text or '(no body)'}", http_status=status)
        errors = _errors(body)
        if errors:
            raise _error_from(what, errors, status)
        if status in (502, 503, 504):
            raise SlurmUnavailable(f"{what}: HTTP {status} from slurmrestd or a proxy in front", http_status=status)
        if status >= 400:
            raise SlurmError(f"{what}: HTTP {status} without an error description", http_status=status)
        for w in body.get("warnings") or ():
            log.debug("%s: slurmrestd warning: %s", what, w.get("description"))
        return body

"""An in-process stand-in for slurmrestd 24.11 or 26.05 (v0.0.42 subset), for unit tests and benchmarks.

Its answers copy the live server's, including the odd ones the client must handle: HTTP
304 for unchanged nodes, an empty job list with ``last_update`` 0 for unchanged jobs,
"Unable to query partitions" when nodes changed but partitions did not (24.11 only: see
``RELEASES``), HTTP 200 with an error numbered 0 for an unknown node, and kill results in
``status[]``. Item shapes come from real 24.11.5 answers (same keys, same nesting), so parse
costs are realistic; 26.05.5 answers v0.0.42 with the same shapes (docs/compatibility.md).

It is not a scheduler: jobs stay as tests set them.
"""

from __future__ import annotations

import copy
import json
import re
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional
from urllib.parse import parse_qs, unquote, urlparse

from attrs import define, field

Obj = dict[str, Any]
PREFIX = "/slurm/v0.0.42/"


def n(number: Any) -> Obj:
    return {"set": True, "infinite": False, "number": number}


UNSET: Obj = {"set": False, "infinite": False, "number": 0}
INFINITE: Obj = {"set": False, "infinite": True, "number": 0}


def node_json(name: str, *, state: tuple[str, ...] = ("IDLE",), cpus: int = 32, alloc_cpus: int = 0,
              real_memory: int = 131072, alloc_memory: int = 0, gres: str = "gpu:2", gres_used: str = "gpu:0",
              reason: str = "", reason_time: int = 0, reason_user: str = "", extra: str = "", comment: str = "",
              partitions: tuple[str, ...] = ("batch",), features: tuple[str, ...] = ("FAKE_GPU",),
              now: int = 0) -> Obj:
    return {
        "architecture": "x86_64", "burstbuffer_network_address": "", "boards": 1, "boot_time": n(now),
        "cluster_name": "", "cores": 1, "specialized_cores": 0, "cpu_binding": 0, "cpu_load": 9,
        "free_mem": n(23058), "cpus": cpus, "effective_cpus": cpus, "specialized_cpus": "",
        "energy": {"average_watts": 0, "base_consumed_energy": 0, "consumed_energy": 0, "current_watts": n(0),
                   "previous_consumed_energy": 0, "last_collected": 0},
        "external_sensors": {}, "extra": extra, "power": {}, "features": list(features),
        "active_features": list(features), "gpu_spec": "", "gres": gres, "gres_drained": "N/A",
        "gres_used": gres_used, "instance_id": "", "instance_type": "", "last_busy": n(now), "mcs_label": "",
        "specialized_memory": 0, "name": name, "next_state_after_reboot": ["INVALID"], "address": "localhost",
        "hostname": "localhost", "state": list(state), "operating_system": "Linux 6.1.0 #1 SMP PREEMPT_DYNAMIC",
        "owner": "", "partitions": list(partitions), "port": 17001, "real_memory": real_memory,
        "res_cores_per_gpu": 0, "comment": comment, "reason": reason, "reason_changed_at": n(reason_time),
        "reason_set_by_user": reason_user, "resume_after": n(0), "reservation": "", "alloc_memory": alloc_memory,
        "alloc_cpus": alloc_cpus, "alloc_idle_cpus": cpus - alloc_cpus, "tres_used": "", "tres_weighted": 0.0,
        "slurmd_start_time": n(now), "sockets": cpus, "threads": 1, "temporary_disk": 0, "weight": 1,
        "tres": f"cpu={cpus},mem={real_memory // 1024}G,billing={cpus},gres/gpu=2", "version": "24.11.5",
    }


def job_resources(nodes: list[tuple[str, int, int]], sockets: int = 32) -> Obj:
    """``job_resources`` for running jobs: (node, cpus, memory MB) per node, one core per socket as in sunk-dev."""
    return {
        "select_type": ["CORE"],
        "nodes": {
            "count": len(nodes), "select_type": ["ONE_ROW"], "list": ",".join(name for name, _, _ in nodes),
            "whole": False,
            "allocation": [
                {"index": i, "name": name, "cpus": {"count": cpus, "used": 0},
                 "memory": {"used": 0, "allocated": memory},
                 "sockets": [{"index": s, "cores": [{"index": 0, "status": ["ALLOCATED" if s < cpus else
                                                                           "UNALLOCATED"]}]}
                             for s in range(sockets)]}
                for i, (name, cpus, memory) in enumerate(nodes)
            ],
        },
        "cpus": sum(c for _, c, _ in nodes),
        "threads_per_core": UNSET,
    }


def job_json(job_id: int, *, name: str = "job", state: tuple[str, ...] = ("PENDING",), state_reason: str = "None",
             nodes: str = "", allocation: Optional[list[tuple[str, int, int]]] = None,
             gres_detail: tuple[str, ...] = (), extra: str = "", comment: str = "", admin_comment: str = "",
             user: str = "root",
             user_id: int = 0, account: str = "root", partition: str = "batch", qos: str = "normal",
             priority: int = 1000, submit_time: int = 0, start_time: int = 0, end_time: int = 0,
             time_limit: Optional[int] = None, tres_req: str = "cpu=1,mem=1000M,node=1,billing=1",
             tres_alloc: str = "", shared: tuple[str, ...] = (), working_directory: str = "/tmp",
             array_job_id: int = 0, array_task_id: Optional[int] = None, array_task_string: str = "") -> Obj:
    return {
        "account": account, "accrue_time": n(submit_time), "admin_comment": admin_comment,
        "allocating_node": "localhost",
        "array_job_id": n(array_job_id), "array_task_id": UNSET if array_task_id is None else n(array_task_id),
        "array_max_tasks": n(0), "array_task_string": array_task_string,
        "association_id": 2, "batch_features": "", "batch_flag": True, "batch_host": nodes.split(",")[0],
        "flags": ["USING_DEFAULT_ACCOUNT", "USING_DEFAULT_QOS", "USING_DEFAULT_WCKEY", "PARTITION_ASSIGNED"],
        "burst_buffer": "", "burst_buffer_state": "", "cluster": "dev", "cluster_features": "", "command": "",
        "comment": comment, "container": "", "container_id": "", "contiguous": False, "core_spec": 0,
        "thread_spec": 32766, "cores_per_socket": UNSET, "billable_tres": UNSET, "cpus_per_task": n(1),
        "cpu_frequency_minimum": UNSET, "cpu_frequency_maximum": UNSET, "cpu_frequency_governor": UNSET,
        "cpus_per_tres": "", "cron": "", "deadline": n(0), "delay_boot": n(0), "dependency": "",
        "derived_exit_code": {"status": ["SUCCESS"], "return_code": n(0), "signal": {"id": UNSET, "name": ""}},
        "eligible_time": n(submit_time), "end_time": n(end_time), "excluded_nodes": "",
        "exit_code": {"status": ["SUCCESS"], "return_code": n(0), "signal": {"id": UNSET, "name": ""}},
        "extra": extra, "failed_node": "", "features": "", "federation_origin": "",
        "federation_siblings_active": "", "federation_siblings_viable": "", "gres_detail": list(gres_detail),
        "group_id": user_id, "group_name": user, "het_job_id": n(0), "het_job_id_set": "", "het_job_offset": n(0),
        "job_id": job_id, "job_resources": job_resources(allocation) if allocation else None, "job_size_str": [],
        "job_state": list(state), "last_sched_evaluation": n(submit_time), "licenses": "", "mail_type": [],
        "mail_user": user, "max_cpus": n(0), "max_nodes": n(1), "mcs_label": "", "memory_per_tres": "",
        "name": name, "network": "", "nodes": nodes, "nice": 0, "tasks_per_core": INFINITE,
        "tasks_per_tres": n(0), "tasks_per_node": n(0), "tasks_per_socket": INFINITE, "tasks_per_board": n(0),
        "cpus": n(1), "node_count": n(1), "tasks": n(1), "partition": partition, "prefer": "",
        "memory_per_cpu": UNSET, "memory_per_node": n(1000), "minimum_cpus_per_node": n(1),
        "minimum_tmp_disk_per_node": n(0), "power": {"flags": []}, "preempt_time": n(0),
        "preemptable_time": n(start_time), "pre_sus_time": n(0), "hold": False, "priority": n(priority),
        "priority_by_partition": [], "profile": ["NOT_SET"], "qos": qos, "reboot": False, "required_nodes": "",
        "required_switches": 0, "requeue": True, "resize_time": n(0), "restart_cnt": 0, "resv_name": "",
        "scheduled_nodes": "", "selinux_context": "", "shared": list(shared), "sockets_per_board": 0,
        "sockets_per_node": UNSET, "start_time": n(start_time), "state_description": "",
        "state_reason": state_reason, "standard_error": f"/tmp/slurm-{job_id}.out", "standard_input": "/dev/null",
        "standard_output": f"/tmp/slurm-{job_id}.out", "submit_time": n(submit_time), "suspend_time": n(0),
        "system_comment": "", "time_limit": INFINITE if time_limit is None else n(time_limit),
        "time_minimum": n(0), "threads_per_core": UNSET, "tres_bind": "", "tres_freq": "", "tres_per_job": "",
        "tres_per_node": "", "tres_per_socket": "", "tres_per_task": "", "tres_req_str": tres_req,
        "tres_alloc_str": tres_alloc, "user_id": user_id, "user_name": user, "maximum_switch_wait_time": 0,
        "wckey": "", "current_working_directory": working_directory,
    }


def array_tasks(text: str) -> list[int]:
    """``"1-3,7%2"`` (an array's pending tasks, as a job record's ``array_task_string`` gives them) -> [1, 2, 3, 7]."""
    tasks: list[int] = []
    for part in text.split("%")[0].strip("[]").split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        tasks.extend(range(int(low), int(high or low) + 1))
    return tasks


def job_state_entries(job: Obj) -> list[Obj]:
    """What 24.11's ``GET /jobs/state`` lists for one job record (data_parser v0.0.42's JOB_STATE_RESP_MSG):
    ``{"job_id": "123", "state": [...]}``; a record of an array as ``"<its own job id>_<task>"`` (a started
    task's own id, not its array's), and the array's own record's pending tasks one entry each, with its
    state."""
    state = list(job["job_state"])
    array = (job.get("array_job_id") or {}).get("number") or 0
    if not array:
        return [{"job_id": str(job["job_id"]), "state": state}]
    task = job.get("array_task_id") or UNSET
    if task.get("set"):
        return [{"job_id": f"{job['job_id']}_{task['number']}", "state": state}]
    pending = array_tasks(job.get("array_task_string") or "")
    return [{"job_id": f"{array}_{t}", "state": state} for t in pending] or [{"job_id": f"{array}_*", "state": state}]


def partition_json(name: str, nodes: str, total_nodes: int, total_cpus: int, tier: int = 1) -> Obj:
    return {
        "nodes": {"allowed_allocation": "", "configured": nodes, "total": total_nodes},
        "accounts": {"allowed": "", "deny": ""}, "groups": {"allowed": ""},
        "qos": {"allowed": "", "deny": "", "assigned": ""}, "alternate": "",
        "tres": {"billing_weights": "", "configured": f"cpu={total_cpus},node={total_nodes}"}, "cluster": "",
        "select_type": [], "cpus": {"task_binding": 0, "total": total_cpus}, "name": name,
        "priority": {"job_factor": 1, "tier": tier}, "partition": {"state": ["UP"]},
    }


def error(description: str, number: int, text: str, source: str) -> Obj:
    return {"description": description, "error_number": number, "error": text, "source": source}


def meta(release: str = "24.11.5") -> Obj:
    """Every answer's ``meta``: the plugins, and the Slurm release (``RestClient.release()`` reads it)."""
    major, minor, micro = release.split(".")
    return {"plugin": {"type": "openapi/slurmctld", "name": "Slurm OpenAPI slurmctld",
                       "data_parser": "data_parser/v0.0.42", "accounting_storage": "accounting_storage/slurmdbd"},
            "slurm": {"version": {"major": major, "micro": micro, "minor": minor}, "release": release,
                      "cluster": "dev"}}


# Where the releases' v0.0.42 answers differ, by release (``major.minor``). partition_bug: /nodes with
# update_time loads partitions with the same update_time, and fails (HTTP 500 "Unable to query
# partitions") when nodes changed but partitions did not. 24.11.5's openapi_slurmctld.so passes
# update_time to that slurm_load_partitions; 26.05.5's passes 0 (read from both builds' machine code).
RELEASES = {"24.11": {"partition_bug": True}, "26.05": {"partition_bug": False}}


@define
class Fault:
    """Make matching requests fail: with ``status``/``body``, or by closing the connection unanswered."""

    method: str
    path: str  # regular expression matched against the path after /slurm/v0.0.42/
    status: int = 500
    body: Optional[Obj] = None
    drop: bool = False
    delay: float = 0.0  # seconds before answering (normally, unless status/body/drop say otherwise)
    times: int = 1
    lose_answer: bool = False  # handle the request (a submission creates its job), then close unanswered


@define
class FakeState:
    nodes: dict[str, Obj] = field(factory=dict)
    jobs: dict[int, Obj] = field(factory=dict)
    partitions: dict[str, Obj] = field(factory=dict)
    node_update: int = 0
    job_update: int = 0
    part_update: int = 0
    next_job_id: int = 1
    reconfigures: int = 0  # GET /reconfigure/ calls (scontrol reconfigure)
    submitted: list[Obj] = field(factory=list)
    requests: list[tuple[str, str, str]] = field(factory=list)
    sent: list[tuple[str, str, int]] = field(factory=list)  # (method, path, bytes of the answer's body)
    peers: set[tuple[str, int]] = field(factory=set)  # client (host, port): one per TCP connection
    faults: list[Fault] = field(factory=list)


class FakeSlurmrestd:
    """``with FakeSlurmrestd(token="t") as fake: connect("rest", url=fake.url, token="t")``."""

    def __init__(self, *, token: str = "token", clock: Callable[[], float] = time.time,
                 partition_bug: Optional[bool] = None, pretty: bool = True, release: str = "24.11.5"):
        """``release``: which slurmrestd to be where releases differ (``RELEASES``); ``partition_bug``
        overrides the release's."""
        self.token = token
        self.clock = clock
        self.release = release
        self.meta = meta(release)
        quirks = RELEASES[release.rsplit(".", 1)[0]]
        self.partition_bug = quirks["partition_bug"] if partition_bug is None else partition_bug
        self.pretty = pretty  # slurmrestd pretty-prints; the byte count matters for benchmarks
        self.state = FakeState()
        self.lock = threading.RLock()
        self.port = 0
        self._server: Optional[ThreadingHTTPServer] = None
        self._thread: Optional[threading.Thread] = None
        self._connections: set[socket.socket] = set()

    # -- lifecycle -------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeSlurmrestd:
        fake = self

        class Handler(_Handler):
            server_fake = fake

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-slurmrestd", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Like a stopped slurmrestd: the port refuses connections until start() again."""
        if self._server:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with self.lock:
            connections, self._connections = self._connections, set()
        for conn in connections:  # a stopped daemon drops its keep-alive connections too
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __enter__(self) -> FakeSlurmrestd:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- state, as slurmctld would change it -------------------------------------------------------
    def now(self) -> int:
        return int(self.clock())

    def put_node(self, name: str, **fields: Any) -> None:
        with self.lock:
            self.state.nodes[name] = node_json(name, now=self.now(), **fields)
            self.state.node_update = self.now()

    def remove_node(self, name: str) -> None:
        with self.lock:
            del self.state.nodes[name]
            self.state.node_update = self.now()

    def put_job(self, job_id: int, **fields: Any) -> None:
        with self.lock:
            self.state.jobs[job_id] = job_json(job_id, **fields)
            self.state.next_job_id = max(self.state.next_job_id, job_id + 1)
            self.state.job_update = self.now()

    def remove_job(self, job_id: int) -> None:
        """The job is purged (MinJobAge passed)."""
        with self.lock:
            del self.state.jobs[job_id]
            self.state.job_update = self.now()

    def put_partition(self, name: str, nodes: str, total_nodes: int, total_cpus: int, tier: int = 1) -> None:
        with self.lock:
            self.state.partitions[name] = partition_json(name, nodes, total_nodes, total_cpus, tier)
            self.state.part_update = self.now()

    def add_fault(self, fault: Fault) -> None:
        with self.lock:
            self.state.faults.append(fault)

    def bytes_sent(self, method: Optional[str] = None, path: Optional[str] = None) -> int:
        """Bytes of answer bodies sent for requests matching ``method`` and ``path`` (a regular expression)."""
        with self.lock:
            return sum(size for m, p, size in self.state.sent
                       if (method is None or m == method) and (path is None or re.fullmatch(path, p)))

    def calls(self, method: Optional[str] = None, path: Optional[str] = None) -> int:
        with self.lock:
            return sum(1 for m, p, _ in self.state.requests
                       if (method is None or m == method) and (path is None or re.fullmatch(path, p)))

    # -- request handling ---------------------------------------------------------------------------
    def handle(self, method: str, path: str, query: dict[str, str], body: Optional[Obj],
               headers: Any) -> tuple[int, Optional[Obj]]:
        with self.lock:
            if headers.get("X-SLURM-USER-TOKEN") != self.token:
                return 401, None
            s = self.state
            if path in ("ping/", "ping"):
                return 200, {"pings": [{"hostname": "fake", "pinged": "UP", "responding": True, "latency": 100,
                                        "mode": "primary", "primary": True}]}
            if path in ("nodes/", "nodes"):
                return self._nodes(query)
            if path in ("jobs/", "jobs"):
                return self._jobs(query)
            if path in ("jobs/state/", "jobs/state"):
                return self._job_states(query)
            if path in ("partitions/", "partitions"):
                return 200, {"partitions": list(s.partitions.values()), "last_update": n(s.part_update)}
            if path in ("diag/", "diag"):
                return 200, {"statistics": {"req_time": n(self.now()), "req_time_start": n(0),
                                            "server_thread_count": 1, "jobs_submitted": len(s.submitted),
                                            "schedule_cycle_last": 1500, "schedule_cycle_mean": 2500,
                                            "bf_cycle_last": 0, "rpcs_by_message_type": [
                                                {"type_id": 2003, "message_type": "REQUEST_JOB_INFO",
                                                 "count": len(s.requests), "average_time": n(120)}]}}
            if path in ("reconfigure/", "reconfigure") and method == "GET":
                s.reconfigures += 1
                return 200, {}
            if path == "job/submit" and method == "POST":
                return self._submit(body or {})
            m = re.fullmatch(r"node/([^/]+)", path)
            if m:
                return self._node(method, unquote(m.group(1)), body or {})
            m = re.fullmatch(r"job/([^/]+)", path)
            if m:
                return self._job(method, m.group(1), query, body or {})
            return 404, {"errors": [error("Unknown URL", 9007, "Unknown URL method", "fake")]}

    def _nodes(self, query: dict[str, str]) -> tuple[int, Optional[Obj]]:
        s = self.state
        since = int(query.get("update_time", 0))
        if since and since - 1 >= s.node_update:
            return 304, None
        if since and self.partition_bug and since - 1 >= s.part_update:
            return 500, {"errors": [error("Unable to query partitions", -1, "Unspecified error", "_dump_nodes")]}
        return 200, {"nodes": list(s.nodes.values()), "last_update": n(self.now())}

    def _jobs(self, query: dict[str, str]) -> tuple[int, Optional[Obj]]:
        s = self.state
        since = int(query.get("update_time", 0))
        if since and since - 1 >= s.job_update:
            return 200, {"jobs": [], "last_backfill": n(0), "last_update": n(0),
                         "warnings": [{"description": f"No job changes since update_time[{since}]",
                                       "source": "op_handler_jobs"}]}
        jobs = list(s.jobs.values())
        if query.get("flags") == "ALL":
            jobs = [{**j, "job_resources": None} for j in jobs]
        return 200, {"jobs": jobs, "last_backfill": n(0), "last_update": n(self.now())}

    def _job_states(self, query: dict[str, str]) -> tuple[int, Optional[Obj]]:
        """``GET /jobs/state``: ids and states only, no ``last_update``; ``job_id`` filters by a CSV list."""
        jobs = list(self.state.jobs.values())
        if query.get("job_id"):
            wanted = {int(i) for i in query["job_id"].split(",") if i.isdigit()}
            jobs = [j for j in jobs if j["job_id"] in wanted or (j["array_job_id"].get("number") or 0) in wanted]
        return 200, {"jobs": [entry for j in jobs for entry in job_state_entries(j)]}

    def _node(self, method: str, name: str, body: Obj) -> tuple[int, Optional[Obj]]:
        s = self.state
        node = s.nodes.get(name)
        if method == "GET":
            if node is None:
                return 200, {"errors": [error(f"Failure to query node {name}", 0, "No error", "_dump_nodes")]}
            return 200, {"nodes": [node], "last_update": n(self.now())}
        if node is None:
            return 500, {"errors": [error(f"Failure to update node {name}", 2018, "Invalid node name specified",
                                          "_update_node")]}
        if method == "DELETE":
            self.remove_node(name)
            return 200, {}
        states = body.get("state") or []
        valid = {"DRAIN", "RESUME", "DOWN", "UNDRAIN", "IDLE", "FAIL", "FUTURE"}
        bad = [w for w in states if w not in valid]
        if bad:
            return 500, {"errors": [
                error(f'Unknown flag "{bad[0]}"', 9207, "Data parser unable to parse invalid flag", "#/state[0]/"),
                error(f"Failure to update node {name}", 2028, "Invalid node state specified", "_update_node")]}
        current = node["state"]
        if "RESUME" in states:
            if "DRAIN" not in current:
                return 500, {"errors": [error(f"Failure to update node {name}", 2028, "Invalid node state specified",
                                              "_update_node")]}
            node["state"] = [w for w in current if w != "DRAIN"]
            node["reason"], node["reason_changed_at"], node["reason_set_by_user"] = "", n(0), ""
        if "DRAIN" in states and "DRAIN" not in current:
            node["state"] = [*current, "DRAIN"]
        if "reason" in body:
            node["reason"], node["reason_changed_at"], node["reason_set_by_user"] = body["reason"], n(self.now()), \
                "root"
        for key in ("extra", "comment"):
            if key in body:
                node[key] = body[key]
        s.node_update = self.now()
        return 200, {}

    def _job(self, method: str, raw_id: str, query: dict[str, str], body: Obj) -> tuple[int, Optional[Obj]]:
        s = self.state
        if not raw_id.isdigit():
            return 422, {"errors": [error("Rejecting request. Failure parsing parameters", 9000,
                                          "Query empty or not RFC7320 compliant", "op_handler_job")]}
        job_id = int(raw_id)
        job = s.jobs.get(job_id)
        if method == "GET":
            # slurm_load_job: an array's id gives every record of the array (a job of no array: itself, with no
            # walk of every job, which made a read cost the job count at 50,000 jobs)
            if job is not None and not (job["array_job_id"].get("number") or 0):
                found = [job]
            else:
                found = [j for j in s.jobs.values() if (j["array_job_id"].get("number") or 0) == job_id] or \
                    ([job] if job is not None else [])
            if not found:
                return 404, {"jobs": [], "last_update": n(0), "errors": [
                    error(f"Unable to query JobId={job_id}", 2017, "Invalid job id specified", "_handle_job_get")]}
            if query.get("flags") == "ALL":
                found = [{**j, "job_resources": None} for j in found]
            return 200, {"jobs": found, "last_update": n(self.now())}
        if method == "DELETE":
            if job is None:
                code, text = 2017, "Invalid job id specified"
            elif job["job_state"][0] not in ("PENDING", "RUNNING", "SUSPENDED"):
                code, text = 2021, "Job/step already completing or completed"
            else:
                job["job_state"] = ["CANCELLED"]
                s.job_update = self.now()
                return 200, {"status": []}
            return 200, {"status": [{"error": {"string": text, "code": code, "message": text},
                                     "step_id": raw_id, "job_id": n(job_id), "federation": {"sibling": ""}}]}
        if job is None:
            return 404, {"results": None, "errors": [
                error("Job update requested failed", 2017, "Invalid job id specified", "slurm_update_job2()")]}
        for key in ("extra", "comment", "admin_comment"):
            if key in body:
                job[key] = body[key]
        s.job_update = self.now()
        return 200, {"results": [{"job_id": job_id, "step_id": "batch", "error": "No error", "error_code": 0,
                                  "why": ""}]}

    def _submit(self, body: Obj) -> tuple[int, Optional[Obj]]:
        s = self.state
        desc = body.get("job") or {}
        partition = desc.get("partition", "batch")
        if s.partitions and partition not in s.partitions:
            return 500, {"errors": [error("Batch job submission failed", 2000, "Invalid partition name specified",
                                          "slurm_submit_batch_job()")]}
        job_id = s.next_job_id
        s.submitted.append(desc)
        limit = (desc.get("time_limit") or {}).get("number")
        self.put_job(job_id, name=desc.get("name", ""), extra=desc.get("extra", ""), comment=desc.get("comment", ""),
                     admin_comment=desc.get("admin_comment", ""), partition=partition, submit_time=self.now(),
                     time_limit=limit, shared=tuple(desc.get("shared") or ()),
                     working_directory=desc.get("current_working_directory", ""))
        return 200, {"job_id": job_id, "step_id": "batch", "job_submit_user_msg": ""}


class _Handler(BaseHTTPRequestHandler):
    server_fake: FakeSlurmrestd
    protocol_version = "HTTP/1.1"  # keep-alive, like slurmrestd

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        with self.server_fake.lock:
            self.server_fake._connections.add(self.connection)

    def finish(self) -> None:
        with self.server_fake.lock:
            self.server_fake._connections.discard(self.connection)
        super().finish()

    def _serve(self, method: str) -> None:
        fake = self.server_fake
        url = urlparse(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not url.path.startswith(PREFIX):
            self._reply(404, None)
            return
        path = url.path[len(PREFIX):]
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        with fake.lock:
            fake.state.requests.append((method, path, url.query))
            fake.state.peers.add(self.client_address[:2])
            fault = next((f for f in fake.state.faults if f.method == method and re.fullmatch(f.path, path)), None)
            if fault:
                fault.times -= 1
                if fault.times <= 0:
                    fake.state.faults.remove(fault)
        if fault and fault.delay:
            time.sleep(fault.delay)
        if fault and fault.drop:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if fault and not fault.lose_answer and (fault.body is not None or not fault.delay):
            self._reply(fault.status, copy.deepcopy(fault.body), method, path)
            return
        body = json.loads(raw) if raw else None
        status, answer = fake.handle(method, path, query, body, self.headers)
        if fault and fault.lose_answer:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self._reply(status, answer, method, path)

    def _reply(self, status: int, body: Optional[Obj], method: str = "", path: str = "") -> None:
        fake = self.server_fake
        if status == 401:
            data = b"Authentication failure"
            content_type = "text/plain"
        elif body is None:
            data, content_type = b"", "application/json"
        else:
            body = {**body, "meta": fake.meta, "errors": body.get("errors", []), "warnings": body.get("warnings", [])}
            data = json.dumps(body, indent=2 if fake.pretty else None).encode()
            content_type = "application/json"
        with fake.lock:
            fake.state.sent.append((method, path, len(data)))
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if data:
            self.wfile.write(data)

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

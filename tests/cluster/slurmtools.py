"""Reading Slurm and waiting, for cluster tests: what slurmctld itself reports, via scontrol --json."""

from __future__ import annotations

import json
import time

from sunk.slurm.v0042 import parse_job
from sunk.translate.gang import has_started
from sunk.translate.identity import identity_of


def wait_for(predicate, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def slurm_job(dev_cluster, job_id: int) -> dict:
    """The job as slurmctld reports it (``scontrol --json``, REST v0.0.42 fields); {} once it is gone."""
    out = dev_cluster.slurm("scontrol", "--json", "show", "job", str(job_id), check=False).stdout
    try:
        jobs = json.loads(out).get("jobs") or []
    except ValueError:
        return {}
    return jobs[0] if jobs else {}


def topo_exclusive(dev_cluster, job_id: int) -> bool:
    """The job holds its topology block alone (``--exclusive=topo``). scontrol's text names it on every release
    (``OverSubscribe=TOPO`` up to 25.11, ``Exclusive=TOPO`` from 26.05, whose ``--json`` no longer shows it in
    ``shared``: REST v0.0.42 still does)."""
    words = dev_cluster.slurm("scontrol", "show", "job", str(job_id)).stdout.split()
    return "OverSubscribe=TOPO" in words or "Exclusive=TOPO" in words


def jobs_carrying(dev_cluster, needle: str) -> list[int]:
    """Ids of the jobs slurmctld still holds (any state) whose record mentions ``needle``, in one call."""
    out = dev_cluster.slurm("scontrol", "-o", "show", "job", check=False).stdout
    return sorted(int(line.split(None, 1)[0].removeprefix("JobId="))
                  for line in out.splitlines() if line.startswith("JobId=") and needle in line)


def state(job: dict):
    return job["job_state"][0] if job.get("job_state") else None


def started_placeholder(job: dict, owner: str) -> bool:
    """Slurm shows the job started (running, its prolog over) and its AdminComment names ``owner`` (a Pod's
    UID, or a gang's ``gang:<ns>/<key>``), with nothing of sunk's in the Extra its user may write."""
    if not job:
        return False
    parsed = parse_job(job)
    identity = identity_of(parsed)
    found = None if identity is None else str(identity.unit)
    return has_started(parsed) and found == owner and "sunk-" not in parsed.extra


def number(job: dict, key: str):
    value = job.get(key)
    return value.get("number") if isinstance(value, dict) else value


def idle_node(dev_cluster, timeout: float = 90, states: tuple[str, ...] = ("idle",)) -> str:
    """Some node with nothing on it (the highest-numbered first: other tests fill from node1); with ``states``
    ("idle", "mixed"), one that can still take a small job beside what runs there."""

    def find():
        out = dev_cluster.slurm("sinfo", "-h", "-N", "-p", "batch", "-o", "%N %T").stdout.split("\n")
        idle = sorted((line.split()[0] for line in out if line.split()[1:] and line.split()[1] in states),
                      reverse=True)
        return idle[0] if idle else None

    return wait_for(find, timeout, "an idle node", interval=1)


def all_jobs(dev_cluster, timeout: float = 20) -> list[dict]:
    """Every job slurmctld holds, in any state (ended ones for MinJobAge), in one ``scontrol --json`` call.

    Raises when slurmctld does not answer: here, unlike in ``slurm_job``, no answer is not "no job".
    """
    out = dev_cluster.slurm("scontrol", "--json", "show", "job", timeout=timeout).stdout
    return json.loads(out).get("jobs") or []


def all_nodes(dev_cluster, timeout: float = 20) -> dict[str, dict]:
    """Every Slurm node by name, as ``scontrol --json show node`` reports it (raises when slurmctld does not answer)."""
    out = dev_cluster.slurm("scontrol", "--json", "show", "node", timeout=timeout).stdout
    return {node["name"]: node for node in json.loads(out).get("nodes") or []}

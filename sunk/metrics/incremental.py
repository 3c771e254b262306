"""The Slurm table rendered incrementally: each job's and each node's lines are kept between scrapes.

Why: at 5000 nodes and 50,000 jobs the table is 214,000 series (20 MB of text), and rendering
every series on every scrape took 0.25 to 0.73 s (docs/benchmarks.md), although between two
scrapes only a few jobs and nodes change. ``IncrementalTable.pieces`` gives the bytes of
``render(slurm_families(snapshot))`` (tests compare the two on random sequences of snapshots)
while rendering only the objects that changed since its last scrape, and hands them to
``/metrics`` as pieces, never joined whole (``sunk.controller.textsources``).

Memory: the lines kept are most of the table's text, about 34 MB at 50,000 jobs, held between
scrapes. A scrape then allocates a few MB (lists of pieces, the uptime lines, one group joined
at a time), where the full renderer allocated 52 MB of rows and text per scrape and /metrics
copied the 20 MB text twice more (encoded, then appended to the registry's bytes).

What is kept, and when it is reused:
- Per job: its ``slurm_job_state`` line and, while it runs, its ``slurm_job_cpus_allocated``
  and ``slurm_job_gpus_allocated`` lines and its ``slurm_job_uptime_seconds`` lines without the
  value. Per node: its ``slurm_node_state`` lines and its eight ``slurm_node_<figure>`` lines.
- An entry is keyed by the object's key in the snapshot and holds the object it was rendered
  from. It is reused when the snapshot holds that very object (the Slurm cache keeps an
  unchanged job's object between reads), or an equal one (a full list makes every object
  anew; Job and Node are frozen attrs classes, equal objects render the same lines). The
  equal object then replaces the held one, so the next scrape is an identity check again.
  Anything else is rendered again. Entries whose key left the snapshot are dropped.
- ``slurm_job_uptime_seconds`` is the one family that depends on the scrape's clock, not only
  on the objects: its values are rendered on every scrape (one per running job), only its
  label part is kept.
- The counts (``slurm_jobs_*``, ``slurm_queue_*``, ``slurm_partition_*``, ``slurm_nodes_*``) are
  kept up to date as entries come, change and go, and rendered on every scrape through the same
  functions as the full renderer (a few hundred series). The scheduler figures are rendered
  on every scrape.

Order: jobs in the snapshot's order, nodes sorted by name, as the full renderer does; one
HELP/TYPE per family, then the family's lines from every object in that order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable
from itertools import chain
from typing import Any, Optional

from sunk.model.slurm import Job, Node
from sunk.translate.slurmstates import job_state_name, node_count_bucket, node_state_name

from .exposition import format_value, header, label_block, render
from .families import (
    _NODE_FIGURES,
    JOB_CPUS_HELP,
    JOB_GPUS_HELP,
    JOB_LABELS,
    JOB_NODE_LABELS,
    JOB_STATE_HELP,
    JOB_UPTIME_HELP,
    JOBS_COUNTS,
    NODE_STATE_HELP,
    NODE_STATE_LABELS,
    SlurmSnapshot,
    job_user,
    jobs_count_families,
    node_count_families,
    node_usage,
    per_node,
    queue_count_families,
    scheduler_families,
)

GROUP = 4096  # pieces per group: about half a MB joined
_FIGURES = tuple(figure for figure, _ in _NODE_FIGURES)
_NODE_HEADERS = tuple(header(f"slurm_node_{figure}", f"{text} per node.").encode() for figure, text in _NODE_FIGURES)
_JOB_FAMILIES = ("slurm_job_state", "slurm_job_cpus_allocated", "slurm_job_gpus_allocated", "slurm_job_uptime_seconds")
_HEADERS = {name: header(name, text).encode() for name, text in (
    ("slurm_job_state", JOB_STATE_HELP), ("slurm_job_cpus_allocated", JOB_CPUS_HELP),
    ("slurm_job_gpus_allocated", JOB_GPUS_HELP), ("slurm_job_uptime_seconds", JOB_UPTIME_HELP),
    ("slurm_node_state", NODE_STATE_HELP))}
_NODE_LABEL = ("node",)

# A job's entry: [job, state line] for a job that is not running; a running one adds
# [cpus lines, gpus lines, uptime template, its series count, start time], all lines in UTF-8.
# The uptime template is the job's uptime lines with "%b" for the value (a "%" of a label doubled).
# A list: an equal object from a new list takes the old one's place in it.
_JobEntry = list[Any]
# A node's entry: [node, state lines, then one line per figure of _NODE_FIGURES].
_NodeEntry = list[Any]


def _sub(counter: Counter[Any], key: Any, by: int = 1) -> None:
    """Take ``by`` off ``key``'s count, dropping the key at zero (a count of zero is no series)."""
    left = counter[key] - by
    if left:
        counter[key] = left
    else:
        del counter[key]


class IncrementalTable:
    """The Slurm table's text, kept between scrapes. Not thread-safe: one scrape at a time."""

    def __init__(self) -> None:
        self.job_renders = 0  # jobs rendered since the start (for tests and benchmarks)
        self.node_renders = 0
        self.clear()

    def clear(self) -> None:
        """Forget every entry (a standby renders no table and need not hold one)."""
        self._jobs: dict[Hashable, _JobEntry] = {}
        self._nodes: dict[Hashable, _NodeEntry] = {}
        self._owners: dict[str, Counter[tuple[str, str, str]]] = {base: Counter() for base, _ in JOBS_COUNTS}
        self._queue: Counter[str] = Counter()
        self._dependency = 0
        self._partitions: dict[str, Counter[str]] = {}  # partition -> figure sums, "" -> the node count
        self._buckets: Counter[str] = Counter()
        self._node_total = 0
        self._not_responding = 0

    # -- jobs ---------------------------------------------------------------------------------------
    def _count_job(self, job: Job, sign: int) -> None:
        owners = self._owners.get(job.state)
        if owners is not None:
            owner = (job.partition, job.account, job_user(job))
            if sign > 0:
                owners[owner] += 1
            else:
                _sub(owners, owner)
        word = job_state_name(job)
        dependency = job.state == "PENDING" and job.state_reason == "Dependency"
        if sign > 0:
            self._queue[word] += 1
        else:
            _sub(self._queue, word)
        self._dependency += sign * dependency

    def _render_job(self, job: Job) -> _JobEntry:
        self.job_renders += 1
        user, job_id = job_user(job), str(job.id)
        state = ("slurm_job_state" + label_block(
            JOB_LABELS, (job.partition, job.account, user, job_id, job.name, job_state_name(job))) + " 1\n").encode()
        if job.state != "RUNNING":
            return [job, state]
        cpus, gpus, uptime = [], [], []
        for allocation in per_node(job):
            block = label_block(JOB_NODE_LABELS, (job.partition, job.account, user, job_id, allocation.node))
            cpus.append(f"slurm_job_cpus_allocated{block} {format_value(allocation.cpus)}\n")
            gpus.append(f"slurm_job_gpus_allocated{block} {format_value(allocation.gpus)}\n")
            uptime.append(f"slurm_job_uptime_seconds{block.replace('%', '%%')} %b\n")
        return [job, state, "".join(cpus).encode(), "".join(gpus).encode(), "".join(uptime).encode(), len(uptime),
                job.start_time]

    def _job_parts(self, jobs: Iterable[tuple[Hashable, Job]], now: int) -> tuple[list[bytes], ...]:
        """The pieces of the four per-job families, in the snapshot's order of jobs.

        One pass over the jobs, each entry read once: the loop runs once per job, so it is kept lean.
        """
        entries = self._jobs
        get = entries.get
        states: list[bytes] = []
        cpus: list[bytes] = []
        gpus: list[bytes] = []
        uptimes: list[bytes] = []
        add_state, add_cpus, add_gpus, add_uptime = states.append, cpus.append, gpus.append, uptimes.append
        for key, job in jobs:
            entry = get(key)
            if entry is None or entry[0] is not job:
                if entry is not None and entry[0] == job:
                    entry[0] = job  # equal: the same lines; the next scrape checks identity again
                else:
                    entries[key] = entry = self._job_entry(entry, job)
            add_state(entry[1])
            if len(entry) > 2:
                add_cpus(entry[2])
                add_gpus(entry[3])
                if entry[5]:
                    start = entry[6]
                    value = now - start if start and now > start else 0  # whole seconds, never negative
                    text = b"%d" % value if type(value) is int else format_value(value).encode()
                    add_uptime(entry[4] % ((text,) * entry[5]))
        return states, cpus, gpus, uptimes

    def _job_entry(self, entry: Optional[_JobEntry], job: Job) -> _JobEntry:
        """The entry for a changed or new ``job``, whose key held ``entry`` (or nothing). Rendered before
        the counts move: a render that raises leaves entry and counts as they were, in step."""
        rendered = self._render_job(job)
        if entry is not None:
            self._count_job(entry[0], -1)
        self._count_job(job, +1)
        return rendered

    def _drop_gone(self, entries: dict[Hashable, Any], present: Any, count: Any) -> None:
        if len(entries) > len(present):  # every key of the snapshot has its entry by now
            for key in entries.keys() - present.keys():
                count(entries.pop(key)[0], -1)

    # -- nodes --------------------------------------------------------------------------------------
    def _count_node(self, node: Node, sign: int) -> None:
        usage = node_usage(node)
        for partition in node.partitions:
            sums = self._partitions.get(partition)
            if sums is None:
                sums = self._partitions[partition] = Counter()
            sums[""] += sign
            for figure in _FIGURES:
                sums[figure] += sign * getattr(usage, figure)
            if not sums[""]:
                del self._partitions[partition]
        self._node_total += sign
        self._not_responding += sign * node.not_responding
        bucket = node_count_bucket(node.state)
        if bucket is not None:
            if sign > 0:
                self._buckets[bucket] += 1
            else:
                _sub(self._buckets, bucket)

    def _render_node(self, node: Node) -> _NodeEntry:
        self.node_renders += 1
        word = node_state_name(node.state)
        state = "".join(f"slurm_node_state{label_block(NODE_STATE_LABELS, (node.name, partition, word))} 1\n"
                        for partition in node.partitions or ("",))
        usage = node_usage(node)
        block = label_block(_NODE_LABEL, (node.name,))
        return [node, state.encode(), *(f"slurm_node_{figure}{block} {format_value(getattr(usage, figure))}\n".encode()
                                        for figure in _FIGURES)]

    def _node_order(self, nodes: Iterable[tuple[Hashable, Node]]) -> list[_NodeEntry]:
        entries = self._nodes
        order: list[_NodeEntry] = []
        for key, node in nodes:
            entry = entries.get(key)
            if entry is None or entry[0] is not node:
                if entry is not None and entry[0] == node:
                    entry[0] = node
                else:
                    rendered = self._render_node(node)  # (first: a render that raises moves no count)
                    if entry is not None:
                        self._count_node(entry[0], -1)
                    self._count_node(node, +1)
                    entries[key] = entry = rendered
            order.append(entry)
        order.sort(key=lambda e: e[0].name)  # stable, as the full renderer's sorted()
        return order

    # -- the table ----------------------------------------------------------------------------------
    def pieces(self, snapshot: SlurmSnapshot, before: Iterable[bytes] = ()) -> list[list[bytes]]:
        """The table's bytes for ``snapshot`` after ``before``, as groups of pieces (``textsources.Pieces``).

        Never joined here: at 50,000 jobs the table is 20 MB, and ``/metrics`` joins one group at a time.
        """
        parts = list(before)
        families = self._job_parts(snapshot.jobs.items(), int(snapshot.now))
        self._drop_gone(self._jobs, snapshot.jobs, self._count_job)
        for name, pieces in zip(_JOB_FAMILIES, families, strict=True):
            parts.append(_HEADERS[name])
            parts += pieces
        del families
        parts.append(render(jobs_count_families(self._owners)).encode())

        nodes = self._node_order(snapshot.nodes.items())
        self._drop_gone(self._nodes, snapshot.nodes, self._count_node)
        parts.append(_HEADERS["slurm_node_state"])
        parts += [entry[1] for entry in nodes]
        for index, figure_header in enumerate(_NODE_HEADERS, start=2):
            parts.append(figure_header)
            parts += [entry[index] for entry in nodes]
        tail = [*node_count_families(self._partitions, self._buckets, self._node_total, self._not_responding),
                *queue_count_families(self._queue, self._dependency)]
        if snapshot.stats is not None:
            tail += scheduler_families(snapshot.stats)
        parts.append(render(tail).encode())
        return [parts[i:i + GROUP] for i in range(0, len(parts), GROUP)]

    def render(self, snapshot: SlurmSnapshot) -> str:
        """The table's text, whole (tests compare it with the full renderer's)."""
        return b"".join(chain.from_iterable(self.pieces(snapshot))).decode()

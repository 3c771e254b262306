"""How Slurm's nodes and jobs are read: the lister behind each ``SlurmInformer`` (``sunk/slurm/informer.py``).

Readers use the informers (store, indexers, handlers), never this class: a ``SlurmCache`` of one kind is
an informer's lister, polling Slurm and writing what it read into its informer's store (``add_sink``: a
``ListerSink``'s ``put`` and ``drop``, as client-go's Reflector writes into its Store), which decides what
changed for its handlers. What follows is the read strategy and its cost.

Everything that needs Slurm's state reads it from memory, through the informers. The cache makes one
list call per kind per interval, whatever the number of readers: a burst of pending
Pods never becomes a burst of Slurm calls (slurm-bridge listed every job on every
scheduling attempt, and starved). Reads of single jobs happen only in the job-state
mode below, for the jobs that changed.

- Each list passes ``updated_since`` (Slurm's ``update_time``), so an idle cluster costs
  two "no change" answers per interval. Any answer with items is a full list; it is
  diffed against the previous one, and each sink gets one write per added, changed
  (``put``) or removed (``drop``) item.
- Slurm unreachable: the error is logged once per outage, the last snapshot is kept, the
  cache reports itself not ``fresh``, and the next interval tries again. After an outage,
  after ``last_update`` went backwards (a restarted or failed-over slurmctld whose clock
  is behind), and every ``resync_every`` seconds, it relists without ``updated_since``,
  so a missed "changed" answer can never leave it wrong for good.
- A refresh that takes long (a full list of 10,000 jobs takes slurmrestd seconds to
  render) stretches the period so that the cache keeps Slurm busy at most ``max_busy``
  of the time: at that size the refresh rate is Slurm's to set, not ours.
- Sinks are written on the refreshing thread, one refresh at a time, once the kind's refresh is
  done, additions first, then changes, then removals, then (a full list, a job state list) the
  keys Slurm listed (``listed``: its informer drops what only a reader observed, before the
  listing, and the listing does not show); they must be quick and must not block on
  the cache. An exception in one is logged and swallowed.
- The end of an outage is an event too (``on_recovered``): the first refresh in which every
  kind lists again, after one failed, calls its listeners once the relist's own writes are
  out. A Manager wakes with it every reconcile that waits out a backoff for the outage,
  which otherwise grew through the outage to minutes (the fault matrix's slurmrestd row).

Jobs, by state (``job_states``; on by default where the client's state list is cheap, i.e.
slurmrestd's ``GET /jobs/state``). v0.0.42 has no job delta: with ``update_time`` any one
changed job costs the full list (77 to 143 MB and 6 to 10 s at 10,000 jobs). So a job
refresh is instead:

1. one ``list_job_states()`` (about 80 bytes a job: ids and states only);
2. each listed state compared with the state of the record held: a job that is new, whose
   state (base state or flags) differs, that is gone, or whose read a reader requested
   (``read_requests``: every so many seconds) and is due, is marked; an array whose listed
   tasks do not match its held records is marked whole;
3. one ``read_jobs`` call per marked job or array (``GET /job/{id}``: v0.0.42 takes one id
   per call), each record stamped with the time its own read began; a job gone from the
   state list is removed without a read. More than ``max_job_reads`` marks in one refresh
   (64, or a twentieth of the jobs held): a full list instead, which costs no more then;
4. every ``job_full_every`` seconds (and after an outage) a full list, diffed as above: the
   safety net for what a state cannot show. While the state list cannot be used, jobs are
   listed as in the full-list mode (with ``update_time``). A read Slurm refused (an answer, not
   an outage) fails the refresh and changes nothing held; the next refresh lists states and reads
   again, since a full list would cost seconds at 10,000 jobs; a second refusal in a row lists in full.

Reads made elsewhere, and reads that may wait (``observe``, a request's ``wait_up_to``). A reader that
reads a job from Slurm itself (the scheduler's hook API reads a placeholder as its script calls, seconds
before a state list would show the change) hands the record to the cache; the next state list takes it for
the job's read when it shows the same state, and no later read of the job is held. A job's read request
(``ReadRequest.wait_up_to``, ``sunk/slurm/readrequests.py``) lets the read its change to RUNNING asks for
(or its first, when the job is new and PENDING or RUNNING) wait that many seconds for such a record: the
scheduler's new placeholders and starting ones, whose own call brings the record, are then read by nobody
else (a
placeholder cost three reads of the same job as it started, every one of them on slurmctld's busiest
seconds). A read that waits counts as a change, not as an idle state list: the cache keeps listing
states meanwhile, since the job may change in ways a check of ``update_time`` begun later would not
see. Once the patience is out the cache reads the job itself, so a call that never comes costs only
that delay.

Only its readers' jobs (``keep_job``: the scheduler keeps its own placeholders). Every other tenant's
job would otherwise be read at each of its changes (a submission, a start, an end: three or four reads
a job), by every replica. With ``keep_job`` the cache holds only the jobs it keeps, from full lists and
reads alike, and a state list's entry for a job it does not hold is read only when a read request names
the job (``ReadRequest.expected``: its reader just submitted it) or while a reader asks for every new job
(``ReadRequests.read_new_jobs``: a submission whose answer was lost, when the job it may have made must
be found; a replica standing by, whose store must hold the leader's new placeholders when it takes
over); such a job, once read and not kept, is not read again. The other jobs' states are remembered by
id (and by array), so that their changes still count as changes (a refresh that saw one is not idle),
and a job first seen while no reader asked for new jobs is read if one asks later, from the time it asks.
The jobs that changed are read ``read_workers`` at a time (the client's ``read_concurrency``: 8 over
REST, where slurmrestd serves each read on a thread of its own; 1 through pyslurm, which holds the GIL
through a read): a burst of changes is then about an eighth as many round trips deep.

Writes mean what they meant with full lists (added, changed, removed),
and a read that finds the job changed again since the state list keeps the newer record:
the comparison is always with the record held, never with an earlier state list, so a job
that changes between the state list and its read is never lost or shown stale (the next
state list differs from the record, or matches it).

What a state list cannot show, and so what readers see only at the next full list (up to
``job_full_every``, 5 minutes by default) unless a read request covers it: a change to a job's
fields while its state (and flags) stay the same: its Extra or comment, its reason (a
placeholder's ``Prolog`` clearing as it starts: the scheduler rereads its running placeholders
not started yet, for this; a pending job's reason: the scheduler rereads its pending placeholders
every few seconds, to show Slurm's reason on their Pods), its priority, its
name, partition or limits (scontrol update), its nodes
if it is resized. Its nodes as it starts, and its end, come with state changes
(PENDING -> RUNNING, RUNNING -> COMPLETING/COMPLETED, requeue -> PENDING), so they are seen
at once.

Jobs while idle (update_time checks). ``/jobs/state`` takes no ``update_time`` (24.11's
handler parses ``job_id`` only) and its answer carries no time, so a state list costs the
same whether or not anything changed (0.19 s and 0.8 MB at 10,000 jobs on 24.11, where the
full-list mode's "no change" answer costs 4 ms). The only "did any job change?" question
slurmrestd answers is ``GET /jobs?update_time=T``: slurmctld compares T with its own
``last_job_update``, which it moves with its changes to the job table (a submission, a state
change, an update, a purge: what the full-list mode always relied on), and answers "no change"
when ``T - 1 >= last_job_update`` (a change in the same second as T counts as a change).
But when a job did change, that same call answers with every job: the full list. So checks
are worth it only while the cluster is idle, and the cache switches between the two:

- after ``job_check_after`` refreshes in a row whose state list found nothing to read (by
  default: once those state lists have taken, together, as long as the last full job list,
  so that a switch that turns out wrong costs at most as much again: the ski-rental rule), the
  next refresh first reads slurmctld's clock (``server_time``: ``GET /diag``'s ``req_time``),
  then lists states; if that state list finds nothing to read either, the cache holds every
  change up to the state list, which began after that time, and each following refresh is
  one ``list_jobs(updated_since=that time)``: a "no change" answer, and nothing else;
- the first check that meets a change gets every job, and that answer is used as a full list
  (diffed, and its own ``last_update``, slurmctld's clock as it packed the list, is the new
  T); the cache lists states again from the next refresh on. A change met while checking
  thus costs a full list (seconds at 10,000 jobs) where a state list and a read would have
  done; that is the price of the cheap idle refresh, and why checking waits for a stretch
  of idle state lists, and why by default it checks only while a full list takes at most one
  refresh interval (``job_check_max_full``): at 10,000 jobs a full list takes seconds, so a
  large cluster keeps listing states (0.19 s and 0.8 MB a refresh), and a change is never
  seen seconds late for the sake of a cheaper idle refresh;
- a nudged refresh (a caller that expects a change, e.g. after a submission) lists states
  instead of checking, so sunk's own changes never cost a full list;
- while checking, every ``resync_every`` seconds one refresh reads slurmctld's clock and
  lists states again: a clock that went backwards (a failover to a controller whose clock is
  behind, which could answer "no change" wrongly) means a full list at once, and a state list
  that does find something ends the checks; otherwise the checks go on with the same T (so
  a change of any field since T still counts, where a state list shows only states). T is
  always slurmctld's own time (from ``/diag`` or a job list), never the cache's clock.

A job purged while checking moves ``last_job_update`` too (``purge_old_job``): the check
answers with the full list, in which the job is missing, so it is removed. Where the clock
cannot be read (a client without ``server_time``, ``PrivateData=usage`` refusing ``/diag``),
idle refreshes keep listing states.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import MappingProxyType
from typing import Any, Optional, Protocol, Union

from attrs import frozen

from sunk.model.slurm import Job, JobState, Node

from .client import SlurmClient, Snapshot
from .errors import SlurmError, SlurmUnavailable
from .readrequests import ReadRequest, ReadRequests

log = logging.getLogger(__name__)

NODE = "node"
JOB = "job"
KINDS = (NODE, JOB)  # every kind a cache can hold (its lister and key: ``SlurmCache.__init__``), in start order

Item = Union[Node, Job]


@frozen
class RefreshResult:
    ok: bool
    calls: int  # Slurm calls: a list per kind, plus in the job-state mode one read per changed job or array
    events: int  # changes written to the sinks: items added, changed or removed
    seconds: float
    error: Optional[str] = None


@frozen
class CacheStats:
    refreshes: int
    failures: int
    calls: int
    events: int
    last_refresh_seconds: float
    job_reads: int = 0  # read_jobs calls made for changed jobs (job-state mode)
    job_full_lists: int = 0  # full job lists (every one, in the full-list mode)
    job_checks: int = 0  # update_time checks answered "no job changed" (job-state mode, while idle)
    job_reads_taken: int = 0  # job reads a record observed elsewhere stood in for (``observe``)


Reread = Callable[[Job], bool]


class ListerSink(Protocol):
    """Where a lister writes what it read: its informer's store (client-go's Reflector writes into its Store).

    No event type stands between the two: the lister says what it holds now and as of which read, and the
    store (which keeps its own old values and ordering rule) decides what changed for its handlers."""

    def put(self, key: Hashable, item: Any, observed_at: float) -> None:
        """``item`` as read by a read requested at ``observed_at`` (the lister's clock)."""

    def drop(self, key: Hashable, observed_at: float) -> None:
        """The item is gone as of a read requested at ``observed_at``."""

    def listed(self, keys: Collection[Hashable], observed_at: float) -> None:
        """A complete listing requested at ``observed_at`` (a full list, or a job state list) showed these
        keys and no other (client-go's ``Replace``): an item held that it does not show, observed before it
        (a record only a reader read, of a job purged since), is gone. After the listing's own writes."""


class RefreshWrites:
    """One refresh's writes for one kind, held until the refresh is done and then written to the sinks in
    the order a relist's changes always came: additions, then changes, then removals, each in the order
    made. ``items``: what the lister holds once they are applied."""

    def __init__(self, held: Mapping[Hashable, Any] = MappingProxyType({})):
        self.items: dict[Hashable, Any] = dict(held)
        self._added: list[tuple[Hashable, Any, float]] = []
        self._changed: list[tuple[Hashable, Any, float]] = []
        self._removed: list[tuple[Hashable, float]] = []
        self._listing: Optional[tuple[frozenset[Hashable], float]] = None

    def listed(self, keys: Collection[Hashable], observed_at: float) -> None:
        """This refresh was a complete listing (``ListerSink.listed``), written after its changes."""
        self._listing = (frozenset(keys), observed_at)

    def put(self, key: Hashable, item: Any, observed_at: float) -> None:
        old = self.items.get(key)
        self.items[key] = item
        if old is None:
            self._added.append((key, item, observed_at))
        elif old != item:
            self._changed.append((key, item, observed_at))

    def drop(self, key: Hashable, observed_at: float) -> None:
        if self.items.pop(key, None) is not None:
            self._removed.append((key, observed_at))

    @property
    def removed(self) -> list[Hashable]:
        return [key for key, _ in self._removed]

    def __len__(self) -> int:
        return len(self._added) + len(self._changed) + len(self._removed)

    def write_to(self, sink: ListerSink) -> None:
        for key, item, at in self._added + self._changed:
            sink.put(key, item, at)
        for key, at in self._removed:
            sink.drop(key, at)
        if self._listing is not None:
            sink.listed(*self._listing)


def diff(old: Mapping[Hashable, Any], new: Mapping[Hashable, Any], observed_at: float = 0.0) -> RefreshWrites:
    """The writes turning ``old`` into ``new``: added, then changed, then removed, each by key; ``new`` is a
    complete listing (``ListerSink.listed``)."""
    writes = RefreshWrites(old)
    for key, item in new.items():
        writes.put(key, item, observed_at)
    for key in old:
        if key not in new:
            writes.drop(key, observed_at)
    writes.listed(new.keys(), observed_at)
    return writes


@frozen
class JobReads:
    """What one state list says to read: see ``plan_job_reads``."""

    jobs: tuple[int, ...] = ()  # job ids whose records to read
    arrays: tuple[int, ...] = ()  # array job ids whose every record to read
    gone: tuple[int, ...] = ()  # held job ids the state list no longer shows: removed without a read


def plan_job_reads(held: Mapping[int, Job], states: Sequence[JobState],
                   reread: Optional[Reread] = None) -> JobReads:
    """Compare a state list with the records held; name what must be read again, and what is gone.

    Every entry names one record by its own id (JobState): a job, a task that started (a record of
    its own), or an array's own record (its pending tasks, each an entry, or its last task). That
    record is read when new, when its state or flags differ, or when ``reread`` says so: a job or a
    task alone, an array's own record with every record of the array (one read, and what its tasks
    became). A record held but no longer listed is gone (purged), without a read.
    """
    arrays_held = {job.array_job_id for job in held.values() if job.array_job_id is not None}
    read: dict[int, None] = {}
    arrays: dict[int, None] = {}
    listed: set[int] = set()
    for entry in states:
        record_id = entry.job_id
        if record_id is None:
            continue
        listed.add(record_id)
        if record_id in read or record_id in arrays:
            continue
        known = held.get(record_id)
        in_array = entry.array_job_id is not None
        if known is not None and (known.array_job_id is not None) == in_array and _speaks_for(entry, known) and \
                entry.same_state(known) and not (reread is not None and reread(known)):
            continue
        if in_array and (record_id in arrays_held or (known is not None and known.array_job_id == record_id)):
            arrays[record_id] = None  # the array's own record: with every record of its array
        else:
            read[record_id] = None
    gone = tuple(job_id for job_id in held if job_id not in listed)
    return JobReads(tuple(read), tuple(arrays), gone)


def _speaks_for(entry: JobState, record: Job) -> bool:
    """Whether an array's entry is this record's: its own task, or a task still pending in the array's own
    record (which has no task index of its own until its last task starts)."""
    if entry.array_task_id is None or record.array_task_id == entry.array_task_id:
        return True
    return record.array_task_id is None and record.array_job_id == record.id


# slurmctld's update_time is in whole seconds: "no change" only once T - 1 >= its last update.
UPDATE_TIME_RESOLUTION = 1.0
# Within that second every node poll is answered in full again: such re-lists may keep Slurm busy
# with us at most this share of the time (poll_wait).
RELIST_SHARE = 0.2


def poll_wait(interval: float, took: float, max_busy: float, answered_with_nodes: bool) -> float:
    """Seconds the background loop waits after a refresh that took ``took``.

    The interval, stretched so that Slurm is busy with us at most ``max_busy`` of the time. After
    a node list answered with every node (a change), slurmctld answers update_time=T in full
    until the second is out, so a node poll faster than a second (the Syncer's 250 ms) would
    list every node again at each poll: the loop then waits long enough that those lists take at
    most RELIST_SHARE of the time, and never longer than the rest of that second. A small
    cluster's list is cheap and keeps the pace (a second change is seen as fast as the first:
    a drain on its Pod in 0.27 s, p99, at 200 nodes); a large one's waits out the second.
    Nothing is missed: the next call's update_time is that answer's last_update.
    """
    wait = max(interval - took, took / max_busy - took, 0.0)
    if answered_with_nodes:
        wait = max(wait, min(UPDATE_TIME_RESOLUTION - took, took / RELIST_SHARE - took))
    return wait


class _Kind:
    """The state kept for one list (nodes or jobs)."""

    def __init__(self, name: str, lister: Callable[..., Snapshot[Any]], key: Callable[[Any], Hashable]):
        self.name, self.lister, self.key = name, lister, key
        self.items: Mapping[Hashable, Any] = MappingProxyType({})
        self.listed_at = 0.0  # clock when the list behind ``items`` was requested
        self.read_at: dict[Hashable, float] = {}  # items read one by one since that list: when their read began
        self.last_update = 0
        self.synced = False
        self.full_next = True
        self.last_full = -math.inf
        self.last_ok = -math.inf
        self.failing: Optional[str] = None
        self.error: Optional[Exception] = None  # what the failing list raised
        self.failing_since = 0.0  # clock when the current outage began
        self.read_refusals = 0  # refreshes in a row that failed only because Slurm refused a job's read


class _ReadRefused(SlurmError):
    """Slurm answered a job's read with a refusal (not an outage): nothing held changed."""


@frozen
class _Others:
    """With ``keep_job``, the jobs a state list showed that the cache does not hold: their listed states by
    ("job", id) or ("array", array id), and those never read, by the time of the first list that showed them."""

    known: Mapping[tuple[str, int], Any]
    unread: Mapping[tuple[str, int], float]


class SlurmCache:
    outage_dependency = "slurm"  # its on_recovered wakes the keys that waited for Slurm (the Manager)

    def __init__(self, client: SlurmClient, *, interval: float = 1.0, resync_every: float = 60.0,
                 stale_after: Optional[float] = None, kinds: Sequence[str] = (NODE, JOB),
                 min_nudge_interval: float = 0.1, max_busy: float = 0.5, clock: Callable[[], float] = time.monotonic,
                 job_states: Optional[bool] = None, job_full_every: float = 300.0,
                 max_job_reads: Optional[int] = None, job_check_after: Optional[float] = None,
                 job_check_max_full: Optional[float] = None, read_requests: Optional[ReadRequests] = None,
                 keep_job: Optional[Callable[[Job], bool]] = None, read_workers: Optional[int] = None):
        """``job_states``: refresh jobs from the state list (module notes); None (the default) turns it
        on when the client says its state list is cheap (``cheap_job_states``: slurmrestd, not
        pyslurm). ``job_full_every``: seconds between the full job lists of that mode (0: list
        in full every time, as with ``job_states=False``). ``max_job_reads``: more jobs and
        arrays to read in one refresh than this, and it lists in full instead; None: 64, or a
        twentieth of the jobs held if more (a read costs about what one job costs in the full
        list, plus a round trip). ``job_check_after``: after
        this many refreshes in a row whose state list found nothing to read, the cache asks Slurm
        whether any job changed at all (``update_time``) instead of listing states, until one did
        (module notes); None (the default): once those state lists have taken, together, as long
        as the last full job list; ``math.inf``: never. ``job_check_max_full``: by that default rule,
        checks begin only while the last full job list took at most this long (None: ``interval``),
        because the first change a check meets costs a full list: at 10,000 jobs (6 to 10 s) that
        would make one refresh take seconds, so large clusters keep listing states. ``read_requests``: the
        per-job requests of this cache's readers (``sunk/slurm/readrequests.py``; None: a table of its own):
        which held jobs to read again though their state has not changed, every so many seconds (a
        placeholder's prolog ending, a PENDING placeholder's reason), and which reads the state list asks for
        may wait for someone else's read of the job (``observe``; module notes). While such a read is due the
        cache lists states rather than checking ``update_time``. ``keep_job``: hold only the jobs it accepts,
        and read no other job unless asked (module notes, "Only its readers' jobs"); None: every job.
        ``read_workers``: how many job reads of one refresh run at once; None: the client's
        ``read_concurrency`` (8 over REST, 1 through pyslurm).
        """
        if interval <= 0 or not 0 < max_busy <= 1:
            raise ValueError("interval must be positive and max_busy in (0, 1]")
        if job_full_every < 0 or (max_job_reads is not None and max_job_reads < 0):
            raise ValueError("job_full_every and max_job_reads must not be negative")
        if job_check_after is not None and not job_check_after >= 1:
            raise ValueError("job_check_after must be at least 1 (math.inf: never)")
        if read_workers is not None and read_workers < 1:
            raise ValueError("read_workers must be at least 1")
        self.client = client
        self.job_states = (_cheap_states(client) if job_states is None else job_states) and job_full_every > 0
        self.job_full_every = job_full_every
        self.max_job_reads = max_job_reads
        self.read_requests = read_requests if read_requests is not None else ReadRequests()
        self.keep_job = keep_job
        self.read_workers = read_workers if read_workers is not None else _read_concurrency(client)
        self.job_check_after = job_check_after
        self.job_check_max_full = interval if job_check_max_full is None else job_check_max_full
        self.interval = interval
        self.max_busy = max_busy
        self.resync_every = resync_every
        self.stale_after = stale_after if stale_after is not None else max(5.0, 3 * interval)
        self.min_nudge_interval = min_nudge_interval
        self._answered_with_nodes = False  # the last refresh's node list came back with items (poll_wait)
        self._clock = clock
        known = {NODE: (lambda: _Kind(NODE, client.list_nodes, lambda n: n.name)),
                 JOB: (lambda: _Kind(JOB, client.list_jobs, lambda j: j.id))}
        self._kinds = [known[k]() for k in kinds]  # (a one-kind cache touches only its own kind's call)
        self._refresh_lock = threading.RLock()  # one refresh (and its dispatch) at a time
        self._changed = threading.Condition()  # notified after every refresh
        self._sinks: list[tuple[str, ListerSink]] = []  # (kind, sink): its informer's store
        self._recovered: list[Callable[[], None]] = []
        self._on_listed: list[Callable[[float], None]] = []
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._refreshes = self._failures = self._calls = self._events = 0
        self._job_reads = self._job_full_lists = self._job_checks = self._job_reads_taken = 0
        self._last_seconds = 0.0
        self._states_unusable: Optional[str] = None  # why the last state list could not be used
        # Job-state mode, idle (module notes): checking update_time instead of listing states.
        self._checking = False
        self._checked_at = -math.inf  # cache clock when a state list last confirmed the check's update_time
        self._idle_lists = 0  # state lists in a row that found nothing to read
        self._idle_seconds = 0.0  # and their time, together
        self._full_seconds = 0.0  # the last full job list's time
        self._stamp_unusable: Optional[str] = None  # why Slurm's clock could not be read (until the next full list)
        self._stamp_warned = False
        self._nudged = False  # someone expects a change: the next job refresh lists states, it does not check
        self._observed: dict[int, tuple[Job, float]] = {}  # job id -> (a record read elsewhere, when) (observe)
        self._observed_lock = threading.Lock()
        self._waiting: dict[int, float] = {}  # job id -> when a state list first asked for its read, while deferred
        # With keep_job: the jobs not held, by ("job", id) or ("array", array id) -> their listed state (None:
        # not known, from a full list's array), and those of them never read -> the state list that first
        # showed them (requested at).
        self._foreign: dict[tuple[str, int], Any] = {}
        self._unread: dict[tuple[str, int], float] = {}

    # -- readers --------------------------------------------------------------------------------
    def nodes(self) -> Mapping[str, Node]:
        return self._kind(NODE).items  # type: ignore[return-value]

    def jobs(self) -> Mapping[int, Job]:
        return self._kind(JOB).items  # type: ignore[return-value]

    def held(self, kind: str) -> Mapping[Hashable, Any]:
        """Every item of ``kind`` held, by key: an immutable mapping, no copy."""
        return self._kind(kind).items

    def node(self, name: str) -> Optional[Node]:
        return self.nodes().get(name)

    def job(self, job_id: int) -> Optional[Job]:
        return self.jobs().get(job_id)

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kinds this cache lists, in refresh order."""
        return tuple(kind.name for kind in self._kinds)

    @property
    def synced(self) -> bool:
        """Every kind has been listed at least once."""
        return all(k.synced for k in self._kinds)

    @property
    def age(self) -> float:
        """Seconds since the oldest kind was last refreshed successfully (inf before the first)."""
        return self._clock() - min(k.last_ok for k in self._kinds)

    @property
    def fresh(self) -> bool:
        """Synced, the last refresh of every kind worked, and none is older than ``stale_after``."""
        return self.synced and not any(k.failing for k in self._kinds) and self.age <= self.stale_after

    @property
    def jobs_fresh(self) -> bool:
        """As ``fresh``: one cache keeps its kinds equally current (``SplitSlurmCache`` tells them apart)."""
        return self.fresh

    @property
    def last_error(self) -> Optional[str]:
        return next((k.failing for k in self._kinds if k.failing), None)

    @property
    def last_failure(self) -> Optional[Exception]:
        """What the failing list raised, while one fails (a ``SlurmError``: ``AuthenticationFailed``
        says Slurm refused the token); None once every kind lists again."""
        return next((k.error for k in self._kinds if k.error is not None), None)

    @property
    def failing_for(self) -> float:
        """Seconds since the current outage began; 0 when every kind lists."""
        since = [k.failing_since for k in self._kinds if k.error is not None]
        return self._clock() - min(since) if since else 0.0

    def stats(self) -> CacheStats:
        with self._changed:
            return CacheStats(self._refreshes, self._failures, self._calls, self._events, self._last_seconds,
                              self._job_reads, self._job_full_lists, self._job_checks, self._job_reads_taken)

    # -- sinks and listeners ----------------------------------------------------------------------------
    def add_sink(self, kind: str, sink: ListerSink, *, replay: bool = True) -> Callable[[], None]:
        """Write every change of ``kind`` into ``sink`` (its informer's store); with ``replay``, first a ``put``
        of each item held now, stamped with when its read was requested. Returns a function that detaches it.
        """
        found = self._kind(kind)
        entry = (kind, sink)
        with self._refresh_lock:  # no refresh in between: nothing missed, nothing twice
            self._sinks.append(entry)
            if replay:
                for key, item in found.items.items():
                    _guarded(sink.put, kind, key, item, found.read_at.get(key, found.listed_at))

        def detach() -> None:
            with self._refresh_lock:
                if entry in self._sinks:
                    self._sinks.remove(entry)

        return detach

    def on_recovered(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback()`` whenever an outage ends: the first refresh in which every kind lists
        again after one failed (on the refreshing thread, after that refresh's writes; quick, as a
        sink). Returns a function that unsubscribes."""
        with self._refresh_lock:
            self._recovered.append(callback)

        def unsubscribe() -> None:
            with self._refresh_lock:
                if callback in self._recovered:
                    self._recovered.remove(callback)

        return unsubscribe

    # -- refreshing -------------------------------------------------------------------------------
    def refresh(self) -> RefreshResult:
        """One list call per kind (for jobs by state: the state list, and a read per changed job), diff,
        publish, notify. Never raises for Slurm errors."""
        with self._refresh_lock:
            started = self._clock()
            calls = events = 0
            errors = []
            in_outage = any(kind.error is not None for kind in self._kinds)
            expect, self._nudged = self._nudged, False
            listed: list[float] = []
            for kind in self._kinds:
                made = [0]
                requested = self._clock()
                try:
                    found = self._refresh_kind(kind, made, expect)
                    kind.read_refusals = 0
                except Exception as exc:  # SlurmError, or an answer we could not map: stale either way
                    if not isinstance(exc, SlurmError):
                        log.exception("Slurm %s list could not be used", kind.name)
                    errors.append(f"{kind.name}s: {exc}")
                    self._failed(kind, exc)
                    continue
                finally:
                    calls += made[0]
                events += len(found)
                self._write(kind.name, found)
                listed.append(requested)
            seconds = self._clock() - started
            with self._changed:
                self._refreshes += 1
                self._failures += bool(errors)
                self._calls += calls
                self._events += events
                self._last_seconds = seconds
                self._changed.notify_all()
            if listed and not errors:
                self._whole_list(min(listed))
            if in_outage and not errors:
                self._outage_over()
            return RefreshResult(ok=not errors, calls=calls, events=events, seconds=seconds,
                                 error="; ".join(errors) or None)

    def on_listed(self, callback: Callable[[float], None]) -> Callable[[], None]:
        """Call ``callback(requested_at)`` after each refresh in which every kind listed, once its writes are
        out: what is held is Slurm's state as of a read requested at ``requested_at`` (this cache's clock).
        Returns a function that unsubscribes."""
        with self._refresh_lock:
            self._on_listed.append(callback)

        def unsubscribe() -> None:
            with self._refresh_lock:
                if callback in self._on_listed:
                    self._on_listed.remove(callback)

        return unsubscribe

    @property
    def clock(self) -> Callable[[], float]:
        """This cache's clock: what its writes' ``observed_at`` and ``observe``'s ``requested_at`` are read on."""
        return self._clock

    def _whole_list(self, requested_at: float) -> None:
        for callback in list(self._on_listed):
            try:
                callback(requested_at)
            except Exception:
                log.exception("Slurm cache listed callback %r failed", callback)

    def _outage_over(self) -> None:
        for callback in list(self._recovered):
            try:
                callback()
            except Exception:
                log.exception("Slurm cache recovery listener %r failed", callback)

    def _refresh_kind(self, kind: _Kind, made: list[int], expect: bool = False) -> RefreshWrites:
        """One kind's refresh; ``made[0]`` counts the Slurm calls made, failed ones too. ``expect``: the
        cache was nudged since the last refresh (someone expects a change)."""
        now = self._clock()
        if kind.name == JOB and self.job_states:
            if kind.full_next or not kind.synced or now - kind.last_full >= self.job_full_every:
                return self._full_job_list(kind, now, made)
            if self._checking and not expect and now - self._checked_at < self.resync_every \
                    and not self._reread_due(kind, now):
                return self._check_jobs(kind, now, made)
            return self._refresh_job_states(kind, now, made, stamp=not expect and self._check_due(now))
        full = kind.full_next or not kind.synced or now - kind.last_full >= self.resync_every
        return self._list(kind, now, full, made)

    def _rereads(self, kind: _Kind, now: float, requests: Mapping[int, ReadRequest]) -> Optional[Reread]:
        """The held jobs whose requested periodic read (``read_requests``) is due; None when none is asked for."""
        if not requests:
            return None
        read_at, listed_at = kind.read_at, kind.listed_at

        def due(job: Job) -> bool:
            request = requests.get(job.id)
            return request is not None and request.due(now, read_at.get(job.id, listed_at))

        return due

    def _reread_due(self, kind: _Kind, now: float) -> bool:
        """Some held job's requested read is due: the next refresh must list states to read it."""
        read_at, listed_at, held = kind.read_at, kind.listed_at, kind.items
        return any(job_id in held and request.due(now, read_at.get(job_id, listed_at))
                   for job_id, request in self.read_requests.snapshot().items())

    # -- jobs while idle: update_time checks (module notes) ------------------------------------------------
    def _check_due(self, now: float) -> bool:
        """Whether this state list should begin (or, while checking, confirm) update_time checks."""
        if self._checking:
            return now - self._checked_at >= self.resync_every
        if self.job_check_after is None:
            return (self._idle_lists >= 1 and self._full_seconds <= self.job_check_max_full
                    and self._idle_seconds >= self._full_seconds)
        return self._idle_lists >= self.job_check_after

    def _stop_checking(self) -> None:
        if self._checking:
            log.debug("a job changed: listing job states again")
        self._checking = False
        self._idle_lists = 0
        self._idle_seconds = 0.0

    def _full_job_list(self, kind: _Kind, now: float, made: list[int]) -> RefreshWrites:
        started = self._clock()
        found = self._list(kind, now, True, made)
        self._full_seconds = self._clock() - started
        self._stamp_unusable = None  # (try Slurm's clock again)
        if found or (self.job_check_after is None and self._full_seconds > self.job_check_max_full):
            self._stop_checking()  # (or the cluster grew: its full list now costs more than checks may)
        elif self._checking:
            self._checked_at = now  # still no change: the checks go on from this list's last_update
        return found

    def _check_jobs(self, kind: _Kind, now: float, made: list[int]) -> RefreshWrites:
        """One ``list_jobs(updated_since=...)``: "no change", or (any job changed) every job, used as a full list."""
        made[0] += 1
        started = self._clock()
        snapshot = kind.lister(updated_since=kind.last_update)
        self._listed(kind)
        if snapshot.items is None:
            with self._changed:
                self._job_checks += 1
            return RefreshWrites()
        with self._changed:
            self._job_full_lists += 1
        self._full_seconds = self._clock() - started
        self._stop_checking()
        return self._take(kind, now, snapshot, True)

    def _server_stamp(self, made: list[int]) -> Optional[int]:
        """slurmctld's clock now (the client's ``server_time``), or None where it cannot be read."""
        read = _capability(self.client, "server_time")
        if read is None or self._stamp_unusable is not None:
            return None
        made[0] += 1
        try:
            stamp = int(read())
            if stamp <= 0:
                raise SlurmError(f"slurmctld's clock read as {stamp}")
        except SlurmUnavailable:
            raise
        except Exception as exc:  # refused (PrivateData=usage) or not understood: list states meanwhile
            (log.debug if self._stamp_warned else log.warning)(
                "Slurm's clock cannot be read, so idle job refreshes keep listing job states: %s", exc)
            self._stamp_warned = True
            self._stamp_unusable = str(exc)
            return None
        return stamp

    def _listed(self, kind: _Kind) -> None:
        """A call for ``kind`` was answered."""
        if kind.failing:
            log.info("Slurm %s list works again", kind.name)
        kind.failing = None
        kind.error = None
        kind.last_ok = self._clock()

    def _list(self, kind: _Kind, now: float, full: bool, made: list[int]) -> RefreshWrites:
        made[0] += 1
        if kind.name == JOB:
            with self._changed:
                self._job_full_lists += 1
        snapshot = kind.lister(updated_since=None if full else kind.last_update or None)
        self._listed(kind)
        if snapshot.items is None:  # nothing changed since last_update
            return RefreshWrites()
        if kind.name == NODE:
            self._answered_with_nodes = True
        return self._take(kind, now, snapshot, full)

    def _take(self, kind: _Kind, now: float, snapshot: Snapshot[Any], full: bool) -> RefreshWrites:
        """A list answered with items: diff it against the items held, and hold it."""
        assert snapshot.items is not None
        if kind.name == JOB and self.keep_job is not None:
            new = self._keep_listed(snapshot.items)
        else:
            new = {kind.key(item): item for item in snapshot.items}
        found = diff(kind.items, new, now)
        kind.items = MappingProxyType(new)
        kind.listed_at = now
        if kind.name == JOB:
            with self._observed_lock:  # (records read before this list are older than what it holds)
                self._observed = {job_id: seen for job_id, seen in self._observed.items() if seen[1] > now}
            self.read_requests.keep_only(new.keys(), now)  # type: ignore[arg-type]
        kind.read_at = {}
        if snapshot.last_update and snapshot.last_update < kind.last_update:
            log.warning("Slurm's %s last_update went backwards (%d < %d): relisting in full next time",
                        kind.name, snapshot.last_update, kind.last_update)
            kind.full_next = True
        else:
            kind.full_next = False
        kind.last_update = snapshot.last_update
        kind.synced = True
        if full:
            kind.last_full = now
        return found

    def _keep_listed(self, jobs: Sequence[Job]) -> dict[Hashable, Job]:
        """A whole job list, with ``keep_job``: the jobs kept; every other job is known, as read."""
        assert self.keep_job is not None
        kept: dict[Hashable, Job] = {}
        foreign: dict[tuple[str, int], Any] = {}
        for job in jobs:
            if self.keep_job(job):
                kept[job.id] = job
            elif job.array_job_id is not None:
                foreign[("array", job.array_job_id)] = None
            else:
                foreign[("job", job.id)] = (job.state, job.state_flags)
        self._foreign, self._unread = foreign, {}
        return kept

    def _own_states(self, held: Mapping[int, Job], states: Sequence[JobState], requests: Mapping[int, ReadRequest],
                    requested: float) -> tuple[list[JobState], _Others, bool]:
        """With ``keep_job``: the state list's entries to plan reads with (the jobs held, requested or observed,
        and, while a reader asks for new jobs, those not read yet), the others as they will be known once the
        refresh's reads are done (``_know_unkept``; nothing is changed before, so a failed read leaves every job
        as it was), and whether any of those others changed since the last state list."""
        since = self.read_requests.new_jobs_since
        with self._observed_lock:
            observed = set(self._observed)
        held_arrays = {job.array_job_id for job in held.values() if job.array_job_id is not None}
        own: list[JobState] = []
        others: dict[tuple[str, int], Any] = {}
        arrays: list[JobState] = []
        for entry in states:
            if entry.job_id is None:
                continue
            if entry.job_id in held or entry.job_id in requests or entry.job_id in observed or \
                    (entry.array_job_id is not None and entry.array_job_id in held_arrays):
                own.append(entry)
                continue
            key = ("job", entry.job_id) if entry.array_job_id is None else ("array", entry.array_job_id)
            unread_since = self._unread.get(key) if key in self._foreign else math.inf  # (new; None: read already)
            if since is not None and unread_since is not None and unread_since >= since:
                own.append(entry)  # (read now; kept, or known from then on)
                continue
            if key[0] == "job":
                others[key] = (entry.state, entry.state_flags)
            else:
                arrays.append(entry)
        others.update(_array_signatures(arrays))
        changed = len(others) != len(self._foreign) or any(self._foreign.get(k, others) != v for k, v in others.items())
        unread = {key: self._unread.get(key, requested) for key in others
                  if key not in self._foreign or key in self._unread}
        return own, _Others(others, unread), changed

    def _refresh_job_states(self, kind: _Kind, requested: float, made: list[int],
                            stamp: bool = False) -> RefreshWrites:
        """Jobs from the state list plus reads of what changed: see the module notes. ``stamp``: read
        slurmctld's clock first, and if the state list finds nothing to read, check update_time
        from that time on."""
        started = self._clock()
        since = self._server_stamp(made) if stamp else None
        if since is not None and since < kind.last_update:
            log.warning("slurmctld's clock went backwards (%d < %d, a failover?): listing jobs in full",
                        since, kind.last_update)
            self._stop_checking()
            kind.last_update = 0  # (this list's own last_update, on the clock that went back, is the next T)
            return self._full_job_list(kind, self._clock(), made)
        made[0] += 1
        try:
            states: Sequence[JobState] = self.client.list_job_states()
        except SlurmUnavailable:
            raise
        except Exception as exc:  # refused or not understood (no /jobs/state, a shape we do not know): list in full
            if self._states_unusable is None:
                log.warning("Slurm's job state list cannot be used, listing jobs in full until it can: %s", exc)
            self._states_unusable = str(exc)
            self._stop_checking()
            return self._list(kind, self._clock(), False, made)  # with update_time: "no change" when none
        if self._states_unusable is not None:
            log.info("Slurm's job state list works again")
            self._states_unusable = None
        self._listed(kind)
        held: Mapping[int, Job] = kind.items  # type: ignore[assignment]
        requests = self.read_requests.snapshot()
        listed: Sequence[JobState] = states
        others: Optional[_Others] = None
        others_changed = False
        if self.keep_job is not None:
            states, others, others_changed = self._own_states(held, listed, requests, requested)
        plan = plan_job_reads(held, states, self._rereads(kind, self._clock(), requests))
        taken, to_read, deferred = self._sort_reads(kind, held, states, plan, requested, requests)
        if not (to_read or plan.arrays or plan.gone or taken or deferred):
            if others is not None:
                self._foreign, self._unread = dict(others.known), dict(others.unread)
            if others_changed:  # another tenant's job changed: not idle, though nothing is read
                self._stop_checking()
                idle = RefreshWrites()
                idle.listed(_state_listing(listed), requested)
                return idle
            self._idle_lists += 1
            self._idle_seconds += self._clock() - started
            if since is not None and self._checking:
                # Confirmed: no state change the checks missed, and slurmctld's clock did not go back.
                # The checks keep their time: a change since it, of any field, still counts.
                self._checked_at = requested
            elif since is not None:  # nothing changed up to the state list, which began after ``since``
                log.debug("no job changed in %d state lists: checking update_time from %d instead",
                          self._idle_lists, since)
                kind.last_update = since
                self._checking = True
                self._checked_at = requested
            idle = RefreshWrites()
            idle.listed(_state_listing(listed), requested)
            return idle
        self._stop_checking()  # (a deferred read too: the job may change unseen meanwhile, so keep listing states)
        # (the entries listed, not the jobs held: with keep_job a standby reads other tenants' new jobs too)
        bound = self.max_job_reads if self.max_job_reads is not None else max(64, max(len(held), len(listed)) // 20)
        if len(to_read) + len(plan.arrays) > bound:
            log.debug("%d jobs and %d arrays changed: one full job list instead of their reads",
                      len(to_read), len(plan.arrays))
            return self._full_job_list(kind, self._clock(), made)
        writes = RefreshWrites(kind.items)
        read_at = dict(kind.read_at)

        def put(job: Job, at: float) -> None:
            writes.put(job.id, job, at)
            read_at[job.id] = at

        def drop(job_id: Hashable, at: float) -> None:
            writes.drop(job_id, at)
            read_at.pop(job_id, None)

        members: dict[int, list[int]] = {}
        if plan.arrays:
            for key, job in held.items():
                if job.array_job_id is not None:
                    members.setdefault(job.array_job_id, []).append(key)
        keep = self.keep_job or (lambda _job: True)
        for observed, seen_at in taken.values():
            if keep(observed):
                put(observed, seen_at)
        reads = [(job_id, False) for job_id in to_read] + [(array, True) for array in plan.arrays]
        try:
            results = self._read(reads, made)
        except Exception:
            self._reads_failed(taken, to_read)
            raise
        for (target, array), (records, at) in zip(reads, results, strict=True):
            if not array:
                record = next((j for j in records if j.id == target), None)
                if record is None or not keep(record):  # gone since the state list, or not one to keep
                    drop(target, at)
                else:
                    put(record, at)
                continue
            found = [j for j in records if j.array_job_id == target and keep(j)]
            fresh = {j.id for j in found}
            for member in members.get(target, ()):
                if member not in fresh:
                    drop(member, at)
            for record in found:
                put(record, at)
        for job_id in plan.gone:
            drop(job_id, requested)
        with self._changed:
            self._job_reads += len(to_read) + len(plan.arrays)
            self._job_reads_taken += len(taken)
        if writes:
            kind.items = MappingProxyType(writes.items)
        if others is not None:
            self._know_unkept(others, states, writes.items, deferred)
        writes.listed(_state_listing(listed), requested)
        self.read_requests.forget(writes.removed)  # type: ignore[arg-type]
        kind.read_at = read_at
        return writes

    def _read(self, reads: Sequence[tuple[int, bool]], made: list[int]) -> list[tuple[tuple[Job, ...], float]]:
        """Each (job or array id, whether an array) read, in order, with when its read began: up to
        ``read_workers`` at once; ``made[0]`` counts the reads made. A failed read fails them all (the refresh
        keeps its snapshot; the reads not begun yet are not made)."""
        counted = threading.Lock()

        def read(target: tuple[int, bool]) -> tuple[tuple[Job, ...], float]:
            with counted:
                made[0] += 1
            at = self._clock()
            try:
                return self.client.read_jobs([target[0]]), at
            except SlurmUnavailable:
                raise
            except SlurmError as exc:
                raise _ReadRefused(f"reading {'array' if target[1] else 'job'} {target[0]}: {exc.message}",
                                   code=exc.code, http_status=exc.http_status) from exc

        if len(reads) <= 1 or self.read_workers == 1:
            return [read(target) for target in reads]
        with ThreadPoolExecutor(min(self.read_workers, len(reads)), thread_name_prefix="slurm-job-read") as pool:
            return list(pool.map(read, reads))

    def _reads_failed(self, taken: Mapping[int, tuple[Job, float]], to_read: Sequence[int]) -> None:
        """A refresh whose reads failed changes nothing held, and loses nothing it took up for them: the records
        observed elsewhere go back for the next state list (the newer kept), and the reads due now stay due (their
        patience was spent: the next refresh reads them at once)."""
        with self._observed_lock:
            for job_id, item in taken.items():
                if job_id not in self._observed or self._observed[job_id][1] < item[1]:
                    self._observed[job_id] = item
        for job_id in to_read:
            self._waiting.setdefault(job_id, -math.inf)

    def _know_unkept(self, others: _Others, planned: Sequence[JobState], kept: Mapping[Hashable, Job],
                     deferred: Collection[int]) -> None:
        """With ``keep_job``, once a refresh's reads are done: the jobs planned with and not kept (read and found
        to be another's, or gone) join the others, as read, and a read request naming one goes (it is not
        ours to read again); then the others are what the cache knows."""
        known, unread = dict(others.known), dict(others.unread)
        kept_arrays = {job.array_job_id for job in kept.values() if job.array_job_id is not None}
        arrays: list[JobState] = []
        for entry in planned:  # (keyed as _own_states keys the others: an array's entries by their array)
            if entry.job_id is None:
                continue
            if entry.array_job_id is not None:
                if entry.job_id not in kept and entry.array_job_id not in kept_arrays and entry.job_id not in deferred:
                    arrays.append(entry)
            elif entry.job_id not in kept and entry.job_id not in deferred:
                known[("job", entry.job_id)] = (entry.state, entry.state_flags)
                unread.pop(("job", entry.job_id), None)
                self.read_requests.cancel(entry.job_id)
        for key, signature in _array_signatures(arrays).items():
            known[key] = signature
            unread.pop(key, None)
        self._foreign, self._unread = known, unread

    def _sort_reads(self, kind: _Kind, held: Mapping[int, Job], states: Sequence[JobState], plan: JobReads,
                    requested: float, requests: Mapping[int, ReadRequest],
                    ) -> tuple[dict[int, tuple[Job, float]], list[int], list[int]]:
        """The plan's job reads, sorted: records observed elsewhere that stand in for a read, reads to make
        now, and reads deferred by their request's ``wait_up_to`` (``ReadRequest.patience``).

        An observed record stands in (for a read the plan asks for, or for the record held) when the state
        list shows the same state and no later read of the job is held. One that does not agree, or whose
        job the list does not show, is kept for the next state list if it was read after this one began
        (the list may be the older, or predate the job), and dropped otherwise.
        """
        with self._observed_lock:
            observed, self._observed = self._observed, {}
        wanted = set(plan.jobs)
        listed = {entry.job_id: entry for entry in states
                  if entry.job_id is not None and (entry.job_id in wanted or entry.job_id in observed)}
        taken: dict[int, tuple[Job, float]] = {}
        later: dict[int, tuple[Job, float]] = {}
        for job_id, (record, at) in observed.items():
            entry = listed.get(job_id)
            newer = job_id not in held or at > kind.read_at.get(job_id, kind.listed_at)
            if entry is not None and newer and entry.same_state(record) and held.get(job_id) != record:
                taken[job_id] = (record, at)
            elif newer and at > requested and held.get(job_id) != record:
                later[job_id] = (record, at)  # (this list may even predate the job)
        if later:
            with self._observed_lock:
                for job_id, item in later.items():
                    if job_id not in self._observed or self._observed[job_id][1] < item[1]:
                        self._observed[job_id] = item
        to_read: list[int] = []
        deferred: list[int] = []
        now = self._clock()
        waiting: dict[int, float] = {}
        for job_id in plan.jobs:
            if job_id in taken:
                continue
            request = requests.get(job_id)
            wait = request.patience(held.get(job_id), listed[job_id]) if request is not None else 0.0
            since = self._waiting.get(job_id, now)
            if wait > 0 and now - since < wait:
                deferred.append(job_id)
                waiting[job_id] = since
            else:
                to_read.append(job_id)
        self._waiting = waiting
        return taken, to_read, deferred

    def _failed(self, kind: _Kind, exc: Exception) -> None:
        if kind.failing is None:
            log.warning("Slurm %s list failed, keeping the last snapshot (%d items): %s",
                        kind.name, len(kind.items), exc)
            kind.failing_since = self._clock()
        else:
            log.debug("Slurm %s list still failing: %s", kind.name, exc)
        kind.failing = str(exc)
        kind.error = exc
        kind.read_refusals = kind.read_refusals + 1 if isinstance(exc, _ReadRefused) else 0
        # Whatever happened meanwhile, start again from a full list; but the first refused read only reads again.
        kind.full_next = kind.full_next or kind.read_refusals != 1

    def _write(self, kind: str, writes: RefreshWrites) -> None:
        for name, sink in list(self._sinks):
            if name == kind:
                writes.write_to(_GuardedSink(sink, kind))

    def _kind(self, name: str) -> _Kind:
        for kind in self._kinds:
            if kind.name == name:
                return kind
        raise KeyError(f"this cache does not hold {name}s")

    # -- background thread ---------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="slurm-cache", daemon=True)
        self._thread.start()

    def stop(self, timeout: Optional[float] = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread:
            self._thread.join(timeout)

    def nudge(self) -> None:
        """Refresh within ``min_nudge_interval`` instead of at the next interval.

        A burst of nudges within that window is one refresh; a nudge during a refresh
        gets another one after it, since the state may have changed meanwhile. The caller
        expects a change (it has just submitted or cancelled a job, say), so that refresh
        lists job states even while idle refreshes only check update_time: its change is
        then one state list and a read, not a full list.
        """
        self._nudged = True
        self._wake.set()

    def observe(self, job: Job, requested_at: float) -> None:
        """A record of ``job`` that a reader read from Slurm itself, its read begun at ``requested_at`` (this
        cache's clock): the next state list takes it for the job's own read when it shows the same state
        (module notes). Never a call, never blocks on a refresh; ignored outside the job-state mode, and
        while the state list cannot be used (nothing would take it)."""
        if not self.job_states or self._states_unusable is not None or job.array_job_id is not None:
            return
        with self._observed_lock:
            held = self._observed.get(job.id)
            if held is None or held[1] <= requested_at:
                self._observed[job.id] = (job, requested_at)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()  # nudges until now are served by this refresh
            started = self._clock()
            self._answered_with_nodes = False
            try:
                self.refresh()
            except Exception:  # a bug, not Slurm: keep polling anyway
                log.exception("Slurm cache refresh crashed")
            took = self._clock() - started
            rest = took / self.max_busy - took  # leave slurmctld and slurmrestd room
            nudged = self._wake.wait(poll_wait(self.interval, took, self.max_busy, self._answered_with_nodes))
            if nudged and not self._stop.is_set():
                # let the rest of a burst arrive, and still respect max_busy
                self._stop.wait(max(self.min_nudge_interval, started + took + rest - self._clock()))

    # -- waiting (with start and stop, what a Manager asks of an informer) ----------------------------
    def has_synced(self) -> bool:
        return self.synced

    def wait_for_sync(self, timeout: Optional[float] = None) -> bool:
        return self.wait_for(lambda: self.synced, timeout)

    def wait_for(self, predicate: Callable[[], bool], timeout: Optional[float] = None) -> bool:
        """Wait until ``predicate()`` holds after some refresh (``timeout`` None: for as long as it takes).

        Refreshes by itself if not started.
        """
        deadline = self._clock() + (math.inf if timeout is None else timeout)
        running = self._thread is not None and self._thread.is_alive()
        last_own = -math.inf
        while True:
            if predicate():
                return True
            remaining = deadline - self._clock()
            if remaining <= 0:
                return False
            if running:
                with self._changed:
                    self._changed.wait(min(remaining, self.interval))
                continue
            pause = min(remaining, self.interval - (self._clock() - last_own))
            if pause > 0:
                time.sleep(pause)
            last_own = self._clock()
            self.refresh()


def _state_listing(states: Sequence[JobState]) -> set[Hashable]:
    """The job ids a state list shows: its entries' own ids (every record of an array is listed by its own id:
    JobState)."""
    return {entry.job_id for entry in states if entry.job_id is not None}


def _guarded(write: Callable[..., None], kind: str, key: Hashable, *args: Any) -> None:
    """One write into a sink: one that raises is logged and swallowed (the other sinks and writes go on)."""
    try:
        write(key, *args)
    except Exception:
        log.exception("Slurm cache sink %r failed on %s %s", write, kind, key)


@frozen
class _GuardedSink:
    sink: ListerSink
    kind: str

    def put(self, key: Hashable, item: Any, observed_at: float) -> None:
        _guarded(self.sink.put, self.kind, key, item, observed_at)

    def drop(self, key: Hashable, observed_at: float) -> None:
        _guarded(self.sink.drop, self.kind, key, observed_at)

    def listed(self, keys: Collection[Hashable], observed_at: float) -> None:
        try:
            self.sink.listed(keys, observed_at)
        except Exception:
            log.exception("Slurm cache sink %r failed on a listing of %d %ss", self.sink, len(keys), self.kind)


def _capability(client: Any, name: str) -> Optional[Callable[[], Any]]:
    """``client.name`` if the client has such a method (a test double that refuses unknown attributes has not)."""
    try:
        found = getattr(client, name, None)
    except Exception:
        return None
    return found if callable(found) else None


def _array_signatures(entries: Sequence[JobState]) -> dict[tuple[str, int], Any]:
    """("array", array id) -> its tasks' listed states, in an order of their own: what changes when a task does."""
    tasks: dict[tuple[str, int], list[tuple[str, str, tuple[str, ...]]]] = {}
    for entry in entries:
        if entry.array_job_id is not None:
            tasks.setdefault(("array", entry.array_job_id), []).append(
                (entry.key, entry.state, tuple(sorted(entry.state_flags))))
    return {key: tuple(sorted(listed)) for key, listed in tasks.items()}


def _read_concurrency(client: Any) -> int:
    """The reads the client says are worth making at once (1 for a test double that does not say)."""
    try:
        found = getattr(client, "read_concurrency", 1)
    except Exception:  # doubles that refuse every unknown attribute
        return 1
    return found if isinstance(found, int) and not isinstance(found, bool) and found >= 1 else 1


def _cheap_states(client: Any) -> bool:
    """The client says its job state list is cheap (a test double that does not say so is not)."""
    try:
        return getattr(client, "cheap_job_states", False) is True
    except Exception:  # doubles that refuse every unknown attribute
        return False

"""Slurm's job-state RPC (``slurm_load_job_state``, what slurmrestd's ``/jobs/state`` serves), which pyslurm
25.11 does not wrap: called through ctypes on the ``libslurmfull`` pyslurm has already loaded.

It is the pyslurm backend's cheap state list (about 24 bytes a job on the wire, against a full record's
kilobytes), so the job cache reads only the jobs that changed, as it does over REST; and it gives the exact
state and flags of jobs pyslurm reports in one word (``Job.state`` is "COMPLETING" for a cancelled job still
in its epilog). The structures are those of Slurm 25.11's ``slurm.h``, the only release pyslurm 25.11 builds
against; the decoding (``job_state``) is pure.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterable, Iterator

from sunk.model.slurm import JobState

NO_VAL = 0xFFFFFFFE
INFINITE = 0xFFFFFFFF
JOB_STATE_BASE = 0xFF
# enum job_states, in order, by the names slurmrestd gives them (data_parser v0.0.42's JOB_STATE flags).
BASE_STATES = ("PENDING", "RUNNING", "SUSPENDED", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL",
               "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY")
# The JOB_* state flags (SLURM_BIT(n)), by the same names.
STATE_FLAGS = {8: "LAUNCH_FAILED", 10: "REQUEUED", 11: "REQUEUE_HOLD", 12: "SPECIAL_EXIT", 13: "RESIZING",
               14: "CONFIGURING", 15: "COMPLETING", 16: "STOPPED", 17: "RECONFIG_FAIL", 18: "POWER_UP_NODE",
               19: "REVOKED", 20: "REQUEUE_FED", 21: "RESV_DEL_HOLD", 22: "SIGNALING", 23: "STAGE_OUT"}


def job_state(job_id: int, array_job_id: int, array_task_id: int, het_job_id: int, state: int) -> JobState:
    """One ``job_state_response_job_t`` as ``/jobs/state`` prints it (keys as its JOB_STATE_RESP_JOB_JOB_ID)."""
    base = state & JOB_STATE_BASE
    name = BASE_STATES[base] if base < len(BASE_STATES) else "PENDING"
    flags = frozenset(word for bit, word in STATE_FLAGS.items() if state & (1 << bit))
    if het_job_id:
        return JobState(key=f"{job_id}+{job_id - het_job_id}", state=name, state_flags=flags, job_id=job_id)
    if not array_job_id:
        return JobState(key=str(job_id), state=name, state_flags=flags, job_id=job_id)
    if array_task_id in (NO_VAL, INFINITE):
        return JobState(key=f"{job_id}_*", state=name, state_flags=flags, job_id=job_id, array_job_id=array_job_id)
    return JobState(key=f"{job_id}_{array_task_id}", state=name, state_flags=flags, job_id=job_id,
                    array_job_id=array_job_id,
                    array_task_id=array_task_id)


class _StepId(ctypes.Structure):
    _fields_ = [("sluid", ctypes.c_uint64), ("job_id", ctypes.c_uint32), ("step_het_comp", ctypes.c_uint32),
                ("step_id", ctypes.c_uint32)]


class _SelectedStep(ctypes.Structure):
    _fields_ = [("array_bitmap", ctypes.c_void_p), ("array_task_id", ctypes.c_uint32),
                ("het_job_offset", ctypes.c_uint32), ("step_id", _StepId)]


class _StateJob(ctypes.Structure):
    _fields_ = [("job_id", ctypes.c_uint32), ("array_job_id", ctypes.c_uint32), ("array_task_id", ctypes.c_uint32),
                ("array_task_id_bitmap", ctypes.c_void_p), ("het_job_id", ctypes.c_uint32),
                ("state", ctypes.c_uint32)]


class _StateResponse(ctypes.Structure):
    _fields_ = [("jobs_count", ctypes.c_uint32), ("jobs", ctypes.POINTER(_StateJob))]


API_CURRENT = 44  # libslurm's API number in Slurm 25.11 (its META), whose slurm.h the structures above copy


class JobStateRpc:
    """``slurm_load_job_state`` on a loaded libslurmfull. ``load`` returns (rc, errno, states)."""

    def __init__(self, lib: ctypes.CDLL):
        version = lib.slurm_api_version
        version.restype = ctypes.c_long
        found = version() >> 16 & 0xFF
        if found != API_CURRENT:  # another release's layouts would be read as garbage
            raise OSError(f"libslurmfull has API {found}, these structures are Slurm 25.11's (API {API_CURRENT})")
        self._load = lib.slurm_load_job_state
        self._load.argtypes = [ctypes.c_int, ctypes.POINTER(_SelectedStep),
                               ctypes.POINTER(ctypes.POINTER(_StateResponse))]
        self._load.restype = ctypes.c_int
        self._free = lib.slurm_free_job_state_response_msg
        self._free.argtypes = [ctypes.POINTER(_StateResponse)]
        self._free.restype = None
        self._bit_size = lib.slurm_bit_size
        self._bit_size.argtypes = [ctypes.c_void_p]
        self._bit_size.restype = ctypes.c_int64
        self._next_set = lib.bit_ffs_from_bit  # the first set bit from a position, -1 past the last
        self._next_set.argtypes = [ctypes.c_void_p, ctypes.c_int64]
        self._next_set.restype = ctypes.c_int64

    @classmethod
    def open(cls) -> JobStateRpc:
        """The libslurmfull of this process (pyslurm's, found as the loader found it); OSError without one."""
        return cls(ctypes.CDLL("libslurmfull.so", use_errno=True))

    def load(self, job_ids: Iterable[int] | None = None) -> tuple[int, int, tuple[JobState, ...]]:
        wanted = None if job_ids is None else list(dict.fromkeys(int(i) for i in job_ids))
        if wanted == []:
            return 0, 0, ()
        selected = None
        if wanted is not None:
            selected = (_SelectedStep * len(wanted))(*(
                _SelectedStep(None, NO_VAL, NO_VAL, _StepId(0, job_id, NO_VAL, NO_VAL)) for job_id in wanted))
        response = ctypes.POINTER(_StateResponse)()
        rc = self._load(len(wanted or ()), selected, ctypes.byref(response))
        if rc != 0:
            return rc, ctypes.get_errno(), ()
        try:
            return 0, 0, tuple(self._states(response.contents)) if response else ()
        finally:
            if response:
                self._free(response)

    def _states(self, msg: _StateResponse) -> Iterator[JobState]:
        for i in range(msg.jobs_count):
            job = msg.jobs[i]
            if job.array_task_id_bitmap:  # a pending array's tasks without records, one by one (as slurmrestd)
                bitmap, size = job.array_task_id_bitmap, self._bit_size(job.array_task_id_bitmap)
                task = self._next_set(bitmap, 0)
                while 0 <= task < size:  # one call per pending task, as many as the entries it makes
                    yield job_state(job.job_id, job.array_job_id, task, 0, job.state)
                    task = self._next_set(bitmap, task + 1)
            else:
                yield job_state(job.job_id, job.array_job_id, job.array_task_id, job.het_job_id, job.state)

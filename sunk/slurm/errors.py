"""Errors every Slurm backend raises, so callers never see transport details, and the Slurm
error numbers that map to them (shared by the REST and pyslurm backends)."""

from __future__ import annotations

from sunk.model.types import Outage

# Slurm error numbers (slurm_errno.h) that decide which exception a backend raises. Each means the
# same in 24.11.5's and 26.05.5's slurm_errno.h (compared: docs/compatibility.md); 1019-1023,
# 6010, 6011 and 9008 exist in 26.05 only (25.11 has them too), so 24.11 never sends them.
ESLURM_INVALID_JOB_ID = 2017
ESLURM_INVALID_NODE_NAME = 2018
ESLURM_ALREADY_DONE = 2021
ESLURM_INVALID_JOB_CREDENTIAL = 2026  # (a refusal, not an outage)
ESLURM_IN_STANDBY_MODE = 2027
# A slurmctld in standby (a backup not in control, or a primary that says it is) telling the client to
# try another controller. 2131 in slurm/slurm_errno.h (ESLURM_PARTITION_ASSOC = 2130, then this);
# 24.11.5's and 26.05.5's libslurmfull.so (slurm_errtab) both number it 2131.
ESLURM_IN_STANDBY_USE_BACKUP = 2131
NOT_FOUND_CODES = frozenset({ESLURM_INVALID_JOB_ID, ESLURM_INVALID_NODE_NAME})
# Slurm could not talk to slurmctld: SLURM_COMMUNICATIONS_* (1001-1004; 1019-1023 from 25.11: REJECTED,
# QUIESCE_TIMEOUT, CONNECT_TIMEOUT, WRITE_TIMEOUT, READ_TIMEOUT), SLURMCTLD_COMMUNICATIONS_* (1800-1805),
# ESLURM_IN_STANDBY_MODE (2027: a backup slurmctld not in control), ESLURM_IN_STANDBY_USE_BACKUP (2131:
# a standby slurmctld pointing elsewhere), socket timeout (5004).
UNAVAILABLE_CODES = frozenset({1001, 1002, 1003, 1004, *range(1019, 1024), *range(1800, 1806),
                               ESLURM_IN_STANDBY_MODE, ESLURM_IN_STANDBY_USE_BACKUP, 5004})
# Slurm did not accept the request's credentials: SLURM_PROTOCOL_AUTHENTICATION_ERROR (1007,
# slurmctld refusing an expired or wrongly signed JWT: "Protocol authentication error"), the
# ESLURM_AUTH_* family (6000-6011) and ESLURM_REST_AUTH_FAIL (9008).
AUTH_CODES = frozenset({1007, 6000, 6001, 6004, 6007, 6008, 6009, 6010, 6011, 9008})
# Of those unavailable ones, the ones that can come after the request reached slurmctld, so that a request which
# is not safe to repeat (a submission) may have taken effect: SLURM_COMMUNICATIONS_SEND_ERROR,
# _RECEIVE_ERROR, _SHUTDOWN_ERROR (1002-1004), _WRITE_TIMEOUT, _READ_TIMEOUT (1022, 1023), their
# SLURMCTLD_COMMUNICATIONS_ twins (1801-1803), and a socket timeout (5004).
UNCERTAIN_CODES = frozenset({1002, 1003, 1004, 1022, 1023, 1801, 1802, 1803, 5004})


class SlurmError(Exception):
    """Slurm refused or failed a request. ``code`` is Slurm's errno, when it gave one."""

    def __init__(self, message: str, *, code: int | None = None, http_status: int | None = None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.http_status = http_status

    def __str__(self) -> str:
        code = f" (slurm error {self.code})" if self.code is not None else ""
        return f"{self.message}{code}"


class NotFound(SlurmError):
    """The node or job does not exist."""


class SlurmUnavailable(SlurmError, Outage):
    """slurmctld or slurmrestd could not be reached at all; safe to retry later."""

    dependency = "slurm"


class OutcomeUnknown(SlurmUnavailable):
    """A request that is not safe to repeat was sent, and its answer was lost (a read timeout, the
    connection closed after sending, slurmctld timing out behind slurmrestd): it may have taken
    effect. A caller that submits looks for its job by its own identity before submitting again."""


class AuthenticationFailed(SlurmUnavailable):
    """Slurm refused our credentials (an expired, rotated or wrong token; munge on the pyslurm
    backend): an outage of ours, not an answer about the request. Retry later; never read it
    as a verdict on what was asked. ``token_source`` says where the token came from."""

    def __init__(self, message: str, *, code: int | None = None, http_status: int | None = None,
                 token_source: str = ""):
        super().__init__(message, code=code, http_status=http_status)
        self.token_source = token_source

"""Errors every Slurm backend raises, so callers never see transport details."""

from __future__ import annotations

from typing import Optional


class SlurmError(Exception):
    """Slurm refused or failed a request. ``code`` is Slurm's errno, when it gave one."""

    def __init__(self, message: str, *, code: Optional[int] = None, http_status: Optional[int] = None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.http_status = http_status

    def __str__(self) -> str:
        code = f" (slurm error {self.code})" if self.code is not None else ""
        return f"{self.message}{code}"


class NotFound(SlurmError):
    """The node or job does not exist."""


class SlurmUnavailable(SlurmError):
    """slurmctld or slurmrestd could not be reached at all; safe to retry later."""

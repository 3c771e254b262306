"""Flag parsing shared by the entry points: Go-style durations and structured logging.

SUNK's binaries are Go; operators copy their flags (``--slurm-kill-wait=30s``,
``--zap-log-level=debug``) into our manifests, so we accept the same spellings.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import re
import sys
import time

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration(text: str) -> float:
    """``"30s"``, ``"1m30s"``, ``"500ms"`` or a bare number of seconds -> seconds (never nan or inf)."""
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(value):
            raise ValueError(f"not a duration: {text!r} (a finite number of seconds, or e.g. 30s)")
        return value
    pos, total = 0, 0.0
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ValueError(f"not a duration: {text!r} (use e.g. 30s, 1m30s, 500ms)")
    if not math.isfinite(total):
        raise ValueError(f"not a duration: {text!r} (too long)")
    return total


def positive_duration(text: str) -> float:
    """An argparse type: a duration above zero (a zero interval would turn a poller into a busy loop)."""
    return _duration_from(text, zero=False)


def non_negative_duration(text: str) -> float:
    """An argparse type: a duration of zero or more (zero: off)."""
    return _duration_from(text, zero=True)


def _duration_from(text: str, *, zero: bool) -> float:
    try:
        value = duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if value < 0 or (value == 0 and not zero):
        raise argparse.ArgumentTypeError(f"must be {'0 or more' if zero else 'more than 0'}, got {text!r}")
    return value


def boolean(text: str) -> bool:
    """An argparse type for switches given a value (``--leader-elect=false``, as Go's flag package takes them)."""
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def parse_bind_address(address: str) -> tuple[str, int]:
    """A listen address as SUNK's Go flags take it: ``":8081"`` -> ("0.0.0.0", 8081),
    ``"127.0.0.1:0"`` -> ("127.0.0.1", 0) (any free port), ``"[::1]:80"`` -> ("::1", 80)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"bind address must look like HOST:PORT or :PORT, got {address!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def positive_int(text: str) -> int:
    """An argparse type for counts of workers or threads: zero would start nothing and hang."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text!r}")
    return value


class JsonFormatter(logging.Formatter):
    """One JSON object per line, with the fields log pipelines index on."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry)


LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "error": logging.ERROR, "warn": logging.WARNING,
          "warning": logging.WARNING}


LOGGED_CHARS = 200  # of any caller-controlled text in a log line


def loggable(text: object, limit: int = LOGGED_CHARS) -> str:
    """Caller-controlled text (a request's path, method, a reason naming it) for a log line: cut to
    ``limit`` characters and quoted, every non-printable character escaped (``repr``), so that a
    client can neither end a log line nor forge one, whatever the log's format."""
    text = str(text)
    return repr(text[:limit]) + ("..." if len(text) > limit else "")


def configure_logging(level: str = "info") -> None:
    if level not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(LEVELS[level])
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    logging.getLogger("kubernetes").setLevel(logging.WARNING)

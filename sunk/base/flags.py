"""Flag parsing shared by the entry points: Go-style durations, components and logging.

SUNK's binaries are Go; operators copy their flags (``--slurm-kill-wait=30s``,
``--zap-log-level=debug``, ``--components scheduler``) into
our manifests, so we accept the same spellings, with the meaning SUNK's docs give them.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import re
import sys
import time
from collections.abc import Callable, Mapping

from sunk.translate.dra import DeviceMapping

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


def add_switch(parser: argparse.ArgumentParser | argparse._ArgumentGroup, flag: str, *, default: bool | None,
               help: str) -> None:
    """A switch as Go's flag package takes it, the same in every daemon: ``--flag``, ``--flag=false``,
    ``--flag false`` (true/false, 1/0, yes/no). ``default=None``: absent reads as None (not given)."""
    parser.add_argument(flag, type=boolean, nargs="?", const=True, default=default, help=help)


def parse_bind_address(address: str) -> tuple[str, int]:
    """A listen address as SUNK's Go flags take it: ``":8081"`` -> ("0.0.0.0", 8081),
    ``"127.0.0.1:0"`` -> ("127.0.0.1", 0) (any free port), ``"[::1]:80"`` -> ("::1", 80)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"bind address must look like HOST:PORT or :PORT, got {address!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


GRES_TYPE = re.compile(r"[A-Za-z0-9_.\-]+", re.ASCII)


def gpu_types(text: str) -> tuple[tuple[str, str], ...]:
    """``NVIDIA_L4=l4,H100_SXM=h100`` (``:`` for ``=`` too, as SUNK's YAML writes it) -> pairs."""
    pairs = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        label, sep, gres = item.replace(":", "=", 1).partition("=")
        label, gres = label.strip(), gres.strip()
        if not sep or not GRES_TYPE.fullmatch(label) or not GRES_TYPE.fullmatch(gres):
            raise argparse.ArgumentTypeError(f"{item!r}: want LABEL_VALUE=gres_type, e.g. NVIDIA_L4=l4")
        pairs.append((label, gres))
    if len({label for label, _ in pairs}) != len(pairs):
        raise argparse.ArgumentTypeError("a label value is mapped twice")
    return tuple(pairs)


def dra_device_mapping(text: str) -> DeviceMapping:
    """``--dra-device-mapping`` (sunk-scheduler's and the Syncer's): ``DeviceMapping.parse``; only ``gres=gpu`` is
    filled yet."""
    try:
        mapping = DeviceMapping.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if mapping.gres != "gpu":
        raise argparse.ArgumentTypeError(f"gres={mapping.gres}: only gres=gpu is filled yet")
    return mapping


DRA_DEVICE_MAPPING_HELP = (
    "the DRA driver and DeviceClasses whose ResourceClaims this scheduler fills with the devices of the GRES "
    "indices Slurm gave a Pod's job: driver=DRIVER,device-class=CLASS[:GRES_TYPE][,device-class=...],attribute=ATTR "
    "(a device attribute holding the index) or name=TEMPLATE (gpu-{index}); a class's GRES_TYPE (a100, a MIG "
    "profile's 1g.10gb) makes its claims ask Slurm for gres/gpu:GRES_TYPE:N; shard-class=CLASS (repeatable) makes a "
    "class whose claims' counts are Slurm shards of a GPU (gres/shard:N); docs/scheduler.md")


def positive_int(text: str) -> int:
    """An argparse type for counts of workers or threads: zero would start nothing and hang."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text!r}")
    return value


_REFERENCE = re.compile(r"\$\$|\$\(([^)]*)\)")


def expand_references(text: str, environ: Mapping[str, str]) -> str:
    """``$(NAME)`` replaced by ``environ[NAME]``, as the kubelet expands a container's args from its env
    (``$$`` is a literal ``$``; a reference to a variable not in ``environ`` stays as it is)."""

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return environ.get(name, match.group(0))

    return _REFERENCE.sub(one, text)


def unexpanded_reference(text: str) -> str | None:
    """The first ``$(NAME)`` in ``text`` (after expansion: a variable that was not defined)."""
    match = re.search(r"\$\(([^)]*)\)", text)
    return match.group(0) if match else None


def components_flag(runs: str, elsewhere: Mapping[str, str]) -> Callable[[str], tuple[str, ...]]:
    """An argparse type for SUNK's ``--components``: which parts of SUNK this process runs.

    One sunk daemon runs one component (``runs``); a component another daemon runs (``elsewhere``:
    component -> daemon) or an unknown name stops the start, naming what to do: silently running
    less than the flag asks would leave that part of SUNK missing. Commas separate names, and the
    flag may be given more than once (as a Go string slice)."""

    def parse(text: str) -> tuple[str, ...]:
        names = tuple(name.strip().lower() for name in text.split(",") if name.strip())
        if not names:
            raise argparse.ArgumentTypeError(f"no component named: this process runs {runs!r}")
        for name in names:
            if name in elsewhere:
                raise argparse.ArgumentTypeError(
                    f"component {name!r} is run by {elsewhere[name]}, not by this process (which runs {runs!r}): "
                    f"start {elsewhere[name]} for it (the chart does)")
            if name != runs:
                raise argparse.ArgumentTypeError(
                    f"unknown component {loggable(name)}: this process runs {runs!r}; "
                    f"{', '.join(f'{c!r} is {d}' for c, d in sorted(elsewhere.items()))}")
        return names

    return parse


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
          "warning": logging.WARNING, "dpanic": logging.CRITICAL, "panic": logging.CRITICAL,
          "fatal": logging.CRITICAL}


def log_level(text: str) -> int:
    """``--zap-log-level`` as controller-runtime's zap flags take it: a level's name (any case), or a
    whole number above 0, zap's verbosity beyond debug (Python has no finer level: debug)."""
    name = text.strip().lower()
    if name in LEVELS:
        return LEVELS[name]
    if name.isdigit() and int(name) > 0:
        return logging.DEBUG
    raise ValueError(f"log level must be one of {', '.join(LEVELS)} or a whole number above 0, got {text!r}")


def log_level_flag(text: str) -> str:
    """``log_level`` as an argparse type; the flag keeps its text (configure_logging reads it)."""
    try:
        log_level(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


class ConsoleFormatter(logging.Formatter):
    """``--zap-encoder=console``: one tab-separated line for a person, as zap's console encoder writes."""

    def format(self, record: logging.LogRecord) -> str:
        when = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"
        line = f"{when}\t{record.levelname.upper()}\t{record.name}\t{record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


ENCODERS: dict[str, Callable[[], logging.Formatter]] = {"json": lambda: JsonFormatter(),
                                                        "console": lambda: ConsoleFormatter()}


def add_logging_arguments(parser: argparse.ArgumentParser) -> None:
    """The zap flags SUNK's daemons take (controller-runtime's), for every entry point."""
    parser.add_argument("--zap-log-level", type=log_level_flag, default="info",
                        help="debug, info, warn, error, panic, or a whole number above 0 (debug)")
    parser.add_argument("--zap-encoder", choices=sorted(ENCODERS), default="json",
                        help="json: one JSON object per line (for log pipelines); console: lines for a person")


LOGGED_CHARS = 200  # of any caller-controlled text in a log line


def loggable(text: object, limit: int = LOGGED_CHARS) -> str:
    """Caller-controlled text (a request's path, method, a reason naming it) for a log line: cut to
    ``limit`` characters and quoted, every non-printable character escaped (``repr``), so that a
    client can neither end a log line nor forge one, whatever the log's format."""
    text = str(text)
    return repr(text[:limit]) + ("..." if len(text) > limit else "")


def configure_logging(level: str = "info", encoder: str = "json") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(ENCODERS[encoder]())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(log_level(level))
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    logging.getLogger("kubernetes").setLevel(logging.WARNING)


def configure_logging_from(args: argparse.Namespace) -> None:
    """Logging as ``add_logging_arguments``' flags say."""
    configure_logging(args.zap_log_level, getattr(args, "zap_encoder", "json"))

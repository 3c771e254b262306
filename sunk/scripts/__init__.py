"""The shell scripts sunk runs on the Slurm side, as they ship.

prolog.sh, epilog.sh and placeholder.sh share functions kept once, in a file beside them that each
sources (``LIBRARY``). Where they ship no such file is beside them: Slurm copies a batch script to its
spool, and the chart mounts the prolog and epilog one key each into slurmd's prolog.d/epilog.d (where
another file would run as a prolog itself). So what ships is ``shipped_script``: the script with its
source line replaced by the library's text. The chart does the same with helm's ``replace``
(templates/slurm-hooks-configmap.yaml); tests/unit/test_chart.py checks the two agree.
"""

from __future__ import annotations

from importlib import resources

LIBRARY = "common.sh"
# The line each script sources the library with, exactly (the chart replaces this very text).
SOURCE_LINE = f'. "$(dirname "${{BASH_SOURCE[0]}}")/{LIBRARY}"'


def script_text(name: str) -> str:
    """A file of this directory, as it is in the repository."""
    return resources.files(__name__).joinpath(name).read_text()


def inline_library(script: str, library: str) -> str:
    """``script`` with its one source line of the library replaced by ``library``'s text."""
    if script.count(SOURCE_LINE + "\n") != 1:
        raise ValueError(f"the script must source {LIBRARY} exactly once, with: {SOURCE_LINE}")
    return script.replace(SOURCE_LINE, library.removesuffix("\n"))


def shipped_script(name: str) -> str:
    """``name`` (prolog.sh, epilog.sh, placeholder.sh) as Slurm runs it: self-contained, the library inlined."""
    return inline_library(script_text(name), script_text(LIBRARY))

"""Which Slurm release the dev cluster runs: one value, chosen once, that everything else follows.

sunk talks to slurmrestd's OpenAPI v0.0.42, which every release from 24.11 to 26.05 serves. The dev
cluster runs two of them, each from the Debian suite that ships it: 24.11 (trixie, the default)
and 26.05 (sid). A release is picked by ``sunk-dev up --slurm NAME`` or ``SUNK_DEV_SLURM=NAME``;
the chroot (and so Slurm's own state: StateSaveLocation, MariaDB's accounting schema, which a
newer release upgrades and an older one refuses), the slurmd image and the failure messages of
the tests all follow from it, so no code asks "which release?" anywhere else.

Kubernetes' etcd always runs from the default release's chroot (its data lives there), so
switching Slurm releases leaves the Kubernetes side as it is.

Pure: no I/O.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Optional

from attrs import frozen

ENV = "SUNK_DEV_SLURM"
# The default release's chroot also carries etcd (Kubernetes' store, whatever Slurm runs). This
# tuple, its order and the suite make the cached chroot's name: change them and every dev cache
# debootstraps anew (and loses its etcd and MariaDB data).
SLURM_PACKAGES = (
    "slurmctld", "slurmd", "slurmrestd", "slurm-client", "slurm-wlm-jwt-plugin", "slurmdbd",
    "mariadb-server", "munge",
)
KUBE_PACKAGES = ("etcd-server",)
TOOLS = ("curl", "procps", "iproute2")


@frozen
class SlurmRelease:
    """A Slurm release the dev cluster can run: its name (what ``--slurm`` takes), the Debian suite
    that ships it, and the packages its chroot is made of."""

    name: str
    suite: str
    packages: tuple[str, ...]

    @property
    def version_prefix(self) -> str:
        """What the chroot's Slurm version must start with: ``26.05.`` (sid moves on; this says when)."""
        return self.name + "."

    def matches(self, version: str) -> bool:
        return version.startswith(self.version_prefix)

    def describe(self, version: str = "") -> str:
        """``Slurm 26.05.5 (Debian sid)``: what a log line or a failed test names."""
        return f"Slurm {version or self.name} (Debian {self.suite})"


DEFAULT = SlurmRelease("24.11", "trixie", SLURM_PACKAGES + KUBE_PACKAGES + TOOLS)
RELEASES: Mapping[str, SlurmRelease] = {
    r.name: r for r in (DEFAULT, SlurmRelease("26.05", "sid", SLURM_PACKAGES + TOOLS))
}


def by_name(name: str) -> SlurmRelease:
    try:
        return RELEASES[name.strip()]
    except KeyError:
        raise ValueError(f"no Slurm release {name!r} in the dev cluster: one of {', '.join(RELEASES)}") from None


def chosen(flag: Optional[str] = None, environ: Mapping[str, str] = os.environ) -> SlurmRelease:
    """The release asked for: the flag, else ``SUNK_DEV_SLURM``, else the default (never "whatever runs":
    a test run must know what it tests)."""
    name = flag or environ.get(ENV, "").strip()
    return by_name(name) if name else DEFAULT


def of_version(version: str, flag: Optional[str] = None) -> SlurmRelease:
    """The release a chroot with Slurm ``version`` holds, for naming what is built from it (the slurmd
    image's tag): ``flag`` (``--slurm``) if given must agree, since a tag naming another release than
    the binaries inside would pass for that release. ValueError says which of the two to change."""
    match = next((r for r in RELEASES.values() if r.matches(version)), None)
    if flag:
        named = by_name(flag)
        if match != named:
            hint = f" (release {match.name}: drop --slurm or give that)" if match else ""
            raise ValueError(f"--slurm {named.name} does not match the chroot's Slurm {version or '(none)'}{hint}")
        return named
    if match is None:
        raise ValueError(f"the chroot has Slurm {version or '(none)'}, none of the dev cluster's releases "
                         f"({', '.join(RELEASES)})")
    return match


def saved(data: Mapping[str, Any]) -> SlurmRelease:
    """The release recorded in ``run/layout.json`` (none recorded: written before there were two)."""
    name = data.get("slurm")
    return by_name(name) if isinstance(name, str) and name else DEFAULT


def debian_upstream(version: str) -> str:
    """``1:26.05.5-1+b1`` (dpkg's version of slurmctld) -> ``26.05.5``."""
    return version.strip().split(":", 1)[-1].rsplit("-", 1)[0]


def check_version(release: SlurmRelease, version: str) -> str:
    """``version`` if it is ``release``'s, else a RuntimeError that says what to change."""
    if not release.matches(version):
        raise RuntimeError(f"the {release.suite} chroot has Slurm {version or '(none)'}, not {release.name}: "
                         f"Debian {release.suite} has moved on; name the release it ships in sunk/dev/release.py")
    return version


def tag_failure(report: Any, text: str) -> None:
    """Name the Slurm release in a failed test's report: its one-line summary (``-ra``'s FAILED
    line) and a section of its own. Duck-typed on pytest's TestReport; a report without a crash
    line (a collection error) gets the section only."""
    report.sections.append(("Slurm release", f"failed against {text}"))
    short = f"[{text.split(' (')[0]}]"  # "[Slurm 26.05.5]": a summary line is cut at the terminal's width
    crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
    if crash is not None and not str(crash.message).startswith(short):
        crash.message = f"{short} {crash.message}"
